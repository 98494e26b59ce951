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
from ...people.model import Escalation, Person
from ...smf import utcnow

if TYPE_CHECKING:
    from ...pipeline import Agency
    from ...tasks import TaskRecord

__all__ = [
    "Bar",
    "Layout",
    "Rights",
    "audit_state",
    "contract_rows",
    "decision_rights",
    "duration",
    "escalation_view",
    "task_bars",
    "timeline_layout",
    "waited",
]

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


def duration(ms: float) -> str:
    """``12 ms``, ``3.2 s``, ``4 min 05 s``, ``2 h 05 min``: a span for people."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    hours = int(seconds // 3600)
    if hours < 48:
        return f"{hours} h {int(seconds % 3600 // 60):02d} min"
    return f"{hours // 24} d {hours % 24} h"


@dataclass
class Placed:
    """A bar where it is drawn (``x``, ``w`` in the timeline's units)."""

    bar: Bar
    x: float
    w: float
    took: str


@dataclass
class Layout:
    """A timeline laid out on an axis that may be broken: a wait for a person much longer than
    the agents' work is drawn at a fixed width with a break mark, so agent bars are not slivers
    beside it. ``breaks`` are (x, w, label) of the compressed spans, ``ticks`` (x, label)."""

    rows: list[Placed] = field(default_factory=list)
    width: float = 900.0
    breaks: list[tuple[float, float, str]] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)


def timeline_layout(
    bars: Bars,
    *,
    width: float = 900.0,
    min_width: float = 6.0,
    wait_width: float = 110.0,
    share: float = 0.25,
) -> Layout:
    """Where each bar goes: time maps linearly to x, except that each wait for a person longer
    than ``share`` of the task's time is drawn ``wait_width`` wide (a broken axis, marked);
    every bar is at least ``min_width`` wide."""
    total = max(bars.total_ms, 1.0)
    spans: list[tuple[float, float]] = []
    for b in sorted((b for b in bars.bars if b.status == "wait"), key=lambda b: b.start_ms):
        if b.end_ms - b.start_ms <= share * total:
            continue
        if spans and b.start_ms <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], b.end_ms))
        else:
            spans.append((b.start_ms, b.end_ms))
    wait_width = min(wait_width, width * 0.5 / max(len(spans), 1))
    hidden = sum(end - start for start, end in spans)
    scale = (width - wait_width * len(spans)) / max(total - hidden, 1e-9)

    def x(t: float) -> float:
        pos, last = 0.0, 0.0
        for start, end in spans:
            if t <= start:
                break
            pos += (start - last) * scale
            if t < end:
                return pos + (t - start) / (end - start) * wait_width
            pos += wait_width
            last = end
        return pos + (t - last) * scale

    layout = Layout(width=width)
    for b in bars.bars:
        left, right = x(b.start_ms), x(b.end_ms)
        w = max(right - left, min_width)
        left = min(left, width - w)
        layout.rows.append(Placed(b, left, w, duration(b.end_ms - b.start_ms)))
    ticks = [(0.0, "0")]
    for start, end in spans:
        layout.breaks.append((x(start), wait_width, f"waited {duration(end - start)}"))
        ticks += [(x(start), f"+{duration(start)}"), (x(end), f"+{duration(end)}")]
    end_tick = (width, duration(total))
    for tick in ticks:  # labels at least 70 apart, the end always
        if tick[0] - (layout.ticks[-1][0] if layout.ticks else -100.0) >= 70 and end_tick[0] - tick[0] >= 70:
            layout.ticks.append(tick)
    layout.ticks.append(end_tick)
    return layout


@dataclass
class Rights:
    """Whether a person may decide an escalation, and if not, why (shown instead of the form)."""

    may: bool
    why: str = ""


def decision_rights(esc: Escalation, person: Person) -> Rights:
    """What the desk and the approval gate would say to ``person`` deciding ``esc`` (the same
    rules: the roles it needs, being routed it, separation of duties), so the page never offers
    a form that can only be refused."""
    if esc.status != "open":
        return Rights(False, f"already {esc.status}" + (f" by {esc.decided_by}" if esc.decided_by else ""))
    roles = ", ".join(r.value for r in esc.deciders)
    may = person.has(*esc.deciders) or (
        esc.kind != "approval" and not esc.held_message and person.name in esc.assignees
    )
    if not may:
        return Rights(
            False,
            f"deciding it needs one of the roles {roles}; yours: {', '.join(r.value for r in person.roles)}",
        )
    submitters = {s for s in (esc.client, esc.user_id) if s and s != "anonymous"}
    if esc.kind == "approval" and person.name in submitters:
        return Rights(
            False,
            f"you submitted this task: another person with the role {roles} approves it "
            "(separation of duties)",
        )
    return Rights(True)


def _same_sentence(a: str, b: str) -> bool:
    """Whether ``b`` says nothing ``a`` does not (equal, or contained, ignoring case and spaces)."""
    na, nb = " ".join(a.casefold().split()), " ".join(b.casefold().split())
    return bool(nb) and (nb in na or na in nb)


