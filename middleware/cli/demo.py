"""``agency demo``: the reference scenario, governed in process, told step by step."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any, TextIO

from ..audit import AuditRecord, WalAuditLog
from ..kpi import compute_kpis
from ..pipeline import Agency
from ..router import RoutingWeights
from ..tasks import Outcome, TaskRequest
from .report import render
from .tasks import plan_line


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run the reference scenario in process and explain each step",
        description="Run the seed's e-commerce case (section 4): greeting_agent reads "
        "'我上周买的手机屏幕碎了，要换新' (the client sends only that, and who asks), extracts the context "
        "and anchors GOAL_WARRANTY_001; the gateway runs the goal's own plan (shown); "
        "the order and warranty agents are chosen by contract; the replacement shipper times out, "
        "is retried, and the backup express "
        "shipper succeeds; the goal's own Chinese sentences are verified; a second question of the same "
        "session reuses the context; two claims the warranty does not cover (accidental damage, 14 "
        "months) fail the goal and go to a person; a request no contract allows is refused before any "
        "agent runs. Needs no services.",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="where to write (and keep) the audit log; default: a temporary directory removed at the end",
    )
    p.add_argument("--json", action="store_true", help="print the outcomes as JSON instead")
    p.add_argument(
        "--today",
        type=_day,
        metavar="YYYY-MM-DD",
        help="tell the story as on this date (purchases, deliveries and the goal's 12-month check "
        "follow it); default: today",
    )
    p.set_defaults(handler=_run)


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def _run(args: argparse.Namespace) -> int:
    import sys

    from ..demo import clock_on

    clock = clock_on(args.today) if args.today else None
    return asyncio.run(run_demo(args.data_dir, as_json=args.json, out=sys.stdout, clock=clock))


def _scenarios() -> list[tuple[str, TaskRequest, str]]:
    from ..demo import (
        drifting_request,
        failing_claim_request,
        refused_request,
        tracking_request,
        warranty_request,
    )

    return [
        ("1. The seed's request: a shattered screen, a replacement", warranty_request("s_demo"), "completed"),
        ("2. Later, in the same session: where is my phone?", tracking_request("s_demo"), "completed"),
        ("3. A claim for accidental damage", failing_claim_request("accidental"), "input_required"),
        ("4. A claim 14 months after the purchase", failing_claim_request("expired"), "input_required"),
        (
            "5. A plan that drifts: a freight quote for a replacement goal",
            drifting_request(),
            "input_required",
        ),
        ("6. A request no contract allows", refused_request(), "rejected"),
    ]


async def run_demo(
    data_dir: Path | None,
    *,
    as_json: bool = False,
    out: TextIO,
    clock: Callable[[], datetime] | None = None,
) -> int:
    """Run the scenarios; keep the audit log in ``data_dir`` (else a temporary one, removed).

    ``clock`` is the scenario's time (default: the real one; see :func:`middleware.demo.clock_on`).
    """
    from ..demo import build_demo_agency, demo_config
    from ..smf import utcnow

    kept = data_dir is not None
    directory = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="agency-demo-"))
    try:
        audit = WalAuditLog(directory / "audit", "demo")
        agency = await build_demo_agency(Agency(audit=audit, config=demo_config(), clock=clock or utcnow))
        outcomes: list[Outcome] = []
        try:
            for _, request, _ in _scenarios():
                outcomes.append(await agency.submit(request, client="demo-app"))
            records = [r for _, r in audit.records()]
        finally:
            await agency.close()
        ok = all(o.state.value == want for o, (_, _, want) in zip(outcomes, _scenarios(), strict=True))
        if as_json:
            out.write(json.dumps([o.model_dump(mode="json") for o in outcomes], indent=2, ensure_ascii=False))
            out.write("\n")
            return 0 if ok else 1
        weights = agency.router.weights
        for (title, request, _), outcome in zip(_scenarios(), outcomes, strict=True):
            _tell(out, title, request, outcome, [r for r in records if r.task_id == outcome.task_id], weights)
        out.write("\n== The seed's section 4.4 measures over these tasks (agency report) ==\n")
        render(compute_kpis(records), out)
        out.write(
            f"\nAudit log: {audit.location} ({len(records)} records, hash-chained, signed checkpoints)\n"
        )
        if kept:
            out.write("Open each task's timeline:\n")
            for outcome in outcomes:
                out.write(f"  agency trace show {outcome.trace_id} --data-dir {directory}\n")
        else:
            out.write(
                f"The temporary directory {directory} is removed now; run 'agency demo --data-dir DIR' to "
                "keep the audit log, then 'agency trace show TRACE_ID --data-dir DIR' opens a task's "
                "timeline.\n"
            )
        return 0 if ok else 1
    finally:
        if not kept:
            shutil.rmtree(directory, ignore_errors=True)


def _score_parts(candidate: dict[str, Any], w: RoutingWeights) -> str:
    """``score 0.782`` as its terms (see ``middleware.router``)."""
    slo_term = w.slo_reference_ms / (w.slo_reference_ms + candidate["slo_latency_ms"])
    load_term = 1.0 / (1.0 + candidate["load"] / w.load_reference)
    total = w.slo + w.success + w.load
    return (
        f"score {candidate['score']:.3f} = ({w.slo:g}×SLO term {slo_term:.3f} "
        f"[SLO {candidate['slo_latency_ms']} ms] "
        f"+ {w.success:g}×success {candidate['success_rate']:.3f} [{candidate['samples']} calls] "
        f"+ {w.load:g}×load term {load_term:.3f} [{candidate['load']:g} in flight]) / {total:g}"
    )


def _hops(records: list[AuditRecord], step: str) -> list[AuditRecord]:
    return [r for r in records if r.event_type == "agent.result" and r.detail.get("step") == step]


def _tell(
    out: TextIO,
    title: str,
    request: TaskRequest,
    o: Outcome,
    records: list[AuditRecord],
    weights: RoutingWeights,
) -> None:
    w = out.write
    w(f"\n== {title} ==\nUser ({request.user_id}, session {request.session_id or '-'}): {request.text}\n")
    anchored = next((r for r in records if r.event_type == "goal.anchored"), None)
    if anchored is not None:
        by = anchored.detail.get("by") or "the client"
        w(f"Goal anchored: {anchored.goal_id} by {by}")
        if anchored.detail.get("intent"):
            w(f" (intent {anchored.detail['intent']}, language {anchored.detail.get('language') or '?'})")
        w("\n")
        if anchored.detail.get("context"):
            w(f"Context extracted: {json.dumps(anchored.detail['context'], ensure_ascii=False)}\n")
    if o.plan:
        source = str(o.plan.get("source", ""))
        whose = f"the plan of {source[5:]}" if source.startswith("goal:") else source or "?"
        w(f"Plan the gateway chose ({whose}): {plan_line(o.plan)}\n")
    elif request.steps:
        w(f"Plan the client sent: {' → '.join(s.name for s in request.steps)}\n")
    submitted = next((r for r in records if r.event_type == "task.submitted"), None)
    carried = submitted.detail.get("session_context") if submitted is not None else None
    if carried:
        keys = ", ".join(carried)
        w(f"Context carried over from session {request.session_id} (not asked for again): {keys}\n")
    records_by_step = {s.name: s for s in o.steps}
    for routed in o.routing:
        name = routed["step"]
        w(f"\n[{name}] route: {routed['explanation']}\n")
        if routed.get("candidates"):
            w(f"[{name}]   {_score_parts(routed['candidates'][0], weights)}\n")
        for failure, resolution in zip(o.failures, o.resolutions, strict=False):
            if failure.step != name or failure.type.value == "CAPABILITY_MISMATCH":
                continue
            if failure.context.get("before_dispatch"):
                what = f"{failure.type.value} before dispatch (no agent ran)"
            else:
                what = f"{failure.type.value} on {failure.agent or 'the goal'} (attempt {failure.attempt})"
            w(f"[{name}] {what}: {failure.detail}\n")
            extra = f" after {resolution.delay_ms:.0f} ms backoff" if resolution.delay_ms else ""
            w(f"[{name}]   -> {resolution.kind.value}{extra}: {resolution.reason}\n")
        step = records_by_step.get(name)
        if step is not None and step.status == "completed":
            took = f"{step.attempts} attempt(s), last took {step.duration_ms:.0f} ms"
            w(f"[{name}] done by {step.agent} ({took})\n")
        for hop in _hops(records, name)[-1:]:
            meta = hop.detail["message"]["metadata"]
            prov, rel = meta["provenance"], hop.detail.get("reliability") or {}
            ttl = meta.get("freshness_ttl")
            w(
                f"[{name}]   SMF: provenance {prov['source']} reliability {prov['reliability_score']:.3f}"
                + (
                    f" (authority {rel['authority']:.2f}, recency {rel['recency']:.2f}, consistency "
                    f"{rel['consistency']:.2f}; agent claimed {rel['claimed']})"
                    if rel
                    else ""
                )
                + f"; freshness_ttl {'none' if ttl is None else f'{ttl:g} s'}"
                + (f" ({meta['domain']})" if meta.get("domain") else "")
                + f"; intention_trace {meta['intention_trace']}\n"
            )
    for verdict in [
        *o.stage_verdicts,
        *([o.goal_verdict] if o.goal_verdict and not o.goal_verdict.stage else []),
    ]:
        where = f"stage {verdict.stage}" if verdict.stage else "final output"
        w(f"\nGoal verification ({verdict.goal_id}, {where}):\n")
        for v in verdict.steps:
            mark = "PASS" if v.passed else "FAIL"
            w(
                f"  [{mark}] {v.step}"
                + (f" (actual: {_short(v.actual)})" if v.actual is not None else "")
                + "\n"
            )
            if not v.passed:
                w(f"         {v.reason}\n")
    if isinstance(o.output, dict) and "reply" in o.output and o.state.value == "completed":
        w(f"\nReply: {o.output['reply']}\n")
    if o.pending.get("kind") == "human_handover":
        w(f"\nHanded over to a person: {o.pending['blocking_point']['detail']}\n")
        w(f"Suggested reply: {o.pending['suggested_reply']}\n")
    why = o.failures[-1].type.value if o.failures else ""
    verdict_text = {
        "completed": "COMPLETED",
        "rejected": "REJECTED before any agent ran",
        "input_required": ("INTENT DRIFT" if why == "INTENT_DRIFT" else "GOAL FAILED")
        + ": waiting for a person (INPUT_REQUIRED)",
    }.get(o.state.value, o.state.value)
    if o.state.value == "rejected":
        w(f"\nWhy: {o.reason}\n")
    w(f"\nTask {o.task_id}: {verdict_text}; trace {o.trace_id}\n")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
