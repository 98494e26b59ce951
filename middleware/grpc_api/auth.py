"""Per-client bearer tokens, checked by a grpc.aio server interceptor.

Clients send ``authorization: Bearer <token>``. The server knows only the SHA-256
of each token (``{hash: client_name}``, see :func:`middleware.config.read_token_hashes`),
so a leaked configuration does not leak credentials. A call without a known token
ends with UNAUTHENTICATED through the usual status mapping (trailing metadata
``agency-reason: UNAUTHENTICATED``). Health checks and reflection stay open so
probes and tooling work without a token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from ..errors import Unauthenticated
from .status import rpc, rpc_stream

__all__ = ["OPEN_SERVICES", "TokenAuthInterceptor"]

#: Services reachable without a token (probes, tooling).
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class _Refuse:
    """Handlers that fail the call with :class:`Unauthenticated` through ``@rpc``."""

    def __init__(self, why: str) -> None:
        self.why = why

    @rpc
    async def unary(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise Unauthenticated(self.why)

    @rpc_stream
    async def stream(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise Unauthenticated(self.why)
        yield  # pragma: no cover - makes this an async generator


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Require a known bearer token on every call except :data:`OPEN_SERVICES`.

    Args:
        token_hashes: ``{sha256_hex_of_token: client_name}``.
    """

    def __init__(self, token_hashes: Mapping[str, str]) -> None:
        self._clients = {h.lower(): name for h, name in token_hashes.items()}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method or ""
        if method.startswith(OPEN_SERVICES):
            return await continuation(handler_call_details)
        why = self._check(handler_call_details.invocation_metadata or ())
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if why is not None:
            return _refusing(handler, why)
        return handler

    def _check(self, metadata: Any) -> str | None:
        token = _bearer(metadata)
        if token is None:
            return "missing bearer token (send 'authorization: Bearer <token>')"
        if self._client_for(metadata) is None:
            return "unknown bearer token"
        return None

    def _client_for(self, metadata: Any) -> str | None:
        token = _bearer(metadata)
        if token is None:
            return None
        return self._clients.get(hashlib.sha256(token.encode()).hexdigest())


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata:
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _refusing(handler: grpc.RpcMethodHandler, why: str) -> grpc.RpcMethodHandler:
    refuse = _Refuse(why)
    if handler.unary_unary or handler.stream_unary:
        make = grpc.unary_unary_rpc_method_handler
        if handler.stream_unary:
            make = grpc.stream_unary_rpc_method_handler
        return make(
            refuse.unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    make_stream = grpc.unary_stream_rpc_method_handler
    if handler.stream_stream:
        make_stream = grpc.stream_stream_rpc_method_handler
    return make_stream(
        refuse.stream,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
