"""What one audit record says (NIST SP 800-53 AU-3)."""

from __future__ import annotations

import functools
import json
import socket
import time
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson
from pydantic import Field, SerializerFunctionWrapHandler, ValidationError, model_serializer
from pydantic_core import to_jsonable_python

from .._model import Model
from ..errors import AuditCorrupted
from ..smf import new_id, utcnow

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "Actors",
    "AuditEventType",
    "AuditRecord",
    "PlainRecord",
    "canonical_json",
    "fast_canonical_json",
    "parse_record",
    "plain_record",
    "record_bytes",
    "record_problem",
    "record_view",
    "task_record_template",
    "utc_now_text",
]

AUDIT_SCHEMA_VERSION = 1


class AuditEventType(StrEnum):
    TASK_SUBMITTED = "task.submitted"
    MESSAGE_ACCEPTED = "message.accepted"
    MESSAGE_REJECTED = "message.rejected"
    GOAL_ANCHORED = "goal.anchored"
    PLAN_PROPOSED = "plan.proposed"
    PLAN_ACCEPTED = "plan.accepted"
    PLAN_REFUSED = "plan.refused"
    PLAN_SKIPPED = "plan.skipped"
    ROUTING_DECISION = "routing.decision"
    ROUTING_REFUSED = "routing.refused"
    DISPATCH = "agent.dispatch"
    AGENT_RESULT = "agent.result"
    VERIFICATION = "goal.verification"
    FAILURE = "failure.event"
    RESOLUTION = "failure.resolution"
    STATE_TRANSITION = "task.transition"
    HUMAN_HANDOVER = "human.handover"
    TASK_COMPLETED = "task.completed"
    TASK_INTERRUPTED = "task.interrupted"
    CATALOG_CHANGE = "catalog.change"
    AGENT_STEP = "agent.step"
    TASK_RESUMED = "task.resumed"
    QUARANTINE = "failure.quarantine"
    CIRCUIT_CHANGE = "agent.circuit"
    CONTRACT_REVIEW = "contract.review"
    MESSAGE_ACKED = "message.acked"
    MESSAGE_EXPIRED = "message.expired"
    MESSAGE_DEAD_LETTERED = "message.dead_lettered"
    MESSAGE_LOST = "message.lost"
    MESSAGE_FORGED = "message.forged"
    MESSAGE_DUPLICATE = "message.duplicate"
    TOPIC_DRIFT = "topic.drift"
    TOPIC_SUBSCRIBED = "topic.subscribed"
    AGENT_REGISTERED = "agent.registered"
    AGENT_TURN = "agent.turn"
    AGENT_HANDOFF = "agent.handoff"
    USAGE = "usage.recorded"
    BUDGET_ALERT = "budget.alert"
    BUDGET_EXCEEDED = "budget.exceeded"


