"""The former path of :mod:`middleware.server.settings` (the deployable server's layer), kept for imports.

``import middleware.config`` gives the very module object of :mod:`middleware.server.settings`.
"""

import sys

from .server import settings

sys.modules[__name__] = settings
