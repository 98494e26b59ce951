"""Audit log benchmark: ``python -m bench.bench_audit [--dir DIR] [--records N] [--rounds R]``.

Measured in the same run, on the same disk (``--dir``, default ./.bench-audit):

1. durable appends/s of ``WalAuditLog.append_batch`` (fsync policy: batch): ``PRODUCERS``
   coroutines each hand over batches of ``BATCH`` plain records (as the pipeline's task
   journals do) and await one future per batch; with the compiled part
   (``middleware.audit._native``) and as pure Python, alternately in each round;
2. SQLite in WAL mode, synchronous=FULL, one row per transaction;
3. raw ``write`` + ``fdatasync`` of 64-record batches, one after the other (the disk's
   batched floor; the targets' baseline), and of batches as large as the log's (its records
   per fdatasync, measured in 1.: the stricter comparison, only the CPU around the fsync).
   The measurements alternate for ``--rounds`` rounds (the disk is shared and noisy) and
   the median is reported; the baselines write blobs of the record's size;
4. the hand-over floor: the same producers and batches with no record work at all (a
   ready-made blob per batch, one future, a writer thread that writes and fdatasyncs):
   what any asyncio log could reach here;
5. for comparison, single ``append`` calls from 64 concurrent appenders (one future per
   record: the contract before ``append_batch``);
6. recovery (open + full verification) of an N-record log (default 1,000,000), checked
   in one process and with the default worker processes;
7. ``agency audit verify``'s check of that log in one process (records/s per core: records
   per CPU second of the process), compiled and pure, with and without the record check;
8. export of that log as a JSON Lines bundle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import threading
import time
from pathlib import Path

from middleware.audit import merkle, native, segment
from middleware.audit.checkpoint import Signer
from middleware.audit.export import export
from middleware.audit.merkle import MerkleTree
from middleware.audit.record import AuditRecord, PlainRecord, canonical_json, plain_record
from middleware.audit.segment import (
    CHECKPOINT,
    SEAL,
    SEGMENT,
    ZERO_HASH,
    ChainState,
    SegmentName,
    encode_batch,
    encode_events,
    encode_frame,
    list_segments,
)
from middleware.audit.segment_pool import check_segments, default_workers
from middleware.audit.verify import scan_node, verify_path
from middleware.audit.wal import VKEY_FILE, WalAuditLog, WalOptions, origin_for

APPENDERS = 64
BATCH = 64
PRODUCERS = 2
SIGNER = Signer("audit-bench")


def _use(compiled: bool) -> str:
    """Run the audit code compiled (if built) or as pure Python from now on; returns which."""
    segment._NATIVE = merkle._NATIVE = native.NATIVE if compiled else None
    return "native" if segment._NATIVE is not None else "pure"


def _record() -> AuditRecord:
    return AuditRecord(event_type="agent.step", node="bench", outcome="success", detail={})


def _plain() -> PlainRecord:
    return plain_record("agent.step", node="bench", outcome="success", detail={})


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process, by thread name (Linux; elsewhere empty)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            name = names.get(int(tid), tid).split("-")[0:2]
            out["-".join(name)] = out.get("-".join(name), 0.0) + (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        return {}
    return out


WRITER_CPU: list[dict[str, float]] = []
"""µs of CPU per record of each thread, one entry per ``_wal_batch_rate`` run (last one last)."""


async def _wal_batch_rate(root: Path, seconds: float) -> tuple[float, float]:
    """Durable records/s through ``append_batch``, and records per fdatasync; the CPU per record
    of each thread (the event loop building and staging records, the writer framing and hashing,
    the syncer, the compressor) goes to ``WRITER_CPU``."""
    log = WalAuditLog(root, "bench", signer=SIGNER)
    before = _thread_cpu()
    stop = time.perf_counter() + seconds
    done = 0
    syncs = 0
    real_sync = log._sync

    def counting_sync() -> None:
        nonlocal syncs
        syncs += 1
        real_sync()

    log._sync = counting_sync  # type: ignore[method-assign]

    async def producer() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            batch = [_plain() for _ in range(BATCH)]  # built fresh, as a task's journal does
            await log.append_batch(batch)
            done += BATCH

    t0 = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
    elapsed = time.perf_counter() - t0
    after = _thread_cpu()
    await log.close()
    WRITER_CPU.append({k: (v - before.get(k, 0.0)) / max(done, 1) * 1e6 for k, v in after.items()})
    return done / elapsed, done / max(syncs, 1)


async def _wal_rate(root: Path, seconds: float) -> tuple[float, float]:
    log = WalAuditLog(root, "bench", signer=SIGNER)
    stop = time.perf_counter() + seconds
    done = 0
    batches = 0
    real_sync = log._sync

    def counting_sync() -> None:
        nonlocal batches
        batches += 1
        real_sync()

    log._sync = counting_sync  # type: ignore[method-assign]

    async def appender() -> None:
        nonlocal done
        record = _record()  # built by the pipeline in real life; serialised by append() here
        while time.perf_counter() < stop:
            await log.append(record)
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(APPENDERS)))
    elapsed = time.perf_counter() - t0
    await log.close()
    return done / elapsed, done / max(batches, 1)


async def _floor_rate(path: Path, seconds: float, size: int) -> float:
    """The ceiling of an asyncio batch-append log here: the hand-over, nothing else.

    ``PRODUCERS`` coroutines each stage a ready-made blob of ``BATCH`` records and await one
    future; the blobs staged in one loop turn go to a writer thread (one ``write``, one
    ``fdatasync``), which resolves their futures with one ``call_soon_threadsafe`` -- as
    ``WalAuditLog.append_batch`` does, minus building and serialising the records, framing,
    CRC, hashing, the Merkle tree and checkpoints. While the disk syncs, the producers
    already stage the next batches (they are woken as soon as theirs is durable).
    """
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    cv = threading.Condition()
    queue: list[tuple[bytes, asyncio.Future[None]]] = []
    staged: list[tuple[bytes, asyncio.Future[None]]] = []
    closing = False

    def hand_over() -> None:
        batch = staged[:]
        staged.clear()
        with cv:
            queue.extend(batch)
            cv.notify()

    def writer() -> None:
        while True:
            with cv:
                while not queue and not closing:
                    cv.wait()
                if not queue:
                    return
                batch = queue[:]
                queue.clear()
            os.write(fd, b"".join(b for b, _ in batch))
            os.fdatasync(fd)
            loop.call_soon_threadsafe(_set_all, [f for _, f in batch])

    thread = threading.Thread(target=writer)
    thread.start()
    blob = os.urandom(size * BATCH)
    stop = time.perf_counter() + seconds
    done = 0

    async def producer() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            fut = loop.create_future()
            if not staged:
                loop.call_soon(hand_over)
            staged.append((blob, fut))
            await fut
            done += BATCH

    t0 = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(PRODUCERS)))
    elapsed = time.perf_counter() - t0
    with cv:
        closing = True
        cv.notify()
    thread.join()
    os.close(fd)
    return done / elapsed


def _set_all(futs: list[asyncio.Future[None]]) -> None:
    for f in futs:
        f.set_result(None)


def _sqlite_rate(path: Path, seconds: float, size: int) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY, body BLOB)")
    blob = os.urandom(size)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        db.execute("BEGIN")
        db.execute("INSERT INTO audit (body) VALUES (?)", (blob,))
        db.execute("COMMIT")
        n += 1
    elapsed = time.perf_counter() - t0
    db.close()
    return n / elapsed


def _raw_rate(path: Path, seconds: float, size: int, per_sync: int = APPENDERS) -> float:
    """Records/s of a loop that writes ``per_sync`` records and fdatasyncs: the disk alone."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    batch = os.urandom(size * per_sync)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        os.write(fd, batch)
        os.fdatasync(fd)
        n += per_sync
    elapsed = time.perf_counter() - t0
    os.close(fd)
    return n / elapsed


