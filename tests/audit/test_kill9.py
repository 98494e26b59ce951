"""kill -9 of a writer process under load, many rounds: every acknowledged record survives."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import warnings
from pathlib import Path

from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog

from .wal_writer import main as writer_main


def _run_and_kill(root: Path, kill_after: int) -> set[int]:
    """Fork a writer, read acknowledged indexes until ``kill_after`` of them, SIGKILL it.

    Forked (not spawned) so a round costs no interpreter start-up; the child only ever
    runs its own event loop and writer thread.
    """
    rfd, wfd = os.pipe()
    with warnings.catch_warnings():  # 3.12+ warns about fork() with threads; the child uses none of them
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child
        os.close(rfd)
        try:
            asyncio.run(writer_main(str(root), wfd))
        finally:
            os._exit(1)
    os.close(wfd)
    acked: set[int] = set()
    with os.fdopen(rfd, "rb") as pipe:
        try:
            assert pipe.readline() == b"open\n", "writer failed to open the log"
            while len(acked) < kill_after:
                line = pipe.readline()
                if not line.endswith(b"\n"):
                    break
                acked.add(int(line))
        finally:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        # lines already in the pipe when the process died were acknowledged too
        acked.update(int(x) for x in pipe.read().split(b"\n")[:-1])
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
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
