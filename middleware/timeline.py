"""The timeline of one task, rebuilt from the audit log.

:func:`build_timelines` groups the audit records of one trace by task and turns
them into :class:`Timeline` objects: who was asked what (with the SMF metadata of
every message), how long each call took, every failure and its resolution, and the
goal verification step by step. :func:`render_text` and :func:`render_html` show
it to people; the HTML page is self-contained (inline CSS, no scripts, no external
assets) and every value from the log is escaped. A task that ran a plan shows it (where it
came from, each step and what it waits for, the branches that ran at the same time) and
each step's span on one time axis, so branches that overlapped are drawn side by side.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .audit.record import AuditEventType, AuditRecord
from .errors import InvalidInput, NotFound, Problem
from .ids import MIN_PREFIX, id_matches, normalise_id

__all__ = [
    "Timeline",
    "TimelineEntry",
    "build_timelines",
    "find_trace",
    "plan_lines",
    "render_html",
    "render_text",
]

E = AuditEventType


@dataclass
class TimelineEntry:
    """One line of a timeline.

    Attributes:
        offset_ms: Time since the task was submitted.
        kind: ``submitted``, ``message``, ``goal``, ``plan`` (proposed, accepted, refused, a step
            skipped), ``route``, ``refused``, ``dispatch``,
            ``agent-step`` (an LLM, tool or runnable call inside a wrapped LangChain agent),
            ``result``, ``failure``, ``resolution``, ``handover``, ``verification``, ``rejected``
            (input refused at the boundary), ``completed`` or ``interrupted`` (the task was cut
            short: a backend error, a cancelled call, a crash).
        status: ``ok``, ``fail`` or ``info`` (how to colour it).
        summary: One human sentence.
        details: Further lines (SMF metadata, inputs, verification steps ...).
    """

    offset_ms: float
    kind: str
    status: str
    summary: str
    step: str = ""
    agent: str = ""
    details: list[str] = field(default_factory=list)


@dataclass
class Timeline:
    """Everything the audit log says about one task."""

    task_id: str
    trace_id: str
    text: str = ""
    user: str = ""
    goal_id: str = ""
    node: str = ""
    state: str = "unfinished"
    reason: str = ""
    duration_ms: float | None = None
    records: int = 0
    entries: list[TimelineEntry] = field(default_factory=list)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    """What the task's model calls spent (``usage.recorded`` records): tokens, cost, per model."""


def find_trace(records: Iterable[tuple[int, AuditRecord]], trace_id: str) -> list[AuditRecord]:
    """The records of ``trace_id`` (a full id, or a unique prefix: see :mod:`middleware.ids`)."""
    wanted = normalise_id(trace_id)
    if not wanted:
        raise InvalidInput([Problem("trace_id", "give the trace id (or its first 8+ characters)")])
    found: dict[str, list[AuditRecord]] = {}
    for _, record in records:
        if id_matches(record.trace_id, wanted):
            found.setdefault(record.trace_id, []).append(record)
    if not found:
        short = f" (a prefix needs at least {MIN_PREFIX} characters)" if len(wanted) < MIN_PREFIX else ""
        raise NotFound(f"no audit record has trace id {trace_id!r}{short}")
    if len(found) > 1:
        raise InvalidInput(
            [Problem("trace_id", f"prefix {trace_id!r} matches {len(found)} traces: {sorted(found)[:5]}")]
        )
    return next(iter(found.values()))


def build_timelines(records: Iterable[AuditRecord]) -> list[Timeline]:
    """One :class:`Timeline` per task among ``records`` (in order of first appearance)."""
    by_task: dict[str, list[AuditRecord]] = {}
    for record in records:
        by_task.setdefault(record.task_id or "(no task)", []).append(record)
    return [_timeline(task_id, recs) for task_id, recs in by_task.items()]


