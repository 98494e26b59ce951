"""The `redis` marker is applied to every test that needs the Redis server, and only to those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected(marker_expression: str, *paths: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marker_expression, *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return {line.split("::")[0] for line in out.splitlines() if "::" in line}


def test_redis_tests_carry_the_marker_and_others_do_not() -> None:
    paths = ("tests/catalog/test_catalog_redis.py", "tests/goals/test_steps.py")
    assert collected("redis", *paths) == {"tests/catalog/test_catalog_redis.py"}
    assert collected("not redis", *paths) == {"tests/goals/test_steps.py"}
