"""What the content guards and policies cost per task, against the same task without them.

Runs the same 2-step task (two scripted in-process agents; a request in Chinese with a phone
number, a resident id and an e-mail address, the first agent's answer quoting the phone
number back) through ``Agency.submit`` with an in-memory audit log (the CPU cost, no disk):

* ``baseline``      – no guard, no policy;
* ``personal_data`` – the personal-data guard: tokenised before each dispatch, audit records
  redacted;
* ``sealed``        – the same, audit records sealed under the subject's key (AES-GCM, keys
  in a temporary key directory): crypto-shredding;
* ``injection``     – the injection heuristics on the user's input and on every answer;
* ``cedar``         – three Cedar policies asked at routing and dispatch (default allow);
* ``all``           – all of the above.

The variants run interleaved, ``--rounds`` times ``--tasks`` tasks each. The figure that
carries over between machines is the **CPU time per task** (this process's user + system
time over the round, divided by the tasks: other processes on a shared machine do not count);
the wall-clock p50 is printed beside it. The medians of the per-round figures are printed with
the difference to the baseline of the same run.

    python -m bench.bench_guards [--tasks 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from middleware import Agency, AgencyConfig, MemoryAuditLog
from middleware.audit.shredding import FileKeyStore, SubjectSealer
from middleware.guards import ContentGuard, GuardConfig
from middleware.guards.cedar_policy import CedarPolicyEngine
from middleware.guards.policy import PolicyGate

POLICIES = """
@id("refunds-need-finance")
forbid(principal, action == Action::"dispatch", resource)
when { resource.can_do.contains("issue_refund") && !principal.roles.contains("finance") };
@id("no-personal-data-offshore")
forbid(principal, action == Action::"dispatch", resource)
when { resource.tags.contains("offshore") && context.data_classes.contains("phone") };
@id("retired")
forbid(principal, action == Action::"route", resource) when { resource.name == "retired_agent" };
"""

REQUEST: dict[str, Any] = {
    "text": "我上周买的手机屏幕碎了，要换新。电话13812345678，身份证110101199003074258，"
    "邮箱zhang.san@example.com",
    "user_id": "u_789",
    "input": {"order_id": "A-1001", "phone": "13812345678", "device": "fp_7f3a"},
    "steps": [{"name": "order", "action": "get_order_detail"}, {"name": "reply", "action": "compose_reply"}],
}


def order(request: Any) -> dict[str, Any]:
    return {
        "order_id": "A-1001",
        "model": "X10",
        "contact": request.input.get("phone", ""),
        "status": "delivered",
    }


def reply(request: Any) -> dict[str, Any]:
    return {"message": f"我们会联系您 {request.input['order']['contact']}，预计三天内送达。"}


def variant(name: str, keys: Path) -> Callable[[], Agency]:
    pd = {"personal_data": {"enabled": True}}
    inj = {"injection": {"enabled": True}}
    settings: dict[str, Any] = {
        "baseline": {},
        "personal_data": pd,
        "sealed": pd,
        "injection": inj,
        "cedar": {},
        "all": {**pd, **inj},
    }[name]

    def build() -> Agency:
        config = AgencyConfig(guards=GuardConfig.model_validate(settings))
        guard = None
        if name in ("sealed", "all"):
            sealer = SubjectSealer(FileKeyStore(keys))
            guard = ContentGuard(config.guards, audit_replacer=sealer.replacer)
        policy = (
            PolicyGate(CedarPolicyEngine(POLICIES, default="allow")) if name in ("cedar", "all") else None
        )
        return Agency(config=config, guard=guard, policy=policy, audit=MemoryAuditLog())

    return build


async def one_round(build: Callable[[], Agency], tasks: int) -> tuple[list[float], float]:
    agency = build()
    await agency.register(
        {
            "name": "order_agent",
            "can_do": ["get_order_detail"],
            "data_classes": ["phone"],
            "slo_latency_ms": 5000,
        },
        order,
    )
    await agency.register(
        {
            "name": "reply_agent",
            "can_do": ["compose_reply"],
            "restore_personal_data": True,
            "slo_latency_ms": 5000,
        },
        reply,
    )
    for _ in range(20):  # warm-up
        await agency.submit(dict(REQUEST))
    times = []
    cpu = time.process_time()
    for _ in range(tasks):
        started = time.perf_counter()
        outcome = await agency.submit(dict(REQUEST))
        times.append((time.perf_counter() - started) * 1e6)
        assert outcome.state.value == "completed", outcome.reason
    cpu = (time.process_time() - cpu) / tasks * 1e6
    await agency.close()
    return times, cpu


async def run(tasks: int, rounds: int) -> None:
    names = ["baseline", "personal_data", "sealed", "injection", "cedar", "all"]
    cpus: dict[str, list[float]] = {n: [] for n in names}
    p50s: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as scratch:
        builds = {n: variant(n, Path(scratch) / "keys" / "subjects") for n in names}
        for r in range(rounds):
            for n in names:
                times, cpu = await one_round(builds[n], tasks)
                cpus[n].append(cpu)
                p50s[n].append(statistics.median(times))
            said = "  ".join(f"{n} {cpus[n][-1]:.0f}" for n in names)
            print(f"round {r + 1}: {said}  (CPU µs/task)", flush=True)
    base = statistics.median(cpus["baseline"])
    base50 = statistics.median(p50s["baseline"])
    print(f"\n{tasks} tasks x {rounds} rounds, median of the per-round figures (µs per task):")
    print(f"  {'variant':<14} {'CPU':>8} {'+CPU':>8} {'x base':>7} {'wall p50':>9} {'+p50':>8}")
    for n in names:
        cpu, p50 = statistics.median(cpus[n]), statistics.median(p50s[n])
        print(
            f"  {n:<14} {cpu:>8.0f} {cpu - base:>+8.0f} {cpu / base:>7.2f} {p50:>9.0f} {p50 - base50:>+8.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300, help="tasks per variant per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    asyncio.run(run(args.tasks, args.rounds))


if __name__ == "__main__":
    main()
