"""Routing-decision benchmark: ``python -m bench.bench_router``.

Builds catalogs of 1,000 / 10,000 / 100,000 capabilities (mixed names, versions, actions,
refusals, tags, regions and data delays; about ten providers per action at every size,
as when a catalog grows by adding capabilities rather than clones) and times
``Router.decide`` for random requests (random action, sometimes a tag, a region, a
version range or a freshness tolerance):

* in process, on the indexed :class:`MemoryCatalog`, against the baseline of the same
  router over a scanning catalog (what ``Router.decide`` did before: list everything,
  then filter);
* on :class:`RedisCatalog` + :class:`RedisRoutingStats`, counting the round trips to
  Redis per decision (keys under a throw-away prefix, deleted afterwards).

Targets (issue 3): p99 < 1 ms at 100,000 in process, and 100k no more than 3x slower
than 1k. Options: ``--sizes``, ``--decisions``, ``--redis URL``, ``--no-redis``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
import timeit
import uuid
from typing import Any

from middleware.catalog import CatalogEntry
from middleware.constraints import Constraints
from middleware.contracts import CapabilityContract
from middleware.memory_catalog import MemoryCatalog
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats

TAGS = [f"tag{i}" for i in range(40)]
REGIONS = ["shanghai", "beijing", "shenzhen", "hangzhou", "guangzhou", "eu", "usa"]


def contracts(n: int, seed: int = 7) -> list[CapabilityContract]:
    """``n`` varied contracts: ~3 versions per name, ~10 providers and ~1 refuser per action."""
    rng = random.Random(seed)
    n_actions = max(50, n // 10)
    out = []
    for i in range(n):
        can = rng.sample(range(n_actions), rng.randint(1, 2))
        cannot = [a for a in rng.sample(range(n_actions), rng.choice([0, 0, 0, 1])) if a not in can]
        out.append(
            CapabilityContract(
                name=f"cap{i // 3}",
                version=f"{rng.randint(0, 3)}.{rng.randint(0, 9)}.{i % 3}",
                tags=rng.sample(TAGS, rng.randint(1, 4)),
                slo_latency_ms=rng.randint(50, 5000),
                can_do=[f"action{a}" for a in can],
                cannot_do=[f"action{a}" for a in cannot],
                regions=rng.sample(REGIONS, rng.randint(0, 3)),
                max_data_delay_ms=rng.choice([None, 1_000, 60_000, 900_000, 86_400_000]),
            )
        )
    return out


def requests(n: int, count: int, seed: int = 11) -> list[Constraints]:
    rng = random.Random(seed)
    n_actions = max(50, n // 10)
    out = []
    for _ in range(count):
        extra: dict[str, Any] = {}
        roll = rng.random()
        if roll < 0.2:
            extra["tags"] = [rng.choice(TAGS)]
        elif roll < 0.4:
            extra["region"] = rng.choice(REGIONS)
        elif roll < 0.5:
            extra["version_range"] = rng.choice(["^1", ">=2.0.0 <3", "~0.5", "1.x || 3.x"])
        elif roll < 0.6:
            extra["freshness_tolerance_ms"] = 900_000
        out.append(Constraints(action=f"action{rng.randrange(n_actions)}", **extra))
    return out


class ScanningCatalog(MemoryCatalog):
    """The baseline: finds candidates by listing the whole catalog (no index)."""

    async def candidates(self, action: str) -> list[CatalogEntry]:
        return [e for e in await self.all() if action in e.contract.can_do or action in e.contract.cannot_do]


CPU: list[float] = []  # CPU time of the decisions last timed (immune to other processes)


async def time_decisions(router: Router, wanted: list[Constraints], warmup: int = 50) -> list[float]:
    """Wall-clock ms per decision; the CPU-time ms land in ``CPU``."""
    for c in wanted[:warmup]:
        await router.decide(c)
    times = []
    CPU.clear()
    for c in wanted:
        cpu = time.thread_time_ns()
        start = time.perf_counter_ns()
        await router.decide(c)
        times.append((time.perf_counter_ns() - start) / 1e6)
        CPU.append((time.thread_time_ns() - cpu) / 1e6)
    return times


def pct(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, n: int, times: list[float], extra: str = "") -> str:
    return (
        f"{label:<18} {n:>8,} {len(times):>6} {statistics.median(times):>8.3f} "
        f"{pct(times, 0.99):>8.3f} {statistics.median(CPU):>8.3f} {pct(CPU, 0.99):>8.3f}  {extra}"
    )


HEADER = (
    f"{'backend':<18} {'entries':>8} {'runs':>6} {'p50 ms':>8} {'p99 ms':>8} {'cpu p50':>8} {'cpu p99':>8}"
    "   (p50/p99 wall clock; cpu = CPU time of the decision)"
)


async def bench_memory(sizes: list[int], decisions: int) -> dict[int, tuple[float, ...]]:
    print("In process (MemoryCatalog, indexed) vs. baseline (same router over a scanning catalog)")
    print(HEADER)
    results = {}
    for n in sizes:
        t0 = time.perf_counter()
        batch = contracts(n)
        catalog = MemoryCatalog()
        scan = ScanningCatalog()
        for c in batch:
            await catalog.register(c)
            await scan.register(c)
        built = time.perf_counter() - t0
        # a long-lived catalog of 100k entries is millions of objects: freeze them out of the
        # cyclic GC (as a gateway would after loading) so a gen-2 pass does not land in a decision
        gc.collect()
        gc.freeze()
        router = Router(catalog, stats=MemoryRoutingStats())
        wanted = requests(n, decisions)
        times = await time_decisions(router, wanted)
        chosen = [not (await router.decide(c)).refused for c in wanted[:200]].count(True)
        results[n] = (statistics.median(times), pct(times, 0.99), statistics.median(CPU), pct(CPU, 0.99))
        print(row("memory (indexed)", n, times, f"built in {built:.1f} s; {chosen}/200 routed, rest refused"))
        scan_runs = max(10, min(decisions, 200_000 // n))
        scan_times = await time_decisions(Router(scan), wanted[:scan_runs], warmup=2)
        print(row("baseline (scan)", n, scan_times))
        del catalog, scan, router, batch
        gc.unfreeze()
        gc.collect()
    first, last = sizes[0], sizes[-1]
    r = [results[last][i] / results[first][i] for i in range(4)]
    print(
        f"ratio {last:,}/{first:,}: p50 x{r[0]:.2f}, p99 x{r[1]:.2f}, cpu p50 x{r[2]:.2f}, "
        f"cpu p99 x{r[3]:.2f} (target <= 3); at {last:,}: p99 {results[last][1]:.3f} ms, "
        f"cpu p99 {results[last][3]:.3f} ms (target < 1 ms)"
    )
    return results


async def bench_redis(url: str, sizes: list[int], decisions: int) -> None:
    import redis.asyncio as aioredis
    from redis.asyncio.connection import Connection

    from middleware.redis.catalog import RedisCatalog
    from middleware.redis.routing_stats import RedisRoutingStats

    sent = [0]

    class Counting(Connection):
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            sent[0] += 1
            await super().send_packed_command(command, check_health)

    print(f"\nRedis ({url}): RedisCatalog + RedisRoutingStats, round trips counted per decision")
    print(HEADER)
    client = aioredis.Redis.from_url(url, connection_class=Counting)
    prefix = f"bench:{uuid.uuid4().hex[:8]}:"
    pings = []
    for _ in range(200):
        start = time.perf_counter_ns()
        await client.ping()
        pings.append((time.perf_counter_ns() - start) / 1e6)
    print(
        f"(one PING round trip on this machine: p50 {statistics.median(pings):.3f} ms, "
        f"p99 {pct(pings, 0.99):.3f} ms)"
    )
    try:
        for n in sizes:
            catalog = RedisCatalog(client, prefix=prefix + f"{n}:catalog:", lease_seconds=3600)
            t0 = time.perf_counter()
            await catalog.register_many(contracts(n))
            built = time.perf_counter() - t0
            router = Router(catalog, stats=RedisRoutingStats(client, prefix=prefix + f"{n}:stats:"))
            wanted = requests(n, decisions)
            await time_decisions(router, wanted[:50], warmup=0)  # warm the parsed-entry cache
            before = sent[0]
            times = await time_decisions(router, wanted, warmup=0)
            trips = (sent[0] - before) / len(wanted)
            print(row("redis", n, times, f"{trips:.2f} round trips/decision; loaded in {built:.1f} s"))
            await catalog.clear()
    finally:
        async for key in client.scan_iter(match=prefix + "*", count=1000):
            await client.unlink(key)
        await client.aclose()


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--decisions", type=int, default=5_000, help="timed decisions per size")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="Redis URL for the Redis run")
    parser.add_argument("--no-redis", action="store_true", help="skip the Redis run")
    args = parser.parse_args(argv)
    calibration = min(timeit.repeat("sum(range(1000))", number=1000, repeat=5)) / 1000 * 1e6
    print(
        f"python {sys.version.split()[0]}; {args.decisions} decisions per size; machine speed: "
        f"sum(range(1000)) takes {calibration:.1f} us (about 10 us on an idle laptop)\n"
    )
    await bench_memory(args.sizes, args.decisions)
    if not args.no_redis:
        await bench_redis(args.redis, args.sizes, min(args.decisions, 2_000))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
