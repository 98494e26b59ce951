"""The README's quick start, run as written against this checkout's .venv (a fresh venv aside).

Substituted, and only these: the two ports (free ones instead of 50051 and 9464, other tests
run in parallel) and ``TRACE_ID`` (by the trace id the previous command printed, as a reader
would copy it). ``make test`` is this test suite itself and is not re-run. Each command must
exit 0, or with the status its comment announces (``(exit N)``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    commands = []
    for block in blocks:
        lines: list[str] = []
        pending = ""
        for raw in block.splitlines():
            if raw.rstrip().endswith("\\"):
                pending += raw.rstrip()[:-1] + " "
                continue
            lines.append(pending + raw)
            pending = ""
        commands.append([x for x in lines if x.strip()])
    return commands


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(300)
def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    blocks = _quick_start_blocks()
    assert [b[0] for b in blocks[:2]] == ["make demo", "make test"], blocks
    demo = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]

    grpc_port, metrics_port = _free_port(), _free_port()
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {
        **os.environ,
        "AGENCY_ADDRESS": f"127.0.0.1:{grpc_port}",
        "AGENCY_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}",
    }
    env.pop("AGENCY_DATA_DIR", None)
    background: list[subprocess.Popen[bytes]] = []
    trace_id = ""
    try:
        for line in blocks[2]:
            command, _, comment = line.partition("  #")
            command = command.replace("127.0.0.1:50051", f"127.0.0.1:{grpc_port}")
            command = command.replace("127.0.0.1:9464", f"127.0.0.1:{metrics_port}")
            if "TRACE_ID" in command:
                assert trace_id, "no trace id was printed before the command that needs one"
                command = command.replace("TRACE_ID", trace_id)
            if command.rstrip().endswith("&"):
                with open(tmp_path / "background.log", "ab") as log:
                    background.append(
                        subprocess.Popen(
                            command.rstrip()[:-1],
                            shell=True,
                            cwd=tmp_path,
                            env=env,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    )
                continue
            proc = subprocess.run(
                command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
            )
            expected = int(m.group(1)) if (m := re.search(r"\(exit (\d+)\)", comment)) else 0
            assert proc.returncode == expected, (shlex.split(command)[:3], proc.stdout, proc.stderr)
            if m := re.search(r"^trace (\S+)$", proc.stdout, flags=re.MULTILINE):
                trace_id = m.group(1)
            if "completed" in comment:
                assert ": completed (TASK_STATE_COMPLETED)" in proc.stdout, proc.stdout
            if "metrics" in command:
                assert "agency_tasks_total" in proc.stdout
        assert (tmp_path / "trace.html").stat().st_size > 1000
        assert (tmp_path / "agency-data" / "audit").is_dir()
    finally:
        for p in background:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)
