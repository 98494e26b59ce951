"""The former path of :mod:`middleware.server.definition` (the deployable server's layer), kept for imports.

``import middleware.definition`` gives the very module object of :mod:`middleware.server.definition`.
"""

import sys

from .server import definition

sys.modules[__name__] = definition
