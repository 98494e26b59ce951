"""A task's events as A2A status updates: what ``SendStreamingMessage`` and ``SubscribeToTask``
stream (the same events gRPC ``WatchTask`` streams, see :mod:`middleware.task_events`).

=======================================  ===============================================================
task event                               A2A
=======================================  ===============================================================
``task.transition`` to a working state   ``working`` status update; metadata ``agency_state`` (the new
                                         state), ``from``, ``node`` and ``agency_event``
``agent.progress``                       ``working`` status update with an agent message: a text part
                                         (a token delta) or a data part ``{kind, data}``
every other event (routing, dispatch,    carried in the metadata ``agency_events`` of the next status
answers, failures, resolutions,          update (the final one included): ``{seq, id, type, time,
verdicts, waits, decisions)              state, step, agent, outcome}`` each
``task.outcome``                         the final status update (input-required, completed with its
                                         artifact, failed, rejected, canceled)
=======================================  ===============================================================
"""

from __future__ import annotations

from typing import Any

from a2a.helpers import new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Role, TaskState, TaskStatus, TaskStatusUpdateEvent
from google.protobuf.struct_pb2 import Struct  # type: ignore[import-untyped]

from ...smf import new_id
from ...task_events import PROGRESS, TaskEvent
from ...task_progress import TOKEN
from ...tasks import TaskState as AgencyState

__all__ = ["StatusStream", "event_summary"]

#: The task states a working update tells (waits and ends are told by the final update).
_WORKING = frozenset(
    {AgencyState.ROUTING, AgencyState.DISPATCHED, AgencyState.RETRYING, AgencyState.VERIFYING}
)


def event_summary(event: TaskEvent) -> dict[str, Any]:
    """What an A2A client is told of one event (the detail is left out: ``WatchTask`` has it)."""
    return {
        "seq": event.seq,
        "id": event.id,
        "type": event.type,
        "time": event.time,
        "state": event.state,
        "step": event.step,
        "agent": event.agent,
        "outcome": event.outcome,
    }


class StatusStream:
    """Turns one task's events into A2A status updates (see the module docstring)."""

    def __init__(self, task_id: str, context_id: str) -> None:
        self.task_id, self.context_id = task_id, context_id
        self._carried: list[dict[str, Any]] = []

    def update(self, event: TaskEvent) -> TaskStatusUpdateEvent | None:
        """The status update ``event`` makes now (None: carried by the next one)."""
        if event.type == "task.transition" and event.state in _WORKING:
            meta = {
                "agency_state": event.state,
                "from": str(event.detail.get("from", "")),
                "node": event.node,
                "agency_event": event_summary(event),
            }
            return self._working(meta)
        if event.type == PROGRESS:
            data = event.detail.get("data")
            text = data.get("text") if event.outcome == TOKEN and isinstance(data, dict) else None
            part = (
                new_text_part(text)
                if isinstance(text, str)
                else new_data_part({"kind": event.outcome, "data": data})
            )
            message = Message(
                role=Role.ROLE_AGENT,
                task_id=self.task_id,
                context_id=self.context_id,
                message_id=new_id("msg"),
                parts=[part],
            )
            meta = {"agency_state": event.state, "agency_event": event_summary(event)}
            return self._working(meta, message)
        self._carried.append(event_summary(event))
        return None

    def carried(self) -> list[dict[str, Any]]:
        """The events carried since the last update (for the final one); then none."""
        carried, self._carried = self._carried, []
        return carried

    def _working(self, meta: dict[str, Any], message: Message | None = None) -> TaskStatusUpdateEvent:
        if self._carried:
            meta["agency_events"] = self.carried()
        metadata = Struct()
        metadata.update(meta)
        status = TaskStatus(state=TaskState.TASK_STATE_WORKING)
        if message is not None:
            status.message.CopyFrom(message)
        status.timestamp.GetCurrentTime()
        return TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, status=status, metadata=metadata
        )