SYNTHETIC_BATCH = 50  # divides the checkpoint interval (1,000)


def signing_cost(batch: int, rounds: int = 400) -> tuple[float, float]:
    """CPU µs per record to frame a batch of ``batch`` records with its signed commit frame,
    and without one (the frames alone), best of 5."""
    payloads = [_record().canonical() for _ in range(batch)]
    state = ChainState(origin="agency-middleware/audit/bench")

    def signed() -> None:
        encode_batch(1, 0, 0, ZERO_HASH, payloads, state=state, sign=SIGNER.sign_bytes)

    def unsigned() -> None:
        encode_events(1, 0, 0, ZERO_HASH, payloads)

    out = []
    for fn in (signed, unsigned):
        best = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            for _ in range(rounds):
                fn()
            best = min(best, time.process_time() - t0)
        out.append(best / rounds / batch * 1e6)
    return out[0], out[1]


async def bytes_per_task(directory: Path, rounds: int) -> tuple[int, int, int]:
    """Run the demo's six scenarios ``rounds`` times into one log; (tasks, plain bytes, bytes on disk)."""
    from middleware import Agency
    from middleware.cli.demo import _scenarios
    from middleware.demo import build_demo_agency, demo_config

    audit = WalAuditLog(directory, "demo", signer=SIGNER, options=WalOptions(segment_bytes=4 << 20))
    agency = await build_demo_agency(Agency(audit=audit, config=demo_config()))
    tasks = 0
    try:
        for _ in range(rounds):
            for _, request, _ in _scenarios():
                await agency.submit(request, client="demo-app")
                tasks += 1
        plain = audit.size and sum(
            len(frame.payload) + 72 + (-(72 + len(frame.payload)) % 8) for frame in audit._iter_frames()
        )
    finally:
        await agency.close()
    on_disk = sum(p.stat().st_size for p in (directory / "demo").glob("*.wal*"))
    return tasks, plain, on_disk


