"""The live view of ``agency task watch``: one line per event of a task, streamed text inline.

Each line is the event's seq, its time (UTC, to the millisecond), the task's state then, and
what happened in words. An agent's token deltas (``agent.progress`` of kind ``token``) are
written as they come, on one line, so a streaming chat model's answer appears as it is written.
``--json`` writes each event as one JSON object per line instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, Any

from ..task_events import OUTCOME, PROGRESS, TaskEvent
from ..task_progress import TOKEN
from ._text import truncate

__all__ = ["EventView", "describe"]


class EventView:
    """Writes a task's events to ``out`` as they come (see the module docstring)."""

    def __init__(self, out: IO[str], *, json_lines: bool = False) -> None:
        self.out = out
        self.json_lines = json_lines
        self._streaming: tuple[str, str] | None = None  # (agent, step) whose text is being written

    def show(self, event: TaskEvent) -> None:
        if self.json_lines:
            self.out.write(event.model_dump_json() + "\n")
            self.out.flush()
            return
        text = _token_text(event)
        if text is not None:
            if self._streaming != (event.agent, event.step):
                self._break()
                self.out.write(f"{_head(event)}{event.agent} writes: ")
                self._streaming = (event.agent, event.step)
            self.out.write(text)
            self.out.flush()
            return
        self._break()
        self.out.write(f"{_head(event)}{describe(event)}\n")
        self.out.flush()

    def end(self) -> None:
        """Close a line of streamed text left open."""
        self._break()

    def _break(self) -> None:
        if self._streaming is not None:
            self.out.write("\n")
            self._streaming = None


def _head(event: TaskEvent) -> str:
    time = event.time[11:23] if len(event.time) >= 23 else event.time
    return f"{event.seq:>4}  {time:<12}  {event.state:<14} "


def _token_text(event: TaskEvent) -> str | None:
    if event.type != PROGRESS or event.outcome != TOKEN:
        return None
    data = event.detail.get("data")
    text = data.get("text") if isinstance(data, dict) else None
    return text if isinstance(text, str) else None


def _step(d: dict[str, Any]) -> str:
    return f"step {d['step']}: " if d.get("step") else ""


def _verdict(e: TaskEvent) -> str:
    d = e.detail
    stage = f"stage {d['stage']}" if d.get("stage") else f"goal {e.detail.get('goal_id') or ''}".strip()
    checks = d.get("steps") or []
    passed = sum(1 for c in checks if isinstance(c, dict) and c.get("passed"))
    return f"{stage}: {e.outcome} ({passed}/{len(checks)} checks)"


def _progress(e: TaskEvent) -> str:
    data = e.detail.get("data")
    shown = json.dumps(data, ensure_ascii=False, default=str) if data is not None else ""
    return f"{e.agent} {e.outcome}: {truncate(shown, 200)}" if shown else f"{e.agent} {e.outcome}"


def _outcome(e: TaskEvent) -> str:
    d = e.detail
    if e.state == "input_required":
        pending = d.get("pending") or {}
        question = pending.get("question") or pending.get("why") or d.get("reason") or "input required"
        options = [str(o.get("id")) for o in pending.get("options") or [] if isinstance(o, dict)]
        offered = f" (options: {', '.join(options)})" if options else ""
        return (
            f"waiting for input: {truncate(str(question), 160)}{offered}; "
            f"answer with: agency task resume {e.task_id} --answer OPTION (or --decision JSON)"
        )
    reason = f": {truncate(str(d.get('reason')), 160)}" if d.get("reason") else ""
    return f"outcome {e.state}{reason}"


_DESCRIBE: dict[str, Callable[[TaskEvent], str]] = {
    "task.submitted": lambda e: f"accepted: {truncate(str(e.detail.get('text', '')), 100)}",
    "message.accepted": lambda e: "request message accepted (SMF)",
    "goal.anchored": lambda e: (
        f"goal {e.detail.get('goal', {}).get('id', '')} anchored" + (f" by {e.agent}" if e.agent else "")
    ),
    "task.transition": lambda e: f"{e.detail.get('from', '')} -> {e.detail.get('to', '')}",
    "routing.decision": lambda e: (
        f"{_step(e.detail)}routed to {e.detail.get('chosen', '')}"
        + (f" (backups: {', '.join(e.detail['fallbacks'])})" if e.detail.get("fallbacks") else "")
    ),
    "routing.refused": lambda e: (
        f"{_step(e.detail)}refused: {truncate(str(e.detail.get('explanation', '')), 160)}"
    ),
    "agent.dispatch": lambda e: (
        f"{_step(e.detail)}dispatched to {e.agent} (attempt {e.detail.get('attempt', 1)})"
    ),
    "agent.result": lambda e: (
        f"{_step(e.detail)}{e.agent} answered in {e.detail.get('duration_ms', 0):.0f} ms"
    ),
    "failure.event": lambda e: (
        f"{_step(e.detail)}failure {e.outcome} on {e.agent or '-'} "
        f"(attempt {e.detail.get('attempt', 1)}): {truncate(str(e.detail.get('detail', '')), 140)}"
    ),
    "failure.resolution": lambda e: (
        f"resolution {e.outcome}"
        + (f" -> {e.detail['agent']}" if e.detail.get("agent") else "")
        + f": {truncate(str(e.detail.get('reason', '')), 140)}"
    ),
    "goal.verification": _verdict,
    "human.handover": lambda e: (
        f"{e.outcome}: waiting for a person"
        + (f" ({truncate(str(e.detail.get('why')), 120)})" if e.detail.get("why") else "")
    ),
    "task.resumed": lambda e: (
        f"resumed: {e.outcome}"
        + (f" by {e.detail['person']}" if e.detail.get("person") else "")
        + (f" ({truncate(str(e.detail.get('reason')), 120)})" if e.detail.get("reason") else "")
    ),
    "task.completed": lambda e: f"stopped: {e.outcome}",
    "task.interrupted": lambda e: f"interrupted: {truncate(str(e.detail.get('reason', '')), 160)}",
    "failure.quarantine": lambda e: f"output of {e.agent} quarantined",
    "agent.circuit": lambda e: (
        f"circuit of {e.agent}: {e.detail.get('from', '')} -> {e.detail.get('to', '')}"
    ),
    "contract.review": lambda e: f"contract {e.agent} {e.outcome} for review",
    PROGRESS: _progress,
    OUTCOME: _outcome,
}


def describe(event: TaskEvent) -> str:
    """What ``event`` says, in a few words."""
    how = _DESCRIBE.get(event.type)
    if how is None:
        return f"{event.type} {event.outcome}".strip()
    try:
        return how(event)
    except (KeyError, TypeError, ValueError, AttributeError):  # an unexpected detail: the raw facts
        return f"{event.type} {event.outcome}".strip()
