"""The former path of :mod:`middleware.server.metrics` (the deployable server's layer), kept for imports.

``import middleware.metrics`` gives the very module object of :mod:`middleware.server.metrics`.
"""

import sys

from .server import metrics

sys.modules[__name__] = metrics
