"""Listing tasks (ListTasks): whose, which, newest first, a page at a time.

A :class:`TaskQuery` names the owner (``client``: a name, or None for everyone's — an admin, or
a gateway without tokens) and its tenant (``tenant``: None for every tenant — a global admin, or
a gateway without tokens), the states, the goal and a creation time range. Stores answer with a
:class:`TaskPage` of :class:`TaskSummary` rows, newest first (ties by task id), and a
``next_page_token`` that continues after the page's last row ("" at the end). A page may hold
fewer rows than asked and still have a token (a store bounds the rows it scans per call): go on
until the token is empty.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from ._model import Model, trusted
from .access import same_name
from .errors import InvalidInput
from .tasks import TaskRecord, TaskState, _a2a_state

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "RUNNING_STATES",
    "STOPPED_STATES",
    "TaskPage",
    "TaskQuery",
    "TaskSummary",
    "live_row",
    "micros",
    "page_token",
    "parse_page_token",
    "summary_of",
]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: Characters of the request text a summary keeps.
TEXT_CHARS = 200
#: States a task stops in (a store holds them as they are): it ended, or waits for an answer or
#: (interrupted) for a resume or a cancel.
STOPPED_STATES = frozenset(
    s for s in TaskState if s.terminal or s in (TaskState.INPUT_REQUIRED, TaskState.INTERRUPTED)
)
#: States of a running task (stored as it was accepted or claimed; live in its events).
RUNNING_STATES = frozenset(TaskState) - STOPPED_STATES


class TaskQuery(Model):
    """Which tasks to list (every criterion given must hold)."""

    client: str | None = Field(default=None, description="Whose tasks; None = everyone's.")
    tenant: str | None = Field(default=None, description="Of which tenant; None = every tenant's.")
    states: list[TaskState] = Field(default_factory=list, description="Any of these; empty = any state.")
    goal_id: str = ""
    created_after: datetime | None = Field(default=None, description="Created at or after (inclusive).")
    created_before: datetime | None = Field(default=None, description="Created before (exclusive).")
    page_size: int = Field(default=DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE)
    page_token: str = ""

    def matches(self, summary: TaskSummary) -> bool:
        """Whether ``summary`` is one of the tasks asked for (owner, states, goal, time)."""
        if self.tenant is not None and summary.tenant != self.tenant:
            return False
        if self.client is not None and not same_name(summary.client, self.client):
            return False
        if self.states and summary.state not in self.states:
            return False
        if self.goal_id and summary.goal_id != self.goal_id:
            return False
        if self.created_after is not None and summary.created_at < self.created_after:
            return False
        return self.created_before is None or summary.created_at < self.created_before


class TaskSummary(Model):
    """One row of a task list: where a task is, not what it produced (``GetTask`` for that)."""

    task_id: str
    state: TaskState
    a2a_state: str = ""
    client: str = ""
    tenant: str = ""
    user_id: str = ""
    goal_id: str = ""
    trace_id: str = ""
    created_at: datetime
    updated_at: datetime
    reason: str = ""
    text: str = Field(default="", description="The request, cut to 200 characters.")


class TaskPage(Model):
    """One page of a task list."""

    tasks: list[TaskSummary] = Field(default_factory=list)
    next_page_token: str = Field(default="", description='Continues after this page; "" = no more.')


def summary_of(record: TaskRecord) -> TaskSummary:
    """The summary of a task as its record says now."""
    text = record.request.text
    return trusted(
        TaskSummary,
        {
            "task_id": record.task_id,
            "state": record.state,
            "a2a_state": _a2a_state(record.state, record.pending),
            "client": record.client,
            "tenant": record.tenant,
            "user_id": record.request.user_id,
            "goal_id": record.goal.id if record.goal is not None else "",
            "trace_id": record.trace_id,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "reason": record.reason,
            "text": text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "\u2026",
        },
    )


def live_row(summary: TaskSummary, state: str) -> TaskSummary:
    """``summary`` in the live ``state`` of its running task ("" or a stop state: as stored)."""
    if not state or summary.state in STOPPED_STATES or state == summary.state.value:
        return summary
    live = TaskState(state)
    return summary.model_copy(update={"state": live, "a2a_state": _a2a_state(live, {})})


def micros(when: datetime) -> int:
    """``when`` as whole microseconds since the epoch (the sort key of a task list)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def page_token(created_us: int, task_id: str) -> str:
    """The token that continues a list after the row (``created_us``, ``task_id``)."""
    return base64.urlsafe_b64encode(f"{created_us}:{task_id}".encode()).decode().rstrip("=")


def parse_page_token(token: str) -> tuple[int, str] | None:
    """``(created_us, task_id)`` of the row a token continues after (None: from the start).

    Raises:
        InvalidInput: naming ``page_token``, when it is not one this gateway gave.
    """
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        created, _, task_id = text.partition(":")
        if not task_id:
            raise ValueError("no task id")
        return int(created), task_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput.single(
            "page_token", "not a token of this list (pass next_page_token as given)", what="task list"
        ) from None


def after_cursor(created_us: int, task_id: str, cursor: tuple[int, str] | None) -> bool:
    """Whether the row (``created_us``, ``task_id``) comes after ``cursor`` (newest first)."""
    if cursor is None:
        return True
    return (created_us, task_id) < cursor


def summary_fields(summary: TaskSummary) -> dict[str, Any]:
    """A summary as JSON-ready data (what a store keeps)."""
    return summary.model_dump(mode="json")
