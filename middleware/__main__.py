"""``python -m middleware`` is the ``agency`` command."""

import sys

from .cli import main

sys.exit(main())
