"""Without the local Redis or Chromium the suite stops at once, with one message and the command
that fixes it, instead of hundreds of identical failures minutes later (issue 27, seventh item).

Each case runs pytest in a subprocess pointed at a Redis port nothing listens on, or a Chromium
path that does not exist; nothing here touches the real ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_pytest(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_without_redis_the_session_stops_before_any_test_with_the_command_that_starts_it(workers):
    done = run_pytest("tests/test_redis_layer.py", *workers, AGENCY_TEST_REDIS_URL="redis://127.0.0.1:1/15")
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "Redis is required at redis://127.0.0.1:1/15" in out
    assert "redis-server --daemonize yes" in out and "pytest -m 'not redis'" in out
    assert " passed" not in out and " failed" not in out and "INTERNALERROR" not in out


def test_tests_that_do_not_need_redis_still_run_without_it():
    done = run_pytest(
        "tests/test_redis_layer.py", "-m", "not redis", AGENCY_TEST_REDIS_URL="redis://127.0.0.1:1/15"
    )
    assert done.returncode == 5 and "deselected" in done.stdout, done.stdout  # 5: nothing selected


def test_without_chromium_the_browser_tests_stop_with_the_install_hint(tmp_path):
    done = run_pytest("tests/humans/test_console_browser.py", AGENCY_TEST_CHROMIUM=str(tmp_path / "chromium"))
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert f"Chromium is required at {tmp_path / 'chromium'}" in out
    assert "apt-get install chromium" in out and " passed" not in out
