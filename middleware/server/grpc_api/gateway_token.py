"""A worker that takes calls only from its gateway: the gateway's bearer token, checked.

``agency worker --gateway-token-file FILE`` (or ``Worker(gateway_token=...)``) makes the
worker refuse every ``AgentWorker`` call that does not carry ``authorization: Bearer
<token>`` with that token (UNAUTHENTICATED); health and reflection stay open for probes.
The gateway sends it on every call to its workers (``workers.token_file`` in the
definition). Without it, anyone who reaches a worker's port can ``Invoke`` its agent.
Mutual TLS (``--tls-client-ca``) is the other way to the same end.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable

import grpc

from ...errors import Unauthenticated
from .auth import OPEN_SERVICES, _bearer, _Refuse, _refusing

__all__ = ["GatewayTokenInterceptor"]


class GatewayTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuse every call but health and reflection without the gateway's bearer token.

    Args:
        token: The gateway's token (kept only as its SHA-256).
    """

    def __init__(self, token: str) -> None:
        self._digest = hashlib.sha256(token.encode()).digest()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or (handler_call_details.method or "").startswith(OPEN_SERVICES):
            return handler
        token = _bearer(handler_call_details.invocation_metadata or ())
        if token is not None and hmac.compare_digest(hashlib.sha256(token.encode()).digest(), self._digest):
            return handler
        why = "missing" if token is None else "not the gateway's"
        return _refusing(
            handler,
            _Refuse(
                Unauthenticated(f"this worker takes calls only from its gateway: bearer token {why}"), None
            ),
        )
