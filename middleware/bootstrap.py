"""The former path of :mod:`middleware.server.bootstrap` (the deployable server's layer), kept for imports.

``import middleware.bootstrap`` gives the very module object of :mod:`middleware.server.bootstrap`.
"""

import sys

from .server import bootstrap

sys.modules[__name__] = bootstrap
