"""Redis cost of a task: memory per task during and after retention, round trips, commands and
gateway CPU per 1-step task (``python -m bench.bench_redis_tasks``).

Builds a gateway as ``agency serve`` does (:func:`middleware.server.bootstrap.build_agency`) from a
definition with one in-process echo agent and Redis storage, and submits ``--tasks`` 1-step tasks
through ``Agency.submit`` (the real task path: lease, task record, routing, audit, events, the
outcome). Needs a Redis of its own, since ``used_memory`` is the whole server's: by default it
starts ``redis-server`` on a free port (and stops it by PID); ``--redis-url`` uses another one
(only a database nobody else writes to gives a true figure).

Printed:

- **bytes per task** of Redis ``used_memory`` (baseline: the empty server after the gateway
  started) right after the tasks ran (within retention), and after the retention passed (the
  definition's retention is shortened to ``--retention`` seconds for the run, by default 1.5 times
  the run's estimated length, so that "after" is reached; the bench waits until the last task's
  record and events are gone, polling);
- **round trips per task** (each command or pipeline sent on a connection: counted on the
  client), **commands per task** sent by the gateway, and **Redis commands per task** executed by
  the server (``INFO commandstats`` deltas, the scripts' inner calls included), in the steady
  state: the first ``--warmup`` tasks (script loading, the catalog's first reads) are left out;
- **gateway CPU per task** (process time) with Redis storage and, in the same run, with memory
  storage.

    python -m bench.bench_redis_tasks                 # 100k tasks
    python -m bench.bench_redis_tasks --tasks 2000 --retention 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.bench_gateway import ECHO_GOAL, echo_contract
from middleware.redis import keys

__all__ = ["RoundTrips", "count_round_trips", "main"]


@dataclass
class RoundTrips:
    """What the gateway sent to Redis while counting: ``trips`` writes of a command or a pipeline
    to a connection (each waits for its replies: one round trip), ``commands`` in them."""

    trips: int = 0
    commands: int = 0
    #: round trips by the ``middleware/redis`` module that sent them (the outermost on the stack)
    by_module: Counter[str] = field(default_factory=Counter)


@contextlib.contextmanager
def count_round_trips() -> Iterator[RoundTrips]:
    """Count every round trip any ``redis.asyncio`` connection of this process makes in the block
    (a command is one, a pipeline is one however many commands it holds)."""
    from redis.asyncio.connection import AbstractConnection

    counts = RoundTrips()
    send = AbstractConnection.send_packed_command
    pack_one = AbstractConnection.pack_command

    async def counted_send(self: Any, command: Any, check_health: bool = True) -> None:
        counts.trips += 1
        frame: Any = sys._getframe(1)
        module = "other"
        while frame is not None:
            path = frame.f_code.co_filename.replace("\\", "/")
            if "/middleware/redis/" in path and not path.endswith(("/errors.py", "/batch.py")):
                module = path.rsplit("/", 1)[1].removesuffix(".py")
            frame = frame.f_back
        counts.by_module[module] += 1
        await send(self, command, check_health)

    def counted_one(self: Any, *args: Any) -> Any:
        counts.commands += 1
        return pack_one(self, *args)

    AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]
    AbstractConnection.pack_command = counted_one  # type: ignore[method-assign]  # pipelines too
    try:
        yield counts
    finally:
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        AbstractConnection.pack_command = pack_one  # type: ignore[method-assign]


def definition_for(redis_url: str, prefix: str, data_dir: Path, *, retention_s: float | None) -> Any:
    """The bench's definition: one echo agent, Redis storage (memory when ``redis_url`` is empty)."""
    from middleware.server.settings import definition_from

    storage: dict[str, Any] = {"backend": "memory"}
    if redis_url:
        storage = {"backend": "redis", "redis_url": redis_url, "key_prefix": prefix}
        if retention_s is not None:
            storage["retention"] = {
                "finished_task_seconds": retention_s,
                "task_event_seconds": retention_s,
            }
    return definition_from(
        {
            "server": {"address": "127.0.0.1:0", "metrics_address": "", "data_dir": str(data_dir)},
            "agency": {"node_id": "bench"},
            "storage": storage,
            "agents": [{"agent": "bench.bench_gateway:echo_agent", "contract": echo_contract(False)}],
            "goals": [ECHO_GOAL],
        },
        env={},
    )


