"""``agency.v1.AgencyService``: submit tasks, dry-run routing, resume waiting or interrupted tasks,
read tasks, cancel waiting or interrupted tasks, follow and list tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import grpc

from ..._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from ...access import current_caller, current_principal
from ...caller_limits import CallerLimits, StreamCounter
from ...errors import InvalidInput
from ...pipeline import Agency
from ..tracing import current_trace_id
from .convert import decision_to_pb, loads, outcome_to_pb, task_from_pb
from .convert_tasks import event_to_pb, page_to_pb, query_from_pb
from .status import rpc, rpc_stream


class AgencyServicer(agency_pb2_grpc.AgencyServiceServicer):
    """Args: ``limits``: WatchTask streams one caller may hold (``watch_streams``, as Watch)."""

    def __init__(self, agency: Agency, *, limits: CallerLimits | None = None) -> None:
        self._agency = agency
        self._streams = StreamCounter((limits or CallerLimits()).watch_streams)

    @rpc
    async def Submit(
        self, request: agency_pb2.SubmitRequest, context: grpc.aio.ServicerContext
    ) -> agency_pb2.Outcome:
        try:
            task = task_from_pb(request)
        except InvalidInput as exc:
            await self._agency.record_rejection(exc)
            raise
        if not task["trace_id"]:  # adopt the call's OTel trace id (see middleware.server.tracing)
            task["trace_id"] = current_trace_id()
        outcome = await self._agency.submit(
            task, client=current_caller(), wait=not request.return_immediately
        )
        return outcome_to_pb(outcome)

    @rpc
    async def Route(
        self, request: agency_pb2.RouteRequest, context: grpc.aio.ServicerContext
    ) -> agency_pb2.RoutingDecision:
        try:  # a refused dry run is audited like a refused task (message.rejected)
            constraints = loads(request.constraints_json, "constraints_json", default={}, want=dict)
            decision = await self._agency.route(request.text, constraints)
        except InvalidInput as exc:
            await self._agency.record_rejection(exc)
            raise
        return decision_to_pb(decision)

    @rpc
    async def Resume(
        self, request: agency_pb2.ResumeRequest, context: grpc.aio.ServicerContext
    ) -> agency_pb2.Outcome:
        try:
            decision = loads(request.decision_json, "decision_json", want=dict)
            given = loads(request.input_json, "input_json", want=dict)
        except InvalidInput as exc:  # the task's own refusals are audited by Agency.resume
            await self._agency.record_rejection(exc)
            raise
        outcome = await self._agency.resume(
            request.task_id,
            answer=request.answer or None,
            decision=decision,
            input=given,
            caller=current_principal(),
        )
        return outcome_to_pb(outcome)

    @rpc
    async def GetTask(
        self, request: agency_pb2.GetTaskRequest, context: grpc.aio.ServicerContext
    ) -> agency_pb2.Outcome:
        return outcome_to_pb(await self._agency.get_task(request.task_id, caller=current_principal()))

    @rpc
    async def Cancel(
        self, request: agency_pb2.CancelRequest, context: grpc.aio.ServicerContext
    ) -> agency_pb2.Outcome:
        outcome = await self._agency.cancel(
            request.task_id, reason=request.reason, caller=current_principal()
        )
        return outcome_to_pb(outcome)

    @rpc_stream
    async def WatchTask(
        self, request: agency_pb2.WatchTaskRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agency_pb2.TaskEvent]:
        # the stream reads the task's stored events at its own pace: a slow reader holds a
        # cursor, not a backlog; one caller holds a bounded number of streams
        with self._stream():
            events = self._agency.watch(request.task_id, after=request.after_seq, caller=current_principal())
            async for event in events:
                yield event_to_pb(event)

    @rpc
    async def ListTasks(
        self, request: agency_pb2.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> agency_pb2.ListTasksResponse:
        page = await self._agency.list_tasks(query_from_pb(request), caller=current_principal())
        return page_to_pb(page)

    @contextmanager
    def _stream(self) -> Iterator[None]:
        principal = current_principal()
        if principal is None:  # tokens off: no caller to count for
            yield
            return
        with self._streams.holding(principal.name):
            yield
