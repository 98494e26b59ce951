"""The former path of :mod:`middleware.server.backends` (the deployable server's layer), kept for imports.

``import middleware.backends`` gives the very module object of :mod:`middleware.server.backends`.
"""

import sys

from .server import backends

sys.modules[__name__] = backends