class Actors(Model):
    """Who was involved: the end user, the agent, the session, and the tenant they act in.

    ``tenant`` is written only when there is one, so a record without a tenant has the same
    canonical bytes (and hash) as before tenants existed."""

    user: str = ""
    agent: str = ""
    session: str = ""
    tenant: str = ""

    @model_serializer(mode="wrap")
    def _without_empty_tenant(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("tenant"):
            data.pop("tenant", None)
        return data


class AuditRecord(Model):
    """One governed step. ``detail`` holds the step-specific facts (the explanation, the verdict ...)."""

    event_id: str = Field(default_factory=lambda: new_id("evt"))
    event_type: str = Field(min_length=1, max_length=64)
    time: datetime = Field(default_factory=utcnow)
    component: str = Field(default="gateway", max_length=64)
    node: str = Field(default_factory=socket.gethostname, max_length=128)
    actors: Actors = Field(default_factory=Actors)
    task_id: str = ""
    trace_id: str = ""
    goal_id: str = ""
    rule: str = Field(default="", description="The rule or policy applied.")
    outcome: str = Field(default="", description="success | failure | refused | info ...")
    detail: dict[str, Any] = Field(default_factory=dict)
    schema_version: int = AUDIT_SCHEMA_VERSION

    def canonical(self) -> bytes:
        """The canonical JSON bytes of this record (sorted keys, compact, UTF-8).

        These bytes are what the write-ahead log stores and hashes; nothing ever
        re-serialises a stored record to check it (verification re-hashes the stored bytes).
        """
        return fast_canonical_json(self.model_dump(mode="json"))


PlainRecord = dict[str, Any]
"""An audit record as plain data: exactly ``AuditRecord.model_dump(mode="json")`` (every
field, ``time`` as pydantic writes it). Built by code (``plain_record``), never from a client
or an agent, so it is not validated again; its canonical bytes are the same as those of the
``AuditRecord`` it validates to (tested)."""


def plain_record(
    event_type: str,
    *,
    node: str,
    outcome: str = "",
    detail: dict[str, Any] | None = None,
    component: str = "gateway",
    user: str = "",
    agent: str = "",
    session: str = "",
    task_id: str = "",
    trace_id: str = "",
    goal_id: str = "",
    rule: str = "",
) -> PlainRecord:
    """A new record as plain data (the hot path's form: no model built, no validation).

    Same fields and defaults as ``AuditRecord``; ``time`` is now, in pydantic's JSON form.
    """
    return {
        "event_id": new_id("evt"),
        "event_type": event_type,
        "time": utc_now_text(),
        "component": component,
        "node": node,
        "actors": {"user": user, "agent": agent, "session": session},
        "task_id": task_id,
        "trace_id": trace_id,
        "goal_id": goal_id,
        "rule": rule,
        "outcome": outcome,
        "detail": detail if detail is not None else {},
        "schema_version": AUDIT_SCHEMA_VERSION,
    }


def task_record_template(
    *, node: str, task_id: str, trace_id: str, component: str = "gateway"
) -> PlainRecord:
    """What every record of one task carries, built once per task: a copy of it, the record's
    own fields set, is the record :func:`plain_record` builds (the same keys in the same order)."""
    return {
        "event_id": "",
        "event_type": "",
        "time": "",
        "component": component,
        "node": node,
        "actors": {},
        "task_id": task_id,
        "trace_id": trace_id,
        "goal_id": "",
        "rule": "",
        "outcome": "",
        "detail": {},
        "schema_version": AUDIT_SCHEMA_VERSION,
    }


def utc_now_text() -> str:
    """Now (UTC) as pydantic's JSON mode writes it: ISO 8601, the microseconds when not zero, ``Z``.

    The same text as ``utcnow().isoformat()`` with ``Z`` for ``+00:00`` (the same clock, its
    microseconds floored as ``datetime.now`` floors them), with the date and time of day
    formatted once a second instead of once a record.
    """
    return utc_text_of(time.time_ns())


def utc_text_of(ns: int) -> str:
    """:func:`utc_now_text` at ``ns`` nanoseconds since the epoch."""
    micro = ns // 1000 % 1_000_000
    prefix = _second_text(ns // 1_000_000_000)
    return f"{prefix}.{micro:06d}Z" if micro else f"{prefix}Z"


@functools.lru_cache(maxsize=4)
def _second_text(seconds: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of a second since the epoch (UTC)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat()[:-6]  # without "+00:00"


def record_bytes(record: AuditRecord | PlainRecord) -> bytes:
    """The canonical bytes of a record in either form (what the log stores and hashes)."""
    if isinstance(record, AuditRecord):
        return record.canonical()
    return fast_canonical_json(record)


def record_view(record: AuditRecord | PlainRecord) -> AuditRecord:
    """``record`` as an ``AuditRecord`` (validates a plain record: for readers off the hot path)."""
    return record if isinstance(record, AuditRecord) else AuditRecord.model_validate(record)


_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME


def _jsonable(value: Any) -> Any:
    """What orjson does not write itself, in pydantic's JSON form (datetimes with ``Z`` ...)."""
    return to_jsonable_python(value)


def fast_canonical_json(value: Any) -> bytes:
    """Canonical JSON via orjson: sorted keys, compact, UTF-8 (non-ASCII kept, not escaped).

    Floats use orjson's shortest round-trip form (``1e16``, not ``1e+16``). The only values
    orjson refuses (integers beyond 64 bits) fall back to ``canonical_json``; either way the
    bytes are deterministic for a given record and are stored exactly as hashed.
    """
    try:
        return orjson.dumps(value, default=_jsonable, option=_OPTIONS)
    except TypeError:
        return canonical_json(value)


def canonical_json(value: Any) -> bytes:
    """Canonical JSON via the ``json`` module (sorted keys, compact, UTF-8).

    The form ``FileAuditLog`` writes and re-derives when it checks its file: keep it stable.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable
    ).encode()


def record_problem(payload: bytes | memoryview) -> str | None:
    """What is wrong with the stored bytes of one record (None: it is a valid ``AuditRecord``).

    A record of this reader's schema version (or older) must validate exactly: a JSON object
    with known fields of the right types, nothing unknown. A record of a *newer* schema
    version (written by a later release) need only be a JSON object with a non-empty
    ``event_type``: its other fields are that release's to define.
    """
    data = bytes(payload)
    try:
        AuditRecord.model_validate_json(data)
        return None
    except ValidationError as exc:
        if _newer_schema(data):
            return None
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "the record"
        return f"not a valid audit record ({where}: {err.get('msg', 'invalid')})"


def _newer_schema(data: bytes) -> dict[str, Any] | None:
    """The record as a dict if it is an object of a newer schema version with an event type."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    version, etype = obj.get("schema_version"), obj.get("event_type")
    newer = isinstance(version, int) and not isinstance(version, bool) and version > AUDIT_SCHEMA_VERSION
    return obj if newer and isinstance(etype, str) and etype else None


_FIELDS = frozenset(AuditRecord.model_fields)


def parse_record(payload: bytes | memoryview, *, where: str = "") -> AuditRecord:
    """The ``AuditRecord`` stored as ``payload`` (the bytes a log holds).

    A record of a newer schema version is read with the fields this release knows (unknown
    ones are left out of the object; the stored bytes, hashed and exported, keep them).

    Raises:
        AuditCorrupted: the bytes are not a record (see :func:`record_problem`), naming ``where``.
    """
    data = bytes(payload)
    try:
        return AuditRecord.model_validate_json(data)
    except ValidationError:
        newer = _newer_schema(data)
        if newer is not None:
            try:
                return AuditRecord.model_validate({k: v for k, v in newer.items() if k in _FIELDS})
            except ValidationError:
                pass
    raise AuditCorrupted(record_problem(data) or "not a valid audit record", where=where)
