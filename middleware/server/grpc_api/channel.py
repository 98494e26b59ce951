"""Client channels to the gateway: plaintext, TLS or mutual TLS, with an optional token.

Workers and the CLI open their channel here so every client speaks the same
security options as ``agency serve``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from ..settings import ClientTlsConfig

__all__ = ["open_channel"]


class _Token:
    """Adds ``authorization: Bearer <token>`` to every call."""

    def __init__(self, token: str) -> None:
        self._md = ("authorization", f"Bearer {token}")

    def _details(self, d: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(tuple(d.metadata or ())), self._md)
        return grpc.aio.ClientCallDetails(d.method, d.timeout, metadata, d.credentials, d.wait_for_ready)


# One class per call kind: grpc.aio files an interceptor under the first kind it implements
# only, so one class implementing both would never see a server-streaming call.
class _UnaryToken(_Token, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


class _StreamToken(_Token, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


def open_channel(
    address: str,
    *,
    tls: ClientTlsConfig | None = None,
    token: str | None = None,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A grpc.aio channel to ``address``.

    Args:
        address: ``host:port`` of the gateway.
        tls: Verify the server with TLS (and present a client certificate for mTLS); None = plaintext.
        token: A bearer token sent on every call (``authorization`` metadata).
        interceptors: Further client interceptors (e.g. tracing), outermost first.
        options: Extra channel options.
    """
    chain: list[grpc.aio.ClientInterceptor] = list(interceptors)
    if token:
        chain += [_UnaryToken(token), _StreamToken(token)]
    opts = list(options)
    if tls is None:
        return grpc.aio.insecure_channel(address, options=opts, interceptors=chain or None)
    ca, cert, key = tls.read()
    if tls.server_name:
        opts.append(("grpc.ssl_target_name_override", tls.server_name))
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    return grpc.aio.secure_channel(address, creds, options=opts, interceptors=chain or None)
