"""W3C trace context over gRPC metadata: server and client interceptors.

The server interceptor continues the caller's ``traceparent`` (or starts a trace)
with one SERVER span per call; the client interceptor opens a CLIENT span and
sends its ``traceparent``. See :mod:`middleware.server.tracing` for how a task's trace id
and the audit log's agree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from ..tracing import Tracing, extract, inject

__all__ = ["TracingClientInterceptor", "TracingServerInterceptor"]


def _split(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


class TracingServerInterceptor(grpc.aio.ServerInterceptor):
    """One SERVER span per unary call, child of the caller's ``traceparent`` if sent."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracer = tracing.tracer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not handler.unary_unary:
            return handler
        from opentelemetry import trace

        method = handler_call_details.method or ""
        if method.startswith("/grpc.health.v1.Health/"):
            return handler  # probes every few seconds are noise
        carrier = {k: v for k, v in handler_call_details.invocation_metadata or () if isinstance(v, str)}
        inner = handler.unary_unary
        tracer = self._tracer

        async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with tracer.start_as_current_span(
                method.lstrip("/"),
                context=extract(carrier),
                kind=trace.SpanKind.SERVER,
                attributes=_split(method),
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    return await inner(request, context)
                except BaseException:
                    code = context.code() if hasattr(context, "code") else None
                    name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
                    span.set_attribute("rpc.grpc.status_code", name)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, name))
                    raise

        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class TracingClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):
    """A CLIENT span per unary call; its ``traceparent`` travels in the call's metadata."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracer = tracing.tracer

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        from opentelemetry import trace

        method = client_call_details.method
        method = method.decode() if isinstance(method, bytes) else str(method)
        with self._tracer.start_as_current_span(
            method.lstrip("/"), kind=trace.SpanKind.CLIENT, attributes=_split(method)
        ) as span:
            carrier: dict[str, str] = {}
            inject(carrier)
            metadata = grpc.aio.Metadata(*tuple(client_call_details.metadata or ()), *carrier.items())
            details = grpc.aio.ClientCallDetails(
                client_call_details.method,
                client_call_details.timeout,
                metadata,
                client_call_details.credentials,
                client_call_details.wait_for_ready,
            )
            call = await continuation(details, request)
            code = await call.code()
            span.set_attribute("rpc.grpc.status_code", code.name)
            if code is not grpc.StatusCode.OK:
                span.set_status(trace.Status(trace.StatusCode.ERROR, code.name))
            return call
