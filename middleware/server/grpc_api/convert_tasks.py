"""Conversions of the long-task messages (WatchTask, ListTasks), both ways (``convert.py``'s twin).

The server sends the core's :class:`~middleware.task_events.TaskEvent` and
:class:`~middleware.task_listing.TaskSummary`; the public client turns them back into the same
models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..._proto.agency.v1 import agency_pb2
from ...errors import InvalidInput, Problem
from ...task_events import TaskEvent
from ...task_listing import DEFAULT_PAGE_SIZE, TaskPage, TaskQuery, TaskSummary
from .convert import dumps, loads, outcome_from_pb, outcome_to_pb

__all__ = [
    "event_from_pb",
    "event_to_pb",
    "page_from_pb",
    "page_to_pb",
    "query_from_pb",
    "query_to_pb",
]


def event_to_pb(event: TaskEvent) -> agency_pb2.TaskEvent:
    return agency_pb2.TaskEvent(
        seq=event.seq,
        id=event.id,
        type=event.type,
        time=event.time,
        task_id=event.task_id,
        trace_id=event.trace_id,
        state=event.state,
        step=event.step,
        agent=event.agent,
        outcome=event.outcome,
        rule=event.rule,
        detail_json=dumps(event.detail),
        audit_index=event.audit_index,
        node=event.node,
        final=outcome_to_pb(event.final) if event.final is not None else None,
    )


def event_from_pb(pb: agency_pb2.TaskEvent) -> TaskEvent:
    return TaskEvent(
        seq=pb.seq,
        id=pb.id,
        type=pb.type,
        time=pb.time,
        task_id=pb.task_id,
        trace_id=pb.trace_id,
        state=pb.state,
        step=pb.step,
        agent=pb.agent,
        outcome=pb.outcome,
        rule=pb.rule,
        detail=loads(pb.detail_json, "detail_json", default={}, want=dict),
        audit_index=pb.audit_index,
        node=pb.node,
        final=outcome_from_pb(pb.final) if pb.HasField("final") else None,
    )


def _time(text: str, field: str) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput.single(field, f"{text!r} is not an RFC 3339 time", what="task list") from None
    if when.tzinfo is None:
        raise InvalidInput.single(field, "must carry a time zone (Z or +hh:mm)", what="task list")
    return when


def query_from_pb(pb: agency_pb2.ListTasksRequest) -> TaskQuery:
    """The query of a ListTasks request; every bad field named at once."""
    problems: list[Problem] = []
    times: dict[str, datetime | None] = {}
    for field in ("created_after", "created_before"):
        try:
            times[field] = _time(getattr(pb, field), field)
        except InvalidInput as exc:
            problems.extend(exc.problems)
    data: dict[str, Any] = {
        "client": pb.client or None,
        "states": list(pb.states),
        "goal_id": pb.goal_id,
        "page_size": pb.page_size or DEFAULT_PAGE_SIZE,
        "page_token": pb.page_token,
        **times,
    }
    try:
        query = TaskQuery.parse(data, what="task list")
    except InvalidInput as exc:
        problems.extend(exc.problems)
    if problems:
        raise InvalidInput(problems, what="task list")
    return query


def query_to_pb(query: TaskQuery) -> agency_pb2.ListTasksRequest:
    return agency_pb2.ListTasksRequest(
        states=[s.value for s in query.states],
        goal_id=query.goal_id,
        created_after=query.created_after.isoformat() if query.created_after else "",
        created_before=query.created_before.isoformat() if query.created_before else "",
        page_size=query.page_size,
        page_token=query.page_token,
        client=query.client or "",
    )


def _summary_to_pb(s: TaskSummary) -> agency_pb2.TaskSummary:
    return agency_pb2.TaskSummary(
        task_id=s.task_id,
        state=s.state.value,
        a2a_state=s.a2a_state,
        client=s.client,
        tenant=s.tenant,
        user_id=s.user_id,
        goal_id=s.goal_id,
        trace_id=s.trace_id,
        created_at=s.created_at.isoformat(),
        updated_at=s.updated_at.isoformat(),
        reason=s.reason,
        text=s.text,
    )


def page_to_pb(page: TaskPage) -> agency_pb2.ListTasksResponse:
    return agency_pb2.ListTasksResponse(
        tasks=[_summary_to_pb(s) for s in page.tasks], next_page_token=page.next_page_token
    )


def page_from_pb(pb: agency_pb2.ListTasksResponse) -> TaskPage:
    return TaskPage(
        tasks=[
            TaskSummary(
                task_id=s.task_id,
                state=s.state,
                a2a_state=s.a2a_state,
                client=s.client,
                tenant=s.tenant,
                user_id=s.user_id,
                goal_id=s.goal_id,
                trace_id=s.trace_id,
                created_at=s.created_at,
                updated_at=s.updated_at,
                reason=s.reason,
                text=s.text,
            )
            for s in pb.tasks
        ],
        next_page_token=pb.next_page_token,
    )
