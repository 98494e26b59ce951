"""An agent's progress while it works, forwarded to its task's event stream (``agent.progress``).

An agent behind a contract with ``stream_progress`` reports as it goes::

    from middleware import emit_progress

    emit_progress("token", {"text": delta})      # or "progress", "tool_call" … any kind

The dispatcher opens a :class:`TaskProgress` around each call of such an agent and makes it the
current one (a context variable: it reaches the agent's callbacks, the LangChain adapter's token
handler and the sub-agents the messaging runtime runs for it without being passed down). Outside
such a call — another contract, a remote worker, after the call returned — ``emit_progress``
does nothing.

Progress is never audited and never slows the agent: ``emit`` puts the event in a buffer and
returns; one drain task stores what the buffer holds as one batch, so while a slow store (Redis)
is busy the next tokens gather and consecutive token deltas of one agent become one event. An
attempt stores at most ``limit`` events; those beyond are counted and told in one last
``dropped`` event. When the call returns, :meth:`TaskProgress.close` waits until everything is
stored: the task's next record comes after every progress event of the call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .task_events import TaskEvent, progress_event

__all__ = ["DEFAULT_PROGRESS_LIMIT", "TOKEN", "TaskProgress", "current_progress", "emit_progress"]

log = logging.getLogger("agency.progress")

#: The kind of a text delta (a streaming chat model's token): consecutive ones are merged.
TOKEN = "token"
#: Progress events one agent call stores at most.
DEFAULT_PROGRESS_LIMIT = 1000

Publish = Callable[[list[TaskEvent]], Awaitable[None]]

_CURRENT: contextvars.ContextVar[TaskProgress | None] = contextvars.ContextVar(
    "agency_task_progress", default=None
)


def current_progress() -> TaskProgress | None:
    """The progress of the agent call running in this context (None outside one)."""
    return _CURRENT.get()


def emit_progress(kind: str, data: Any = None) -> None:
    """Report progress of the agent call running here to its task's event stream.

    ``kind`` names it (``token`` for a text delta: ``data`` ``{"text": ...}``; ``progress``,
    ``tool_call``, ``subagent`` …); ``data`` must be JSON. A no-op outside the call of an agent
    whose contract has ``stream_progress``. Safe from the agent's worker thread.
    """
    progress = _CURRENT.get()
    if progress is not None:
        progress.emit(kind, data)


class TaskProgress:
    """The progress of one agent call (one attempt of one step).

    Args:
        publish: Stores a batch of events in the task's stream (after the task's records so
            far are durable: the caller's business).
        task_id, trace_id, step, agent, node: What each event carries.
        limit: Events this call stores at most.
    """

    def __init__(
        self,
        publish: Publish,
        *,
        task_id: str,
        trace_id: str,
        step: str,
        agent: str,
        node: str,
        limit: int = DEFAULT_PROGRESS_LIMIT,
    ) -> None:
        self._publish = publish
        self._ids = {"task_id": task_id, "trace_id": trace_id, "step": step, "agent": agent, "node": node}
        self._limit = limit
        self._buffer: list[tuple[str, str, Any]] = []  # (agent, kind, data)
        self._taken = 0  # events accepted (stored or in the buffer)
        self._dropped = 0
        self._open = True
        self._drain: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def emit(self, kind: str, data: Any = None) -> None:
        """Buffer one event; it is stored soon after, in order (see the module docstring)."""
        if threading.get_ident() != self._thread:  # the agent's worker thread
            self._loop.call_soon_threadsafe(self._put, self._ids["agent"], kind, data)
        else:
            self._put(self._ids["agent"], kind, data)

    def _put(self, agent: str, kind: str, data: Any) -> None:
        if not self._open or self._error is not None:
            return
        if self._taken >= self._limit:
            self._dropped += 1
            return
        self._taken += 1
        self._buffer.append((agent, str(kind), data))
        if self._drain is None or self._drain.done():
            self._drain = self._loop.create_task(self._run(), name=f"progress:{self._ids['task_id']}")

    def stop(self) -> None:
        """Take no more events (the call returned); what is buffered is still stored."""
        self._open = False

    async def close(self) -> None:
        """Stop, wait until every buffered event is stored, then tell what was dropped.

        Raises:
            Exception: storing failed (the task's records or its events could not be written).
        """
        self._open = False
        if self._drain is not None:
            await asyncio.shield(self._drain)
        if self._error is None and self._dropped:
            dropped = {"dropped": self._dropped, "limit": self._limit}
            await self._store([self._event(self._ids["agent"], "dropped", dropped)])
        if self._error is not None:
            raise self._error

    async def _run(self) -> None:
        while self._buffer and self._error is None:
            items, self._buffer = self._buffer, []
            await self._store(_merged([self._event(agent, kind, data) for agent, kind, data in items]))

    async def _store(self, events: list[TaskEvent]) -> None:
        try:
            await self._publish(events)
        except Exception as exc:  # told by close(): the call's caller decides
            log.warning("task %s: progress not stored: %s", self._ids["task_id"], exc)
            self._error = exc

    def _event(self, agent: str, kind: str, data: Any) -> TaskEvent:
        ids = self._ids
        return progress_event(
            task_id=ids["task_id"],
            trace_id=ids["trace_id"],
            state="dispatched",
            step=ids["step"],
            agent=agent,
            kind=kind,
            data=data,
            node=ids["node"],
        )


def _merged(events: list[TaskEvent]) -> list[TaskEvent]:
    """Consecutive token deltas of one agent as one event (their texts joined)."""
    out: list[TaskEvent] = []
    for event in events:
        last = out[-1] if out else None
        if (
            last is not None
            and event.outcome == TOKEN
            and last.outcome == TOKEN
            and last.agent == event.agent
            and _text(last) is not None
            and _text(event) is not None
        ):
            last.detail["data"] = {"text": f"{_text(last)}{_text(event)}"}
            continue
        out.append(event)
    return out


def _text(event: TaskEvent) -> str | None:
    data = event.detail.get("data")
    text = data.get("text") if isinstance(data, dict) and len(data) == 1 else None
    return text if isinstance(text, str) else None


def activate(progress: TaskProgress) -> contextvars.Token[TaskProgress | None]:
    """Make ``progress`` the current one (the dispatcher, around an agent call)."""
    return _CURRENT.set(progress)


def deactivate(token: contextvars.Token[TaskProgress | None]) -> None:
    _CURRENT.reset(token)