def _sentences(*said: tuple[str, str]) -> list[tuple[str, str]]:
    """``said`` (label, sentence) without blanks and without a sentence another one already says."""
    out: list[tuple[str, str]] = []
    for label, sentence in said:
        if sentence and not any(_same_sentence(kept, sentence) for _, kept in out):
            out.append((label, sentence))
    return out


#: What each handover decision does, in the words of the decision form.
HANDOVER_CHOICES = {
    "retry": "Retry: route the step again",
    "provide_output": "Provide the output: you give the step's answer (verified like an agent's)",
    "approve": "Approve: the step's output stands as it is",
    "abort": "Abort: the task fails",
    "cancel": "Cancel: the task is canceled",
}


def handover_choices(pending: dict[str, Any]) -> list[tuple[str, str]]:
    """The handover decisions this form offers, each with what it does: never one the task would
    refuse (``approve`` needs an output of the blocked step to vouch for; ``use_agent`` is an
    API decision naming an agent)."""
    blocked = str((pending.get("blocking_point") or {}).get("step") or "")
    outputs = (pending.get("state") or {}).get("outputs") or {}
    return [
        (d, HANDOVER_CHOICES.get(d, d.replace("_", " ")))
        for d in pending.get("decisions") or []
        if d != "use_agent" and not (d == "approve" and blocked not in outputs)
    ]


def _new_evidence(plan: dict[str, Any] | None, pending: dict[str, Any], *, shown_outputs: bool) -> list[Any]:
    """The plan's evidence the page does not show already: not the conflicting values (their own
    table), not the steps' outputs (shown as "Outputs so far")."""
    if not plan:
        return []
    values = (pending.get("conflict") or {}).get("values") or []
    seen = {
        (str(v.get("source")), str(v.get("step")), repr(v.get("value")))
        for v in values
        if isinstance(v, dict)
    }
    return [
        e
        for e in plan.get("evidence") or []
        if (str(e.get("source")), str(e.get("step")), repr(e.get("value"))) not in seen
        and not (shown_outputs and str(e.get("label", "")).startswith("output of step "))
    ]


def escalation_view(esc: Escalation, person: Person, task: TaskRecord | None) -> dict[str, Any]:
    """What the escalation page shows, once each: a title, what happened (each sentence once),
    the facts (step, agent, failure, attempts), the request and who submitted it, the outputs so
    far, the suggested reply in the user's language (the plan's when there is one), and whether
    this person may decide."""
    p = esc.pending
    blocking = p.get("blocking_point") or {}
    failure = p.get("failure") or {}
    state = p.get("state") or {}
    plan = p.get("plan") or None
    request = task.request if task is not None else None
    title = str(p.get("question") or "")
    happened: list[tuple[str, str]] = []
    facts: list[tuple[str, str]] = []
    if esc.kind == "human_handover":
        kind = str(blocking.get("failure_type") or esc.failure_type)
        where = f" at step {blocking.get('step')}" if blocking.get("step") else ""
        title = f"{kind.replace('_', ' ').capitalize()}{where}"
        happened = _sentences(
            ("What happened", str(failure.get("detail") or "")),
            ("Why it came to a person", str(blocking.get("detail") or "")),
            ("Why it came to a person", esc.summary),
        )
        facts = [
            ("Step", str(blocking.get("step") or "—")),
            ("Agent", str(blocking.get("agent") or "no agent ran")),
            ("Failure", kind),
            ("Attempts", str(blocking.get("attempts") or 1)),
        ]
    elif esc.kind == "approval":
        happened = _sentences(("Why it needs an approval", str(p.get("why") or "")))
        facts = [
            ("Step", str(p.get("step") or "—")),
            ("Agent", str(p.get("agent") or "—")),
            ("Approvers", "role " + (", ".join(map(str, p.get("roles") or [])) or "—")),
        ]
    elif esc.kind in ("clarification", "conflict"):
        happened = _sentences(
            ("", esc.summary if not title else ""), ("What happened", str(failure.get("detail") or ""))
        )
        conflict = p.get("conflict") or {}
        if conflict.get("fact"):
            facts = [("Fact", str(conflict["fact"])), ("In the answer at", str(conflict.get("path") or "—"))]
    else:
        title = title or esc.summary
    submitted = [
        f"{who} {name}"
        for who, name in (("client", esc.client), ("user", esc.user_id))
        if name and name != "anonymous"
    ]
    return {
        "title": title or esc.summary or esc.kind.replace("_", " "),
        "happened": [(k, s) for k, s in happened if not _same_sentence(s, title)] if title else happened,
        "facts": facts,
        "request": (request.text if request is not None else str(state.get("text") or "")),
        "submitted_by": ", ".join(submitted) or "an anonymous client",
        "input": request.input if request is not None and esc.kind != "approval" else None,
        "outputs": dict(state.get("outputs") or {}) or (dict(task.outputs) if task is not None else {}),
        "reply": (plan or {}).get("suggested_reply") or p.get("suggested_reply") or "",
        "plan": plan,
        "evidence": _new_evidence(plan, p, shown_outputs=esc.kind != "quarantine"),
        "choices": handover_choices(p) if esc.kind == "human_handover" else [],
        "rights": decision_rights(esc, person),
    }


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
