"""Without langchain-core, importing the adapter says which extra to install."""

from __future__ import annotations

import subprocess
import sys


def test_missing_langchain_core_names_the_extra():
    code = (
        "import sys\n"
        "sys.modules['langchain_core'] = None  # as if the package were not installed\n"
        "import middleware  # the core works without it\n"
        "try:\n"
        "    import middleware.langchain\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('imported without langchain_core')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install 'agency-middleware[langchain]'" in done.stdout