def request(i: int) -> dict[str, Any]:
    return {
        "task_id": f"bench-{i:07d}",
        "text": "echo this payload",
        "goal_id": "GOAL_ECHO",
        "constraints": {"action": "echo"},
        "input": {"payload": "x" * 64},
        "user_id": "bench",
    }


async def run_tasks(agency: Any, first: int, n: int, concurrency: int) -> None:
    """Submit tasks ``first`` … ``first + n - 1``, ``concurrency`` at a time; each must complete."""
    nxt = first
    end = first + n

    async def loop() -> None:
        nonlocal nxt
        while nxt < end:
            i = nxt
            nxt += 1
            outcome = await agency.submit(request(i), client="bench")
            if outcome.state.value != "completed":
                raise RuntimeError(f"task {i}: {outcome.state.value}: {outcome.reason}")

    await asyncio.gather(*(loop() for _ in range(concurrency)))


async def used_memory(client: Any) -> int:
    return int((await client.info("memory"))["used_memory"])


async def server_commands(client: Any) -> int:
    stats = await client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


@contextlib.asynccontextmanager
async def served(definition: Any) -> AsyncIterator[Any]:
    """A gateway's agency as ``agency serve`` runs it: its in-process agents kept alive in the
    catalog, the task leases renewed (Redis), everything closed afterwards."""
    from middleware.liveness import KeepAlive
    from middleware.server.bootstrap import build_agency

    agency = await build_agency(definition)
    keep_alive = KeepAlive(
        agency.catalog,
        agency.agents.keys,
        restore=lambda contract: agency.register(contract, replace=True, actor="keep-alive"),
    )
    await keep_alive.__aenter__()
    if agency.takeover is not None:
        agency.takeover.start()
    try:
        yield agency
    finally:
        try:
            await keep_alive.__aexit__(None, None, None)
            await agency.close()
        finally:
            await agency.catalog.close()


async def measure(args: argparse.Namespace, redis_url: str) -> None:
    import redis.asyncio as aioredis

    admin = aioredis.Redis.from_url(redis_url)
    prefix = f"bench-rt:{uuid.uuid4().hex[:6]}:"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-redis-tasks-") as tmp:
            rate = await round_trips_and_cpu(args, redis_url, admin, prefix, Path(tmp))
            # memory during and after retention (by default long enough to outlast the run)
            retention = args.retention or math.ceil(1.5 * args.tasks / rate + 10)
            await memory_per_task(args, redis_url, admin, prefix, Path(tmp), retention)
    finally:
        await admin.aclose()


async def round_trips_and_cpu(
    args: argparse.Namespace, redis_url: str, admin: Any, prefix: str, tmp: Path
) -> float:
    """Print round trips, commands and CPU per task (Redis, then memory storage); returns the
    rate of tasks per second on Redis."""
    cpu: dict[str, float] = {}
    rate = 100.0
    for label, url in (("redis", redis_url), ("memory", "")):
        definition = definition_for(url, prefix, tmp / label, retention_s=None)
        async with served(definition) as agency:
            await run_tasks(agency, 0, args.warmup, 1)
            gc.collect()
            before = await server_commands(admin)
            with count_round_trips() as counts:
                await run_tasks(agency, args.warmup, args.probe, 1)
            after = await server_commands(admin)
            if url:
                n = args.probe
                print(
                    f"redis: {counts.trips / n:.2f} round trips per 1-step task (goal <= 4), "
                    f"{counts.commands / n:.2f} commands sent by the gateway, "
                    f"{(after - before) / n:.2f} Redis commands executed (scripts' inner calls included)",
                    flush=True,
                )
                modules = ", ".join(f"{m} {c / n:.3f}" for m, c in counts.by_module.most_common())
                print(f"  round trips per task by module: {modules}", flush=True)
            t0, w0 = time.process_time(), time.monotonic()
            await run_tasks(agency, args.warmup + args.probe, args.probe, args.concurrency)
            cpu[label] = (time.process_time() - t0) / args.probe
            if url:
                rate = args.probe / (time.monotonic() - w0)
    print(
        f"gateway CPU per task: {cpu['redis'] * 1e3:.2f} ms with Redis, {cpu['memory'] * 1e3:.2f} ms "
        f"in memory ({args.probe} tasks, concurrency {args.concurrency})",
        flush=True,
    )
    return rate