def ship_figures(work: Path, count: int, batch: int) -> None:
    """Shipping throughput and lag against a real rsyslogd (TCP, CEF), as ``agency audit ship`` runs."""
    import socket
    import subprocess

    from middleware.audit.ship import Cursor, Shipper, SyslogTarget

    rsyslogd = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
    if not os.path.exists(rsyslogd):
        print("\nshipping: rsyslogd not installed, skipped")
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    coll = work / "collector"
    coll.mkdir()
    (coll / "rsyslog.conf").write_text(
        f'global(workDirectory="{coll}")\nmain_queue(queue.type="Direct")\nmodule(load="imtcp")\n'
        'template(name="line" type="string" string="%msg%\\n")\n'
        f'ruleset(name="r") {{ action(type="omfile" file="{coll}/out.log" template="line") }}\n'
        f'input(type="imtcp" port="{port}" ruleset="r")\n'
    )
    proc = subprocess.Popen([rsyslogd, "-n", "-f", str(coll / "rsyslog.conf"), "-i", str(coll / "pid")])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        root = work / "ship-log"
        write_synthetic_log(root, "bench", count)
        target = SyslogTarget(f"tcp://127.0.0.1:{port}")
        shipper = Shipper(
            root,
            target,
            "cef",
            Cursor(work / "ship-state"),
            batch=batch,
            verifier_for=lambda n: SIGNER.verifier(),
        )
        t0 = time.perf_counter()
        shipped = shipper.run_once()
        took = time.perf_counter() - t0
        print(f"\nshipping to rsyslogd (imtcp, CEF, rounds of {batch}): {shipped:,} records in {took:.2f}s = "
              f"{shipped / took:,.0f} records/s (verification of the log included)")  # fmt: skip

        async def live() -> list[int]:
            log = WalAuditLog(work / "live", "bench", signer=SIGNER)
            follower = Shipper(work / "live", target, "cef", Cursor(work / "live-state"), batch=batch,
                               verifier_for=lambda n: SIGNER.verifier())  # fmt: skip
            stop = threading.Event()
            thread = threading.Thread(target=follower.follow, args=(stop,), kwargs={"interval": 0.05})
            thread.start()
            for _ in range(200):  # ~100 records/s, 10 per batch
                await log.append_batch([_plain() for _ in range(10)])
                await asyncio.sleep(0.01)
            await asyncio.sleep(1)
            stop.set()
            await asyncio.to_thread(thread.join)
            await log.close()
            return follower.lags_ns

        lags = sorted(asyncio.run(live()))
        if lags:
            p50, p99 = lags[len(lags) // 2] / 1e6, lags[int(len(lags) * 0.99)] / 1e6
            print(f"shipping lag (append -> collector confirmed the round; follow interval 50 ms), "
                  f"{len(lags):,} records: p50 {p50:.0f} ms, p99 {p99:.0f} ms")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait()


def write_synthetic_log(root: Path, node: str, count: int, *, segment_bytes: int = 64 << 20) -> None:
    """Write an N-event log in the WAL format quickly (no per-record fsync), checkpoint every 1000."""
    directory = root / node
    directory.mkdir(parents=True, exist_ok=True)
    (directory / VKEY_FILE).write_text(SIGNER.vkey + "\n")
    origin = origin_for(node)
    tree, chain, size, seq = MerkleTree(), ZERO_HASH, 0, 0
    base = _record().model_dump(mode="json")
    ts = time.time_ns()

    def new_segment() -> tuple[object, int]:
        nonlocal chain
        name = SegmentName(seq, size + 1)
        header = canonical_json({"seq": seq, "first_index": size + 1, "origin": origin, "node": node})
        frame, _, chain = encode_frame(SEGMENT, size, 0, ts, chain, header)
        fh = open(directory / name.filename, "wb")  # noqa: SIM115 - closed on rotation
        fh.write(frame)
        return fh, len(frame)

    fh, offset = new_segment()
    parts: list[bytes] = []
    state = ChainState(origin=origin)
    for i in range(0, count, SYNTHETIC_BATCH):  # batches as a loaded gateway writes them
        payloads = []
        for k in range(i, min(i + SYNTHETIC_BATCH, count)):
            base["detail"] = {"i": k}
            payloads.append(canonical_json(base))
        frames, leaves, chain = encode_batch(
            size + 1, 0, ts + i, chain, payloads, state=state, sign=SIGNER.sign_bytes
        )
        size += len(payloads)
        tree.extend(leaves)
        parts.append(frames)
        offset += len(frames)
        i += len(payloads) - 1
        if size % 1000 == 0 or i == count - 1:
            cp = SIGNER.sign(origin, size, tree.root())
            frame, _, chain = encode_frame(CHECKPOINT, size, 0, ts + i, chain, cp.note.encode())
            parts.append(frame)
            offset += len(frame)
            fh.write(b"".join(parts))  # type: ignore[attr-defined]
            parts.clear()
            if offset >= segment_bytes or i == count - 1:
                frame, _, chain = encode_frame(SEAL, size, 0, ts + i, chain, b'{"sealed":true}')
                fh.write(frame)  # type: ignore[attr-defined]
                fh.close()  # type: ignore[attr-defined]
                if i != count - 1:
                    seq += 1
                    fh, offset = new_segment()
    (directory / "checkpoint").write_text(cp.note)
    os.sync()


def main() -> None:
    global PRODUCERS, BATCH  # the module's defaults, set once from the command line
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--dir", type=Path, default=Path(".bench-audit"), help="scratch directory on the disk to test"
    )
    ap.add_argument(
        "--records", type=int, default=1_000_000, help="log size for recovery/export (0: skip them)"
    )
    ap.add_argument("--producers", type=int, default=PRODUCERS, help="coroutines handing over batches")
    ap.add_argument("--batch", type=int, default=BATCH, help="records per append_batch")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the append benchmarks")
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each append measurement")
    ap.add_argument(
        "--demo-rounds", type=int, default=20, help="rounds of the demo's six tasks for bytes per task"
    )
    ap.add_argument(
        "--only",
        choices=["signing", "size", "ship", "appends", "verify"],
        help="run only this measurement (appends: the append rounds; verify: the N-record log's checks)",
    )
    ap.add_argument("--ship-records", type=int, default=100_000, help="records shipped for the throughput")
    args = ap.parse_args()
    work = args.dir
    PRODUCERS, BATCH = args.producers, args.batch
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    size = len(_record().canonical())
    print(
        f"scratch dir: {work.resolve()}  record: {size} bytes  batches: {PRODUCERS} producers x "
        f"{BATCH} records  single appends: {APPENDERS} appenders"
    )
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    print(f"audit code: {native.implementation()} (compiled part {'built' if native.NATIVE else 'absent'})")
    print("\nsigned commit frames (CPU per record to frame a batch, with its signature / without):")
    for compiled in (True, False) if native.NATIVE is not None else (False,):
        which = _use(compiled)
        for n in (1, 12, 64, 128):
            with_sig, without = signing_cost(n)
            added = with_sig - without
            print(
                f"  {which:>6} batch of {n:>3}: {with_sig:7.2f} µs / {without:5.2f} µs  "
                f"-> signing adds {added:.2f} µs"
            )
    _use(True)
    if args.only == "signing":
        return
    if args.only == "ship":
        ship_figures(work, args.ship_records, 1000)
        return
    if args.only in (None, "size"):
        tasks, plain, on_disk = asyncio.run(bytes_per_task(work / "demo", args.demo_rounds))
        print(
            f"\nthe demo's tasks x {args.demo_rounds}: {tasks} tasks, {plain / tasks:,.0f} bytes per task "
            f"in frames, {on_disk / tasks:,.0f} bytes per task on disk (sealed segments compressed; "
            "target <= 2,048)"
        )
    if args.only == "size":
        return
    if args.only is None:
        ship_figures(work, args.ship_records, 1000)
    try:
        if args.only != "verify":
            _append_rounds(work, args, size)
        if args.records > 0 and args.only != "appends":
            _big_log(work, args)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _append_rounds(work: Path, args: argparse.Namespace, size: int) -> None:
    """The append measurements, alternating for ``args.rounds`` rounds; the log compiled and pure."""
    compiled = native.NATIVE is not None
    wal, walp, single, sqlite, raw, raw_same, floor, per_sync = [], [], [], [], [], [], [], []
    pure_per: list[float] = []
    cpu: list[dict[str, float]] = []
    cpu_pure: list[dict[str, float]] = []
    for r in range(args.rounds):
        _use(True)
        rate, per = asyncio.run(_wal_batch_rate(work / f"walb{r}", args.seconds))
        wal.append(rate)
        per_sync.append(per)
        cpu.append(WRITER_CPU[-1])
        if compiled:
            _use(False)
            ratep, perp = asyncio.run(_wal_batch_rate(work / f"walp{r}", args.seconds))
            walp.append(ratep)
            pure_per.append(perp)
            cpu_pure.append(WRITER_CPU[-1])
            _use(True)
        sqlite.append(_sqlite_rate(work / f"sqlite{r}.db", args.seconds, size))
        raw.append(_raw_rate(work / f"raw{r}.bin", args.seconds, size))
        # the same records per fdatasync as the log reached: the comparison is the CPU around it
        raw_same.append(_raw_rate(work / f"raws{r}.bin", args.seconds, size, max(BATCH, round(per))))
        floor.append(asyncio.run(_floor_rate(work / f"floor{r}.bin", args.seconds, size)))
        single.append(asyncio.run(_wal_rate(work / f"wal{r}", args.seconds))[0])
        pure_text = (
            f"  pure {walp[-1]:,.0f}/s ({pure_per[-1]:.0f}/fdatasync: {walp[-1] / sqlite[-1]:.1f}x sqlite, "
            f"{100 * walp[-1] / raw[-1]:.0f}% of raw)"
            if compiled
            else ""
        )
        print(
            f"round {r + 1}: wal batch {rate:,.0f}/s ({per:.0f} records/fdatasync)  "
            f"sqlite {sqlite[-1]:,.0f}/s  raw {raw[-1]:,.0f}/s (same batches {raw_same[-1]:,.0f}/s)  "
            f"floor {floor[-1]:,.0f}/s  "
            f"wal single {single[-1]:,.0f}/s  -> {rate / sqlite[-1]:.1f}x sqlite, "
            f"{100 * rate / raw[-1]:.0f}% of raw (floor: {100 * floor[-1] / raw[-1]:.0f}% of raw)" + pure_text
        )
    w, s, b = statistics.median(wal), statistics.median(sqlite), statistics.median(raw)
    print(f"\ndurable appends/s (median of {args.rounds}; the log {native.implementation()}):")
    print(f"  WalAuditLog.append_batch          {w:>10,.0f}/s")
    print(f"  SQLite WAL synchronous=FULL       {s:>10,.0f}/s   -> WAL is {w / s:.1f}x  (target >= 30x)")
    print(
        f"  raw write+fdatasync, 64/batch     {b:>10,.0f}/s   -> WAL is {100 * w / b:.0f}%  (target >= 60%)"
    )
    # The disk's speed swings within seconds: the ratio of each round's neighbours is steadier.
    xs = statistics.median(a / c for a, c in zip(wal, sqlite, strict=True))
    xr = statistics.median(a / c for a, c in zip(wal, raw, strict=True))
    print(f"  median of per-round ratios: {xs:.1f}x SQLite, {100 * xr:.0f}% of raw")
    xsame = statistics.median(a / c for a, c in zip(wal, raw_same, strict=True))
    print(
        f"  raw write+fdatasync with the log's own batch size ({statistics.median(per_sync):.0f} "
        f"records): {statistics.median(raw_same):,.0f}/s -> WAL is {100 * xsame:.0f}% (per-round median)"
    )
    xf = statistics.median(a / c for a, c in zip(floor, raw, strict=True))
    xfs = statistics.median(a / c for a, c in zip(floor, sqlite, strict=True))
    print(
        f"  hand-over floor (batches, no record work): {statistics.median(floor):,.0f}/s = "
        f"{xfs:.1f}x SQLite, {100 * xf:.0f}% of raw; the WAL reaches {100 * xr / xf:.0f}% of it"
    )
    xsingle = statistics.median(a / c for a, c in zip(single, raw, strict=True))
    print(
        f"  single appends, {APPENDERS} appenders (one future per record): "
        f"{statistics.median(single):,.0f}/s = {100 * xsingle:.0f}% of raw"
    )
    if compiled:
        ps = statistics.median(a / c for a, c in zip(walp, sqlite, strict=True))
        pr = statistics.median(a / c for a, c in zip(walp, raw, strict=True))
        gain = statistics.median(a / c for a, c in zip(wal, walp, strict=True))
        print(
            f"  the same log as pure Python (AGENCY_PURE_PYTHON=1), same rounds: "
            f"{statistics.median(walp):,.0f}/s = {ps:.1f}x SQLite, {100 * pr:.0f}% of raw "
            f"(per-round medians); compiled/pure = {gain:.2f}x"
        )
    for which, runs in (("compiled", cpu), ("pure", cpu_pure)):
        if runs and runs[0]:
            threads = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
            shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(threads.items()) if v >= 0.01)
            print(f"  CPU µs per record by thread, {which} (median of rounds): {shown}")