def _timeline(task_id: str, records: list[AuditRecord]) -> Timeline:
    first = records[0]
    t = Timeline(
        task_id=task_id,
        trace_id=first.trace_id,
        user=first.actors.user,
        goal_id=next((r.goal_id for r in records if r.goal_id), ""),  # an intake agent anchors it later
        node=first.node,
        records=len(records),
    )
    start = first.time
    last_failure_step = ""
    for r in records:
        d = r.detail
        at = _ms(start, r.time)
        step = str(d.get("step", "")) if isinstance(d.get("step"), str) else ""
        add = t.entries.append
        if r.event_type == E.TASK_SUBMITTED:
            t.text = str(d.get("text", ""))
            add(TimelineEntry(at, "submitted", "info", f"submitted by {r.actors.user or '-'}: {t.text}"))
        elif r.event_type == E.MESSAGE_ACCEPTED:
            msg = _as_dict(d.get("message"))
            add(
                TimelineEntry(
                    at,
                    "message",
                    "ok",
                    f"SMF message from {msg.get('sender', '?')} accepted",
                    details=_smf(msg),
                )
            )
        elif r.event_type == E.MESSAGE_REJECTED:
            add(
                TimelineEntry(
                    at,
                    "rejected",
                    "fail",
                    f"input refused ({d.get('what', 'message')})",
                    details=[str(p) for p in d.get("problems", [])],
                )
            )
        elif r.event_type == E.GOAL_ANCHORED:
            goal = _as_dict(d.get("goal"))
            checks = [_as_dict(c) for c in goal.get("verification_steps") or []]
            add(
                TimelineEntry(
                    at,
                    "goal",
                    "info",
                    f"goal {goal.get('id', r.goal_id)} anchored ({len(checks)} verification steps, "
                    f"timeout {goal.get('timeout_seconds', '?')} s, criticality "
                    f"{goal.get('criticality', '?')})",
                    details=[str(c.get("description") or c.get("kind", "")) for c in checks],
                )
            )
        elif r.event_type in (E.PLAN_PROPOSED, E.PLAN_ACCEPTED, E.PLAN_REFUSED, E.PLAN_SKIPPED):
            add(_plan_entry(at, r, t))
        elif r.event_type in (E.ROUTING_DECISION, E.ROUTING_REFUSED):
            refused = r.event_type == E.ROUTING_REFUSED
            cands = ", ".join(
                f"{c.get('agent')} ({c.get('score')})" for c in d.get("candidates", []) if isinstance(c, dict)
            )
            add(
                TimelineEntry(
                    at,
                    "refused" if refused else "route",
                    "fail" if refused else "ok",
                    str(d.get("explanation", "")),
                    step=step,
                    agent=r.actors.agent,
                    details=[f"candidates: {cands}"] if cands else [],
                )
            )
        elif r.event_type == E.DISPATCH:
            msg = _as_dict(d.get("message"))
            add(
                TimelineEntry(
                    at,
                    "dispatch",
                    "info",
                    f"dispatch to {r.actors.agent}, attempt {d.get('attempt', 1)}, "
                    f"deadline {d.get('deadline_ms', '?')} ms",
                    step=step,
                    agent=r.actors.agent,
                    details=[f"input: {_short(msg.get('content'))}", *_smf(msg)],
                )
            )
        elif r.event_type == E.AGENT_RESULT:
            msg = _as_dict(d.get("message"))
            ms = d.get("duration_ms")
            info = t.steps.setdefault(step, {"agent": "", "attempts": 0, "duration_ms": 0.0})
            info.update(agent=r.actors.agent, duration_ms=ms, status="completed", end_ms=at)
            add(
                TimelineEntry(
                    at,
                    "result",
                    "ok",
                    f"{r.actors.agent} answered in {_num(ms)} ms",
                    step=step,
                    agent=r.actors.agent,
                    details=[f"output: {_short(msg.get('content'))}", *_smf(msg)],
                )
            )
        elif r.event_type == E.FAILURE:
            last_failure_step = step
            add(
                TimelineEntry(
                    at,
                    "failure",
                    "fail",
                    f"{r.outcome} on {r.actors.agent or 'the task'} (attempt {d.get('attempt', 1)}): "
                    f"{d.get('detail', '')}",
                    step=step,
                    agent=r.actors.agent,
                )
            )
        elif r.event_type == E.RESOLUTION:
            delay = d.get("delay_ms") or 0
            wait = f" after {_num(delay)} ms" if delay else ""
            add(
                TimelineEntry(
                    at,
                    "resolution",
                    "info",
                    f"resolution {r.outcome}{wait}: {d.get('reason', '')}",
                    step=last_failure_step,
                    agent=str(d.get("agent", "")),
                )
            )
        elif r.event_type == E.HUMAN_HANDOVER:
            add(TimelineEntry(at, "handover", "info", "handed over to a human", details=[_short(d, 300)]))
        elif r.event_type == E.VERIFICATION:
            checks = [_as_dict(c) for c in d.get("steps") or []]
            add(
                TimelineEntry(
                    at,
                    "verification",
                    "ok" if r.outcome == "passed" else "fail",
                    f"goal {d.get('goal_id', r.goal_id)} {r.outcome.upper()} "
                    f"({sum(1 for c in checks if c.get('passed'))}/{len(checks)} checks)",
                    details=[
                        ("PASS " if c.get("passed") else "FAIL ")
                        + str(c.get("step", ""))
                        + (f" (actual: {_short(c.get('actual'))})" if c.get("actual") is not None else "")
                        + (f": {c.get('reason')}" if c.get("reason") else "")
                        for c in checks
                    ],
                )
            )
        elif r.event_type == E.AGENT_STEP:
            add(_agent_step(at, r, step))
        elif r.event_type == E.USAGE:
            _add_usage(t.usage, d)
            add(
                TimelineEntry(
                    at,
                    "usage",
                    "info",
                    f"{d.get('model', '-')}: {d.get('input_tokens', 0)} in / "
                    f"{d.get('output_tokens', 0)} out, {d.get('cost', 0)} {d.get('currency', '')}"
                    + (" (unpriced)" if r.outcome == "unpriced" else ""),
                    step=step,
                    agent=r.actors.agent,
                )
            )
        elif r.event_type in (E.BUDGET_ALERT, E.BUDGET_EXCEEDED):
            stopped = r.event_type == E.BUDGET_EXCEEDED
            add(
                TimelineEntry(
                    at,
                    "budget",
                    "fail" if stopped else "info",
                    (f"stopped ({r.outcome}): {d.get('why', '')}" if stopped else f"alert at {r.outcome}: ")
                    + ("" if stopped else f"{d.get('budget', '')} used {d.get('used', '')}"),
                    step=step,
                    agent=r.actors.agent,
                    details=[
                        f"spent {d.get('spent')} {d.get('currency', '')}, {d.get('spent_tokens')} tokens"
                    ],
                )
            )
        elif r.event_type == E.TASK_INTERRUPTED:
            t.state, t.reason, t.duration_ms = "interrupted", str(d.get("reason", "")), at
            add(TimelineEntry(at, "interrupted", "fail", "task interrupted" + _suffix(t.reason)))
        elif r.event_type == E.TASK_COMPLETED:
            t.state, t.reason, t.duration_ms = r.outcome, str(d.get("reason", "")), at
            ok = r.outcome == "completed"
            add(
                TimelineEntry(
                    at, "completed", "ok" if ok else "fail", f"task {r.outcome}" + _suffix(t.reason)
                )
            )
        if r.event_type == E.DISPATCH:
            info = t.steps.setdefault(step, {"agent": "", "attempts": 0, "duration_ms": None})
            info["attempts"] += 1
            info["agent"] = r.actors.agent
            info.setdefault("status", "running")
            info.setdefault("start_ms", at)
        elif r.event_type == E.FAILURE and step in t.steps:
            t.steps[step]["status"] = "failed"
            t.steps[step]["end_ms"] = at
        elif r.event_type == E.PLAN_SKIPPED and step:
            t.steps.setdefault(step, {"agent": "", "attempts": 0, "duration_ms": None})["status"] = "skipped"
    return t


