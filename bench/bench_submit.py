"""CPU of one governed Submit in process, without the transport (``python -m bench.bench_submit``).

Runs the gateway's ``AgencyService/Submit`` servicer method directly (request conversion,
validation, routing, schema checks, SMF envelopes, goal verification, audit records,
metrics, outcome conversion) over an ``Agency`` with the in-process echo agent of
``bench.bench_gateway``, 16 callers at a time. The audit log is ``MeteredAuditLog`` over
a log that serialises each record to its canonical bytes, as the write-ahead log does,
and keeps nothing (``--audit file``: the real ``WalAuditLog``, which adds its writer
thread and the disk). The baseline in the same run is the bare servicer's own work
(answering with a same-sized ``Outcome``).

    python -m bench.bench_submit                  # CPU per task, min and median of 10 rounds
    python -m bench.bench_submit --audit file

CPU time on a shared machine swings with its load; for a figure that does not, count
instructions: ``python -m bench.bench_submit --instructions`` runs this benchmark under
``valgrind --tool=cachegrind --cache-sim=no`` with ``--tasks 160`` and ``--tasks 800``
(``--rounds 1``) and divides the difference in instructions by the difference in tasks
(start-up and warm-up cancel out); it prints the figure against the baseline and target.

What each part of the path costs: ``--without PART[,PART]`` takes parts out (the task then
does less than a governed task must: for attribution only) and the difference in
instructions against a run without it is that part's cost; ``--profile FILE`` writes a
cProfile of the measured rounds (``python -m pstats FILE``).

    python -m bench.bench_submit --instructions --without metrics
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.bench_gateway import ECHO_CONTRACT, ECHO_GOAL, BareServicer, request_for
from middleware import Agency
from middleware.audit import AuditRecord, WalAuditLog
from middleware.audit.record import PlainRecord, record_bytes
from middleware.constraints import Constraints
from middleware.errors import NotFound
from middleware.memory_catalog import MemoryCatalog
from middleware.router import Router, RoutingDecision
from middleware.server import event_loop
from middleware.server.grpc_api.agency_servicer import AgencyServicer
from middleware.server.metrics import MeteredAuditLog, Metrics
from middleware.tasks import TaskRecord


class SerialisingLog:
    """Does the CPU work a durable log does on the caller's side (the canonical bytes), keeps nothing."""

    def __init__(self) -> None:
        self._size = 0

    async def append(self, record: AuditRecord) -> int:
        record.canonical()
        self._size += 1
        return self._size

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        for record in records:
            record_bytes(record)
        first = self._size + 1
        self._size += len(records)
        return range(first, self._size + 1)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return iter(())

    async def close(self) -> None:
        return None

    @property
    def location(self) -> str:
        return "nowhere"


class _NoTaskStore:
    """``--without task_store``: versions counted, nothing kept."""

    async def create(self, record: TaskRecord) -> None:
        record.version = 1

    async def get(self, task_id: str) -> TaskRecord:
        raise NotFound(f"no task {task_id!r}")

    async def save(self, record: TaskRecord) -> None:
        record.version += 1

    def lock(self, task_id: str, *, wait_s: float = 2.0) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class _OnceRouter(Router):
    """``--without routing``: the first task's constraints and decision, reused."""

    _constraints: Constraints | None = None
    _decision: RoutingDecision | None = None

    async def constraints_for(self, text: str, explicit: Any = None) -> Constraints:
        if self._constraints is None:
            self._constraints = await super().constraints_for(text, explicit)
        return self._constraints

    async def decide(
        self, constraints: Constraints, *, exclude: Sequence[str] = (), tenant: str = ""
    ) -> RoutingDecision:
        if self._decision is None:
            self._decision = await super().decide(constraints, exclude=exclude, tenant=tenant)
        return self._decision


#: What ``--without`` takes out, each the whole of one part of a governed task.
PARTS = {
    "metrics": "the metrics wrapper of the audit log (MeteredAuditLog)",
    "outcome_pb": "the outcome's protobuf conversion (outcome_to_pb)",
    "audit_records": "the task's audit records (TaskJournal.add: nothing recorded, barriers still waited)",
    "routing": "constraint extraction and the routing decision (the first task's reused)",
    "task_store": "the task store (nothing kept)",
    "outcome_bound": "the outcome-size bound (limits.max_outcome_bytes)",
    "task_events": "the task's event stream (WatchTask: no event built or kept)",
}


def take_out(parts: set[str]) -> None:
    """Patch out what ``--without`` names that cannot be injected (this process only)."""
    if "outcome_pb" in parts:
        import middleware.server.grpc_api.agency_servicer as servicer

        servicer.outcome_to_pb = lambda outcome: outcome  # type: ignore[assignment]
    if "audit_records" in parts:
        from middleware.task_journal import TaskJournal

        TaskJournal.add = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    if "outcome_bound" in parts:
        Agency._bound_outcome = lambda self, run, state, reason: (state, reason, None)  # type: ignore[method-assign]
    if "task_events" in parts:
        import middleware.pipeline as pipeline

        class _Nowhere:
            async def append(self, task_id: str, events: Any) -> int:
                return 0

            async def close(self) -> None:
                return None

        pipeline.events_of = lambda records, states, indexes: []  # type: ignore[assignment]
        Agency._outcome_event = lambda self, run, final=None: None  # type: ignore[assignment, method-assign, return-value]
        pipeline.MemoryTaskEventLog = _Nowhere  # type: ignore[assignment, misc]


