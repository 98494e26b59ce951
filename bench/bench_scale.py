"""Scale benchmark (issue 32): ``python -m bench.bench_scale``.

Three measurements, each against its baseline in the same run:

1. **Catalog build**: 1,000 / 10,000 / 100,000 contracts (``bench_router.contracts``: varied
   names, versions, actions, refusals, tags), handed over as plain mappings (what a file or a
   bulk import gives), built into a :class:`MemoryCatalog` with ``register_many``; the baseline
   is one ``register`` call per contract (the path before, the cyclic GC running). Printed: the
   seconds, the µs per entry and the per-entry cost at each size relative to the smallest
   (1.00 = linear). Target: linear, 100,000 in < 5 s.
2. **audit verify**: a synthetic ``--records`` log (``bench_audit.write_synthetic_log``: signed
   batches of 50, a checkpoint every 1,000), verified as ``agency audit verify`` does
   (``verify_path``: CRC-32C, chain, signatures, Merkle tree, checkpoints, every record checked
   as an ``AuditRecord``), in one process; the baseline is the floor of any Python verifier:
   read the segment files and SHA-256 each frame's payload, nothing else. Records/s per CPU
   second (this process and any worker processes). Target: >= 1 M records/s per core.
3. **Soak** (``--soak-minutes N``, off by default): the embedded gateway
   (``bench_gateway.start_gateway``: memory catalog, task store and event log, the WAL audit
   log in a temporary directory) serves steady Submits over gRPC at ``--soak-rate`` calls/s
   from a load generator in a child process; both are pinned to one CPU (``--cpu``), so the
   soak never takes more than one core. RSS is printed every minute; the verdict compares the
   last minute with the middle of the run (a plateau: < 5 % growth over the second half).
   ``--soak-storage redis``: the gateway as ``agency serve`` builds it on Redis (catalog,
   routing stats, task store, sessions, task leases, task events; keep-alive, takeover, the
   health monitor) on a private ``redis-server`` on a free port (stopped by its PID; pinned
   to the same CPU). Redis ``used_memory``, its key count and the keys by pattern are printed
   every minute too; the verdict adds the growth of ``used_memory`` over the second half
   (< 5 %), which only means something once the middle of the run is past the retention
   window: storage.retention is as shipped (finished tasks 1 h, their events 300 s) unless
   ``--retention-finished-seconds`` / ``--retention-events-seconds`` shorten it.

    python -m bench.bench_scale                                # catalog + verify
    python -m bench.bench_scale --soak-minutes 10 --only soak  # the soak alone
    python -m bench.bench_scale --only soak --soak-storage redis --soak-minutes 30 \
        --soak-rate 50 --cpu 1 --retention-finished-seconds 300   # on Redis
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from middleware.contracts import CapabilityContract, _meta_schema_problem
from middleware.memory_catalog import MemoryCatalog

from .bench_router import contracts

# ------------------------------------------------------------------ 1. catalog build
BEFORE_MAX = 10_000  # the old path at 100,000 takes ~20 s of CPU (80 s on a loaded machine)


async def _build(specs: list[dict[str, Any]], bulk: bool, memo: bool = True) -> tuple[float, float]:
    """(wall, CPU) seconds to build a catalog of ``specs`` in bulk or one ``register`` at a time
    (``memo=False``: every contract's schemas checked against the meta-schema, as before)."""
    gc.collect()
    catalog = MemoryCatalog()
    t0, c0 = time.perf_counter(), time.process_time()
    if bulk:
        await catalog.register_many(specs)
    else:
        for spec in specs:
            if not memo:
                _meta_schema_problem.cache_clear()
            await catalog.register(CapabilityContract.parse(spec))
    took = time.perf_counter() - t0, time.process_time() - c0
    assert len(catalog._entries) == len({(s["name"], s["version"]) for s in specs})
    del catalog
    gc.collect()
    return took


async def catalog_build(sizes: list[int]) -> None:
    print("1. catalog build (MemoryCatalog, contracts given as mappings; CPU seconds of this process,")
    print("   wall in brackets: on a shared machine the CPU time is the steadier figure)")
    print("   register x N: one call each, GC on; before: also every schema checked again (the old path,")
    print(f"   run up to {BEFORE_MAX:,} entries: ~0.2 ms of CPU an entry)")
    print(f"{'entries':>9} {'register_many':>22} {'us/entry':>9} {'vs first':>9} "
          f"{'register x N':>22} {'us/entry':>9} {'vs first':>9} {'before':>10} {'us/entry':>9}")  # fmt: skip
    first: list[float] = []
    last = (0, 0.0, 0.0)
    for n in sizes:
        specs = [c.model_dump() for c in contracts(n)]
        bulk, bulk_cpu = await _build(specs, bulk=True)
        single, single_cpu = await _build(specs, bulk=False)
        per = [bulk_cpu / n * 1e6, single_cpu / n * 1e6]
        first = first or per
        before = "-"
        if n <= BEFORE_MAX:
            _, old_cpu = await _build(specs, bulk=False, memo=False)
            before = f"{old_cpu:>8.2f} s {old_cpu / n * 1e6:>9.1f}"
        print(
            f"{n:>9,} {bulk_cpu:>8.2f} s ({bulk:>7.2f} s) {per[0]:>9.1f} {per[0] / first[0]:>8.2f}x "
            f"{single_cpu:>8.2f} s ({single:>7.2f} s) {per[1]:>9.1f} {per[1] / first[1]:>8.2f}x {before}"
        )
        last = (n, bulk_cpu, bulk)
    n, cpu, wall = last
    print(f"   target: linear (per-entry ratio ~1.0) and {n:,} in < 5 s: "
          f"{'met' if cpu < 5 else 'MISSED'} ({cpu:.2f} s CPU, {wall:.2f} s wall)\n")  # fmt: skip


# ------------------------------------------------------------------ 2. audit verify


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _floor(directory: Path) -> int:
    """Read every segment and SHA-256 each frame's payload: what any Python verifier pays."""
    from middleware.audit.segment import HEADER, HEADER_SIZE, list_segments

    frames = 0
    sha, unpack = hashlib.sha256, HEADER.unpack_from
    for _, path in list_segments(directory):
        data = path.read_bytes()
        off, size = 0, len(data)
        while off < size:
            end = off + HEADER_SIZE + unpack(data, off)[1]
            sha(data[off + HEADER_SIZE : end]).digest()
            off = end + (-end % 8)
            frames += 1
    return frames


def audit_verify(records: int, rounds: int) -> None:
    from middleware.audit.verify import verify_path

    from .bench_audit import SIGNER, write_synthetic_log

    print(f"2. audit verify ({records:,}-record synthetic log, signed batches of 50)")
    work = Path(tempfile.mkdtemp(prefix="bench-scale-audit-"))
    try:
        write_synthetic_log(work, "bench", records)
        mb = sum(p.stat().st_size for p in (work / "bench").iterdir()) / 1e6
        floor_rates, verify_rates = [], []
        for _ in range(rounds):  # alternating: the machine is shared and noisy
            c0 = _cpu()
            frames = _floor(work / "bench")
            floor_rates.append(frames / (_cpu() - c0))
            c0, w0 = _cpu(), time.perf_counter()
            verdict = verify_path(work, key=SIGNER.vkey)
            cpu, wall = _cpu() - c0, time.perf_counter() - w0
            assert verdict.ok and verdict.nodes[0].events == records, verdict.nodes
            verify_rates.append(records / cpu)
            print(
                f"   verify_path: {wall:.2f} s wall, {cpu:.2f} s CPU = {records / cpu:>9,.0f} records/s per "
                f"CPU second ({cpu / records * 1e6:.2f} us/record); floor (read + SHA-256 per frame): "
                f"{floor_rates[-1]:>9,.0f} frames/s"
            )
        best_v, best_f = max(verify_rates), max(floor_rates)
        print(
            f"   best of {rounds}: verify {best_v:,.0f} records/s per core = {100 * best_v / best_f:.0f}% of "
            f"the Python floor ({best_f:,.0f}/s); log {mb:.0f} MB; target >= 1,000,000/s: "
            f"{'met' if best_v >= 1e6 else 'MISSED'}\n"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------ 3. soak


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _heap() -> str:
    """Where the memory is: Python's allocated blocks, and glibc malloc's bytes in use and
    free but kept (``mallinfo2``; fragmentation shows as free bytes that RSS keeps)."""
    text = f"python blocks {sys.getallocatedblocks() / 1e6:5.2f} M"
    try:
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                "fordblks", "keepcost")]  # fmt: skip

        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return text
    return (
        f"{text}; malloc in use {info.uordblks / 2**20:6.1f} MiB, "
        f"free kept {info.fordblks / 2**20:5.1f} MiB, mmapped {info.hblkhd / 2**20:5.1f} MiB"
    )


