"""The one exception hierarchy of Agency Middleware.

Every error the product raises on purpose derives from :class:`AgencyError`. Each
subclass carries structured fields (a machine-readable ``reason``, whether the
operation may be ``retryable``, and for bad input every ``problems`` entry with its
field) and a default message, so transports can map them to status codes in one
place (see ``middleware.server.grpc_api.status``) without parsing strings::

    AgencyError                      reason            gRPC status
    ├── InvalidInput                 INVALID_INPUT     INVALID_ARGUMENT
    │   └── ContractViolation        SCHEMA_VIOLATION  INVALID_ARGUMENT
    ├── NotFound                     NOT_FOUND         NOT_FOUND
    ├── AlreadyExists                ALREADY_EXISTS    ALREADY_EXISTS
    ├── PermissionDenied             PERMISSION_DENIED PERMISSION_DENIED
    ├── Unauthenticated              UNAUTHENTICATED   UNAUTHENTICATED
    ├── FailedPrecondition           FAILED_PRECONDITION FAILED_PRECONDITION
    │   ├── RoutingRefused           ROUTING_REFUSED   FAILED_PRECONDITION
    │   └── ConcurrentUpdate         CONCURRENT_UPDATE FAILED_PRECONDITION
    ├── ResourceExhausted            RESOURCE_EXHAUSTED RESOURCE_EXHAUSTED
    │   └── BudgetExhausted          BUDGET_EXHAUSTED  RESOURCE_EXHAUSTED (a usage budget is spent)
    ├── DeadlineExceeded             DEADLINE_EXCEEDED DEADLINE_EXCEEDED
    ├── Unavailable                  UNAVAILABLE       UNAVAILABLE
    │   └── BackendUnavailable       BACKEND_UNAVAILABLE UNAVAILABLE (Redis failed during the call)
    ├── AgentFailure                 AGENT_FAILURE     INTERNAL (an agent states its own failure type)
    └── AuditError                   AUDIT_ERROR       INTERNAL
        └── AuditCorrupted           AUDIT_CORRUPTED   DATA_LOSS

Messages and problems are bounded when an error is made (:func:`shorten`): a long value
echoed into one (a megabyte task id, a huge field) is cut to a short prefix with its length,
so an error always fits a gRPC status and an audit record.

Failures of *agents* (a timeout, a schema violation in an output, an unmet goal) are
not exceptions to the caller: they become typed failure events handled by the
failure machinery (``middleware.failures``) and end up in the task's outcome.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "AgencyError",
    "AgentFailure",
    "AlreadyExists",
    "AuditCorrupted",
    "AuditError",
    "BackendUnavailable",
    "BudgetExhausted",
    "ConcurrentUpdate",
    "ContractViolation",
    "DeadlineExceeded",
    "FailedPrecondition",
    "InvalidInput",
    "NotFound",
    "PermissionDenied",
    "Problem",
    "ResourceExhausted",
    "RoutingRefused",
    "Unauthenticated",
    "Unavailable",
    "clip",
    "shorten",
]

#: Longest message an error keeps; longest field path and reason of one problem.
MAX_MESSAGE_CHARS = 1024
MAX_FIELD_CHARS = 128
MAX_REASON_CHARS = 300
#: An unbroken run of this many characters in a message is an echoed value: it is cut.
LONG_RUN_CHARS = 160
#: How much of a cut value is kept.
PREFIX_CHARS = 32

_LONG_RUN = re.compile(r"\S{" + str(LONG_RUN_CHARS) + ",}")


def clip(value: object, limit: int = PREFIX_CHARS) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters of it plus its length when
    longer (``'tttt…' (1048576 chars)``)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} chars)"


def _cut(match: re.Match[str]) -> str:
    run = match.group(0)
    return f"{run[:PREFIX_CHARS]}… ({len(run)} chars)"


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` with every long unbroken run (an echoed value) cut to a prefix and its length,
    then cut to ``limit`` characters in all."""
    if len(text) < LONG_RUN_CHARS:
        return text
    text = _LONG_RUN.sub(_cut, text)
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text)} chars in all)"
    return text


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where (a dotted path) and why."""

    field: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "field", shorten(self.field, MAX_FIELD_CHARS))
        object.__setattr__(self, "reason", shorten(self.reason, MAX_REASON_CHARS))

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


class AgencyError(Exception):
    """Root of every error raised by Agency Middleware.

    Attributes:
        reason: A stable, machine-readable code (``NOT_FOUND``, ``INVALID_INPUT`` ...).
        retryable: Whether repeating the same call may succeed.
        details: Extra structured context, safe to show to a client.
    """

    default_message: ClassVar[str] = "agency middleware error"
    reason: ClassVar[str] = "AGENCY_ERROR"
    retryable: bool = False

    def __init__(
        self,
        message: str | None = None,
        *,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(shorten(message or self.default_message))
        if retryable is not None:
            self.retryable = retryable
        self.details: dict[str, Any] = {  # echoed values bounded as the message is
            k: shorten(v, MAX_REASON_CHARS) if isinstance(v, str) else v for k, v in (details or {}).items()
        }

    @property
    def message(self) -> str:
        return str(self.args[0])


class InvalidInput(AgencyError):
    """Input failed validation. ``problems`` lists every field and what was wrong."""

    default_message = "invalid input"
    reason = "INVALID_INPUT"

    def __init__(
        self,
        problems: Sequence[Problem] | Problem,
        *,
        what: str = "input",
        details: dict[str, Any] | None = None,
    ) -> None:
        self.problems: tuple[Problem, ...] = (problems,) if isinstance(problems, Problem) else tuple(problems)
        self.what = what
        listed = "; ".join(str(p) for p in self.problems) or "no detail"
        super().__init__(f"invalid {what}: {listed}", details=details)

    @property
    def field(self) -> str:
        """The first offending field (what a single-field error would report)."""
        return self.problems[0].field if self.problems else ""

    @classmethod
    def single(cls, field: str, reason: str, *, what: str = "input") -> InvalidInput:
        return cls([Problem(field, reason)], what=what)


class ContractViolation(InvalidInput):
    """Data crossing an agent boundary does not match the contract's JSON Schema."""

    default_message = "contract schema violation"
    reason = "SCHEMA_VIOLATION"


