"""``agency serve --workers N``: N gateway processes on one address, one per core.

The parent process starts N ``agency serve`` processes (the same command line without
``--workers``) that share the listening port with ``SO_REUSEPORT`` — chosen explicitly
here, for the workers only: the kernel spreads incoming connections over them. Each is
its own audit node (node id ``<node>-w1`` ... ``<node>-wN``, its log under the same audit
directory) and they share everything else through Redis, so in-memory storage is refused.
The parent forwards SIGTERM/SIGINT to every worker and waits until all have drained; if a
worker stops on its own, the others are stopped too (the supervisor restarts the whole
group). Exit status: 0 if every worker exited 0, else the first non-zero status.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Sequence

from ..errors import InvalidInput
from ..server.definition import AgencyDefinition
from ..server.grpc_api.ports import check_port_free

__all__ = ["run_workers", "worker_argv", "worker_node"]

_DROPPED = {"--workers": True, "--address": True, "--metrics-address": True, "--reuse-port": False}
"""Flags the parent sets per worker: name -> whether it takes a value."""


def worker_node(node: str, i: int) -> str:
    """The audit node id of worker ``i`` (from 1)."""
    return f"{node}-w{i}"


def worker_argv(argv: Sequence[str], address: str, metrics_address: str) -> list[str]:
    """The worker's command line: ``argv`` without the flags the parent decides, plus them."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _DROPPED:
            skip = _DROPPED[name] and "=" not in arg
            continue
        out.append(arg)
    return [*out, "--address", address, "--metrics-address", metrics_address, "--reuse-port"]


def _check(workers: int, definition: AgencyDefinition) -> None:
    if workers < 1:
        raise InvalidInput.single("--workers", "must be at least 1", what="agency serve")
    if definition.storage.backend != "redis":
        raise InvalidInput.single(
            "--workers",
            "needs shared storage (storage.backend: redis, or AGENCY_REDIS_URL): with in-memory "
            "storage every worker would have its own catalog, tasks and mailboxes",
            what="agency serve",
        )


def _reserve(address: str, explicit_sharing: bool) -> tuple[socket.socket, str]:
    """Hold the port for the workers (bound with SO_REUSEPORT, not listening: it takes no
    connections); port 0 becomes a free port. A port another process holds is refused
    unless sharing was asked for (``--reuse-port``)."""
    host, _, port = address.rpartition(":")
    if not explicit_sharing and port != "0":
        check_port_free(address)
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        sock.close()
        raise InvalidInput.single(
            "--address", f"cannot listen on {address}: {exc}", what="agency serve"
        ) from None
    return sock, f"{host}:{sock.getsockname()[1]}"


def _metrics_for(metrics_address: str, i: int) -> str:
    """Worker ``i``'s metrics address: the given port + i - 1 (port 0: any; '' = off)."""
    if not metrics_address:
        return ""
    host, _, port = metrics_address.rpartition(":")
    return f"{host}:{int(port) + i - 1}" if int(port) else metrics_address


def run_workers(
    workers: int, definition: AgencyDefinition, argv: Sequence[str], *, explicit_sharing: bool
) -> int:
    """Run ``workers`` gateway processes on ``definition.server.address`` until SIGTERM/SIGINT.

    Args:
        workers: How many processes.
        definition: The resolved definition (flags, environment, file): checked here.
        argv: The command line after the program name (``serve ...``), repeated to the workers.
        explicit_sharing: ``--reuse-port`` was given: the port may be shared with other processes.

    Raises:
        InvalidInput: ``--workers`` below 1, in-memory storage, or the address cannot be held.
    """
    _check(workers, definition)
    return asyncio.run(_supervise(workers, definition, argv, explicit_sharing))


async def _supervise(
    workers: int, definition: AgencyDefinition, argv: Sequence[str], explicit_sharing: bool
) -> int:
    server = definition.server
    held, address = _reserve(server.address, explicit_sharing)
    node = definition.agency.node_id
    procs: list[asyncio.subprocess.Process] = []
    ready: list[asyncio.Event] = []
    readers: list[asyncio.Task[None]] = []
    try:
        for i in range(1, workers + 1):
            env = {**os.environ, "AGENCY_NODE_ID": worker_node(node, i)}
            cmd = worker_argv(argv, address, _metrics_for(server.metrics_address, i))
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "middleware", *cmd, stdout=asyncio.subprocess.PIPE, env=env
            )
            procs.append(proc)
            ready.append(asyncio.Event())
            readers.append(asyncio.create_task(_relay(proc, f"[w{i}] ", ready[-1])))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        exited = [asyncio.create_task(p.wait()) for p in procs]
        all_ready = asyncio.create_task(_all_set(ready))
        stopping = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([all_ready, stopping, *exited], return_when=asyncio.FIRST_COMPLETED)
        if all_ready in done:
            held.close()  # the workers listen now; the reservation is no longer needed
            names = ", ".join(worker_node(node, i) for i in range(1, workers + 1))
            print(f"agency: serving on {address} ({workers} workers: {names})", flush=True)
            await asyncio.wait([stopping, *exited], return_when=asyncio.FIRST_COMPLETED)
        all_ready.cancel()
        stopping.cancel()
        if not stop.is_set():
            print("agency: a worker stopped: stopping the others", file=sys.stderr, flush=True)
    finally:
        held.close()
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        codes = [await proc.wait() for proc in procs]
        for reader in readers:
            await reader
    print("agency: all workers stopped", flush=True)
    return next((code for code in codes if code != 0), 0)


async def _all_set(events: list[asyncio.Event]) -> None:
    for event in events:
        await event.wait()


async def _relay(proc: asyncio.subprocess.Process, prefix: str, ready: asyncio.Event) -> None:
    """Copy a worker's output lines, prefixed; set ``ready`` once it serves."""
    assert proc.stdout is not None
    async for raw in proc.stdout:
        line = raw.decode(errors="replace")
        if "serving on" in line:
            ready.set()
        sys.stdout.write(prefix + line)
        sys.stdout.flush()