def _big_log(work: Path, args: argparse.Namespace) -> None:
    """Recovery, ``verify`` (records/s per core, compiled and pure) and export of an N-record log."""
    root = work / "big"
    t0 = time.perf_counter()
    write_synthetic_log(root, "bench", args.records)
    print(f"\nwrote a {args.records:,}-record log in {time.perf_counter() - t0:.1f}s "
          f"({sum(p.stat().st_size for p in (root / 'bench').iterdir()) / 1e6:.0f} MB)")  # fmt: skip
    for workers, records in ((1, False), (1, True), (None, True)):  # the baseline first
        t0 = time.perf_counter()
        opts = WalOptions(recovery_workers=workers, check_records=records, compress_sealed=False)
        log = WalAuditLog(root, "bench", signer=SIGNER, options=opts)
        recovery = time.perf_counter() - t0
        assert log.size == args.records, log.size
        asyncio.run(log.close())
        how = "in one process" if workers == 1 else f"with {default_workers()} workers (default)"
        how += ", records checked" if records else ", records not checked (baseline)"
        print(f"recovery (open + verify) of {args.records:,} records {how}: {recovery:.2f}s  (target < 5 s)")
    t0 = time.perf_counter()
    verdict = verify_path(root, key=SIGNER.vkey)
    assert verdict.ok, verdict.nodes
    print(
        f"offline verify (agency audit verify) of {args.records:,} records: {time.perf_counter() - t0:.2f}s"
    )
    out = work / "export.jsonl"
    t0 = time.perf_counter()
    with open(out, "wb") as fh:
        summary = export(root, fh, "jsonl")
    took = time.perf_counter() - t0
    print(
        f"export of {summary.records:,} records as JSON Lines: {took:.2f}s "
        f"({out.stat().st_size / 1e6:.0f} MB, target < 20 s)"
    )
    verify_rates(root / "bench", args.records)