def _plan_entry(at: float, r: AuditRecord, t: Timeline) -> TimelineEntry:
    """A ``plan.*`` record; the plan it accepts (or refuses) is kept for drawing."""
    d = r.detail
    if r.event_type == E.PLAN_SKIPPED:
        return TimelineEntry(
            at,
            "plan",
            "fail",
            f"step {d.get('step', '')} skipped (the plan goes on without it): {d.get('reason', '')}",
            step=str(d.get("step", "")),
            details=[str(d["failure"])] if d.get("failure") else [],
        )
    if r.event_type == E.PLAN_PROPOSED:
        proposal = _as_dict(d.get("plan"))
        steps = [_as_dict(s).get("name", "?") for s in proposal.get("steps") or [] if isinstance(s, dict)]
        what = (
            f"{len(steps)} steps: {', '.join(map(str, steps))}"
            if steps
            else d.get("question") or d.get("reason", "no plan")
        )
        return TimelineEntry(at, "plan", "info", f"planner {d.get('planner', '?')} proposed {what}")
    steps = [_as_dict(s) for s in d.get("steps") or []]
    if r.event_type == E.PLAN_REFUSED:
        problems = [str(p) for p in d.get("problems") or []]
        t.plan = {**t.plan, "status": "refused", "problems": problems}
        if steps:
            t.plan.update(steps=steps, source=str(d.get("source", t.plan.get("source", ""))))
        return TimelineEntry(at, "plan", "fail", f"plan refused ({len(problems)} problems)", details=problems)
    t.plan = {
        "source": str(d.get("source", "")),
        "status": "accepted",
        "steps": steps,
        "branches": [list(map(str, b)) for b in d.get("branches") or [] if isinstance(b, list)],
    }
    return TimelineEntry(
        at,
        "plan",
        "ok",
        f"plan accepted ({t.plan['source'] or '?'}): {len(steps)} steps",
        details=plan_lines(t.plan),
    )


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """Each step and what it waits for; steps that may run at the same time marked as such."""
    lines = []
    together = {n: [o for o in group if o != n] for group in plan.get("branches") or [] for n in group}
    for s in plan.get("steps") or []:
        name, after = str(s.get("name", "?")), [str(a) for a in s.get("after") or []]
        text = f"{name} ◄ {', '.join(after)}" if after else name
        if len(after) > 1:
            text += "  (waits for all)"
        if together.get(name):
            text += f"  ║ parallel with {', '.join(together[name])}"
        if s.get("on_failure") == "continue":
            text += "  (may be skipped)"
        lines.append(text)
    return lines


