"""Submit throughput and latency: the governed gateway against a bare grpc.aio echo server.

Both servers run in this process on loopback, one after the other, with the same
message, the same concurrency and the same load generator (a separate process, so
client and server do not share a GIL). The gateway runs the full governance path:
request validation, routing by contract, input/output schema checks, SMF envelopes,
goal verification, the durable audit log (``WalAuditLog``, as ``agency serve`` uses it) and Prometheus
metrics, with an in-process echo agent. The bare server answers the same RPC with
the same-sized reply and nothing else.

    python -m bench.bench_gateway                        # 10 s per server
    python -m bench.bench_gateway --seconds 20 --concurrency 32 --size 1024
    python -m bench.bench_gateway --soak 600             # + 10 min at 70 % of gateway throughput
    python -m bench.bench_gateway --profile gateway.prof # cProfile the gateway run
    python -m bench.bench_gateway --workers-compare      # + agency serve --workers 2 vs 1 (Redis)
    python -m bench.bench_gateway --side-effects         # the echo under the default contract

The echo agent's contract declares ``side_effect_free`` (a pure function): in process, a task
waits for one fdatasync (the outcome barrier). ``--side-effects`` registers it with the default
contract (an agent that may act: the dispatch barrier too, two waits). Every run prints which.

Each line also shows the server's CPU per call (every thread of this process; the load
generator is a child process): on a shared machine calls/s swing with the load, the CPU per
call much less, and the throughput of a CPU-bound gateway follows it.

Targets (issue 18), each printed against its baseline measured in the same run:
throughput at 16 in flight >= 0.40x the bare server's; p50 at 1 in flight <= bare p50 +
the disk's fdatasync p50 (measured in the gateway's data directory) + 1 ms; with
``--workers-compare``, ``agency serve --workers 2`` vs ``--workers 1`` (real processes on
Redis, the load generator on several connections) >= 1.6x on an otherwise idle 2-core
machine; soak: RSS growth < 10 %, no errors.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import multiprocessing as mp
import os
import re
import resource
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, BinaryIO

import grpc

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.server import event_loop

_STRING = {"type": "string"}
ECHO_CONTRACT = {
    "name": "echo",
    "version": "1.0.0",
    "description": "Echoes its input.",
    "can_do": ["echo"],
    "slo_latency_ms": 5000,
    "input_schema": {"type": "object", "required": ["payload"], "properties": {"payload": _STRING}},
    "output_schema": {"type": "object", "required": ["payload"], "properties": {"payload": _STRING}},
    # A pure function: run in process, its dispatch is no durability barrier (one fdatasync
    # wait per task, at the outcome). --side-effects measures the default contract (two).
    "side_effect_free": True,
}


def echo_contract(side_effects: bool) -> dict[str, Any]:
    """The echo's contract: side-effect free (the default here), or as any contract by default."""
    return {**ECHO_CONTRACT, "side_effect_free": not side_effects}


def barrier_mode(side_effects: bool) -> str:
    """What the run measures, in words (printed with the figures)."""
    if side_effects:
        return "default contract (may act): 2 fdatasync waits per task (dispatch + outcome)"
    return "side-effect-free agent in process: 1 fdatasync wait per task (outcome)"


ECHO_GOAL = {
    "id": "GOAL_ECHO",
    "description": "The payload comes back.",
    "verification_steps": [{"kind": "json_path", "path": "$.payload"}],
    "timeout_seconds": 30,
}


def request_for(size: int) -> agency_pb2.SubmitRequest:
    return agency_pb2.SubmitRequest(
        text="echo this payload",
        goal_id="GOAL_ECHO",
        constraints_json=json.dumps({"action": "echo"}),
        input_json=json.dumps({"payload": "x" * size}),
        user_id="bench",
    )


# ------------------------------------------------------------------ servers
class BareServicer(agency_pb2_grpc.AgencyServiceServicer):
    """The baseline: decode, answer a same-sized Outcome, nothing else."""

    async def Submit(self, request: agency_pb2.SubmitRequest, context: Any) -> agency_pb2.Outcome:
        return agency_pb2.Outcome(
            task_id="task_bare", state="completed", output_json=request.input_json, trace_id="0" * 32
        )


