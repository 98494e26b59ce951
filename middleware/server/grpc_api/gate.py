"""Fail fast while a required backend is down.

``BackendGate`` is a server interceptor: while its ``BackendMonitor`` says the
backends are unhealthy, every call except health checks and reflection is refused
at once with UNAVAILABLE (``agency-reason: BACKEND_UNAVAILABLE``) instead of
hanging on a dead Redis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ...redis.health import BackendMonitor

__all__ = ["BackendGate"]

_ALWAYS_OPEN = ("/grpc.health.v1.", "/grpc.reflection.")


class BackendGate(grpc.aio.ServerInterceptor):
    def __init__(self, monitor: BackendMonitor) -> None:
        self._monitor = monitor

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if self._monitor.healthy is not False or details.method.startswith(_ALWAYS_OPEN) or handler is None:
            return handler
        message = (
            "required backend unavailable: " + ", ".join(sorted(self._monitor.failing)) or "backend down"
        )

        async def refuse(context: grpc.aio.ServicerContext) -> None:
            context.set_trailing_metadata((("agency-reason", "BACKEND_UNAVAILABLE"),))
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await refuse(context)

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await refuse(context)
            yield  # pragma: no cover - abort raises

        kw = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(unary, **kw)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(stream, **kw)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(unary, **kw)
        return grpc.stream_stream_rpc_method_handler(stream, **kw)
