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

    python -m bench.bench_scale                                # catalog + verify
    python -m bench.bench_scale --soak-minutes 10 --only soak  # the soak alone
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import resource
import shutil
import sys
import tempfile
import time
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


async def soak(minutes: float, rate: float, cpu: int, concurrency: int) -> None:
    from .bench_gateway import drive, show, start_gateway

    os.sched_setaffinity(0, {cpu})  # the load generator (a child) inherits it: one core in all
    print(f"3. soak: {minutes:g} min at {rate:g} calls/s, gateway and load generator pinned to CPU {cpu}")
    args = argparse.Namespace(size=64, concurrency=concurrency)
    samples: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-soak-") as tmp:
        _, port, stop = await start_gateway(Path(tmp))
        try:
            start = time.perf_counter()
            samples.append((0.0, _rss_mib()))
            print(f"   minute  0: RSS {samples[-1][1]:6.1f} MiB  ({_heap()}; started)")
            load = asyncio.create_task(drive(port, args, seconds=minutes * 60, rate=rate))
            minute = 1
            while not load.done():
                due = start + 60 * minute
                await asyncio.wait({load}, timeout=max(0.0, due - time.perf_counter()))
                if time.perf_counter() >= due:
                    samples.append((minute, _rss_mib()))
                    print(f"   minute {minute:2d}: RSS {samples[-1][1]:6.1f} MiB  ({_heap()})", flush=True)
                    minute += 1
            result = load.result()
        finally:
            await stop()
    show("soak", result)
    if len(samples) >= 3:
        mid = samples[len(samples) // 2]
        first, last = samples[1], samples[-1]
        growth = (last[1] - mid[1]) / mid[1]
        print(
            f"   RSS minute 1 {first[1]:.1f} MiB, minute {mid[0]:g} {mid[1]:.1f} MiB, minute {last[0]:g} "
            f"{last[1]:.1f} MiB: second half {growth:+.1%} (plateau: < 5% -> "
            f"{'met' if growth < 0.05 else 'MISSED'}); errors {sum(result['errors'].values())}"
        )


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
    p.add_argument("--only", choices=["catalog", "verify", "soak"], help="run only this measurement")
    args = p.parse_args(argv)
    print(f"python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)\n")
    if args.only in (None, "catalog"):
        asyncio.run(catalog_build(args.sizes))
    if args.only in (None, "verify"):
        audit_verify(args.records, args.rounds)
    if args.soak_minutes > 0 and args.only in (None, "soak"):
        asyncio.run(soak(args.soak_minutes, args.soak_rate, args.cpu, args.soak_concurrency))
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
