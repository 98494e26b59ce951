"""The live view of ``agency task watch``: one line per event of a task, streamed text inline.

Each line is the event's seq, its time (UTC, to the millisecond), the task's state then, and
what happened in words. An agent's token deltas (``agent.progress`` of kind ``token``) are
written as they come, on one line, so a streaming chat model's answer appears as it is written.
``--json`` writes each event as one JSON object per line instead.
"""

from __future__ import annotations

from typing import IO

from ..task_events import OUTCOME, PROGRESS, TaskEvent, describe
from ..task_progress import TOKEN

__all__ = ["EventView"]


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
        said = describe(event)
        if event.type == OUTCOME and event.state == "input_required":
            said += f"; answer with: agency task resume {event.task_id} --answer OPTION (or --decision JSON)"
        elif event.type == OUTCOME and event.state == "interrupted":
            said += f"; agency task resume {event.task_id}, or agency task cancel {event.task_id}"
        self.out.write(f"{_head(event)}{said}\n")
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
