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


def test_the_example_runs_offline_in_under_30_lines():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "langchain_agent.py"
    assert len(example.read_text().splitlines()) < 30
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("completed -> A cracked screen is covered for 12 months.")
    assert "'llm'" in done.stdout
