"""Failed gRPC calls become the library's own errors (``middleware.errors``)."""

from __future__ import annotations

import grpc

from ..errors import AgencyError
from ..server.grpc_api.status import error_from_status

__all__ = ["error_from_rpc"]


def error_from_rpc(exc: grpc.aio.AioRpcError | grpc.RpcError, address: str = "") -> AgencyError:
    """The :class:`AgencyError` a failed call stands for (see ``grpc_api.status.error_from_status``).

    A transport failure (no ``agency-reason`` trailer: nothing answered, TLS refused) is
    :class:`~middleware.errors.Unavailable` with a hint; ``details["grpc_code"]`` keeps the code.
    """
    code: grpc.StatusCode = exc.code()
    message: str = exc.details() or ""
    trailers = {str(k): str(v) for k, v in (exc.trailing_metadata() or ())}
    if code == grpc.StatusCode.UNAVAILABLE and "agency-reason" not in trailers:
        where = f" at {address}" if address else ""
        message = f"no gateway answers{where} ({message}); is 'agency serve' running there?"
    elif code == grpc.StatusCode.UNAUTHENTICATED:
        message = f"{message} (the gateway wants a bearer token: token= here, --token-file FILE in the CLI)"
    return error_from_status(code, message, trailers)