def _bar(start: Any, end: Any, total: float, width: int = 24) -> str:
    """``|   ████     |``: a step's span on the task's time axis."""
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or total <= 0:
        return ""
    a = min(width - 1, int(start / total * width))
    b = max(a + 1, min(width, round(end / total * width)))
    return "|" + " " * a + "█" * (b - a) + " " * (width - b) + "|"


def _add_usage(total: dict[str, Any], d: dict[str, Any]) -> None:
    inp, out = int(d.get("input_tokens") or 0), int(d.get("output_tokens") or 0)
    cost = float(d.get("cost") or 0)
    total["input_tokens"] = total.get("input_tokens", 0) + inp
    total["output_tokens"] = total.get("output_tokens", 0) + out
    total["cost"] = round(total.get("cost", 0.0) + cost, 6)
    total["currency"] = d.get("currency", "")
    model = total.setdefault("by_model", {}).setdefault(str(d.get("model", "-")), [0, 0, 0.0])
    model[0], model[1], model[2] = model[0] + inp, model[1] + out, round(model[2] + cost, 6)


_STEP_DETAILS = ("model", "token_usage", "tool_calls", "input_preview", "output_preview", "error")


def _agent_step(at: float, r: AuditRecord, step: str) -> TimelineEntry:
    """An ``agent.step`` record (one LLM, tool or runnable call of a wrapped agent)."""
    d = r.detail
    kind, name = str(d.get("kind", "step")), str(d.get("name", ""))
    where = f" (attempt {d['attempt']})" if isinstance(d.get("attempt"), int) and d["attempt"] > 1 else ""
    return TimelineEntry(
        at,
        "agent-step",
        "ok" if r.outcome == "success" else "fail",
        f"{r.actors.agent or 'agent'}: {kind} {name} {r.outcome} in {_num(d.get('duration_ms'))} ms{where}",
        step=step,
        agent=r.actors.agent,
        details=[f"{key}: {_short(d[key])}" for key in _STEP_DETAILS if d.get(key) not in (None, "", [], {})],
    )


