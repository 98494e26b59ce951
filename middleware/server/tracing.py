"""OpenTelemetry tracing: one trace per task, with the audit log's trace id.

Optional: install ``agency-middleware[otel]`` (the current span's context is read by
:mod:`middleware.trace_context`, re-exported here). Without it every helper here is a
no-op (``current_trace_id()`` returns ``""``) and :class:`Tracing` refuses to start.

How a task becomes one trace:

* The gRPC server interceptor (``middleware.server.grpc_api.tracing``) continues the
  caller's W3C ``traceparent`` (gRPC metadata) or starts a new trace.
* **Trace id rule.** A task's trace id is the ``trace_id`` its client set, if any;
  otherwise the gateway adopts the OTel trace id of the incoming call (the caller's
  ``traceparent``, or the trace the gateway started). So the audit log's
  ``trace_id`` and the OTel trace id are the same 32-hex value. A client-set
  ``trace_id`` that is not 32 hex digits cannot be an OTel id: the task span then
  has its own trace id and carries the client's value as ``agency.trace_id``.
* :class:`TracingAuditLog` derives spans from the audit stream, like the metrics
  do: a ``agency.task`` span from ``task.submitted`` to ``task.completed`` (every
  audit record an event on it), and one ``agency.dispatch`` child span per agent
  call, ended by the result or the failure.
* :class:`~middleware.agents.AgentRequest` carries the ``traceparent`` of the task
  span, so a remote worker that receives the request (however it is transported)
  continues the same trace with :meth:`Tracing.agent_span`.
* Over gRPC, :class:`~middleware.server.remote_agent.RemoteAgent` sends that ``traceparent``
  (and the task's ``tracestate``, if any) as ``AgentWorker.Invoke`` metadata
  (:func:`trace_metadata`), with or without OTel in the gateway; the worker hands it to
  the agent unchanged, or, with tracing on, opens its agent span as a child of it and
  hands the agent that span's ``traceparent`` (same trace id).
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..audit.log import AuditLog
from ..audit.record import AuditEventType, AuditRecord, PlainRecord, record_view
from ..errors import FailedPrecondition
from ..trace_context import (
    PROPAGATOR as _PROPAGATOR,
)
from ..trace_context import (
    current_trace_id,
    current_traceparent,
    extract,
    inject,
    otel_available,
    otel_context,
    otel_trace,
)
from .genai_spans import agent_attributes, step_span_spec

if TYPE_CHECKING:
    from ..agents import AgentRequest

__all__ = [
    "TRACE_HEADERS",
    "Tracing",
    "TracingAuditLog",
    "current_trace_id",
    "current_traceparent",
    "extract",
    "inject",
    "otel_available",
    "trace_metadata",
]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
E = AuditEventType

TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace context headers, as gRPC metadata keys."""


def trace_metadata(traceparent: str) -> tuple[tuple[str, str], ...]:
    """gRPC metadata that continues ``traceparent`` in the callee.

    ``traceparent`` travels as given (no OTel needed). The current context's
    ``tracestate`` is added when the current span *is* that parent, so vendor state
    is never paired with another span's id. A value that is not printable ASCII
    cannot be a W3C header (nor gRPC metadata) and is not sent.
    """
    if not traceparent or not (traceparent.isascii() and traceparent.isprintable()):
        return ()
    headers = [("traceparent", traceparent)]
    if _PROPAGATOR is not None:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier)
        if carrier.get("traceparent") == traceparent and carrier.get("tracestate"):
            headers.append(("tracestate", carrier["tracestate"]))
    return tuple(headers)


def _parent_for_trace(trace_id: str) -> Any:
    """A context whose (remote, synthetic) parent has ``trace_id``, so a child joins that trace."""
    assert otel_trace is not None
    span_context = otel_trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=secrets.randbits(64) or 1,
        is_remote=True,
        trace_flags=otel_trace.TraceFlags(otel_trace.TraceFlags.SAMPLED),
    )
    return otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(span_context))


