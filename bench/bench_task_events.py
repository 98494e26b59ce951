"""What a task's event stream adds per task, in process and on Redis (``python -m bench.bench_task_events``).

Every record of a task becomes an event of its stream once durable, plus one ``task.outcome``
(issue 29: WatchTask, SubscribeToTask, MCP progress read it). This measures what that costs a
governed Submit, against the same Submit with the publishing taken out (the baseline, in the
same run, rounds interleaved so that the machine's load hits both alike):

* **in process** (memory task store and event log; the servicer's ``Submit`` called directly,
  16 at a time, the audit log serialising each record as the write-ahead log does): CPU per task;
* **on Redis** (``--redis-url``; Redis task store, and the Redis event log: one Lua append per
  durability barrier and one for the outcome): wall time per task one at a time, CPU per task,
  event-log round trips per task, and the bytes a task's stream holds in Redis.

    python -m bench.bench_task_events                       # both, default sizes
    python -m bench.bench_task_events --tasks 2000 --rounds 10 --redis-tasks 400
    python -m bench.bench_task_events --no-redis
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import middleware.pipeline as pipeline
from bench.bench_gateway import ECHO_CONTRACT, ECHO_GOAL, request_for
from bench.bench_submit import SerialisingLog, _Context
from middleware import Agency
from middleware.memory_catalog import MemoryCatalog
from middleware.server import event_loop
from middleware.server.grpc_api.agency_servicer import AgencyServicer
from middleware.task_events import TaskEvent, TaskEventLog

REDIS_URL = os.environ.get("AGENCY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")


class _Nowhere:
    """The baseline's event log: appends nothing (the events are still built: see below)."""

    async def append(self, task_id: str, events: Sequence[TaskEvent]) -> int:
        return 0

    async def close(self) -> None:
        return None


class CountingLog:
    """An event log counting its appends (round trips, on Redis) and the events appended."""

    def __init__(self, inner: TaskEventLog) -> None:
        self.inner = inner
        self.appends = 0
        self.events = 0

    async def append(self, task_id: str, events: Sequence[TaskEvent]) -> int:
        self.appends += 1
        self.events += len(events)
        return await self.inner.append(task_id, events)

    async def read(
        self, task_id: str, *, after: int = 0, limit: int = 100, wait_s: float = 0.0
    ) -> list[TaskEvent]:
        return await self.inner.read(task_id, after=after, limit=limit, wait_s=wait_s)

    async def last(self, task_id: str) -> TaskEvent | None:
        return await self.inner.last(task_id)

    async def close(self) -> None:
        await self.inner.close()


async def governed(
    events: bool, *, tasks: Any = None, log: TaskEventLog | None = None
) -> Callable[[], Awaitable[None]]:
    """One Submit of the echo task through the servicer (``events=False``: nothing published)."""
    catalog = MemoryCatalog()
    agency = Agency(audit=SerialisingLog(), catalog=catalog, tasks=tasks, events=log)
    if not events:  # the baseline: the pipeline as it was, no event built or stored
        agency._outcome_event = lambda run, final=None: None  # type: ignore[assignment, method-assign, return-value]
        agency.events = _Nowhere()

    async def echo(agent_request: Any) -> Any:
        return agent_request.input

    await agency.register(ECHO_CONTRACT, echo)
    agency.register_goal(ECHO_GOAL)
    servicer = AgencyServicer(agency)
    request, context = request_for(256), _Context()

    async def submit() -> None:
        outcome = await servicer.Submit(request, context)
        if outcome.state != "completed":
            raise RuntimeError(f"task ended {outcome.state}: {outcome.reason}")

    submit.agency = agency  # type: ignore[attr-defined]
    submit.events = events  # type: ignore[attr-defined]
    return submit


_EVENTS_OF = pipeline.events_of


def publishing(on: bool) -> None:
    """Build the records' events (on), or not (the baseline's rounds: nothing of the stream)."""
    pipeline.events_of = _EVENTS_OF if on else (lambda records, states, indexes: [])  # type: ignore[assignment]


async def cpu_round(call: Callable[[], Awaitable[None]], tasks: int, concurrency: int) -> float:
    publishing(getattr(call, "events", True))
    per_worker = max(1, tasks // concurrency)

    async def worker() -> None:
        for _ in range(per_worker):
            await call()

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - started) / (per_worker * concurrency)


