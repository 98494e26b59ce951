"""Trace context: the W3C ``traceparent`` of the current OpenTelemetry span, read by the core.

An :class:`~middleware.agents.AgentRequest` carries the ``traceparent`` of the task span so an
agent (in process or remote) continues the task's trace. Reading it needs only the optional
``otel`` extra (opentelemetry-api); without it every helper here is a no-op. Spans are made by
the server (:mod:`middleware.server.tracing`), never by the core.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PROPAGATOR",
    "current_trace_id",
    "current_traceparent",
    "extract",
    "inject",
    "otel_available",
    "otel_context",
    "otel_trace",
]

try:  # the optional extra
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    PROPAGATOR: Any = TraceContextTextMapPropagator()
    """The W3C trace context propagator, or ``None`` without the ``otel`` extra."""
except ImportError:  # pragma: no cover - exercised only without the extra
    otel_trace = None  # type: ignore[assignment]
    otel_context = None  # type: ignore[assignment]
    PROPAGATOR = None


def otel_available() -> bool:
    """Whether the ``otel`` extra (opentelemetry-api) is installed."""
    return otel_trace is not None


def current_trace_id() -> str:
    """The 32-hex trace id of the current span, or ``""`` (no span, or no OTel)."""
    if otel_trace is None:
        return ""
    ctx = otel_trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else ""


def current_traceparent() -> str:
    """The W3C ``traceparent`` of the current span, or ``""``."""
    if PROPAGATOR is None:
        return ""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", "")


def inject(carrier: dict[str, str]) -> None:
    """Write the current context's ``traceparent`` (and ``tracestate``) into ``carrier``."""
    if PROPAGATOR is not None:
        PROPAGATOR.inject(carrier)


def extract(carrier: dict[str, str]) -> Any:
    """The OTel context a ``traceparent`` carrier describes (empty context if none)."""
    return PROPAGATOR.extract(carrier) if PROPAGATOR is not None else None