class Tracing:
    """The tracer of one process, and the pieces that use it.

    Args:
        tracer_provider: An OTel ``TracerProvider`` (default: the global one).

    Raises:
        FailedPrecondition: the ``otel`` extra is not installed.
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        if otel_trace is None:
            raise FailedPrecondition("tracing needs OpenTelemetry: pip install 'agency-middleware[otel]'")
        self.tracer = otel_trace.get_tracer("agency-middleware", tracer_provider=tracer_provider)
        self.provider: Any = None

    @classmethod
    def with_exporter(cls, exporter: str, *, service_name: str = "agency-gateway") -> Tracing:
        """A tracer with its own SDK provider exporting to ``console`` or ``otlp``.

        ``otlp`` needs ``opentelemetry-exporter-otlp-proto-grpc`` and reads the standard
        ``OTEL_EXPORTER_OTLP_*`` settings itself.
        """
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        except ImportError:
            raise FailedPrecondition(
                "tracing needs the OpenTelemetry SDK: pip install 'agency-middleware[otel]'"
            ) from None
        if exporter == "console":
            span_exporter: Any = ConsoleSpanExporter(out=sys.stdout)
        elif exporter == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
            except ImportError:
                raise FailedPrecondition(
                    "--tracing otlp needs: pip install opentelemetry-exporter-otlp-proto-grpc"
                ) from None
            span_exporter = OTLPSpanExporter()
        else:
            raise FailedPrecondition(f"unknown trace exporter {exporter!r} (console | otlp)")
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
        tracing = cls(provider)
        tracing.provider = provider
        return tracing

    def shutdown(self) -> None:
        """Flush and stop the provider made by :meth:`with_exporter` (no-op otherwise)."""
        provider = getattr(self, "provider", None)
        if provider is not None:
            provider.shutdown()

    def audit_log(self, inner: AuditLog) -> TracingAuditLog:
        """Wrap ``inner`` so the audit stream also produces task and dispatch spans."""
        return TracingAuditLog(inner, self)

    @contextlib.contextmanager
    def agent_span(self, request: AgentRequest, name: str = "", *, tracestate: str = "") -> Iterator[Any]:
        """A span for handling ``request`` in a (remote) worker, in the task's trace.

        The parent is the request's ``traceparent`` (with ``tracestate``, the vendor
        state that came with it); without one, the span still joins the task's trace
        through ``request.message.trace_id`` when that is a 32-hex id.
        """
        assert otel_trace is not None
        parent = None
        if request.traceparent:
            carrier = {"traceparent": request.traceparent}
            if tracestate:
                carrier["tracestate"] = tracestate
            parent = extract(carrier)
        elif _HEX32.match(request.message.trace_id or ""):
            parent = _parent_for_trace(request.message.trace_id)
        with self.tracer.start_as_current_span(
            name or f"agency.agent {request.contract.key}",
            context=parent,
            kind=otel_trace.SpanKind.CONSUMER,
            attributes={
                "agency.task_id": request.task_id,
                "agency.step": request.step,
                "agency.agent": request.contract.key,
                "agency.attempt": request.attempt,
            },
        ) as span:
            yield span

    @staticmethod
    def set_error(span: Any, description: str) -> None:
        """Mark ``span`` as failed (e.g. with the failure type an agent came back with)."""
        assert otel_trace is not None
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, description))


class TracingAuditLog:
    """An :class:`AuditLog` that turns the audit stream of each task into spans.

    Spans start and end at the audit records' own times, so a trace and the audit
    log tell the same story. At most ``max_open`` tasks are tracked at once (the
    oldest is ended if a task never completes).
    """

    def __init__(self, inner: AuditLog, tracing: Tracing, *, max_open: int = 10_000) -> None:
        self.inner = inner
        self._tracer = tracing.tracer
        self._tasks: dict[str, tuple[Any, Any]] = {}  # task_id -> (span, context token)
        self._dispatch: dict[str, Any] = {}  # task_id -> open dispatch span
        self._max_open = max_open

    @property
    def location(self) -> str:
        return self.inner.location

    async def append(self, record: AuditRecord) -> int:
        index = await self.inner.append(record)
        try:
            self._observe(record)
        except Exception:  # tracing must never break governance
            import logging

            logging.getLogger("agency.tracing").exception("tracing failed for %s", record.event_type)
        return index

    def on_task_record(self, record: PlainRecord) -> None:
        """A task's record was recorded (not yet durable: it reaches the log at the task's next
        barrier). ``task.submitted`` starts the task's span here, in the task's context, so
        whatever the task does before its first barrier (routing, remote hops) runs under it."""
        if record["event_type"] != E.TASK_SUBMITTED or not record["task_id"]:
            return
        try:
            view = record_view(record)
            self._start_task(view, int(view.time.timestamp() * 1e9))
        except Exception:  # tracing must never break governance
            import logging

            logging.getLogger("agency.tracing").exception("tracing failed for %s", record["event_type"])

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        indexes = await self.inner.append_batch(records)
        for record in records:
            try:
                self._observe(record_view(record))
            except Exception:  # tracing must never break governance
                import logging

                logging.getLogger("agency.tracing").exception("tracing failed for a batch record")
        return indexes

    def _observe(self, record: AuditRecord) -> None:
        assert otel_trace is not None and otel_context is not None
        kind, task = record.event_type, record.task_id
        at = int(record.time.timestamp() * 1e9)
        if kind == E.TASK_SUBMITTED and task and task not in self._tasks:  # else: on_task_record did
            self._start_task(record, at)
        entry = self._tasks.get(task)
        if entry is None:
            return
        span = entry[0]
        span.add_event(
            kind,
            {"outcome": record.outcome, "agent": record.actors.agent, "audit.event_id": record.event_id},
            timestamp=at,
        )
        if kind == E.DISPATCH:
            self._end_dispatch(task, at)
            d = record.detail
            self._dispatch[task] = self._tracer.start_span(
                f"agency.dispatch {record.actors.agent}",
                context=otel_trace.set_span_in_context(span),
                kind=otel_trace.SpanKind.CLIENT,
                start_time=at,
                attributes={
                    "agency.agent": record.actors.agent,
                    "agency.step": str(d.get("step", "")),
                    "agency.attempt": int(d.get("attempt", 1)),
                    "agency.deadline_ms": float(d.get("deadline_ms", 0) or 0),
                    **agent_attributes(record.actors.agent),
                },
            )
        elif kind == E.AGENT_RESULT:
            self._end_dispatch(task, at)
        elif kind == E.AGENT_STEP:
            self._step_span(record, at, self._dispatch.get(task) or span)
        elif kind == E.FAILURE:
            self._end_dispatch(task, at, error=f"{record.outcome}: {record.detail.get('detail', '')}")
        elif kind == E.TASK_COMPLETED:
            self._end_dispatch(task, at)
            span.set_attribute("agency.state", record.outcome)
            if record.outcome != "completed":
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, record.outcome))
            span.end(end_time=at)
            _, token = self._tasks.pop(task)
            with contextlib.suppress(Exception):
                otel_context.detach(token)

    def _step_span(self, record: AuditRecord, at: int, parent: Any) -> None:
        """A LangChain model or tool call of a wrapped agent, with the GenAI conventions."""
        assert otel_trace is not None
        spec = step_span_spec(record.detail)
        if spec is None:
            return
        name, attributes = spec
        duration = float(record.detail.get("duration_ms", 0) or 0)
        span = self._tracer.start_span(
            name,
            context=otel_trace.set_span_in_context(parent),
            kind=otel_trace.SpanKind.CLIENT,
            start_time=at - int(duration * 1e6),
            attributes={**attributes, "agency.agent": record.actors.agent, "audit.event_id": record.event_id},
        )
        if record.outcome not in ("success", ""):
            error = record.detail.get("error") or {}
            span.set_attribute("error.type", str(error.get("type") or record.outcome))
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, str(error.get("message") or "")))
        span.end(end_time=at)

    def _start_task(self, record: AuditRecord, at: int) -> None:
        assert otel_trace is not None and otel_context is not None
        current = otel_trace.get_current_span()
        links = []
        if current.get_span_context().is_valid and current_trace_id() == record.trace_id:
            parent = None  # child of the current (server) span: same trace already
        elif _HEX32.match(record.trace_id):
            parent = _parent_for_trace(record.trace_id)
            if current.get_span_context().is_valid:
                links.append(otel_trace.Link(current.get_span_context()))
        else:
            parent = otel_context.Context()  # a new trace; the audit id is an attribute
        span = self._tracer.start_span(
            "agency.task",
            context=parent,
            links=links,
            start_time=at,
            attributes={
                "agency.task_id": record.task_id,
                "agency.trace_id": record.trace_id,
                "agency.goal_id": record.goal_id,
                "agency.user": record.actors.user,
                "agency.node": record.node,
            },
        )
        # The rest of the task (and the AgentRequests it creates) runs under the task span.
        token = otel_context.attach(otel_trace.set_span_in_context(span))
        self._tasks[record.task_id] = (span, token)
        while len(self._tasks) > self._max_open:
            oldest = next(iter(self._tasks))
            self._end_dispatch(oldest, at)
            self._tasks.pop(oldest)[0].end(end_time=at)

    def _end_dispatch(self, task: str, at: int, *, error: str = "") -> None:
        assert otel_trace is not None
        span = self._dispatch.pop(task, None)
        if span is None:
            return
        if error:
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, error))
        span.end(end_time=at)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return self.inner.records()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def close(self) -> None:
        await self.inner.close()
