"""What planning adds per task, and what parallel branches save (``python -m bench.bench_plans``).

The same five-step task (in-process agents that answer at once, a goal checked on the last
output, the audit log serialising every record as the write-ahead log does) run four ways:

* ``client steps`` (the baseline): the client sends the five steps, as before plans;
* ``goal plan``: the client sends only the text and the goal's id; the gateway runs the goal's
  plan (plan checked against the live contracts, ``plan.accepted`` audited, each step's input
  built from its mapping);
* ``intake + goal plan``: the client sends only the text; an intake agent anchors the goal
  first (one more agent call: the seed's greeting agent), then the goal's plan joins;
* ``planner``: the client sends only the text; the governed planner (a scripted chat model
  answering at once) proposes the plan, which is checked and audited before it runs.

Figures are CPU microseconds per task (``time.process_time``), the median of ``--rounds``
rounds of ``--tasks`` tasks each, one task at a time, the four ways taking turns within each
round; what planning adds is the median of each round's difference to the baseline. Then the
wall time of a fork and a join whose two branches each take ``--branch-ms`` (the agents
sleep): written in order (one after the other) and as branches.

    python -m bench.bench_plans                  # --tasks 400 --rounds 7 --branch-ms 200

CPU time on a shared machine swings with its load; ``--instructions`` counts instructions
instead (each way run under ``valgrind --tool=cachegrind --cache-sim=no`` with ``--tasks 100``
and ``--tasks 300``; the difference divided by 200 tasks, so start-up and warm-up cancel out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.bench_submit import SerialisingLog
from middleware import Agency
from middleware.planner import LangChainPlanner
from middleware.testing import ScriptedChatModel

ACTIONS = ["fetch", "check", "enrich", "decide", "reply"]


def goal(*, plan: bool) -> dict[str, Any]:
    steps = [
        {
            "name": action,
            "action": action,
            "input": {"user_id": ["context.user_id", "task.user_id"]}
            | ({"previous": f"steps.{ACTIONS[i - 1]}"} if i else {"order": "request.order"}),
        }
        for i, action in enumerate(ACTIONS)
    ]
    return {
        "id": "GOAL_BENCH_001",
        "description": "five steps, checked on the reply",
        "verification_steps": ["$.done is true"],
        **({"plan": {"steps": steps}} if plan else {}),
    }


async def answer(request: Any) -> dict[str, Any]:
    return {"done": True, request.step: "ok"}


async def intake(request: Any) -> dict[str, Any]:
    return {"intent": "bench", "goal_id": "GOAL_BENCH_001", "context": {"user_id": "u_1"}}


async def agency_for(mode: str) -> Agency:
    planner = None
    if mode == "planner":
        reply = json.dumps({"plan": goal(plan=True)["plan"]})
        planner = LangChainPlanner(ScriptedChatModel([reply]), name="scripted")
    agency = Agency(audit=SerialisingLog(), planner=planner)  # type: ignore[arg-type]
    for action in ACTIONS:
        await agency.register(
            {"name": f"{action}_agent", "can_do": [action], "side_effect_free": True, "slo_latency_ms": 5000},
            answer,
        )
    if mode == "intake + goal plan":
        await agency.register(
            {"name": "greeter", "can_do": ["anchor_goal"], "side_effect_free": True}, intake
        )
    agency.register_goal(goal(plan=mode in ("goal plan", "intake + goal plan")))
    return agency


def request(mode: str, n: int) -> dict[str, Any]:
    base: dict[str, Any] = {"text": "bench", "user_id": "u_1", "input": {"order": n}}
    if mode == "client steps":
        return base | {"goal_id": "GOAL_BENCH_001", "steps": [{"name": a, "action": a} for a in ACTIONS]}
    if mode == "goal plan":
        return base | {"goal_id": "GOAL_BENCH_001"}
    return base


async def cpu_per_task(modes: list[str], tasks: int, rounds: int) -> dict[str, list[float]]:
    """Per mode, the CPU µs per task of each round; the modes take turns within a round, so a
    change in the machine's load touches them alike."""
    agencies = {mode: await agency_for(mode) for mode in modes}
    for mode, agency in agencies.items():
        for n in range(20):  # warm up
            outcome = await agency.submit(request(mode, n))
            assert outcome.state.value == "completed", (mode, outcome.reason)
    figures: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode, agency in agencies.items():
            started = time.process_time()
            for n in range(tasks):
                await agency.submit(request(mode, n))
            figures[mode].append((time.process_time() - started) / tasks * 1e6)
    for agency in agencies.values():
        await agency.close()
    return figures