class NotFound(AgencyError):
    default_message = "not found"
    reason = "NOT_FOUND"


class AlreadyExists(AgencyError):
    default_message = "already exists"
    reason = "ALREADY_EXISTS"


class PermissionDenied(AgencyError):
    default_message = "permission denied"
    reason = "PERMISSION_DENIED"


class Unauthenticated(AgencyError):
    default_message = "unauthenticated"
    reason = "UNAUTHENTICATED"


class FailedPrecondition(AgencyError):
    default_message = "failed precondition"
    reason = "FAILED_PRECONDITION"


class RoutingRefused(FailedPrecondition):
    """No registered contract allows the request; ``rejections`` says why for each."""

    default_message = "no capability satisfies the request"
    reason = "ROUTING_REFUSED"

    def __init__(self, message: str | None = None, *, rejections: Iterable[Any] = ()) -> None:
        self.rejections = list(rejections)
        super().__init__(message)


class ConcurrentUpdate(FailedPrecondition):
    """Another request holds or changed the same object (e.g. two resumes of one task)."""

    default_message = "the object is being changed by another request"
    reason = "CONCURRENT_UPDATE"
    retryable = True


class ResourceExhausted(AgencyError):
    default_message = "resource exhausted"
    reason = "RESOURCE_EXHAUSTED"
    retryable = True


class BudgetExhausted(ResourceExhausted):
    """A budget of model usage is spent: no further step runs until a person decides or the
    period turns (``details``: the budget, what was spent, the limit)."""

    default_message = "budget exhausted"
    reason = "BUDGET_EXHAUSTED"
    retryable = False


class DeadlineExceeded(AgencyError):
    default_message = "deadline exceeded"
    reason = "DEADLINE_EXCEEDED"
    retryable = True


class Unavailable(AgencyError):
    default_message = "service unavailable"
    reason = "UNAVAILABLE"
    retryable = True


class BackendUnavailable(Unavailable):
    """A backend the gateway needs (Redis) failed during the operation; the cause is chained."""

    default_message = "a backend the gateway needs is unavailable"
    reason = "BACKEND_UNAVAILABLE"


class AgentFailure(AgencyError):
    """Raised by an agent (or an adapter around one) to state *which* failure it is.

    The pipeline turns any exception from an agent into a typed failure event by its
    class (a timeout, a connection error, anything else is a tool error); an adapter
    that knows better (a LangChain output that does not parse is a schema violation, a
    rate limit means the model is unavailable) raises this instead, and the pipeline
    uses ``failure_type`` as given.

    Attributes:
        failure_type: A :class:`middleware.failures.FailureType` value (checked).
        cause: The underlying exception, if any (also chained as ``__cause__``).
        context: JSON-safe facts for the failure handler, e.g. ``{"direction": "output"}``.
    """

    default_message = "agent failed"
    reason = "AGENT_FAILURE"

    def __init__(
        self,
        failure_type: str,
        message: str | None = None,
        *,
        cause: BaseException | None = None,
        context: dict[str, Any] | None = None,
    ) -> None:
        from .failures import FailureType  # failures imports this module

        self.failure_type: str = FailureType.of(failure_type).value
        self.cause = cause
        self.context: dict[str, Any] = dict(context or {})
        super().__init__(message or (str(cause) if cause is not None else None))
        if cause is not None:
            self.__cause__ = cause


class AuditError(AgencyError):
    default_message = "audit log error"
    reason = "AUDIT_ERROR"


class AuditCorrupted(AuditError):
    """The audit log failed verification; ``where`` names the segment/record."""

    default_message = "audit log is corrupted"
    reason = "AUDIT_CORRUPTED"

    def __init__(self, message: str | None = None, *, where: str = "") -> None:
        self.where = where
        super().__init__(f"{message or self.default_message}" + (f" at {where}" if where else ""))