class _Context:
    """Stands in for ``grpc.aio.ServicerContext`` (only used when a call fails)."""

    def set_trailing_metadata(self, metadata: Any) -> None:
        return None

    async def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")


async def rounds(
    call: Callable[[], Awaitable[Any]], tasks: int, n_rounds: int, concurrency: int
) -> list[float]:
    """CPU seconds per call of each round of ``tasks`` calls, ``concurrency`` at a time."""
    per_worker = max(1, tasks // concurrency)

    async def worker() -> None:
        for _ in range(per_worker):
            await call()

    out = []
    for _ in range(n_rounds):
        started = time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        out.append((time.process_time() - started) / (per_worker * concurrency))
    return sorted(out)


def show(name: str, per_call: list[float]) -> None:
    print(
        f"{name:<9} CPU per call: min {per_call[0] * 1e6:8.1f} us   "
        f"median {per_call[len(per_call) // 2] * 1e6:8.1f} us   ({len(per_call)} rounds)"
    )


BASELINE_INSTRUCTIONS = 4.19e6
"""Instructions per governed Submit on main before issue 18 (6d014d9, asyncio loop), measured
with ``--instructions`` on the same machine."""
TARGET_INSTRUCTIONS = 1.6e6


def count_instructions(tasks: int, without: str = "") -> int:
    """Instructions of one ``--tasks N --rounds 1`` run under cachegrind."""
    import os
    import re
    import subprocess
    import sys

    with tempfile.TemporaryDirectory(prefix="bench-submit-vg-") as tmp:
        out = subprocess.run(
            [
                "valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={tmp}/cg.out",
                sys.executable, "-m", "bench.bench_submit", "--tasks", str(tasks), "--rounds", "1",
                *(["--without", without] if without else []),
            ],
            capture_output=True, text=True, check=True, env=os.environ,
        )  # fmt: skip
    match = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def instructions(without: str) -> int:
    from middleware.server.event_loop import loop_name

    low, high = 160, 800
    per_task = (count_instructions(high, without) - count_instructions(low, without)) / (high - low)
    if without:
        print(f"instructions per task without {without} (valgrind, {loop_name()}): {per_task / 1e6:.3f} M")
        return 0
    print(
        f"instructions per governed Submit in process (valgrind, {loop_name()}): {per_task / 1e6:.2f} M "
        f"= {per_task / BASELINE_INSTRUCTIONS:.2f}x the baseline {BASELINE_INSTRUCTIONS / 1e6:.2f} M "
        f"(target <= {TARGET_INSTRUCTIONS / 1e6:.1f} M: "
        f"{'met' if per_task <= TARGET_INSTRUCTIONS else 'MISSED'})"
    )
    return 0


async def run(args: argparse.Namespace) -> int:
    request, context = request_for(args.size), _Context()
    bare = BareServicer()

    async def answer() -> Any:
        return await bare.Submit(request, context)

    show("bare", await rounds(answer, args.tasks, args.rounds, args.concurrency))

    without = set(filter(None, args.without.split(",")))
    take_out(without)
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
        inner = WalAuditLog(Path(tmp), "bench") if args.audit == "file" else SerialisingLog()
        audit = inner if "metrics" in without else MeteredAuditLog(inner, Metrics())
        catalog = MemoryCatalog()
        agency = Agency(
            audit=audit,
            catalog=catalog,
            router=_OnceRouter(catalog) if "routing" in without else None,
            tasks=_NoTaskStore() if "task_store" in without else None,
        )

        async def echo(agent_request: Any) -> Any:
            return agent_request.input

        await agency.register(ECHO_CONTRACT, echo)
        agency.register_goal(ECHO_GOAL)
        servicer = AgencyServicer(agency)

        async def submit() -> None:
            outcome = await servicer.Submit(request, context)
            if outcome.state != "completed":
                raise RuntimeError(f"task ended {outcome.state}: {outcome.reason}")

        await rounds(submit, 200, 1, args.concurrency)  # warm-up: caches, compiled schemas
        gc.freeze()  # as agency serve does after start-up
        profile = cProfile.Profile() if args.profile else None
        if profile is not None:
            profile.enable()
        show("governed", await rounds(submit, args.tasks, args.rounds, args.concurrency))
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile)
        await agency.close()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_submit", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=1000, help="calls per round (default 1000)")
    p.add_argument("--rounds", type=int, default=10, help="rounds; min and median are printed (default 10)")
    p.add_argument("--concurrency", type=int, default=16, help="calls in flight (default 16)")
    p.add_argument("--size", type=int, default=256, help="payload bytes (default 256)")
    p.add_argument(
        "--audit",
        choices=["serialise", "file"],
        default="serialise",
        help="serialise = canonical bytes only (default); file = the write-ahead log on disk",
    )
    p.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions per task under valgrind (two runs) instead of measuring CPU time",
    )
    p.add_argument(
        "--without",
        default="",
        help="take parts out, comma-separated, to count what each costs: " + ", ".join(PARTS),
    )
    p.add_argument("--profile", metavar="FILE", help="write a cProfile of the measured rounds to FILE")
    args = p.parse_args()
    unknown = set(filter(None, args.without.split(","))) - set(PARTS)
    if unknown:
        p.error(f"--without: unknown part(s) {sorted(unknown)}; known: {', '.join(PARTS)}")
    if args.instructions:
        return instructions(args.without)
    return event_loop.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