def _key_pattern(key: str, prefix: str) -> str:
    """A Redis key's pattern: the prefix dropped, each segment that names one record (has a
    digit, or is long) replaced by ``*``."""
    kept: list[str] = []
    for part in key.removeprefix(prefix).split(":"):
        one = any(c.isdigit() for c in part) or len(part) > 24
        kept.append(("*}" if part.endswith("}") else "*") if one else part)
    return ":".join(kept)


async def _keys_by_pattern(port: int, prefix: str) -> dict[str, int]:
    """Every key of the soak's own redis-server counted by pattern (``redis-cli --scan``, a
    separate process: the gateway's event loop does not walk the keys)."""
    proc = await asyncio.create_subprocess_exec(
        "redis-cli", "-p", str(port), "--scan", stdout=subprocess.PIPE
    )
    out, _ = await proc.communicate()
    counts: dict[str, int] = {}
    for key in out.decode().split():
        pattern = _key_pattern(key, prefix)
        counts[pattern] = counts.get(pattern, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


@contextlib.asynccontextmanager
async def _redis_gateway(
    data_dir: Path, redis_url: str, prefix: str, retention: dict[str, float]
) -> AsyncIterator[int]:
    """The gateway as ``agency serve`` builds it with ``storage.backend: redis``
    (``build_agency``: Redis catalog, routing stats, task store, sessions, task leases, task
    events; the WAL audit log in ``data_dir``; the keep-alive and the lease takeover running; the
    Redis health monitor and its gate), serving gRPC on a free port; yields the port."""
    from middleware.redis.health import redis_monitor
    from middleware.server.grpc_api import build_server
    from middleware.server.grpc_api.gate import BackendGate
    from middleware.server.settings import definition_from

    from .bench_gateway import ECHO_GOAL, echo_contract
    from .bench_redis_tasks import served

    storage: dict[str, Any] = {"backend": "redis", "redis_url": redis_url, "key_prefix": prefix}
    if retention:
        storage["retention"] = retention
    definition = definition_from(
        {
            "server": {"address": "127.0.0.1:0", "metrics_address": "", "data_dir": str(data_dir)},
            "agency": {"node_id": "soak"},
            "storage": storage,
            "agents": [{"agent": "bench.bench_gateway:echo_agent", "contract": echo_contract(False)}],
            "goals": [ECHO_GOAL],
        },
        env={},
    )
    async with served(definition) as agency:
        server: Any = None

        async def serving(ok: bool) -> None:
            if server is not None:
                await server.set_serving(ok)

        monitor = redis_monitor(redis_url, serving, prefix=prefix)
        server = build_server(agency, "127.0.0.1:0", interceptors=[BackendGate(monitor)])
        await monitor.start()
        await server.start()
        gc.freeze()  # as agency serve does after start-up
        try:
            yield int(server.port)
        finally:
            await server.stop(0)
            await monitor.stop()


async def soak(
    minutes: float,
    rate: float,
    cpu: int,
    concurrency: int,
    *,
    storage: str = "memory",
    retention: dict[str, float] | None = None,
) -> None:
    from .bench_gateway import drive, show, start_gateway

    os.sched_setaffinity(0, {cpu})  # the load generator (a child) inherits it: one core in all
    on = "memory storage" if storage == "memory" else "Redis storage (a private redis-server, same CPU)"
    print(f"3. soak on {on}: {minutes:g} min at {rate:g} calls/s, pinned to CPU {cpu}")
    retention = retention or {}
    if storage == "redis":
        shipped = {"finished_task_seconds": 3600.0, "task_event_seconds": 300.0}
        print(f"   storage.retention: {shipped | retention} (as shipped unless set)")
    args = argparse.Namespace(size=64, concurrency=concurrency)
    samples: list[tuple[float, float, int, int]] = []  # minute, RSS MiB, Redis used_memory, keys
    prefix = "soak:"
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-soak-")))
        admin: Any = None
        port_redis, url = 0, ""
        if storage == "redis":
            import redis

            from .bench_redis_tasks import own_redis

            url = stack.enter_context(own_redis())  # started after the pinning: on the same CPU
            port_redis = int(url.rsplit(":", 1)[1].split("/")[0])
            admin = redis.Redis.from_url(url)
            stack.callback(admin.close)
        async with contextlib.AsyncExitStack() as astack:
            if storage == "redis":
                port = await astack.enter_async_context(_redis_gateway(tmp, url, prefix, retention))
            else:
                _, port, stop = await start_gateway(tmp)
                astack.push_async_callback(stop)

            async def sample(minute: float, note: str = "") -> None:
                used = keys = 0
                line = f"   minute {minute:2g}: RSS {_rss_mib():6.1f} MiB"
                if admin is not None:
                    used, keys = int(admin.info("memory")["used_memory"]), int(admin.dbsize())
                    line += f", Redis used_memory {used / 2**20:6.1f} MiB, keys {keys:6d}"
                samples.append((minute, _rss_mib(), used, keys))
                print(f"{line}  ({_heap()}{note})", flush=True)
                if admin is not None:
                    top = await _keys_by_pattern(port_redis, prefix)
                    print("      keys: " + ", ".join(f"{k} {n}" for k, n in top.items()), flush=True)
                    # the keys that are one of a kind (indexes, lists of every task ...): their
                    # size, since one growing key shows in used_memory but not in the key count
                    single = {k: admin.memory_usage(prefix + k) or 0 for k, n in top.items() if "*" not in k}
                    print(
                        "      bytes of single keys: " + ", ".join(f"{k} {b}" for k, b in single.items()),
                        flush=True,
                    )

            start = time.perf_counter()
            await sample(0, "; started")
            load = asyncio.create_task(drive(port, args, seconds=minutes * 60, rate=rate))
            minute = 1
            while not load.done():
                due = start + 60 * minute
                await asyncio.wait({load}, timeout=max(0.0, due - time.perf_counter()))
                if time.perf_counter() >= due:
                    await sample(minute)
                    minute += 1
            result = load.result()
    show("soak", result)
    errors = sum(result["errors"].values())
    if len(samples) < 3:
        print(f"   errors {errors} (too short for a plateau verdict)")
        return
    mid, first, last = samples[len(samples) // 2], samples[1], samples[-1]
    growth = (last[1] - mid[1]) / mid[1]
    verdicts = [errors == 0, growth < 0.05]
    print(
        f"   RSS minute 1 {first[1]:.1f} MiB, minute {mid[0]:g} {mid[1]:.1f} MiB, minute {last[0]:g} "
        f"{last[1]:.1f} MiB: second half {growth:+.1%} (plateau: < 5% -> "
        f"{'met' if growth < 0.05 else 'MISSED'}); errors {errors} ({'met' if errors == 0 else 'MISSED'})"
    )
    if storage == "redis":
        window = max(
            retention.get("finished_task_seconds", 3600.0), retention.get("task_event_seconds", 300.0)
        )
        r_growth = (last[2] - mid[2]) / max(1, mid[2])
        passed = mid[0] * 60 >= window
        verdicts.append(passed and r_growth < 0.05)
        print(
            f"   Redis used_memory minute 1 {first[2] / 2**20:.1f} MiB, minute {mid[0]:g} "
            f"{mid[2] / 2**20:.1f} MiB ({mid[3]} keys), minute {last[0]:g} {last[2] / 2**20:.1f} MiB "
            f"({last[3]} keys): second half {r_growth:+.1%} (plateau: < 5% -> "
            f"{'met' if r_growth < 0.05 else 'MISSED'})"
            + (
                ""
                if passed
                else f"; NOT a plateau test: the retention window ({window:g} s) ends after "
                f"the middle of the run (minute {mid[0]:g}): shorten it (--retention-finished-seconds)"
            )
        )
    print(f"   verdict: {'PASS' if all(verdicts) else 'FAIL'}")


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000], help="catalog sizes")
    p.add_argument("--records", type=int, default=200_000, help="records of the verified log")
    p.add_argument("--rounds", type=int, default=3, help="alternating verify/floor rounds")
    p.add_argument("--soak-minutes", type=float, default=0.0, help="soak this long (default: no soak)")
    p.add_argument("--soak-rate", type=float, default=100.0, help="Submits per second during the soak")
    p.add_argument("--soak-concurrency", type=int, default=16, help="load generator's calls in flight")
    p.add_argument("--cpu", type=int, default=0, help="the one CPU the soak runs on")
    p.add_argument(
        "--soak-storage", choices=["memory", "redis"], default="memory",
        help="the gateway's storage: memory, or Redis (a private redis-server on a free port)",
    )  # fmt: skip
    p.add_argument(
        "--retention-finished-seconds", type=float,
        help="Redis: storage.retention.finished_task_seconds (default as shipped, 3600)",
    )  # fmt: skip
    p.add_argument(
        "--retention-events-seconds", type=float,
        help="Redis: storage.retention.task_event_seconds (default as shipped, 300)",
    )  # fmt: skip
    p.add_argument("--only", choices=["catalog", "verify", "soak"], help="run only this measurement")
    args = p.parse_args(argv)
    print(f"python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)\n")
    if args.only in (None, "catalog"):
        asyncio.run(catalog_build(args.sizes))
    if args.only in (None, "verify"):
        audit_verify(args.records, args.rounds)
    if args.soak_minutes > 0 and args.only in (None, "soak"):
        retention = {
            name: value
            for name, value in (
                ("finished_task_seconds", args.retention_finished_seconds),
                ("task_event_seconds", args.retention_events_seconds),
            )
            if value is not None
        }
        asyncio.run(
            soak(
                args.soak_minutes,
                args.soak_rate,
                args.cpu,
                args.soak_concurrency,
                storage=args.soak_storage,
                retention=retention,
            )
        )
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
