"""``python -m bench [NAME ...]``: list the benchmarks, or run the named ones in turn.

Each benchmark is also runnable alone (``python -m bench.bench_audit --help`` shows its
options) and prints its figures next to a baseline measured in the same run.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path


def available() -> dict[str, str]:
    found = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name.startswith("bench_"):
            module = importlib.import_module(f"bench.{info.name}")
            found[info.name.removeprefix("bench_")] = (module.__doc__ or "").strip().splitlines()[0]
    return dict(sorted(found.items()))


def main(argv: list[str]) -> int:
    benches = available()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m bench NAME [NAME ...]   (or: python -m bench.bench_NAME --help)\n")
        for name, summary in benches.items():
            print(f"  {name:<12} {summary}")
        return 0
    unknown = [n for n in argv if n not in benches]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(benches)}", file=sys.stderr)
        return 2
    for name in argv:
        print(f"\n===== {name} =====", flush=True)
        code = subprocess.call([sys.executable, "-m", f"bench.bench_{name}"])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
