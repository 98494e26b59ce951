"""Malformed protobuf requests become INVALID_ARGUMENT, not an UNKNOWN server error.

grpc's Python server turns a request that fails to deserialize into ``UNKNOWN`` with
the parser's exception text. :class:`DecodeGuardInterceptor` makes the deserializer
return a marker instead, and the handler then refuses the call through the usual
status mapping (``agency-reason: INVALID_INPUT``, field ``request``); the refusal is
audited like any other input refused at the boundary.

A request that decodes is then checked for values no field may hold, whatever the RPC:
a ``NaN`` or infinite ``double``/``float`` (no range check can hold for them), and in a
``*_json`` field a ``NaN``/``Infinity``, a lone UTF-16 surrogate or nesting too deep (see
:func:`.convert.loads`, the one JSON decoder of request fields). Each is refused naming
the field (``steps[2].input_json``, ``message.metadata.confidence_score``) and audited.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]

from ...errors import InvalidInput, Problem
from .convert import MAX_JSON_DEPTH, loads
from .status import rpc

__all__ = ["DecodeGuardInterceptor", "is_malformed", "value_problems"]

_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)
#: Enough problems to say what is wrong: a request with more stops being walked.
MAX_PROBLEMS = 100

#: Text that may hold what JSON has not (a surrogate escape, NaN, Infinity, an overflowing
#: exponent); only such ``*_json`` text is parsed here, the rest once, by the servicer.
#: One regex of the four alternatives (a surrogate escape, NaN, Infinity, an exponent of three
#: digits or more) tries each at every character: :func:`_suspect` asks the same, 2x faster.
_SURROGATE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_EXPONENT = re.compile(r"[eE][+]?0*\d{3}")


def _suspect(text: str) -> bool:
    """Whether ``text`` holds ``\\u`` + a surrogate's first hex digits, ``NaN``, ``Infinity``
    or an exponent of three digits or more (a test checks it against the one-regex form)."""
    return (
        "NaN" in text
        or "Infinity" in text
        or ("\\u" in text and _SURROGATE.search(text) is not None)
        or _EXPONENT.search(text) is not None
    )


_MESSAGE, _FLOAT, _JSON = 1, 2, 3
#: What :func:`value_problems` looks at in a field, by its full name (0: nothing): a nested
#: message (not a map entry), a float, or a ``*_json`` string. Descriptors are fixed at import,
#: so this only grows to the number of request fields there are.
_KINDS: dict[str, int] = {}


def _kind(field: FieldDescriptor) -> int:
    kind = _KINDS.get(field.full_name)
    if kind is None:
        kind = 0
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if not field.message_type.GetOptions().map_entry:  # no request has a map of those
                kind = _MESSAGE
        elif field.type in _FLOATS:
            kind = _FLOAT
        elif field.type == FieldDescriptor.TYPE_STRING and field.name.endswith("_json"):
            kind = _JSON
        _KINDS[field.full_name] = kind
    return kind


def value_problems(message: Message, prefix: str = "") -> list[Problem]:
    """Every field of ``message`` (nested and repeated ones too) holding a value no request
    may carry: a non-finite float, or ``*_json`` text JSON does not allow (at most
    :data:`MAX_PROBLEMS` of them)."""
    problems: list[Problem] = []
    for field, value in message.ListFields():
        kind = _kind(field)
        if not kind:  # most fields: nothing to check, no name to build
            continue
        name = f"{prefix}{field.name}"
        items = list(enumerate(value)) if field.is_repeated else [(-1, value)]
        for i, item in items:
            if len(problems) >= MAX_PROBLEMS:
                return problems[:MAX_PROBLEMS]
            where = f"{name}[{i}]" if i >= 0 else name
            if kind == _MESSAGE:
                problems += value_problems(item, f"{where}.")
            elif kind == _FLOAT:
                if not math.isfinite(item):
                    problems.append(Problem(where, f"must be a finite number, not {item}"))
            elif _suspect(item) or item.count("[") + item.count("{") > MAX_JSON_DEPTH:
                try:
                    loads(item, where)
                except InvalidInput as exc:
                    problems += exc.problems
    return problems[:MAX_PROBLEMS]


Reject = Callable[[InvalidInput], Awaitable[None]]


class _Malformed:
    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


class _Refused:
    __slots__ = ("problems",)

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems


def is_malformed(request: Any) -> bool:
    """Whether ``request`` is the marker of a request that did not decode or holds values no
    request may (outer interceptors that wrap handlers pass it on: the guard's handler refuses it)."""
    return isinstance(request, (_Malformed, _Refused))


def _guarded(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            request = deserializer(data)
        except Exception as exc:
            return _Malformed(type(exc).__name__)
        if isinstance(request, Message):
            problems = value_problems(request)
            if problems:
                return _Refused(problems)
        return request

    return deserialize


class _Refuse:
    def __init__(self, method: str, on_reject: Reject | None) -> None:
        self.method = method
        self.on_reject = on_reject

    @rpc
    async def refuse(self, request: _Malformed | list[Problem], context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, _Malformed):
            why = f"not a valid protobuf message for {self.method} ({request.error})"
            problems = [Problem("request", why)]
        else:
            problems = request
        error = InvalidInput(problems, what="request")
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
        # method -> (the handler the server gave, its guarded form): grpc asks the interceptors
        # on every call, and building the guarded handler anew each time was most of their cost
        self._guarded: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        method = handler_call_details.method or ""
        known = self._guarded.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        guarded = self._guard(method, handler)
        self._guarded[method] = (handler, guarded)
        return guarded

    def _guard(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        refuse = _Refuse(method, self._on_reject).refuse
        if handler.unary_unary:
            inner = handler.unary_unary

            async def behaviour(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, _Malformed):
                    return await refuse(request, context)
                if isinstance(request, _Refused):
                    return await refuse(request.problems, context)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(
                behaviour,
                request_deserializer=_guarded(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:  # server streams (Watch, Export, Subscribe): refused before the stream
            inner_stream = handler.unary_stream

            async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                if isinstance(request, (_Malformed, _Refused)):
                    await refuse(request if isinstance(request, _Malformed) else request.problems, context)
                    return
                async for response in inner_stream(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                streaming,
                request_deserializer=_guarded(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler
