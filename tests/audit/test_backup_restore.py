"""The documented backup and restore, performed (docs/operations.md, "Backup and restore").

A real ``agency serve`` writes under load while ``agency audit backup`` copies its audit
directory twice (the second run incremental). The backup holds no signing key. Restored on a
fresh data directory with the key from the "secret store", the log verifies against the
published keys (a keyring), and a gateway started on it goes on serving and writing a log
that still verifies. Every task answered before the backup began is in the restored log.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import BinaryIO

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.wal_reader import WalLogReader

pytestmark = pytest.mark.timeout(120)

_SERVING = re.compile(r"serving on [\d.]+:(\d+)")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    env["AGENCY_NODE_ID"] = "gw"
    return env


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _create(path: Path) -> BinaryIO:
    return open(path, "wb")  # closed once the child holds its own descriptor


async def _serve(data: Path, log: Path) -> tuple[asyncio.subprocess.Process, str]:
    with _create(log) as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "middleware",
            "serve",
            "--demo",
            "--data-dir",
            str(data),
            "--address",
            "127.0.0.1:0",
            "--metrics-address",
            "",
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=_env(),
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.returncode is None:
        found = _SERVING.search(_read(log))
        if found:
            return proc, f"127.0.0.1:{found.group(1)}"
        await asyncio.sleep(0.05)
    proc.kill()
    await proc.wait()
    raise AssertionError(f"the gateway did not start:\n{_read(log)}")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == 0


async def _agency(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=_env(),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return proc.returncode or 0, out.decode(errors="replace")


async def _submit(address: str, text: str) -> str:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)
        done = await stub.Submit(agency_pb2.SubmitRequest(text=text, user_id="u_1"), timeout=30)
        return str(done.task_id)


async def test_back_up_under_load_restore_on_a_fresh_directory_verify_and_serve_on(tmp_path: Path) -> None:
    live, backup, restored, secrets = (tmp_path / d for d in ("live", "backup", "restored", "secrets"))
    proc, address = await _serve(live, tmp_path / "live.log")
    answered: list[str] = []
    stop, warmed_up = asyncio.Event(), asyncio.Event()

    async def load() -> None:
        n = 0
        while not stop.is_set():
            answered.append(await _submit(address, f"Predict the price of share {n}."))
            n += 1
            if n == 5:
                warmed_up.set()

    try:
        loader = asyncio.create_task(load())
        await asyncio.wait_for(warmed_up.wait(), 60)
        before_backup = list(answered)
        for _ in range(2):  # the second run copies only what changed
            code, out = await _agency("audit", "backup", str(live / "audit"), str(backup))
            assert code == 0, out
        assert "already there" in out
        stop.set()
        await loader
    finally:
        await _stop(proc)

    # the published key (pinned out of band) and the signing key (in its secret store)
    vkey = (live / "audit" / "gw" / "checkpoint.vkey").read_text().strip()
    ring = tmp_path / "fleet.keys"
    ring.write_text(f"# node  verifier key\ngw {vkey}\n")
    secrets.mkdir()
    shutil.copy2(live / "keys" / "gw.key", secrets / "gw.key")
    assert not any(b"PRIVATE+KEY" in p.read_bytes() for p in backup.rglob("*") if p.is_file())
    assert not (backup / "keys").exists() and not list(backup.rglob("*.key"))

    # restore: the backup into a fresh data directory, the key from the secret store beside it
    shutil.copytree(backup, restored / "audit")
    (restored / "keys").mkdir()
    shutil.copy2(secrets / "gw.key", restored / "keys" / "gw.key")
    os.chmod(restored / "keys" / "gw.key", 0o600)
    code, out = await _agency(
        "audit", "verify", str(restored / "audit"), "--keyring", str(tmp_path / "fleet.keys")
    )
    assert code == 0 and "VERIFIED" in out, out

    proc, address = await _serve(restored, tmp_path / "restored.log")
    try:
        after = await _submit(address, "Predict the weather.")
    finally:
        await _stop(proc)
    code, out = await _agency(
        "audit", "verify", str(restored / "audit"), "--keyring", str(tmp_path / "fleet.keys")
    )
    assert code == 0 and "VERIFIED" in out, out
    ended = {
        r.task_id
        for _, r in await asyncio.to_thread(lambda: list(WalLogReader(restored / "audit").records()))
        if r.event_type == "task.completed"
    }
    assert set(before_backup) <= ended, "every task answered before the backup is in the restored log"
    assert after in ended
