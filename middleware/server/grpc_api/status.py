"""The one place where core errors become gRPC status codes.

Every servicer method is wrapped with :func:`rpc`. An :class:`AgencyError` aborts
the call with the mapped code, its message, and trailing metadata a client can read
without parsing text: ``agency-reason`` (e.g. ``INVALID_INPUT``), ``agency-field``
(the first offending field) and ``agency-problems`` (JSON list of
``{"field", "reason"}``, at most :data:`MAX_PROBLEMS_TRAILER` characters: further problems
are summed up in a last entry). Messages and problems are bounded where errors are made
(:func:`middleware.errors.shorten`), so a refusal always fits the status and its metadata,
however long the value it names. Anything else is a bug: logged, returned as INTERNAL with
no internals leaked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ...errors import (
    AgencyError,
    AlreadyExists,
    AuditCorrupted,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    PermissionDenied,
    Problem,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

__all__ = ["ERROR_CODES", "code_for", "error_from_status", "rpc", "rpc_stream"]

log = logging.getLogger("agency.grpc")

#: Most specific class first; the first isinstance match wins.
ERROR_CODES: list[tuple[type[AgencyError], grpc.StatusCode]] = [
    (InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (AuditCorrupted, grpc.StatusCode.DATA_LOSS),
]


def code_for(error: AgencyError) -> grpc.StatusCode:
    for cls, code in ERROR_CODES:
        if isinstance(error, cls):
            return code
    return grpc.StatusCode.INTERNAL


#: Longest ``agency-problems`` value (gRPC refuses metadata over 16 KiB, and may over 8 KiB).
MAX_PROBLEMS_TRAILER = 4096


def _problems_trailer(error: InvalidInput) -> str:
    listed: list[dict[str, str]] = []
    size = 2
    for i, p in enumerate(error.problems):
        item = {"field": p.field, "reason": p.reason}
        length = len(json.dumps(item, ensure_ascii=True)) + 1
        if size + length > MAX_PROBLEMS_TRAILER - 100:
            listed.append({"field": "", "reason": f"... and {len(error.problems) - i} more problems"})
            break
        listed.append(item)
        size += length
    return json.dumps(listed, ensure_ascii=True)


def _reason_classes() -> dict[str, type[AgencyError]]:
    """Every error class a server may name in ``agency-reason``, by its reason."""
    found: dict[str, type[AgencyError]] = {}
    stack: list[type[AgencyError]] = [AgencyError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.reason, cls)
        stack.extend(cls.__subclasses__())
    found.pop("AGENT_FAILURE", None)  # an agent's failure never crosses the wire as an error
    return found


def error_from_status(
    code: grpc.StatusCode, message: str, trailers: dict[str, str] | None = None
) -> AgencyError:
    """The inverse of :func:`code_for`: a failed call as the :class:`AgencyError` the server raised.

    The class comes from the ``agency-reason`` trailer (so ``SCHEMA_VIOLATION`` is a
    :class:`ContractViolation`, ``ROUTING_REFUSED`` a :class:`RoutingRefused`), else from the
    status code; ``agency-problems`` restores every problem of an :class:`InvalidInput`.
    ``details`` carries ``grpc_code`` and, when sent, ``retry_after_ms``.

    Args:
        code: The call's status code.
        message: The status details (the server's error message).
        trailers: The call's trailing metadata as a dict.
    """
    md = trailers or {}
    cls: type[AgencyError] | None = _reason_classes().get(md.get("agency-reason", ""))
    if cls is None:
        cls = next((c for c, k in ERROR_CODES if k == code), AgencyError)
    details: dict[str, Any] = {"grpc_code": code.name}
    if "agency-retry-after-ms" in md:
        with contextlib.suppress(ValueError):
            details["retry_after_ms"] = int(md["agency-retry-after-ms"])
    if issubclass(cls, InvalidInput):
        problems: list[Problem] = []
        try:
            problems = [Problem(str(p["field"]), str(p["reason"])) for p in json.loads(md["agency-problems"])]
        except (KeyError, ValueError, TypeError):
            problems = [Problem(md.get("agency-field", ""), message)]
        error: AgencyError = cls(problems, what="request", details=details)
        if message:
            error.args = (message,)  # the server's words, e.g. "invalid capability contract: ..."
    else:
        error = cls(message or f"{code.name} from the server")
        error.details.update(details)
    if cls is AgencyError:
        error = AgencyError(f"{code.name}: {message}", details=details)
    return error


def _trailers(error: AgencyError) -> tuple[tuple[str, str], ...]:
    md: list[tuple[str, str]] = [("agency-reason", error.reason)]
    if isinstance(error, InvalidInput):
        md.append(("agency-field", error.field))
        md.append(("agency-problems", _problems_trailer(error)))
    retry_after = error.details.get("retry_after_ms")
    if retry_after is not None:
        md.append(("agency-retry-after-ms", str(retry_after)))
    return tuple(md)


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    if isinstance(exc, AgencyError):
        context.set_trailing_metadata(_trailers(exc))
        await context.abort(code_for(exc), exc.message)
    log.exception("unexpected error in %s", method, exc_info=exc)
    context.set_trailing_metadata((("agency-reason", "INTERNAL"),))
    await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {method}")


Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, grpc.aio.ServicerContext], Awaitable[Resp]]
StreamHandler = Callable[[Any, Req, grpc.aio.ServicerContext], AsyncIterator[Resp]]


def rpc(fn: Handler[Req, Resp]) -> Handler[Req, Resp]:
    """Wrap a unary servicer method so errors map to status codes in one place."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, fn.__qualname__)
            raise  # unreachable: abort raises

    return wrapper


def rpc_stream(fn: StreamHandler[Req, Resp]) -> StreamHandler[Req, Resp]:
    """Like :func:`rpc`, for server-streaming methods (async generators)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Req, context: grpc.aio.ServicerContext) -> AsyncIterator[Resp]:
        try:
            async for item in fn(self, request, context):
                yield item
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, fn.__qualname__)

    return wrapper