async def in_process(args: argparse.Namespace) -> None:
    print("[in process: memory task store and event log, the servicer's Submit, 16 in flight]")
    without = await governed(False)
    with_events = await governed(True)
    for call in (without, with_events):
        await cpu_round(call, 200, args.concurrency)  # warm-up
    gc.freeze()
    off: list[float] = []
    on: list[float] = []
    for _ in range(args.rounds):  # interleaved: the load of the moment hits both
        off.append(await cpu_round(without, args.tasks, args.concurrency))
        on.append(await cpu_round(with_events, args.tasks, args.concurrency))
    a, b = statistics.median(off), statistics.median(on)
    print(
        f"  without the event stream   CPU per task: median {a * 1e6:7.1f} us   min {min(off) * 1e6:7.1f} us"
    )
    print(
        f"  with the event stream      CPU per task: median {b * 1e6:7.1f} us   min {min(on) * 1e6:7.1f} us"
    )
    added_min = (min(on) - min(off)) * 1e6
    print(f"  added: {(b - a) * 1e6:+.1f} us per task ({(b - a) / a:+.1%}; mins {added_min:+.1f} us)")
    for call in (without, with_events):
        await call.agency.close()  # type: ignore[attr-defined]


async def on_redis(args: argparse.Namespace) -> None:
    import redis.asyncio as aioredis

    from middleware.redis.task_events import RedisTaskEventLog
    from middleware.redis.task_store import RedisTaskStore

    print(
        f"\n[on Redis ({REDIS_URL}): Redis task store; with the stream also the Redis event log; 1 in flight]"
    )
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    client = aioredis.Redis.from_url(REDIS_URL)
    counting = CountingLog(RedisTaskEventLog(client, prefix=prefix, ttl_s=600))
    try:
        without = await governed(False, tasks=RedisTaskStore(client, prefix=prefix + "a:"))
        with_events = await governed(True, tasks=RedisTaskStore(client, prefix=prefix + "b:"), log=counting)
        for call in (without, with_events):
            publishing(call.events)  # type: ignore[attr-defined]
            for _ in range(20):  # warm-up: scripts loaded, connections open
                await call()
        counting.appends = counting.events = 0
        wall: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.redis_tasks):  # one of each in turn
            for events, call in ((False, without), (True, with_events)):
                publishing(events)
                started, used = time.perf_counter(), time.process_time()
                await call()
                wall[events].append(time.perf_counter() - started)
                cpu[events].append(time.process_time() - used)
        for events in (False, True):
            w = sorted(wall[events])
            name = "with the event stream   " if events else "without the event stream"
            p50, p99 = w[len(w) // 2] * 1e3, w[int(len(w) * 0.99)] * 1e3
            print(
                f"  {name}  wall per task: p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
                f"   CPU per task {statistics.mean(cpu[events]) * 1e6:7.1f} us"
            )
        mid = {e: sorted(wall[e])[len(wall[e]) // 2] for e in (False, True)}
        added_cpu = statistics.mean(cpu[True]) - statistics.mean(cpu[False])
        added_ms = (mid[True] - mid[False]) * 1e3
        print(f"  added: {added_ms:+.2f} ms p50 per task, {added_cpu * 1e6:+.1f} us CPU per task")
        n = args.redis_tasks
        print(
            f"  event log per task: {counting.appends / n:.1f} appends (Redis round trips), "
            f"{counting.events / n:.1f} events"
        )
        keys = [k async for k in client.scan_iter(match=f"{prefix}{{task:*}}:events", count=1000)]
        sizes = [await client.memory_usage(k) or 0 for k in keys[:200]]
        if sizes:
            kib = statistics.median(sizes) / 1024
            print(f"  a task's stream in Redis: {kib:.1f} KiB (median of {len(sizes)})")
        for call in (without, with_events):
            await call.agency.close()  # type: ignore[attr-defined]
    finally:
        async for key in client.scan_iter(match=prefix + "*", count=1000):
            await client.delete(key)
        await client.aclose()


async def run(args: argparse.Namespace) -> int:
    await in_process(args)
    if not args.no_redis:
        await on_redis(args)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_task_events", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--tasks", type=int, default=1000, help="tasks per in-process round (default 1000)")
    p.add_argument("--rounds", type=int, default=8, help="in-process rounds of each (default 8)")
    p.add_argument("--concurrency", type=int, default=16, help="in-process tasks in flight (default 16)")
    p.add_argument("--redis-tasks", type=int, default=300, help="tasks of each on Redis (default 300)")
    p.add_argument("--no-redis", action="store_true", help="only the in-process figures")
    return event_loop.run(run(p.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