async def fork_join_ms(*, parallel: bool, branch_ms: float) -> float:
    async def slow(request: Any) -> dict[str, Any]:
        await asyncio.sleep(branch_ms / 1000)  # the agent's own work
        return {request.step: "found"}

    agency = Agency(audit=SerialisingLog())  # type: ignore[arg-type]
    for action in ("left", "right", "join"):
        await agency.register({"name": action, "can_do": [action], "slo_latency_ms": 60_000}, slow)
    after = [] if parallel else None  # [] = waits for nothing: a branch; None = the step before
    agency.register_goal(
        {
            "id": "GOAL_FORK_001",
            "description": "two lookups, then a join",
            "verification_steps": ["$.join exists"],
            "plan": [
                {"name": "left", "action": "left", "after": []},
                {"name": "right", "action": "right", "after": after},
                {"name": "join", "action": "join", "after": ["left", "right"]},
            ],
        }
    )
    started = time.perf_counter()
    outcome = await agency.submit({"text": "both", "goal_id": "GOAL_FORK_001"})
    took = (time.perf_counter() - started) * 1000
    assert outcome.state.value == "completed", outcome.reason
    await agency.close()
    return took


MODES = ["client steps", "goal plan", "intake + goal plan", "planner"]


def count_instructions(mode: str, tasks: int) -> int:
    """Instructions of one ``--only MODE --tasks N --rounds 1`` run under cachegrind."""
    with tempfile.TemporaryDirectory(prefix="bench-plans-vg-") as tmp:
        out = subprocess.run(
            [
                "valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={tmp}/cg.out",
                sys.executable, "-m", "bench.bench_plans", "--only", mode,
                "--tasks", str(tasks), "--rounds", "1",
            ],
            capture_output=True, text=True, check=True, env=os.environ,
        )  # fmt: skip
    match = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def instructions() -> None:
    low, high = 100, 300
    print("instructions per task (valgrind; the difference of a 300-task and a 100-task run):")
    base = 0.0
    for mode in MODES:
        per_task = (count_instructions(mode, high) - count_instructions(mode, low)) / (high - low)
        base = base or per_task
        added = "baseline" if per_task == base else f"{per_task - base:+,.0f} ({per_task / base - 1:+.0%})"
        print(f"  {mode:<20} {per_task:12,.0f}   {added}", flush=True)


async def main(args: argparse.Namespace) -> None:
    if args.only:  # one way, for --instructions (its figure is valgrind's)
        await cpu_per_task([args.only], args.tasks, args.rounds)
        return
    modes = MODES
    figures = await cpu_per_task(modes, args.tasks, args.rounds)
    print(
        f"CPU per task, median of {args.rounds} rounds of {args.tasks} tasks (one at a time, modes in turn):"
    )
    base = figures[modes[0]]
    for mode in modes:
        cpu = statistics.median(figures[mode])
        if mode == modes[0]:
            print(f"  {mode:<20} {cpu:8.0f} µs   baseline")
            continue
        added = statistics.median(m - b for m, b in zip(figures[mode], base, strict=True))
        print(
            f"  {mode:<20} {cpu:8.0f} µs   {added:+.0f} µs per task ({added / statistics.median(base):+.0%})"
        )
    sequential = await fork_join_ms(parallel=False, branch_ms=args.branch_ms)
    parallel = await fork_join_ms(parallel=True, branch_ms=args.branch_ms)
    print(f"\nTwo {args.branch_ms:g} ms branches, then a join ({args.branch_ms:g} ms):")
    print(f"  one after the other  {sequential:7.1f} ms   baseline")
    print(f"  as branches          {parallel:7.1f} ms   {parallel - sequential:+.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=400, help="tasks per round (default 400)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    parser.add_argument("--branch-ms", type=float, default=200.0, help="each branch's work (default 200)")
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind")
    parser.add_argument("--only", choices=MODES, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.instructions:
        instructions()
    else:
        asyncio.run(main(parsed))
