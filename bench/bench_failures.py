"""What failure semantics cost per task: persisted task state, detectors, and a resume.

Runs the same 3-step task (three scripted in-process agents, no failures) through
``Agency.submit`` with:

* ``baseline`` – no task persistence (a store that keeps nothing) and no detectors:
  what the pipeline did before task state and detectors existed;
* ``memory`` – the default: ``MemoryTaskStore`` + the built-in detectors;
* ``redis`` – ``RedisTaskStore`` on the local Redis + detectors (what replicas use);

and times a clarification round trip (submit → input_required → resume → completed) on
Redis. Prints per-task latency (mean, p50, p99) and throughput for each.

    python -m bench.bench_failures [--tasks 2000] [--redis redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from middleware import Agency, AgentReply, CapabilityContract, TaskRequest, TaskStep
from middleware.detectors import Detection, Detectors
from middleware.errors import NotFound
from middleware.memory_task_store import MemoryTaskStore
from middleware.redis.task_store import RedisTaskStore
from middleware.tasks import TaskRecord


class NullTaskStore:
    """Keeps nothing: the cost of the pipeline without task persistence."""

    async def create(self, record: TaskRecord) -> None:
        record.version = 1

    async def get(self, task_id: str) -> TaskRecord:
        raise NotFound(task_id)

    async def save(self, record: TaskRecord) -> None:
        record.version += 1

    @asynccontextmanager
    async def lock(self, task_id: str, *, wait_s: float = 2.0) -> AsyncIterator[None]:
        yield

    async def close(self) -> None:
        return None


class NoDetectors(Detectors):
    async def inspect(self, result: Any) -> Detection | None:
        return None


STEPS = ["lookup", "ship", "reply"]


async def _agency(tasks: Any, detectors: Detectors | None) -> Agency:
    async def no_sleep(_: float) -> None:
        return None

    agency = Agency(tasks=tasks, detectors=detectors, sleep=no_sleep)
    for i, action in enumerate(STEPS):

        async def agent(request: Any, i: int = i) -> dict[str, Any]:
            return {f"field_{i}": i, "note": "ok"}

        await agency.register(
            CapabilityContract(name=f"agent_{action}", can_do=[action], slo_latency_ms=1000), agent
        )
    return agency


def _request() -> TaskRequest:
    return TaskRequest(text="bench", steps=[TaskStep(name=a, action=a) for a in STEPS])


async def _batch(agency: Agency, n: int, samples: list[float]) -> None:
    for _ in range(n):
        started = time.perf_counter()
        out = await agency.submit(_request())
        samples.append((time.perf_counter() - started) * 1000)
        assert out.state.value == "completed", out.reason


async def _interleaved(agencies: list[Agency], n: int, batch: int = 50) -> list[list[float]]:
    """Alternate batches between the variants so machine noise hits them alike."""
    for agency in agencies:  # warm-up
        await _batch(agency, min(50, n), [])
    samples: list[list[float]] = [[] for _ in agencies]
    for _ in range(max(1, n // batch)):
        for agency, out in zip(agencies, samples, strict=True):
            await _batch(agency, batch, out)
    return samples


async def _resume_round_trip(redis: Any, prefix: str, n: int) -> list[float]:
    agency = Agency(tasks=RedisTaskStore(redis, prefix=prefix))
    unsure = AgentReply(output={"plan": "probably A"}, confidence_score=0.5)

    async def agent(request: Any) -> AgentReply:
        return unsure

    await agency.register(CapabilityContract(name="picker", can_do=["pick"], slo_latency_ms=1000), agent)
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        waiting = await agency.submit(TaskRequest(text="pick", constraints={"action": "pick"}))
        done = await agency.resume(waiting.task_id, answer="accept")
        samples.append((time.perf_counter() - started) * 1000)
        assert done.state.value == "completed"
    return samples


def _line(name: str, samples: list[float], baseline: float | None) -> str:
    mean = statistics.fmean(samples)
    q = statistics.quantiles(samples, n=100)
    extra = f"  ({mean - baseline:+.3f} ms vs baseline)" if baseline is not None else ""
    return (
        f"{name:<22} mean {mean:7.3f} ms  p50 {q[49]:7.3f} ms  p99 {q[98]:7.3f} ms  "
        f"{1000 / mean:8.0f} tasks/s{extra}"
    )


async def main(tasks: int, redis_url: str) -> None:
    import redis.asyncio as aioredis

    redis = aioredis.Redis.from_url(redis_url)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    started = time.perf_counter()
    for _ in range(200):
        await redis.ping()
    rtt = (time.perf_counter() - started) / 200 * 1000
    try:
        base, mem, red = await _interleaved(
            [
                await _agency(NullTaskStore(), NoDetectors()),
                await _agency(MemoryTaskStore(), None),
                await _agency(RedisTaskStore(redis, prefix=prefix), None),
            ],
            tasks,
        )
        resume = await _resume_round_trip(redis, prefix, max(100, tasks // 10))
    finally:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}*")]
        for i in range(0, len(keys), 500):
            await redis.delete(*keys[i : i + 500])
        await redis.aclose()
    b = statistics.fmean(base)
    print(f"3-step task, {tasks} tasks each, in-process scripted agents; Redis PING RTT {rtt:.3f} ms")
    print(_line("baseline (no state)", base, None))
    print(_line("memory store+detect", mem, b))
    print(_line("redis store+detect", red, b))
    print(_line("clarify+resume redis", resume, None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    args = parser.parse_args()
    asyncio.run(main(args.tasks, args.redis))
