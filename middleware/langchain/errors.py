"""LangChain errors onto the failure vocabulary.

=====================================================  ==================  ==========================
raised inside the runnable                             failure type        default resolution
=====================================================  ==================  ==========================
``OutputParserException`` (output does not parse)      SCHEMA_VIOLATION    retry once, then backup
rate limit (``ModelRateLimitError``, HTTP 429, a       TOOL_UNAVAILABLE    switch to a backup at once
provider ``RateLimitError``)
connection (``ConnectionError``,                       TOOL_UNAVAILABLE    switch to a backup at once
``ModelConnectionError``, HTTP 502/503/504, a
provider ``APIConnectionError``)
model request timeout (``ModelTimeoutError``,          TOOL_TIMEOUT        retry, then backup
``TimeoutError``, a provider ``APITimeoutError``)
``ToolException`` and any other error from a tool      TOOL_ERROR          retry, then backup
or a model (auth, invalid request, refusal ...)
an :class:`~middleware.errors.AgentFailure`            as it says
=====================================================  ==================  ==========================

The deadline from the contract's SLO is enforced by the pipeline (a runnable that
does not answer in time is cancelled and becomes TOOL_TIMEOUT); this module only
classifies errors the runnable *raises*. The failure detail names the cause: the
exception type and message, and the tool or model that raised it when the audit
callback saw it.
"""

from __future__ import annotations

from typing import Any

from langchain_core import exceptions as lc_exceptions
from langchain_core.exceptions import OutputParserException
from langchain_core.tools import ToolException

from ..errors import AgentFailure, ContractViolation, Unavailable
from ..failures import FailureType

__all__ = ["failure_from_exception"]

_RATE_LIMIT_NAMES = ("RateLimitError", "ModelRateLimitError", "TooManyRequests")
_CONNECTION_NAMES = (
    "APIConnectionError",
    "ConnectError",
    "ConnectionError",
    "ModelConnectionError",
    "ServiceUnavailableError",
    "RemoteProtocolError",
)
_TIMEOUT_NAMES = ("APITimeoutError", "ModelTimeoutError", "ReadTimeout", "ConnectTimeout", "TimeoutException")


def failure_from_exception(exc: BaseException, *, source: tuple[str, str] | None = None) -> AgentFailure:
    """The :class:`AgentFailure` for an exception raised by a runnable.

    Args:
        exc: What the runnable raised.
        source: ``(kind, name)`` of the inner step that raised (``("tool", "lookup_order")``),
            when known from the audit callback.
    """
    if isinstance(exc, AgentFailure):
        return exc
    ftype, context = _classify(exc)
    where = f"{source[0]} {source[1]!r}" if source else "runnable"
    context = {
        "cause": type(exc).__name__,
        **({"source": f"{source[0]}:{source[1]}"} if source else {}),
        **context,
    }
    return AgentFailure(
        ftype.value,
        f"{where} raised {type(exc).__name__}: {exc}",
        cause=exc,
        context=context,
    )


def _classify(exc: BaseException) -> tuple[FailureType, dict[str, Any]]:
    for err in _chain(exc):
        if isinstance(err, OutputParserException | ContractViolation):
            return FailureType.SCHEMA_VIOLATION, {"direction": "output"}
        names = {cls.__name__ for cls in type(err).__mro__}
        status = _status_code(err)
        if names & set(_RATE_LIMIT_NAMES) or status == 429:
            return FailureType.TOOL_UNAVAILABLE, {"rate_limited": True}
        if names & set(_TIMEOUT_NAMES) or isinstance(err, TimeoutError):
            return FailureType.TOOL_TIMEOUT, {}
        if (
            isinstance(err, ConnectionError | Unavailable)
            or names & set(_CONNECTION_NAMES)
            or status in (502, 503, 504)
        ):
            return FailureType.TOOL_UNAVAILABLE, {}
        if isinstance(err, ToolException):
            return FailureType.TOOL_ERROR, {}
    model_error = getattr(lc_exceptions, "ModelError", None)  # langchain-core >= 1.x only
    if model_error is not None and isinstance(exc, model_error):
        return FailureType.TOOL_ERROR, {"retryable": bool(getattr(exc, "is_retryable", False))}
    return FailureType.TOOL_ERROR, {}


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it was raised from (providers often wrap transport errors)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 8:
        out.append(current)
        current = current.__cause__
    return out


def _status_code(exc: BaseException) -> int | None:
    for attr in ("status_code", "status", "http_status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None
