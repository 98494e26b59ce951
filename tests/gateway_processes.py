"""Real ``agency serve --config FILE`` processes for the multi-gateway tests.

Each gateway listens on a free port (``127.0.0.1:0``) and writes its output to a log
file; it is ready once it prints ``serving on HOST:PORT`` (polled with a deadline: the
observable state of another process).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

_SERVING = re.compile(r"serving on [\d.]+:(\d+)")


def redis_definition(prefix: str, **sections: Any) -> dict[str, Any]:
    """A definition on the test Redis under ``prefix`` (``sections`` add or replace top-level
    ones). Node id and audit directory come from each process's environment, as replicas
    sharing one file get them."""
    return {
        "version": 1,
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "storage": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix},
        **sections,
    }


def write_definition(path: Path, definition: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(definition))  # JSON is YAML
    return path


@dataclass
class GatewayProcess:
    """One running ``agency serve`` process."""

    node: str
    proc: asyncio.subprocess.Process
    port: int
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return _read(self.log)

    async def stop(self, within: float = 20) -> int:
        """SIGTERM and wait for the exit (killed after ``within`` seconds); returns the exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=within)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _create(path: Path) -> BinaryIO:
    return open(path, "wb")  # closed by the caller once the child holds its own descriptor


async def start_gateway(
    config: Path,
    node: str,
    data_dir: Path,
    *,
    pythonpath: Sequence[Path] = (),
    ready_within: float = 30,
) -> GatewayProcess:
    """Start ``agency serve --config CONFIG`` as replica ``node``.

    The process gets ``AGENCY_NODE_ID=node`` and its own audit directory
    ``data_dir/<node>/audit`` (``AGENCY_AUDIT_DIR``); no other ``AGENCY_*`` variable of
    the test's environment leaks into it.

    Args:
        pythonpath: Directories the gateway must import agents from.
        ready_within: Seconds to wait for ``serving on`` (a fresh interpreter starting).
    """
    log = data_dir / f"{node}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    env.update(AGENCY_NODE_ID=node, AGENCY_AUDIT_DIR=str(data_dir / node / "audit"))
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env.get("PYTHONPATH", "")])
    with _create(log) as out:  # the child keeps its own descriptor
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "middleware",
            "serve",
            "--config",
            str(config),
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
    gateway = GatewayProcess(node, proc, 0, log)
    deadline = time.monotonic() + ready_within
    while time.monotonic() < deadline and proc.returncode is None:
        match = _SERVING.search(gateway.output())
        if match:
            gateway.port = int(match.group(1))
            return gateway
        await asyncio.sleep(0.02)
    await gateway.stop(within=5)
    raise AssertionError(f"gateway {node} did not start (exit {proc.returncode}):\n{gateway.output()}")


async def start_gateways(
    config: Path, nodes: Sequence[str], data_dir: Path, **kwargs: Any
) -> list[GatewayProcess]:
    """Start one replica per node id on one definition file, at once; if one fails, the
    others are stopped."""
    results = await asyncio.gather(
        *(start_gateway(config, node, data_dir, **kwargs) for node in nodes), return_exceptions=True
    )
    started = [r for r in results if isinstance(r, GatewayProcess)]
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        for gateway in started:
            await gateway.stop()
        raise failed[0]
    return started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int, *, persist_in: Path | None = None) -> subprocess.Popen[bytes]:
    """A private ``redis-server`` on ``port`` (for outage tests), once it accepts connections.

    Args:
        persist_in: Keep the data in this directory (append-only file, fsync always), so a
            server started again on it has the keys back; None = no persistence.
    """
    exe = shutil.which("redis-server")
    if exe is None:
        raise AssertionError("redis-server is required for this test")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    if persist_in is None:
        args += ["--appendonly", "no"]
    else:
        persist_in.mkdir(parents=True, exist_ok=True)
        args += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(persist_in)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


_WORKER_READY = re.compile(r"agency: worker (\S+) serving on (\S+) .*registered at")


@dataclass
class WorkerProcess:
    """One running ``agency worker`` process."""

    key: str
    proc: asyncio.subprocess.Process
    endpoint: str
    log: Path

    def output(self) -> str:
        return _read(self.log)


async def start_worker(
    agent: str,
    contract: dict[str, Any],
    gateways: Sequence[str],
    data_dir: Path,
    *,
    pythonpath: Sequence[Path] = (),
    heartbeat: float = 0.2,
    ready_within: float = 30,
) -> WorkerProcess:
    """Start ``agency worker --agent AGENT --contract FILE --gateway G1 --gateway G2 ...``; ready
    once it prints that it registered (polled with a deadline)."""
    name = contract["name"]
    contract_file = data_dir / f"{name}.contract.json"
    contract_file.write_text(json.dumps(contract))
    log = data_dir / f"worker-{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), env.get("PYTHONPATH", "")])
    argv = ["-m", "middleware", "worker", "--agent", agent, "--contract", str(contract_file)]
    for gateway in gateways:
        argv += ["--gateway", gateway]
    argv += ["--heartbeat", str(heartbeat)]
    with _create(log) as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env
        )
    deadline = time.monotonic() + ready_within
    while time.monotonic() < deadline and proc.returncode is None:
        match = _WORKER_READY.search(_read(log))
        if match:
            return WorkerProcess(match.group(1), proc, match.group(2), log)
        await asyncio.sleep(0.02)
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
    raise AssertionError(f"worker {name} did not start (exit {proc.returncode}):\n{_read(log)}")


class SubmitLoad:
    """Submits ``work`` back to back from a few clients over ``stub`` and tallies what comes back:
    tasks completed, and each refusal's status code and ``agency-reason`` trailer."""

    def __init__(self, stub: Any, work: Any, clients: int = 3) -> None:
        self.stub = stub
        self.work = work
        self.clients = clients
        self.completed = 0
        self.codes: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._client()) for _ in range(clients)]

    async def _client(self) -> None:
        import grpc

        while not self._stop.is_set():
            try:
                outcome = await self.stub.Submit(self.work, timeout=10)
                assert outcome.state == "completed", outcome
                self.completed += 1
            except grpc.aio.AioRpcError as exc:
                self.codes[exc.code().name] += 1
                trailers = dict(exc.trailing_metadata() or ())
                self.reasons[str(trailers.get("agency-reason", ""))] += 1
                await asyncio.sleep(0.02)  # pacing of a retrying client, not synchronisation

    async def completes(self, more: int, within: float) -> None:
        """Wait until ``more`` further tasks have completed (fails after ``within`` seconds)."""
        target, deadline = self.completed + more, time.monotonic() + within
        while self.completed < target:
            if time.monotonic() > deadline:
                raise AssertionError(f"tasks stopped completing ({self.completed}/{target}; {self.codes})")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)
