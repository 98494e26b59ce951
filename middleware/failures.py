"""Failure semantics: typed failures, resolutions as data, and the processor.

A failure is a state of the system with a business meaning, not an exception. Each
:class:`FailureEvent` has a :class:`FailureType` (a constant, never a free string);
:class:`FailureProcessor` hands it to the handler registered for its type (the
built-ins live in the folder ``handlers/``, installed as the subpackage
:mod:`middleware.handlers`, one module per type; packages
add or override handlers through the ``agency_middleware.failure_handlers``
entry-point group; code through :meth:`FailureProcessor.register`). A handler is a
pure function returning a :class:`Resolution`; :mod:`middleware.executor` is the only
place that applies resolutions.

Operators choose, per type, which resolution applies (``FailurePolicy.resolution``),
but only among the ones that make sense for that type (:data:`ALLOWED_RESOLUTIONS`):
retrying a policy violation, for instance, is refused at configuration time.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, Protocol, cast, runtime_checkable

from pydantic import Field

from ._model import Model
from .errors import InvalidInput, Problem
from .smf import new_id, utcnow

__all__ = [
    "ALLOWED_RESOLUTIONS",
    "DEFAULT_RESOLUTION",
    "ENTRY_POINT_GROUP",
    "FailureEvent",
    "FailureHandler",
    "FailurePolicy",
    "FailureProcessor",
    "FailureType",
    "Resolution",
    "ResolutionKind",
    "builtin_handlers",
    "check_policy",
    "entry_point_handlers",
    "forced_resolution",
]

log = logging.getLogger("agency.failures")

#: Entry-point group through which installed packages ship failure handlers. The entry
#: point's *name* is the failure type (``TOOL_TIMEOUT``), its value the handler
#: (``my_pkg.handlers:on_timeout``).
ENTRY_POINT_GROUP = "agency_middleware.failure_handlers"


class FailureType(StrEnum):
    """The failure vocabulary (seed section 3.3)."""

    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    TOOL_UNAVAILABLE = "TOOL_UNAVAILABLE"
    TOOL_ERROR = "TOOL_ERROR"
    CONTEXT_AMBIGUITY = "CONTEXT_AMBIGUITY"
    POLICY_VIOLATION = "POLICY_VIOLATION"
    DATA_INCONSISTENCY = "DATA_INCONSISTENCY"
    SCHEMA_VIOLATION = "SCHEMA_VIOLATION"
    GOAL_UNMET = "GOAL_UNMET"
    GOAL_TIMEOUT = "GOAL_TIMEOUT"
    CAPABILITY_MISMATCH = "CAPABILITY_MISMATCH"
    STALE_DATA = "STALE_DATA"
    INTENT_DRIFT = "INTENT_DRIFT"

    @classmethod
    def of(cls, value: str | FailureType, *, field: str = "type") -> FailureType:
        """The constant for ``value``; an unknown type is an :class:`InvalidInput`."""
        if isinstance(value, FailureType):
            return value
        try:
            return cls(value)
        except ValueError:
            raise InvalidInput.single(
                field, f"unknown failure type {value!r}; known: {', '.join(t.value for t in cls)}"
            ) from None


class ResolutionKind(StrEnum):
    """What can be done about a failure."""

    RETRY = "retry"
    USE_BACKUP = "use_backup"
    ASK_CLARIFICATION = "ask_clarification"
    ESCALATE_TO_HUMAN = "escalate_to_human"
    QUARANTINE = "quarantine"
    ABORT = "abort"
    RETURN_CONFLICT = "return_conflict"


_T, _R = FailureType, ResolutionKind

#: The resolution each type gets when the operator configures nothing (the built-in
#: handler may still step down, e.g. from retry to backup to a human, as retries run out).
DEFAULT_RESOLUTION: dict[FailureType, ResolutionKind] = {
    _T.TOOL_TIMEOUT: _R.RETRY,
    _T.TOOL_UNAVAILABLE: _R.USE_BACKUP,
    _T.TOOL_ERROR: _R.RETRY,
    _T.CONTEXT_AMBIGUITY: _R.ASK_CLARIFICATION,
    _T.POLICY_VIOLATION: _R.QUARANTINE,
    _T.DATA_INCONSISTENCY: _R.RETURN_CONFLICT,
    _T.SCHEMA_VIOLATION: _R.RETRY,
    _T.GOAL_UNMET: _R.ESCALATE_TO_HUMAN,
    _T.GOAL_TIMEOUT: _R.ESCALATE_TO_HUMAN,
    _T.CAPABILITY_MISMATCH: _R.ABORT,
    _T.STALE_DATA: _R.RETRY,
    _T.INTENT_DRIFT: _R.ESCALATE_TO_HUMAN,
}

#: The resolutions an operator may configure for each type (the default included).
ALLOWED_RESOLUTIONS: dict[FailureType, frozenset[ResolutionKind]] = {
    _T.TOOL_TIMEOUT: frozenset({_R.RETRY, _R.USE_BACKUP, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.TOOL_UNAVAILABLE: frozenset({_R.USE_BACKUP, _R.RETRY, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.TOOL_ERROR: frozenset({_R.RETRY, _R.USE_BACKUP, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.CONTEXT_AMBIGUITY: frozenset(
        {_R.ASK_CLARIFICATION, _R.USE_BACKUP, _R.RETRY, _R.ESCALATE_TO_HUMAN, _R.ABORT}
    ),
    _T.POLICY_VIOLATION: frozenset({_R.QUARANTINE, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.DATA_INCONSISTENCY: frozenset({_R.RETURN_CONFLICT, _R.USE_BACKUP, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.SCHEMA_VIOLATION: frozenset({_R.RETRY, _R.USE_BACKUP, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.GOAL_UNMET: frozenset({_R.ESCALATE_TO_HUMAN, _R.ABORT, _R.RETRY}),  # seed: "retry or escalate"
    _T.GOAL_TIMEOUT: frozenset({_R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.CAPABILITY_MISMATCH: frozenset({_R.ABORT, _R.ESCALATE_TO_HUMAN}),
    _T.STALE_DATA: frozenset({_R.RETRY, _R.USE_BACKUP, _R.ESCALATE_TO_HUMAN, _R.ABORT}),
    _T.INTENT_DRIFT: frozenset({_R.ESCALATE_TO_HUMAN, _R.ABORT}),
}


class FailureEvent(Model):
    """One failure, with everything a pure handler needs to decide."""

    event_id: str = Field(default_factory=lambda: new_id("fail"))
    type: FailureType
    task_id: str
    trace_id: str
    step: str = Field(default="", description="The task step (sub-task) that failed.")
    agent: str = Field(default="", description="Contract key of the agent involved.")
    attempt: int = Field(default=1, ge=1, description="Which attempt on this agent failed (1 = first).")
    fallbacks: list[str] = Field(default_factory=list, description="Remaining backup agents, best first.")
    detail: str = ""
    context: dict[str, Any] = Field(default_factory=dict)
    occurred_at: datetime = Field(default_factory=utcnow)


class Resolution(Model):
    """What to do about a failure, as data. The executor applies it."""

    kind: ResolutionKind
    reason: str
    failure_type: FailureType
    delay_ms: float = Field(default=0.0, ge=0, description="Wait before a retry.")
    agent: str = Field(default="", description="For use_backup: the agent to switch to.")
    payload: dict[str, Any] = Field(default_factory=dict)


class FailurePolicy(Model):
    """Operator-tunable knobs the built-in handlers read (one per type, or one for all)."""

    max_retries: int = Field(default=2, ge=0, le=20, description="Retries per agent (seed: 2).")
    backoff_base_ms: float = Field(default=100.0, ge=0, description="First retry's delay.")
    backoff_max_ms: float = Field(default=5000.0, ge=0, description="Cap of the exponential delay.")
    jitter: float = Field(default=0.2, ge=0, le=1, description="± fraction of the backoff.")
    on_exhausted: Literal["use_backup", "escalate_to_human", "abort"] = Field(
        default="use_backup", description="What follows the last retry."
    )
    resolution: ResolutionKind | None = Field(
        default=None,
        description="Force this resolution for the type (must be allowed for it); None = the default.",
    )
    backup_agent: str = Field(
        default="", description="Preferred backup (contract key), if among the router's fallbacks."
    )


def check_policy(ftype: FailureType | str, policy: FailurePolicy, *, field: str = "policies") -> None:
    """Refuse a policy whose ``resolution`` is not allowed for ``ftype``."""
    ftype = FailureType.of(ftype, field=field)
    if policy.resolution is not None and policy.resolution not in ALLOWED_RESOLUTIONS[ftype]:
        allowed = ", ".join(sorted(k.value for k in ALLOWED_RESOLUTIONS[ftype]))
        raise InvalidInput.single(
            f"{field}.{ftype.value}.resolution",
            f"{policy.resolution.value} is not allowed for {ftype.value}; allowed: {allowed}",
            what="failure policy",
        )


# -- Resolution builders (pure: the same event and policy always give the same resolution) -------
# The built-in handlers (middleware.handlers) and the processor's forced resolutions share them.


def backoff_ms(event: FailureEvent, policy: FailurePolicy) -> float:
    """Exponential backoff with deterministic jitter (same event → same delay).

    ``base * 2**(attempt-1)`` capped at ``backoff_max_ms``, then spread by
    ``± jitter``. The jitter is derived from the event id so the handler stays pure
    and idempotent while retries of different tasks still spread out.
    """
    base = min(policy.backoff_max_ms, policy.backoff_base_ms * (2 ** (event.attempt - 1)))
    digest = hashlib.sha256(event.event_id.encode()).digest()
    unit = int.from_bytes(digest[:4], "big") / 0xFFFFFFFF  # 0..1
    return float(max(0.0, base * (1 + policy.jitter * (2 * unit - 1))))


def backup_agent(event: FailureEvent, policy: FailurePolicy) -> str:
    """The configured backup agent, else the router's next fallback.

    The configured one is a preference among the fallbacks the router found fit for the
    step (its contract allows it, its circuit is not open), never a way around them.
    """
    if policy.backup_agent and policy.backup_agent in event.fallbacks:
        return policy.backup_agent
    return event.fallbacks[0] if event.fallbacks else ""


def backup(event: FailureEvent, policy: FailurePolicy, what: str) -> Resolution:
    """Switch to the backup agent; a human when there is none."""
    agent = backup_agent(event, policy)
    if not agent:
        return escalate(event, f"{what} on {event.agent or 'the task'} and no backup left")
    return Resolution(
        kind=ResolutionKind.USE_BACKUP,
        failure_type=event.type,
        agent=agent,
        reason=f"{what} on {event.agent or 'the task'}; switching to backup {agent}",
    )


def retry_then_backup(event: FailureEvent, policy: FailurePolicy, what: str) -> Resolution:
    """Retry up to ``policy.max_retries`` times, then ``policy.on_exhausted``."""
    if event.attempt <= policy.max_retries:
        return Resolution(
            kind=ResolutionKind.RETRY,
            failure_type=event.type,
            delay_ms=backoff_ms(event, policy),
            agent=event.agent,
            reason=f"{what} on {event.agent}; retry {event.attempt} of {policy.max_retries}",
        )
    done = f"{what} on {event.agent} after {event.attempt} attempts"
    if policy.on_exhausted == "use_backup":
        return backup(event, policy, done)
    if policy.on_exhausted == "abort":
        return abort(event, done)
    return escalate(event, done)


def escalate(event: FailureEvent, reason: str) -> Resolution:
    """Hand the task to a person."""
    return Resolution(kind=ResolutionKind.ESCALATE_TO_HUMAN, failure_type=event.type, reason=reason)


def abort(event: FailureEvent, reason: str) -> Resolution:
    """Stop the task."""
    return Resolution(kind=ResolutionKind.ABORT, failure_type=event.type, reason=reason)


def ask(event: FailureEvent, reason: str, question: str, options: list[dict[str, Any]]) -> Resolution:
    """A structured clarification: a question with at least two options, never an open one.

    With fewer than two options there is nothing to choose from, so a human decides.
    """
    if len(options) < 2:
        return escalate(event, f"{reason} (no options to offer the user)")
    return Resolution(
        kind=ResolutionKind.ASK_CLARIFICATION,
        failure_type=event.type,
        reason=reason,
        payload={"question": question, "options": options},
    )


def forced_resolution(event: FailureEvent, policy: FailurePolicy) -> Resolution | None:
    """The resolution the operator forced for this type (``policy.resolution``), or None.

    :class:`FailureProcessor` applies it before any handler runs; ``check_policy`` has
    already refused resolutions the type does not allow. One exception: a ``GOAL_UNMET``
    whose only open checks are manual ones (nothing failed) goes to a person whatever the
    policy — there is nothing to retry or abort on.
    """
    kind = policy.resolution
    if kind is None:
        return None
    if (
        event.type is FailureType.GOAL_UNMET
        and event.context.get("manual_pending")
        and not event.context.get("failed_steps")
    ):
        return None
    name = event.type.value.lower().replace("_", " ")
    what = event.detail or name
    if kind is ResolutionKind.RETRY:
        return retry_then_backup(event, policy, name)
    if kind is ResolutionKind.USE_BACKUP:
        return backup(event, policy, name)
    if kind is ResolutionKind.ABORT:
        return abort(event, what)
    if kind is ResolutionKind.ESCALATE_TO_HUMAN:
        return escalate(event, what)
    if kind is ResolutionKind.ASK_CLARIFICATION:
        question = str(event.context.get("question") or "Please confirm which option you mean.")
        return ask(event, what, question, [dict(o) for o in event.context.get("options") or []])
    return Resolution(kind=kind, failure_type=event.type, reason=what, payload=dict(event.context))


@runtime_checkable
class FailureHandler(Protocol):
    """A pure function from a failure event to a resolution (no side effects)."""

    def __call__(self, event: FailureEvent, policy: FailurePolicy) -> Resolution: ...


def entry_point_handlers(
    group: str = ENTRY_POINT_GROUP,
    entry_points: Callable[..., Iterable[importlib.metadata.EntryPoint]] | None = None,
) -> dict[FailureType, FailureHandler]:
    """The handlers installed packages declare in ``group``.

    Raises:
        InvalidInput: an entry point names an unknown failure type, two installed
            packages claim the same type, or a handler is not callable.
    """
    found = (entry_points or importlib.metadata.entry_points)(group=group)
    out: dict[FailureType, FailureHandler] = {}
    origin: dict[FailureType, str] = {}
    problems: list[Problem] = []
    for ep in sorted(found, key=lambda e: (e.name, e.value)):
        where = f"entry point {ep.name} = {ep.value}"
        try:
            ftype = FailureType(ep.name)
        except ValueError:
            problems.append(Problem(f"{group}:{ep.name}", f"unknown failure type in {where}"))
            continue
        if ftype in out:
            problems.append(Problem(f"{group}:{ep.name}", f"declared twice ({origin[ftype]} and {ep.value})"))
            continue
        handler = ep.load()
        if not callable(handler):
            problems.append(Problem(f"{group}:{ep.name}", f"{where} is not callable"))
            continue
        out[ftype], origin[ftype] = handler, ep.value
        log.info("failure handler for %s from %s", ftype.value, ep.value)
    if problems:
        raise InvalidInput(problems, what="failure handler entry points")
    return out


#: The package name of the built-in handlers (the folder ``handlers/`` of the source tree).
HANDLERS_PACKAGE = "middleware.handlers"


def _handlers_package() -> ModuleType:
    """:mod:`middleware.handlers`, never a top-level ``handlers`` (which may be the application's).

    Installed (wheel or editable), setuptools maps the folder ``handlers/`` onto the
    subpackage. From a bare source checkout (``python -c ...`` at the repository root, no
    install) the subpackage does not exist on disk, so the folder beside ``middleware/`` is
    loaded under that same name.
    """
    try:
        return importlib.import_module(HANDLERS_PACKAGE)
    except ModuleNotFoundError as exc:
        if exc.name != HANDLERS_PACKAGE:
            raise
    folder = Path(__file__).resolve().parent.parent / "handlers"
    spec = importlib.util.spec_from_file_location(
        HANDLERS_PACKAGE, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:  # pragma: no cover - the folder ships with the code
        raise ModuleNotFoundError(f"no {HANDLERS_PACKAGE} and no {folder}", name=HANDLERS_PACKAGE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[HANDLERS_PACKAGE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[HANDLERS_PACKAGE]
        raise
    return module


def builtin_handlers() -> dict[FailureType, FailureHandler]:
    """A fresh mapping from every failure type to its built-in handler (:mod:`middleware.handlers`)."""
    return cast(dict[FailureType, FailureHandler], _handlers_package().builtin_handlers())


class FailureProcessor:
    """Applies the operator's policy, else dispatches each failure event to its type's handler.

    A resolution the operator forced for the type (``FailurePolicy.resolution``) is applied
    here, before any handler runs: handlers — built-in, custom or from an entry point —
    decide only the default. Handler precedence, lowest first: the built-in handlers,
    handlers installed packages declare in :data:`ENTRY_POINT_GROUP` (only when
    ``load_entry_points=True``: discovery is explicit), then ``handlers`` given here, then
    :meth:`register` calls.

    Args:
        handlers: Handlers to install, keyed by failure type.
        policy: The policy of every type without its own.
        policies: Per-type policies (caps, backoff, forced resolution, backup agent).
        load_entry_points: Discover handlers from installed packages (off unless asked; the
            served gateway asks, see :mod:`middleware.server.bootstrap`).
        entry_points: The discovery seam (``importlib.metadata.entry_points`` by default).
    """

    def __init__(
        self,
        handlers: Mapping[FailureType, FailureHandler] | Mapping[str, FailureHandler] | None = None,
        *,
        policy: FailurePolicy | None = None,
        policies: Mapping[FailureType, FailurePolicy] | Mapping[str, FailurePolicy] | None = None,
        load_entry_points: bool = False,
        entry_points: Callable[..., Iterable[importlib.metadata.EntryPoint]] | None = None,
    ) -> None:
        self._handlers: dict[FailureType, FailureHandler] = builtin_handlers()
        self.plugins: dict[FailureType, FailureHandler] = {}
        if load_entry_points:
            self.plugins = entry_point_handlers(entry_points=entry_points)
            self._handlers.update(self.plugins)
        for ftype, handler in (handlers or {}).items():
            self.register(ftype, handler)
        self.policy = policy or FailurePolicy()
        if self.policy.resolution is not None:
            raise InvalidInput.single(
                "policy.resolution", "a forced resolution is set per failure type (policies=...)"
            )
        self._policies: dict[FailureType, FailurePolicy] = {}
        for ftype, pol in (policies or {}).items():
            self.set_policy(ftype, pol)

    def register(self, ftype: FailureType | str, handler: FailureHandler) -> None:
        """Install ``handler`` for ``ftype``, replacing the current one.

        Raises:
            InvalidInput: ``ftype`` is not one of the twelve types, or ``handler`` is not callable.
        """
        key = FailureType.of(ftype)
        if not callable(handler):
            raise InvalidInput.single("handler", "must be callable (event, policy) -> Resolution")
        self._handlers[key] = handler

    def set_policy(self, ftype: FailureType | str, policy: FailurePolicy | Mapping[str, Any]) -> None:
        """Configure ``ftype`` (validated: only resolutions allowed for the type)."""
        key = FailureType.of(ftype, field="policies")
        parsed = FailurePolicy.parse(policy, what="failure policy")
        check_policy(key, parsed)
        self._policies[key] = parsed

    def handler_for(self, ftype: FailureType | str) -> FailureHandler:
        return self._handlers[FailureType.of(ftype)]

    def policy_for(self, ftype: FailureType) -> FailurePolicy:
        return self._policies.get(ftype, self.policy)

    def process(self, event: FailureEvent) -> Resolution:
        """The resolution for ``event``: the operator's forced one, else its handler's.

        Raises:
            InvalidInput: the event's type is not a known constant.
            TypeError: a handler returned something other than a :class:`Resolution`.
        """
        ftype = FailureType.of(event.type)
        policy = self.policy_for(ftype)
        forced = forced_resolution(event, policy)
        if forced is not None:
            return forced
        resolution = self.handler_for(ftype)(event, policy)
        if not isinstance(resolution, Resolution):
            raise TypeError(f"handler for {ftype} returned {type(resolution).__name__}, not Resolution")
        return resolution


HandlerFactory = Callable[[], FailureHandler]