async def memory_per_task(
    args: argparse.Namespace, redis_url: str, admin: Any, prefix: str, tmp: Path, retention: float
) -> None:
    """Print Redis ``used_memory`` per task within and after ``retention``."""
    await admin.flushdb()  # this bench's own server (or database): see the docstring
    definition = definition_for(redis_url, prefix, tmp / "memory-run", retention_s=retention)
    async with served(definition) as agency:
        takeover = agency.takeover
        assert takeover is not None  # Redis storage: leases, renewed and released in rounds
        await run_tasks(agency, 0, 1, 1)  # scripts loaded, the agent registered
        await takeover.round()
        gc.collect()
        await admin.memory_purge()
        base = await used_memory(admin)
        t0 = time.monotonic()
        await run_tasks(agency, 1, args.tasks, args.concurrency)
        ran = time.monotonic() - t0
        await takeover.round()  # the finished tasks' leases dropped, as the loop does
        during = await used_memory(admin)
        print(
            f"{args.tasks} tasks in {ran:.1f} s ({args.tasks / ran:.0f}/s); Redis used_memory per task "
            f"within retention: {(during - base) / args.tasks:.0f} B (baseline {base} B)",
            flush=True,
        )
        # after retention: wait (polling, bounded) until the last task's record and events are gone
        last = str(request(args.tasks)["task_id"])
        names = [keys.task(prefix, last), keys.task_events(prefix, last)]
        deadline = time.monotonic() + retention + 120
        while await admin.exists(*names) and time.monotonic() < deadline:  # noqa: ASYNC110 (Redis's TTL)
            await asyncio.sleep(0.2)
        left = [k async for k in admin.scan_iter(match=f"{prefix}{{task:*", count=10_000)]
        listed = sum(
            [
                int(await admin.memory_usage(k) or 0)
                for k in (keys.tasks(prefix), keys.client_tasks(prefix, "bench"))
            ]
        )
        await admin.memory_purge()
        after = await used_memory(admin)
        print(
            f"Redis used_memory per task after retention ({retention:g} s): "
            f"{(after - base) / args.tasks:.0f} B "
            f"(goal <= 512; task keys left: {len(left)}; the two list rows: {listed / args.tasks:.0f} B)"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def own_redis() -> Iterator[str]:
    """A ``redis-server`` of this bench on a free port (no persistence), stopped by its PID."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not installed (or pass --redis-url)")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL,
    )
    try:
        import redis

        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)  # a child starting: nothing to wait on but its port
        client.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=100_000, help="tasks for the memory figures (default 100k)")
    p.add_argument("--probe", type=int, default=500, help="tasks counted for round trips and CPU (500)")
    p.add_argument("--warmup", type=int, default=20, help="tasks before counting (20)")
    p.add_argument("--concurrency", type=int, default=16, help="tasks in flight (16)")
    p.add_argument(
        "--retention",
        type=float,
        default=0.0,
        help="finished-task and event retention of the memory run (default: 1.5 x its estimated length)",
    )
    p.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", ""), help="default: own server")
    args = p.parse_args(argv)
    if args.redis_url:
        asyncio.run(measure(args, args.redis_url))
    else:
        with own_redis() as url:
            asyncio.run(measure(args, url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