def verify_rates(directory: Path, records: int) -> None:
    """``agency audit verify``'s check of one node's log in this process: records per CPU second.

    ``scan_node`` with one worker (what ``verify`` runs per log, in one process) and, to show
    where the time goes, the frame checks alone (CRC-32C, chain, leaf hashes, Merkle tree,
    signatures; no record check), compiled and pure, best of ``VERIFY_REPEATS``.
    """
    print(
        f"\nverify of {records:,} records in one process "
        "(records per CPU second = per core; target >= 1 M/s):"
    )
    results: dict[tuple[str, str], float] = {}
    for compiled in (True, False) if native.NATIVE is not None else (False,):
        which = _use(compiled)
        for what in ("scan_node (verify)", "frames only"):
            best = float("inf")
            for _ in range(VERIFY_REPEATS):
                t0 = time.process_time()
                if what == "frames only":
                    state = ChainState(verifier=SIGNER.verifier())
                    for _ in check_segments(list_segments(directory), state, workers=1):
                        pass
                    assert state.size == records, state.size
                else:
                    verdict = scan_node(directory, SIGNER.verifier(), workers=1)
                    assert verdict.ok and verdict.events == records, verdict
                best = min(best, time.process_time() - t0)
            results[which, what] = records / best
            print(f"  {which:>6} {what:<20} {records / best / 1e6:6.3f} M records/s ({best:.2f} s CPU)")
    _use(True)
    if ("native", "scan_node (verify)") in results:
        for what in ("scan_node (verify)", "frames only"):
            print(f"  compiled/pure, {what}: {results['native', what] / results['pure', what]:.2f}x")


VERIFY_REPEATS = 2


if __name__ == "__main__":
    main()
