"""The former path of :mod:`middleware.server.worker` (the deployable server's layer), kept for imports.

``import middleware.worker`` gives the very module object of :mod:`middleware.server.worker`.
"""

import sys

from .server import worker

sys.modules[__name__] = worker
