"""kill -9 of a writer process under load, many rounds: every acknowledged record survives."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from pathlib import Path

from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog

WRITER = Path(__file__).with_name("wal_writer.py")  # appends under load, prints each acknowledged index


def _run_and_kill(root: Path, kill_after: int) -> set[int]:
    """Start a writer process, read acknowledged indexes until ``kill_after`` of them, SIGKILL it.

    Spawned, not forked: a fork of a pytest worker that has run gRPC tests copies locks other
    threads held (gRPC's, the allocator's) and the child can hang before it opens the log.
    """
    proc = subprocess.Popen([sys.executable, str(WRITER), str(root)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    acked: set[int] = set()
    with proc.stdout as pipe:
        try:
            assert pipe.readline() == b"open\n", "writer failed to open the log"
            while len(acked) < kill_after:
                line = pipe.readline()
                if not line.endswith(b"\n"):
                    break
                acked.add(int(line))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        # lines already in the pipe when the process died were acknowledged too
        acked.update(int(x) for x in pipe.read().split(b"\n")[:-1])
    assert proc.returncode == -signal.SIGKILL
    return acked


def test_every_acknowledged_record_survives_kill_9(tmp_path: Path) -> None:
    rng = random.Random(9)
    all_acked: set[int] = set()
    for round_ in range(10):
        all_acked |= _run_and_kill(tmp_path, rng.choice([1, 30, 200, 700, 1500]))
        log = WalAuditLog(tmp_path, "n1")
        try:
            present = {i for i, _ in log.records()}
            missing = all_acked - present
            assert not missing, f"round {round_}: acknowledged but lost: {sorted(missing)[:10]}"
            assert present == set(range(1, log.size + 1))
        finally:
            asyncio.run(log.close())
        verdict = verify_path(tmp_path)
        assert verdict.ok, (round_, verdict.nodes)
        assert verdict.nodes[0].events >= max(all_acked)
