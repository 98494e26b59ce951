"""Instructions per Submit of the server process over gRPC (``python -m bench.bench_instructions``).

Issue 32 states its first target this way: instructions per governed Submit, counted over
gRPC in the server process (every thread), with the write-ahead audit log, against the same
count for a bare grpc.aio echo server answering the same RPC. This bench runs each server
(``bench.bench_gateway``'s bare echo and governed gateway, the same echo agent and goal) in a
child process under ``valgrind --tool=cachegrind --cache-sim=no`` (instructions of every
thread), drives it from this process (not under valgrind) with ``--small`` and then
``--large`` calls at ``--concurrency`` in flight, ends it without its shutdown (closing the log
seals and compresses its open segment: work that grows with the calls served), and divides the
difference in instructions by the difference in calls: start-up and warm-up cancel out.

Valgrind runs the server ~50x slower while the driver runs at full speed, so what the server
does per second of wall time (a signed checkpoint each second) and per hand-over to the audit
writer (a signed commit frame per batch: batches are smaller when the event loop is slow) weigh
more per call than at full speed: the gateway's count here is an upper bound. Instruction
counts do not follow the machine's load the way CPU time does.

    python -m bench.bench_instructions                       # bare, gateway (WAL), gateway (memory audit)
    python -m bench.bench_instructions --modes gateway-wal --small 100 --large 500
    python -m bench.bench_instructions --modes gateway-wal,gateway-redis  # Redis: AGENCY_REDIS_URL
    AGENCY_PURE_PYTHON=1 python -m bench.bench_instructions  # without our compiled parts

Under valgrind the server runs ~50x slower: a mode takes a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from bench.bench_gateway import request_for, start_bare, start_gateway
from middleware._proto.agency.v1 import agency_pb2_grpc
from middleware.server import event_loop

MODES = {
    "bare": "bare grpc.aio echo (the baseline)",
    "gateway-wal": "governed gateway, write-ahead audit log (agency serve's)",
    "gateway-memory": "governed gateway, in-memory audit log",
    "gateway-redis": "governed gateway as agency serve builds it on Redis storage (WAL audit log)",
}
TARGET = 1.1e6  # issue 32: instructions per governed Submit over gRPC with the WAL
REDIS_URL = os.environ.get("AGENCY_REDIS_URL", "redis://127.0.0.1:6379/15")  # gateway-redis (keys expire)


# ------------------------------------------------------------------ the server (child, under valgrind)
async def serve(mode: str, port_file: Path, data_dir: Path) -> None:
    if mode == "bare":
        _, port, stop = await start_bare()
    elif mode == "gateway-redis":
        port, stop = await start_on_redis(data_dir)
    else:
        audit = "file" if mode == "gateway-wal" else "memory"
        _, port, stop = await start_gateway(data_dir, audit)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    port_file.write_text(str(port))  # noqa: ASYNC240 (once, before serving)
    await stopping.wait()
    # Out without the shutdown: closing seals and compresses the open segment, work that grows
    # with the calls served and would be counted as theirs by the difference of two runs.
    del stop
    os._exit(0)


async def start_on_redis(data_dir: Path) -> tuple[int, Callable[[], Awaitable[None]]]:
    """The gateway ``agency serve`` builds from a definition with Redis storage (``REDIS_URL``,
    a fresh key prefix): catalog, routing statistics, tasks, events, leases on Redis."""
    from contextlib import AsyncExitStack

    from bench.bench_redis_tasks import definition_for, served
    from middleware.server.grpc_api import build_server

    prefix = f"bench-instr:{os.urandom(4).hex()}:"
    stack = AsyncExitStack()
    agency = await stack.enter_async_context(
        served(definition_for(REDIS_URL, prefix, data_dir, retention_s=60))
    )
    server = build_server(agency, "127.0.0.1:0")
    await server.start()

    async def stop() -> None:
        await server.stop(0)
        await stack.aclose()

    return server.port, stop


# ------------------------------------------------------------------ the driver (this process)
async def drive(port: int, calls: int, concurrency: int, size: int) -> None:
    request = request_for(size)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)
        left = calls

        async def caller() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                outcome = await stub.Submit(request, timeout=600)
                if outcome.state != "completed":
                    raise RuntimeError(f"a call ended {outcome.state!r}, not completed")

        await asyncio.gather(*(caller() for _ in range(concurrency)))


def count(mode: str, calls: int, args: argparse.Namespace) -> int:
    """Instructions of the server process (all threads) for one run serving ``calls`` calls."""
    with tempfile.TemporaryDirectory(prefix="bench-instr-") as tmp:
        port_file = Path(tmp) / "port"
        out_file = (args.keep / f"{mode}.{calls}.cg.out") if args.keep else Path(tmp) / "cg.out"
        command = [
            "valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out_file}",
            sys.executable, "-m", "bench.bench_instructions", "--serve", mode,
            "--port-file", str(port_file), "--data-dir", tmp,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        server = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 900
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the {mode} server did not start:\n{server.stderr.read()[-3000:]}")  # type: ignore[union-attr]
                time.sleep(0.2)  # polling a child's start-up, not synchronising a test
            port = int(port_file.read_text())
            event_loop.run(drive(port, args.warmup + calls, args.concurrency, args.size))
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=900)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        text = out_file.read_text() if out_file.exists() else ""
        found = re.search(r"^summary:\s+(\d+)", text, re.MULTILINE)
        if server.returncode != 0 or not found:
            raise RuntimeError(f"no instruction count for {mode} (exit {server.returncode}):\n{err[-3000:]}")
        return int(found.group(1))


def per_call(mode: str, args: argparse.Namespace) -> float:
    small, large = count(mode, args.small, args), count(mode, args.large, args)
    return (large - small) / (args.large - args.small)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_instructions",
        description="Instructions per Submit of the server process over gRPC (valgrind), vs a bare echo.",
    )
    parser.add_argument(
        "--modes", default="bare,gateway-wal,gateway-memory", help=f"comma-separated: {', '.join(MODES)}"
    )
    parser.add_argument("--small", type=int, default=100, help="calls in the shorter run (default 100)")
    parser.add_argument("--large", type=int, default=500, help="calls in the longer run (default 500)")
    parser.add_argument(
        "--warmup", type=int, default=50, help="calls before either run's counted ones (default 50)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight (default 16)")
    parser.add_argument("--size", type=int, default=64, help="payload bytes (default 64)")
    parser.add_argument(
        "--keep", type=Path, help="keep cachegrind's outputs in this directory (for cg_diff / cg_annotate)"
    )
    parser.add_argument("--serve", choices=sorted(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        event_loop.run(serve(args.serve, args.port_file, args.data_dir))
        return 0
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(
            f"--modes: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}"
        )
    if not 0 < args.small < args.large:
        parser.error("--small and --large: need 0 < small < large")
    compiled = (
        "pure Python (AGENCY_PURE_PYTHON=1)" if os.environ.get("AGENCY_PURE_PYTHON") else "as installed"
    )
    print(
        f"instructions per Submit, server process over gRPC (valgrind cachegrind, every thread), "
        f"{args.concurrency} in flight, {args.size}-byte payload, ({args.large} - {args.small}) calls, "
        f"event loop {event_loop.loop_name()}, {compiled}, load average {os.getloadavg()[0]:.1f}"
    )
    results: dict[str, float] = {}
    for mode in modes:
        results[mode] = per_call(mode, args)
        print(f"  {mode:<15} {results[mode] / 1e6:6.3f} M   {MODES[mode]}", flush=True)
    bare = results.get("bare")
    for mode in ("gateway-wal", "gateway-memory", "gateway-redis"):
        if mode in results and bare:
            print(f"  {mode}: {results[mode] / bare:.1f}x bare")
    if "gateway-wal" in results:
        wal = results["gateway-wal"]
        verdict = "met" if wal <= TARGET else f"MISSED by {(wal - TARGET) / 1e6:.2f} M ({wal / TARGET:.1f}x)"
        print(f"  issue 32 target <= {TARGET / 1e6:.1f} M per governed Submit with the WAL: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
