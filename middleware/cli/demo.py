"""``agency demo``: the reference scenario, governed in process, told step by step."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any, TextIO

from ..audit import WalAuditLog
from ..pipeline import Agency
from ..tasks import Outcome


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run the reference scenario in process and explain each step",
        description="Run the seed's e-commerce case (a shattered phone screen, GOAL_WARRANTY_001: "
        "warranty agent chosen by contract, replacement shipper times out and is retried, the "
        "backup express shipper succeeds, the goal is verified) and a request no contract allows "
        "(refused before any agent runs). Needs no services.",
    )
    p.add_argument("--data-dir", type=Path, help="where to write the audit log (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print the two outcomes as JSON instead")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import sys

    return asyncio.run(run_demo(args.data_dir, as_json=args.json, out=sys.stdout))


async def run_demo(data_dir: Path | None, *, as_json: bool = False, out: TextIO) -> int:
    from ..demo import build_demo_agency, refused_request, warranty_request

    directory = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="agency-demo-"))
    audit = WalAuditLog(directory / "audit", "demo")
    agency = await build_demo_agency(Agency(audit=audit))
    try:
        first = await agency.submit(warranty_request())
        second = await agency.submit(refused_request())
    finally:
        await agency.close()
    if as_json:
        out.write(json.dumps([first.model_dump(mode="json"), second.model_dump(mode="json")], indent=2))
        out.write("\n")
    else:
        _tell(out, "1. A governed task", warranty_request().text, first)
        _tell(out, "2. A request no contract allows", refused_request().text, second)
        out.write(
            f"\nAudit log: {audit.location} ({sum(1 for _ in audit.records())} records, "
            "hash-chained, signed checkpoints)\n"
        )
    ok = first.state.value == "completed" and second.state.value == "rejected"
    return 0 if ok else 1


def _tell(out: TextIO, title: str, text: str, o: Outcome) -> None:
    w = out.write
    w(f"\n== {title} ==\nUser: {text}\n")
    if o.goal_id:
        w(f"Goal anchored: {o.goal_id}\n")
    records = {s.name: s for s in o.steps}
    for routed in o.routing:
        name = routed["step"]
        w(f"\n[{name}] route: {routed['explanation']}\n")
        for failure, resolution in zip(o.failures, o.resolutions, strict=False):
            if failure.step != name or failure.type.value == "CAPABILITY_MISMATCH":
                continue
            what = f"{failure.type.value} on {failure.agent} (attempt {failure.attempt})"
            w(f"[{name}] {what}: {failure.detail}\n")
            extra = f" after {resolution.delay_ms:.0f} ms backoff" if resolution.delay_ms else ""
            w(f"[{name}]   -> {resolution.kind.value}{extra}: {resolution.reason}\n")
        step = records.get(name)
        if step is not None and step.status == "completed":
            took = f"{step.attempts} attempt(s), last took {step.duration_ms:.0f} ms"
            w(f"[{name}] done by {step.agent} ({took})\n")
    if o.goal_verdict:
        w(f"\nGoal verification ({o.goal_verdict.goal_id}):\n")
        for v in o.goal_verdict.steps:
            mark = "PASS" if v.passed else "FAIL"
            w(
                f"  [{mark}] {v.step}"
                + (f" (actual: {_short(v.actual)})" if v.actual is not None else "")
                + "\n"
            )
            if not v.passed:
                w(f"         {v.reason}\n")
    if isinstance(o.output, dict) and "reply" in o.output:
        w(f"\nReply: {o.output['reply']}\n")
    verdict = {"completed": "COMPLETED", "rejected": "REJECTED before any agent ran"}.get(
        o.state.value, o.state.value
    )
    w(f"\nTask {o.task_id}: {verdict}; trace {o.trace_id}\n")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
