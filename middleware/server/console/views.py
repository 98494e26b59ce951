"""What the console pages show, computed from the core: task bars, contract figures, audit state.

Pure functions over audit records, task outcomes and the catalog (no web imports), so the
pages stay thin and these are tested on their own.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...audit.record import AuditEventType, AuditRecord
from ...smf import utcnow

if TYPE_CHECKING:
    from ...pipeline import Agency

__all__ = ["Bar", "audit_state", "contract_rows", "task_bars", "waited"]

E = AuditEventType


@dataclass
class Bar:
    """One bar of a task's timeline: a dispatch attempt, an LLM or tool call, a wait."""

    label: str
    lane: str
    start_ms: float
    end_ms: float
    status: str  # ok | fail | info | wait
    detail: str = ""
    depth: int = 0


@dataclass
class Bars:
    bars: list[Bar] = field(default_factory=list)
    total_ms: float = 1.0
    lanes: list[str] = field(default_factory=list)


def _ms(t0: datetime, at: datetime) -> float:
    return max(0.0, (at - t0).total_seconds() * 1000)


def task_bars(records: list[AuditRecord]) -> Bars:
    """Bars per step attempt (dispatch → answer or failure), per LangChain ``agent.step`` (LLM,
    tool calls), and per wait for a person (stopped → resumed), on one time axis."""
    out = Bars()
    if not records:
        return out
    t0 = records[0].time
    open_attempts: dict[str, tuple[float, str, int]] = {}
    waiting_since: float | None = None
    for r in records:
        at = _ms(t0, r.time)
        d = r.detail
        step = str(d.get("step", ""))
        if r.event_type == E.DISPATCH:
            open_attempts[step] = (at, r.actors.agent, int(d.get("attempt", 1) or 1))
        elif r.event_type in (E.AGENT_RESULT, E.FAILURE) and step in open_attempts:
            start, agent, attempt = open_attempts.pop(step)
            ok = r.event_type == E.AGENT_RESULT
            out.bars.append(
                Bar(
                    f"{step} · {agent} · attempt {attempt}",
                    f"step {step}",
                    start,
                    at,
                    "ok" if ok else "fail",
                    "answered" if ok else f"{r.outcome}: {d.get('detail', '')}",
                )
            )
        elif r.event_type == E.AGENT_STEP:
            duration = float(d.get("duration_ms") or 0.0)
            kind = str(d.get("kind", "step"))
            out.bars.append(
                Bar(
                    f"{kind}: {d.get('name', '')}",
                    f"step {step}",
                    max(0.0, at - duration),
                    at,
                    "fail" if r.outcome not in ("ok", "success", "completed") else "info",
                    str(d.get("prompt_preview") or d.get("input_preview") or ""),
                    depth=1 if d.get("parent_run_id") else 0,
                )
            )
        elif r.event_type == E.TASK_COMPLETED and r.outcome == "input_required":
            waiting_since = at
        elif r.event_type == E.TASK_RESUMED and waiting_since is not None:
            who = d.get("person") or (d.get("decision") or {}).get("by") or ""
            label = f"waiting for a person ({who})" if who else "waiting for a person"
            out.bars.append(Bar(label, "people", waiting_since, at, "wait", str(d.get("reason", ""))))
            waiting_since = None
    end = _ms(t0, records[-1].time)
    if waiting_since is not None:
        now = _ms(t0, utcnow())
        out.bars.append(Bar("waiting for a person", "people", waiting_since, now, "wait", "still waiting"))
        end = max(end, now)
    out.total_ms = max(end, max((b.end_ms for b in out.bars), default=0.0), 1.0)
    for b in out.bars:
        if b.lane not in out.lanes:
            out.lanes.append(b.lane)
    return out


def waited(since: datetime, now: datetime | None = None) -> str:
    """``3 min``, ``2 h 05 min``: how long something has waited."""
    seconds = int(((now or utcnow()) - since).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60:02d} min"
    return f"{hours // 24} d {hours % 24} h"


async def contract_rows(agency: Agency, *, tenant: str = "") -> list[dict[str, Any]]:
    """Per contract of ``tenant`` (and those shared with it): failure rates by type (the
    monitor's window), review flags (> 15 %), circuit state, and the SLO against the observed
    latency (answers in the audit log)."""
    latencies: dict[str, list[float]] = {}
    flags: dict[str, dict[str, Any]] = {}
    for _, r in agency.audit.records():
        if r.event_type == E.AGENT_RESULT and r.detail.get("duration_ms") is not None:
            latencies.setdefault(r.actors.agent, []).append(float(r.detail["duration_ms"]))
        elif r.event_type == E.CONTRACT_REVIEW:
            key = f"{r.actors.agent}|{r.detail.get('failure_type', '')}"
            flags[key] = {**r.detail, "outcome": r.outcome, "at": r.time}
    rows = []
    for entry in await agency.catalog.all():
        if not entry.contract.routable_for(tenant):
            continue
        c = entry.contract
        tasks, by_type = agency.monitor.figures(c.key)
        seen = sorted(latencies.get(c.key, []))
        p50 = statistics.median(seen) if seen else None
        p95 = seen[min(len(seen) - 1, int(len(seen) * 0.95))] if seen else None
        review = [f for k, f in flags.items() if k.startswith(f"{c.key}|") and f["outcome"] == "flagged"]
        rows.append(
            {
                "key": c.key,
                "can_do": ", ".join(c.can_do),
                "tasks": tasks,
                "rates": {t.value: (n, n / tasks if tasks else 0.0) for t, n in sorted(by_type.items()) if n},
                "flags": review,
                "circuit": agency.breaker.state(c.key).value,
                "slo_ms": c.slo_latency_ms,
                "p50_ms": p50,
                "p95_ms": p95,
                "samples": len(seen),
                "over_slo": p95 is not None and p95 > c.slo_latency_ms,
            }
        )
    return rows


def audit_state(agency: Agency) -> dict[str, Any]:
    """The latest signed checkpoint (size, root, age) and the log's size."""
    log = agency.audit
    latest = getattr(log, "latest_checkpoint", None)
    checkpoint = latest() if callable(latest) else None
    size = getattr(log, "size", None)
    records = size if isinstance(size, int) else None
    age = None
    at = None
    if checkpoint is not None:
        for index, r in log.records():  # the record the checkpoint covers last: its time
            if index == checkpoint.size - 1:
                at = r.time
                break
        age = waited(at) if at is not None else None
    return {
        "records": records,
        "checkpoint": checkpoint,
        "checkpoint_root": checkpoint.root.hex() if checkpoint is not None else "",
        "checkpoint_age": age,
        "behind": (records - checkpoint.size) if checkpoint is not None and records is not None else None,
    }
