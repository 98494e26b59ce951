"""Malformed protobuf requests become INVALID_ARGUMENT, not an UNKNOWN server error.

grpc's Python server turns a request that fails to deserialize into ``UNKNOWN`` with
the parser's exception text. :class:`DecodeGuardInterceptor` makes the deserializer
return a marker instead, and the handler then refuses the call through the usual
status mapping (``agency-reason: INVALID_INPUT``, field ``request``); the refusal is
audited like any other input refused at the boundary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from ..errors import InvalidInput, Problem
from .status import rpc

__all__ = ["DecodeGuardInterceptor", "is_malformed"]

Reject = Callable[[InvalidInput], Awaitable[None]]


class _Malformed:
    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def is_malformed(request: Any) -> bool:
    """Whether ``request`` is the marker of a request that did not decode (outer interceptors
    that wrap handlers pass it on: the guard's handler refuses it)."""
    return isinstance(request, _Malformed)


def _guarded(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:
            return _Malformed(type(exc).__name__)

    return deserialize


class _Refuse:
    def __init__(self, method: str, on_reject: Reject | None) -> None:
        self.method = method
        self.on_reject = on_reject

    @rpc
    async def refuse(self, request: _Malformed, context: grpc.aio.ServicerContext) -> Any:
        error = InvalidInput(
            [Problem("request", f"not a valid protobuf message for {self.method} ({request.error})")],
            what="request",
        )
        if self.on_reject is not None:
            await self.on_reject(error)
        raise error


class DecodeGuardInterceptor(grpc.aio.ServerInterceptor):
    """Refuse undecodable requests with INVALID_ARGUMENT (innermost interceptor).

    Args:
        on_reject: Awaited with the error before refusing (e.g. to audit it).
    """

    def __init__(self, on_reject: Reject | None = None) -> None:
        self._on_reject = on_reject

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        refuse = _Refuse(handler_call_details.method or "", self._on_reject).refuse
        if handler.unary_unary:
            inner = handler.unary_unary

            async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, _Malformed):
                    return await refuse(request, context)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=_guarded(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:  # server streams (Watch, Export, Subscribe): refused before the stream
            inner_stream = handler.unary_stream

            async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                if isinstance(request, _Malformed):
                    await refuse(request, context)
                    return
                async for response in inner_stream(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                streaming,
                request_deserializer=_guarded(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler
