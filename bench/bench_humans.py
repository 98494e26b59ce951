"""What the human desk costs per task: the task list and the escalation lookup.

Runs the same one-step task (a scripted in-process agent, no escalation) through
``Agency.submit`` without a desk, with a desk on the memory escalation store, and with a
desk on the Redis escalation store (what replicas use), in interleaved rounds, and prints
the median time per task of each.

    python -m bench.bench_humans [--tasks 500] [--rounds 3] [--redis redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import redis.asyncio as aioredis

from middleware import Agency, CapabilityContract
from middleware.people import Person, RedisEscalationStore
from middleware.people.desk import HumanDesk
from middleware.server.settings import hash_token
from middleware.testing import ScriptedAgent

PEOPLE = [Person(name="alice", roles=["operator"], token_sha256=hash_token("bench-alice"))]


async def _run(mode: str, tasks: int, url: str) -> float:
    agency = Agency()
    agent = ScriptedAgent(*([{"x": 1}] * (tasks + 60)))
    await agency.register(CapabilityContract(name="a", can_do=["lookup"], slo_latency_ms=500), agent)
    client = aioredis.Redis.from_url(url) if mode == "redis" else None
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    if mode != "none":
        store = RedisEscalationStore(client, prefix=prefix) if client is not None else None
        HumanDesk(agency, PEOPLE, store=store)
    request = {"text": "hi", "constraints": {"action": "lookup"}}
    for _ in range(50):  # warm up
        await agency.submit(request)
    started = time.perf_counter()
    for _ in range(tasks):
        await agency.submit(request)
    per_task = (time.perf_counter() - started) / tasks * 1000
    if client is not None:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
    return per_task


async def main(tasks: int, rounds: int, url: str) -> None:
    results: dict[str, list[float]] = {"none": [], "memory": [], "redis": []}
    for _ in range(rounds):
        for mode, times in results.items():
            times.append(await _run(mode, tasks, url))
    for mode, times in results.items():
        print(f"{mode:7} median {statistics.median(times):.2f} ms/task  runs {[round(t, 2) for t in times]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    args = parser.parse_args()
    asyncio.run(main(args.tasks, args.rounds, args.redis))