def render_text(timeline: Timeline) -> str:
    """The timeline as plain text, one event per line (details indented)."""
    lines = [
        f"Task {timeline.task_id}  trace {timeline.trace_id}",
        f"  user {timeline.user or '-'}  goal {timeline.goal_id or '-'}  node {timeline.node}",
        f"  state {timeline.state}"
        + (f" after {_num(timeline.duration_ms)} ms" if timeline.duration_ms is not None else "")
        + f"  ({timeline.records} audit records)",
        "",
    ]
    for e in timeline.entries:
        where = f"[{e.step}] " if e.step else ""
        mark = {"ok": " ", "fail": "!", "info": " "}[e.status]
        lines.append(f"{mark}{_num(e.offset_ms):>10} ms  {e.kind:<12} {where}{e.summary}")
        lines.extend(f"{'':>27}{d}" for d in e.details)
    if timeline.plan:
        plan = timeline.plan
        lines += ["", f"Plan ({plan.get('source') or '?'}, {plan.get('status', '')}):"]
        lines.extend(f"  {line}" for line in plan_lines(plan))
        lines.extend(f"  ! {p}" for p in plan.get("problems") or [])
    if timeline.usage:
        u = timeline.usage
        lines += [
            "",
            f"Usage: {u['input_tokens']} input + {u['output_tokens']} output tokens, "
            f"{u['cost']:g} {u['currency']}",
        ]
        lines.extend(
            f"  {model:<32} {i} in / {o} out  {c:g} {u['currency']}"
            for model, (i, o, c) in u["by_model"].items()
        )
    if timeline.steps:
        lines += ["", "Steps:"]
        total = timeline.duration_ms or max(
            (s["end_ms"] for s in timeline.steps.values() if isinstance(s.get("end_ms"), (int, float))),
            default=0.0,
        )
        for name, s in timeline.steps.items():
            start, end = s.get("start_ms"), s.get("end_ms")
            span = f"  {_num(start)} → {_num(end)} ms {_bar(start, end, total)}" if start is not None else ""
            lines.append(
                f"  {name or 'main':<16} {s.get('agent', ''):<32} attempts {s.get('attempts', 0)}  "
                f"last call {_num(s.get('duration_ms'))} ms{span}  {s.get('status', '')}"
            )
    return "\n".join(lines) + "\n"


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1d2330;background:#fafbfc}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:2em} .meta{color:#555}
table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #e3e6ea;padding:.35em .6em;vertical-align:top;text-align:left}
th{background:#eef1f5} td.t{white-space:nowrap;text-align:right;font-variant-numeric:tabular-nums}
tr.fail td{background:#fff1f0} tr.ok td.k{color:#1a7f37} tr.fail td.k{color:#cf222e;font-weight:600}
ul{margin:.2em 0 0 1em;padding:0;color:#444;font-size:.92em} code{font-size:.92em}
.state{display:inline-block;padding:.1em .5em;border-radius:.3em;background:#ddf4e4}
.state.bad{background:#ffe0de}
"""


def render_html(timelines: list[Timeline], *, title: str = "") -> str:
    """A self-contained HTML page showing ``timelines`` (every value escaped)."""
    e = html.escape
    trace = timelines[0].trace_id if timelines else ""
    body: list[str] = [f"<h1>Trace {e(trace)}</h1>"]
    for t in timelines:
        bad = "" if t.state == "completed" else " bad"
        body.append(f"<h2>Task {e(t.task_id)}</h2>")
        body.append(
            f'<p class="meta">user {e(t.user or "-")} · goal {e(t.goal_id or "-")} · node {e(t.node)} · '
            f'<span class="state{bad}">{e(t.state)}</span>'
            + (f" after {e(_num(t.duration_ms))} ms" if t.duration_ms is not None else "")
            + f" · {t.records} audit records</p>"
        )
        if t.text:
            body.append(f"<p><b>Request:</b> {e(t.text)}</p>")
        if t.plan:
            source, status = str(t.plan.get("source") or "?"), str(t.plan.get("status", ""))
            body.append(
                f"<p><b>Plan</b> ({e(source)}, {e(status)}):</p><ul>"
                + "".join(f"<li><code>{e(line)}</code></li>" for line in plan_lines(t.plan))
                + "".join(f"<li>{e(str(p))}</li>" for p in t.plan.get("problems") or [])
                + "</ul>"
            )
        body.append("<table><tr><th>+ms</th><th>event</th><th>step</th><th>what happened</th></tr>")
        for x in t.entries:
            details = "".join(f"<li>{e(d)}</li>" for d in x.details)
            body.append(
                f'<tr class="{e(x.status)}"><td class="t">{e(_num(x.offset_ms))}</td>'
                f'<td class="k">{e(x.kind)}</td><td>{e(x.step)}</td>'
                f"<td>{e(x.summary)}{f'<ul>{details}</ul>' if details else ''}</td></tr>"
            )
        body.append("</table>")
        if t.steps:
            body.append("<h2>Steps</h2><table><tr><th>step</th><th>agent</th><th>attempts</th>")
            body.append("<th>last call ms</th><th>status</th></tr>")
            for name, s in t.steps.items():
                body.append(
                    f"<tr><td>{e(name or 'main')}</td><td>{e(str(s.get('agent', '')))}</td>"
                    f"<td>{e(str(s.get('attempts', 0)))}</td><td>{e(_num(s.get('duration_ms')))}</td>"
                    f"<td>{e(str(s.get('status', '')))}</td></tr>"
                )
            body.append("</table>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title or f'Agency trace {trace}')}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _smf(msg: Any) -> list[str]:
    if not isinstance(msg, dict):
        return []
    meta = _as_dict(msg.get("metadata"))
    prov = _as_dict(meta.get("provenance"))
    intent = ", ".join(str(i) for i in meta.get("intention_trace") or []) or "-"
    return [
        f"smf: {msg.get('sender', '?')} -> {msg.get('receiver', '?')}; provenance {prov.get('source', '?')} "
        f"(reliability {prov.get('reliability_score', '?')}); "
        f"confidence {meta.get('confidence_score', '?')}; "
        f"freshness {meta.get('freshness_ttl', '?')} s; intention {intent}"
    ]


def _ms(start: datetime, at: datetime) -> float:
    return round((at - start).total_seconds() * 1000, 3)


def _num(value: Any) -> str:
    if isinstance(value, (int, float)):
        return f"{value:.1f}"
    return "-"


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _suffix(reason: str) -> str:
    return f": {reason}" if reason else ""