async def start_bare() -> tuple[grpc.aio.Server, int, Callable[[], Awaitable[None]]]:
    server = grpc.aio.server()
    agency_pb2_grpc.add_AgencyServiceServicer_to_server(BareServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def stop() -> None:
        await server.stop(0)

    return server, port, stop


Stop = Callable[[], Awaitable[None]]


async def start_gateway(
    data_dir: Path, audit: str = "file", *, side_effects: bool = False
) -> tuple[Any, int, Stop]:
    from middleware import Agency
    from middleware.audit import MemoryAuditLog, WalAuditLog
    from middleware.server.grpc_api import build_server
    from middleware.server.metrics import MeteredAuditLog, Metrics

    async def echo(request: Any) -> Any:
        return request.input

    metrics = Metrics()
    (data_dir / "audit").mkdir(parents=True, exist_ok=True)
    log = WalAuditLog(data_dir / "audit", "bench") if audit == "file" else MemoryAuditLog()
    agency = Agency(audit=MeteredAuditLog(log, metrics))
    await agency.register(echo_contract(side_effects), echo)
    agency.register_goal(ECHO_GOAL)
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    gc.freeze()  # as agency serve does after start-up

    async def stop() -> None:
        await server.stop(0)
        await agency.close()

    return server, server.port, stop


# ------------------------------------------------------------------ load generator (child process)
def _client(
    address: str, size: int, concurrency: int, seconds: float, rate: float, channels: int, conn: Any
) -> None:
    conn.send(event_loop.run(_load(address, size, concurrency, seconds, rate, channels)))
    conn.close()


async def _load(
    address: str, size: int, concurrency: int, seconds: float, rate: float, channels: int = 1
) -> dict[str, Any]:
    """Closed loop with ``concurrency`` callers, or open loop at ``rate`` calls/s if rate > 0,
    over ``channels`` separate connections (callers take them in turn)."""
    payload = request_for(size)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    # a local subchannel pool per channel: separate TCP connections (SO_REUSEPORT spreads them)
    opened = [
        grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, channels))
    ]
    stubs = [agency_pb2_grpc.AgencyServiceStub(c) for c in opened]
    turn = warmup = 0
    try:
        for stub in stubs:
            for _ in range(max(5, 50 // len(stubs))):  # warm-up: connections, caches, compiled schemas
                await stub.Submit(payload, timeout=30)
                warmup += 1

        async def one() -> None:
            nonlocal turn
            stub = stubs[turn % len(stubs)]
            turn += 1
            t0 = time.perf_counter()
            try:
                outcome = await stub.Submit(payload, timeout=10)
                if outcome.state != "completed":
                    errors[outcome.state] = errors.get(outcome.state, 0) + 1
                    return
            except grpc.aio.AioRpcError as exc:
                errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                return
            latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        end = start + seconds
        if rate <= 0:

            async def worker() -> None:
                while time.perf_counter() < end:
                    await one()

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        else:
            pending: set[asyncio.Task[None]] = set()
            interval, sent = 1.0 / rate, 0
            while (now := time.perf_counter()) < end:
                due = start + sent * interval
                if due > now:
                    await asyncio.sleep(due - now)
                if len(pending) >= 1024:
                    errors["CLIENT_BACKLOG"] = errors.get("CLIENT_BACKLOG", 0) + 1
                else:
                    task = asyncio.create_task(one())
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                sent += 1
            await asyncio.gather(*pending)
        elapsed = time.perf_counter() - start
    finally:
        for c in opened:
            await c.close()
    latencies.sort()
    n = len(latencies)
    return {
        "calls": n,
        "warmup": warmup,
        "errors": errors,
        "seconds": elapsed,
        "throughput": n / elapsed,
        "p50_ms": latencies[n // 2] * 1000 if n else float("nan"),
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else float("nan"),
        "mean_ms": statistics.fmean(latencies) * 1000 if n else float("nan"),
    }


async def drive(
    port: int,
    args: argparse.Namespace,
    *,
    seconds: float,
    rate: float = 0.0,
    concurrency: int | None = None,
    channels: int = 1,
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    inflight = args.concurrency if concurrency is None else concurrency
    proc = ctx.Process(
        target=_client, args=(f"127.0.0.1:{port}", args.size, inflight, seconds, rate, channels, child)
    )
    before = _cpu_seconds()
    proc.start()
    result: dict[str, Any] = await asyncio.to_thread(parent.recv)
    # the server's CPU (this process, every thread; the load generator is a child) per call,
    # warm-up calls included: a figure the machine's load moves less than calls/s
    result["cpu_us"] = (_cpu_seconds() - before) / max(1, result["calls"] + result["warmup"]) * 1e6
    await asyncio.to_thread(proc.join)
    return result


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _redis_commands(url: str) -> int:
    """Commands the Redis server at ``url`` has executed so far (INFO commandstats)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return sum(int(v["calls"]) for v in stats.values() if isinstance(v, dict))


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its children so far."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _disk_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process(os.getpid()).memory_info().rss)


# ------------------------------------------------------------------ main
def show(name: str, r: dict[str, Any]) -> None:
    errors = sum(r["errors"].values())
    cpu = f"CPU {r['cpu_us']:5.0f} us/call   " if math.isfinite(r["cpu_us"]) else ""
    print(
        f"{name:<8} {r['throughput']:>9.0f} calls/s   p50 {r['p50_ms']:7.3f} ms   p99 {r['p99_ms']:7.3f} ms"
        f"   {cpu}({r['calls']} calls, {errors} errors {r['errors'] or ''})"
    )


async def run(args: argparse.Namespace) -> int:
    print(
        f"load average {os.getloadavg()[0]:.1f}; Submit, {args.size}-byte payload, "
        f"concurrency {args.concurrency}, {args.seconds:.0f} s each, {os.cpu_count()} CPUs, "
        f"client in a separate process, gateway audit: {args.audit}, event loop: {event_loop.loop_name()}"
    )
    print(f"echo agent: {barrier_mode(args.side_effects)}")
    _, port, stop = await start_bare()
    try:
        bare = await drive(port, args, seconds=args.seconds)
        bare1 = await drive(port, args, seconds=args.latency_seconds, concurrency=1)
    finally:
        await stop()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        _, port, stop = await start_gateway(Path(tmp), args.audit, side_effects=args.side_effects)
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        try:
            gateway = await drive(port, args, seconds=args.seconds)
            gateway1 = await drive(port, args, seconds=args.latency_seconds, concurrency=1)
        finally:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(args.profile)
            await stop()
        fsync_ms = await asyncio.to_thread(fdatasync_p50_ms, Path(tmp))
    show("bare", bare)
    show("gateway", gateway)
    show("bare 1", bare1)
    show("gateway 1", gateway1)
    ratio = gateway["throughput"] / bare["throughput"]
    print(
        f"throughput at {args.concurrency} in flight: {ratio:.2f}x bare "
        f"(target >= 0.40x: {'met' if ratio >= 0.40 else 'MISSED'})"
    )
    print(
        f"server CPU per call at {args.concurrency} in flight: bare {bare['cpu_us']:.0f} us, gateway "
        f"{gateway['cpu_us']:.0f} us = {bare['cpu_us'] / gateway['cpu_us']:.2f}x (the throughput ratio "
        "a CPU-bound gateway would reach with the same CPU as the bare server)"
    )
    allowed = bare1["p50_ms"] + fsync_ms + 1.0
    print(
        f"p50 at 1 in flight: gateway {gateway1['p50_ms']:.2f} ms vs bare {bare1['p50_ms']:.2f} ms "
        f"+ fdatasync p50 {fsync_ms:.2f} ms + 1 ms = {allowed:.2f} ms "
        f"({'met' if gateway1['p50_ms'] <= allowed else 'MISSED'}; {barrier_mode(args.side_effects)})"
    )
    if args.workers_compare:
        await workers_compare(args)
    if args.soak:
        await soak(args, gateway["throughput"] * 0.7)
    return 0


def fdatasync_p50_ms(directory: Path, n: int = 200) -> float:
    """The disk's p50 of one 4 KiB write + fdatasync in ``directory`` (the gateway's disk)."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    block, times = os.urandom(4096), []
    try:
        for _ in range(n):
            os.write(fd, block)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1000


async def echo_agent(request: Any) -> Any:
    """The echo agent, importable by a definition file (``bench.bench_gateway:echo_agent``)."""
    return request.input


_WORKERS_READY = re.compile(r"^agency: serving on [\d.]+:(\d+) \((\d+) workers", re.MULTILINE)


_REPO = Path(__file__).resolve().parent.parent


def _create(path: Path) -> BinaryIO:
    return open(path, "wb")


async def workers_compare(args: argparse.Namespace) -> None:
    """``agency serve --workers 2`` vs ``--workers 1``: real processes on Redis, same load
    generator on ``--channels`` connections (the kernel spreads connections, not calls)."""
    import redis.asyncio as aioredis

    redis_url = os.environ.get("AGENCY_REDIS_URL", "redis://127.0.0.1:6379/15")
    prefix = f"bench:{os.urandom(4).hex()}:"
    definition = {
        "version": 1,
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "storage": {"backend": "redis", "redis_url": redis_url, "key_prefix": prefix},
        "agents": [{"agent": "bench.bench_gateway:echo_agent", "contract": echo_contract(args.side_effects)}],
        "goals": [ECHO_GOAL],
    }
    root = _REPO
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    env.update(AGENCY_NODE_ID="bench", PYTHONPATH=os.pathsep.join([str(root), env.get("PYTHONPATH", "")]))
    results: dict[int, dict[str, Any]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
            config = Path(tmp) / "agency.yaml"
            config.write_text(json.dumps(definition))
            for n in (1, 2):
                log_path = Path(tmp) / f"serve-{n}.log"
                with _create(log_path) as out:  # the child keeps its own descriptor
                    proc = await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "middleware", "serve", "--config", str(config),
                        "--workers", str(n), "--data-dir", str(Path(tmp) / f"data{n}"),
                        stdout=out, stderr=asyncio.subprocess.STDOUT, env=env,
                    )  # fmt: skip
                try:
                    port = 0
                    deadline = time.monotonic() + 60
                    while not port and proc.returncode is None and time.monotonic() < deadline:
                        match = _WORKERS_READY.search(log_path.read_text(errors="replace"))
                        port = int(match.group(1)) if match else 0
                        await asyncio.sleep(0.05)
                    if not port:
                        raise RuntimeError(
                            f"agency serve --workers {n} did not start:\n{log_path.read_text()}"
                        )
                    before = _tree_cpu_seconds(proc.pid)
                    commands = await _redis_commands(redis_url)
                    results[n] = await drive(port, args, seconds=args.seconds, channels=args.channels)
                    commands = await _redis_commands(redis_url) - commands
                    # the server's CPU: the serve process and its workers, warm-up calls included
                    calls = results[n]["calls"] + results[n]["warmup"]
                    results[n]["cpu_us"] = (_tree_cpu_seconds(proc.pid) - before) / max(1, calls) * 1e6
                    results[n]["redis_per_call"] = commands / max(1, calls)
                finally:
                    if proc.returncode is None:
                        proc.send_signal(signal.SIGTERM)
                    await proc.wait()
    finally:
        client = aioredis.Redis.from_url(redis_url)
        try:
            keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
    show("serve -w1", results[1])
    show("serve -w2", results[2])
    print(
        f"Redis commands executed per call (INFO commandstats, scripts' inner calls included; the whole "
        f"server's): {results[1]['redis_per_call']:.1f} with 1 worker, "
        f"{results[2]['redis_per_call']:.1f} with 2"
    )
    ratio = results[2]["throughput"] / results[1]["throughput"]
    print(
        f"agency serve --workers 2 vs 1 ({args.channels} connections, {args.concurrency} in flight): "
        f"{ratio:.2f}x (aim >= 1.6x on an otherwise idle 2-core machine, load generator included; "
        f"load average now {os.getloadavg()[0]:.1f})"
    )


async def soak(args: argparse.Namespace, rate: float) -> None:
    print(f"\nsoak: {args.soak:.0f} s at {rate:.0f} calls/s (70% of the gateway's measured throughput)")
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        _, port, stop = await start_gateway(Path(tmp), side_effects=args.side_effects)
        samples: list[tuple[float, int]] = []
        try:
            load = asyncio.create_task(drive(port, args, seconds=args.soak, rate=rate))
            t0 = time.perf_counter()
            while not load.done():
                samples.append((time.perf_counter() - t0, rss_bytes()))
                await asyncio.wait({load}, timeout=5)
            result = load.result()
        finally:
            await stop()
        audit_bytes = await asyncio.to_thread(_disk_bytes, Path(tmp))
    # the first 10 % is warm-up (allocator, caches); growth is measured after it
    settled = [s for s in samples if s[0] >= args.soak * 0.1] or samples
    first, last = settled[0][1], samples[-1][1]
    peak = max(s[1] for s in samples)
    growth = (last - first) / first
    errors = sum(result["errors"].values())
    show("soak", result)
    print(
        f"RSS after warm-up {first / 2**20:.1f} MiB, at end {last / 2**20:.1f} MiB, "
        f"peak {peak / 2**20:.1f} MiB: growth {growth:+.1%} "
        f"(target < 10%: {'met' if growth < 0.1 else 'MISSED'}); "
        f"errors {errors} (target 0: {'met' if errors == 0 else 'MISSED'}); "
        f"audit log {audit_bytes / 2**20:.1f} MiB"
    )


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_gateway", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measurement time per server (default 10)")
    p.add_argument("--concurrency", type=int, default=16, help="calls in flight (default 16)")
    p.add_argument("--size", type=int, default=256, help="payload bytes (default 256)")
    p.add_argument(
        "--soak", type=float, default=0.0, help="then soak this many seconds at 70%% (default off)"
    )
    p.add_argument(
        "--audit",
        choices=["file", "memory"],
        default="file",
        help="gateway audit backend: file = the durable WAL (the target configuration); memory = diagnosis",
    )
    p.add_argument("--profile", help="write a cProfile of the gateway run to this file")
    p.add_argument(
        "--latency-seconds", type=float, default=5.0, help="time of the 1-in-flight runs (default 5)"
    )
    p.add_argument(
        "--workers-compare",
        action="store_true",
        help="also run agency serve --workers 1 and 2 (Redis: AGENCY_REDIS_URL, default local DB 15)",
    )
    p.add_argument("--channels", type=int, default=8, help="connections for --workers-compare (default 8)")
    p.add_argument(
        "--side-effects",
        action="store_true",
        help="register the echo with the default contract (it may act: dispatch barrier kept) instead "
        "of as side-effect free",
    )
    return event_loop.run(run(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
