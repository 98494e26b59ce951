"""Protobuf <-> core model conversions. Protobuf types stop here."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from ..._model import parse_model
from ..._proto.agency.v1 import agency_pb2, catalog_pb2, common_pb2
from ...catalog import CatalogEntry, CatalogQuery
from ...contracts import CapabilityContract
from ...errors import InvalidInput, Problem, ResourceExhausted
from ...router import RoutingDecision
from ...schema_guard import check_schema_text
from ...smf import SMFMessage
from ...tasks import Outcome, outcome_json

__all__ = [
    "contract_from_pb",
    "contract_to_pb",
    "decision_from_pb",
    "decision_to_pb",
    "dumps",
    "entry_from_pb",
    "entry_to_pb",
    "loads",
    "outcome_from_pb",
    "outcome_to_pb",
    "query_from_pb",
    "smf_from_pb",
    "smf_to_pb",
    "task_from_pb",
]


#: The largest message the gateway receives or sends (gRPC's default is 4 MiB).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

#: Deeper JSON is refused at the boundary (deep nesting exhausts recursion further in).
MAX_JSON_DEPTH = 64

#: An escape of a UTF-16 surrogate (``\\ud800``..``\\udfff``): only text holding one needs the
#: walk that finds lone surrogates (a pair decodes to one character; raw UTF-8 cannot hold one).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


class _NotJson(ValueError):
    """A value JSON does not have (``NaN``, ``Infinity``) or a lone UTF-16 surrogate."""


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value (JSON numbers are finite)")


#: ``json.loads`` with an option builds a decoder per call; one shared decoder reads the same.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def loads(text: str, field: str, *, default: Any = None, want: type | None = None) -> Any:
    """Parse a ``*_json`` field; bad JSON is an InvalidInput naming the field.

    This is the one place request JSON is decoded. Besides syntax it refuses what JSON
    does not have but Python's parser lets through: ``NaN``/``Infinity`` (they would be
    stored as ``null``, so the log would not hold what was sent) and lone UTF-16 surrogates
    such as ``"\\ud800"`` (no UTF-8 text can hold them: the audit log could not write them).
    """
    if not text:
        return default
    try:
        if text.startswith("\ufeff"):  # as json.loads refuses it (the decoder alone does not)
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _DECODER.decode(text)
    except ValueError as exc:  # _NotJson included
        raise InvalidInput([Problem(field, f"not valid JSON: {exc}")]) from None
    except RecursionError:
        raise InvalidInput([Problem(field, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")]) from None
    surrogates = _SURROGATE_ESCAPE.search(text) is not None
    problem = _walk(value, surrogates)
    if problem:
        raise InvalidInput([Problem(field, problem)])
    if want is not None and not isinstance(value, want):
        raise InvalidInput(
            [Problem(field, f"must be a JSON {want.__name__ if want is not dict else 'object'}")]
        )
    return value


def _walk(value: Any, surrogates: bool) -> str:
    """What is wrong deep in a parsed value ('' = nothing): nesting too deep, or (when
    ``surrogates``) a string or key holding a lone UTF-16 surrogate."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(node, dict):
                if surrogates and any(_lone_surrogate(k) for k in node):
                    return _SURROGATE_PROBLEM
                stack.extend((child, depth + 1) for child in node.values())
            else:
                stack.extend((child, depth + 1) for child in node)
        elif surrogates and isinstance(node, str) and _lone_surrogate(node):
            return _SURROGATE_PROBLEM
        elif isinstance(node, float) and not math.isfinite(node):  # 1e999 parses as inf
            return "not valid JSON: a number out of range (JSON numbers are finite)"
    return ""


_SURROGATE_PROBLEM = (
    "not valid JSON: a string holds a lone UTF-16 surrogate (JSON text must be valid Unicode)"
)


def _lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


#: ``json.dumps`` with options builds an encoder per call; one shared encoder gives the same text.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def contract_from_pb(pb: common_pb2.CapabilityContract, prefix: str = "contract") -> CapabilityContract:
    # bounded before parsing: a huge schema is refused by its size, not after parsing it
    check_schema_text(pb.input_schema_json, field=f"{prefix}.input_schema_json")
    check_schema_text(pb.output_schema_json, field=f"{prefix}.output_schema_json")
    data: dict[str, Any] = {
        "name": pb.name,
        "version": pb.version or "1.0.0",
        "description": pb.description,
        "tags": list(pb.tags),
        "can_do": list(pb.can_do),
        "cannot_do": list(pb.cannot_do),
        "input_schema": loads(pb.input_schema_json, f"{prefix}.input_schema_json", default={}, want=dict),
        "output_schema": loads(pb.output_schema_json, f"{prefix}.output_schema_json", default={}, want=dict),
        "owner": pb.owner,
        "endpoint": pb.endpoint,
        "regions": list(pb.regions),
        "data_residency": list(pb.data_residency),
        "time_windows": list(pb.time_windows),
        "granularities": list(pb.granularities),
        "metrics": list(pb.metrics),
        "human_review": pb.human_review,
        "time_critical": pb.time_critical,
        "side_effect_free": pb.side_effect_free,
        "data_classes": list(pb.data_classes),
        "restore_personal_data": pb.restore_personal_data,
        "facts": list(pb.facts),
        "idempotency": pb.idempotency,
        "tenant": pb.tenant,
        "shared_with": list(pb.shared_with),
        "stream_progress": pb.stream_progress,
    }
    if pb.HasField("slo_latency_ms"):  # unset = the contract's default SLO
        data["slo_latency_ms"] = pb.slo_latency_ms
    if pb.HasField("max_data_delay_ms"):  # unset = undeclared
        data["max_data_delay_ms"] = pb.max_data_delay_ms
    return parse_model(CapabilityContract, data, what="capability contract", prefix=prefix)


def contract_to_pb(c: CapabilityContract) -> common_pb2.CapabilityContract:
    return common_pb2.CapabilityContract(
        name=c.name,
        version=c.version,
        description=c.description,
        tags=c.tags,
        slo_latency_ms=c.slo_latency_ms,
        can_do=c.can_do,
        cannot_do=c.cannot_do,
        input_schema_json=dumps(c.input_schema),
        output_schema_json=dumps(c.output_schema),
        owner=c.owner,
        endpoint=c.endpoint,
        regions=c.regions,
        data_residency=c.data_residency,
        max_data_delay_ms=c.max_data_delay_ms,
        time_windows=c.time_windows,
        granularities=c.granularities,
        metrics=c.metrics,
        human_review=c.human_review,
        time_critical=c.time_critical,
        side_effect_free=c.side_effect_free,
        data_classes=c.data_classes,
        restore_personal_data=c.restore_personal_data,
        facts=c.facts,
        idempotency=c.idempotency,
        tenant=c.tenant,
        shared_with=c.shared_with,
        stream_progress=c.stream_progress,
    )


def entry_to_pb(e: CatalogEntry) -> catalog_pb2.CatalogEntry:
    return catalog_pb2.CatalogEntry(
        contract=contract_to_pb(e.contract),
        key=e.key,
        registered_at=e.registered_at.isoformat(),
        last_heartbeat=e.last_heartbeat.isoformat(),
        stale=e.stale,
        revision=e.revision,
    )


def query_from_pb(pb: catalog_pb2.QueryRequest) -> CatalogQuery:
    return CatalogQuery.parse(
        {
            "name": pb.name,
            "action": pb.action,
            "tags": list(pb.tags),
            "max_slo_latency_ms": pb.max_slo_latency_ms,
            "include_stale": pb.include_stale,
            "version_range": pb.version_range,
        },
        what="catalog query",
    )


def task_from_pb(pb: agency_pb2.SubmitRequest) -> dict[str, Any]:
    """The task request as plain data; the core validates it (and audits a refusal)."""
    data: dict[str, Any] = {
        "text": pb.text,
        "input": loads(pb.input_json, "input_json", default={}, want=dict),
        "constraints": loads(pb.constraints_json, "constraints_json", default={}, want=dict),
        "steps": [
            {
                "name": s.name,
                "action": s.action,
                "tags": list(s.tags),
                "text": s.text,
                "input": loads(s.input_json, f"steps[{i}].input_json", default={}, want=dict),
            }
            for i, s in enumerate(pb.steps)
        ],
        "goal_id": pb.goal_id,
        "user_id": pb.user_id or "anonymous",
        "session_id": pb.session_id,
        "trace_id": pb.trace_id,
    }
    if pb.task_id:
        data["task_id"] = pb.task_id
    goal = loads(pb.goal_json, "goal_json", want=dict)
    if goal is not None:
        data["goal"] = goal
    return data


def decision_to_pb(d: RoutingDecision) -> agency_pb2.RoutingDecision:
    return agency_pb2.RoutingDecision(
        constraints_json=dumps(d.constraints.model_dump(mode="json")),
        chosen=d.chosen,
        fallbacks=d.fallbacks,
        candidates=[
            agency_pb2.Candidate(
                agent=c.agent,
                score=c.score,
                slo_latency_ms=c.slo_latency_ms,
                success_rate=c.success_rate,
                load=c.load,
                samples=c.samples,
            )
            for c in d.candidates
        ],
        rejected=[
            agency_pb2.Rejection(agent=r.agent, constraint=r.constraint, reason=r.reason) for r in d.rejected
        ],
        explanation=d.explanation,
        refused=d.refused,
        considered=d.considered,
        rejected_omitted=d.rejected_omitted,
    )


def outcome_to_pb(o: Outcome) -> agency_pb2.Outcome:
    verdict = None
    if o.goal_verdict is not None:
        verdict = agency_pb2.GoalVerdict(
            goal_id=o.goal_verdict.goal_id,
            passed=o.goal_verdict.passed,
            duration_ms=o.goal_verdict.duration_ms,
            steps=[
                agency_pb2.StepVerdict(
                    step=s.step,
                    kind=s.kind,
                    passed=s.passed,
                    expected_json=dumps(s.expected),
                    actual_json=dumps(s.actual),
                    reason=s.reason,
                )
                for s in o.goal_verdict.steps
            ],
        )
    pb = agency_pb2.Outcome(
        task_id=o.task_id,
        trace_id=o.trace_id,
        state=o.state.value,
        a2a_state=o.a2a_state,
        output_json=dumps(o.output),
        goal_id=o.goal_id,
        goal_verdict=verdict,
        failures=[
            agency_pb2.Failure(
                type=f.type.value, step=f.step, agent=f.agent, attempt=f.attempt, detail=f.detail
            )
            for f in o.failures
        ],
        resolutions=[
            agency_pb2.Resolution(
                kind=r.kind.value,
                failure_type=r.failure_type.value,
                reason=r.reason,
                agent=r.agent,
                delay_ms=r.delay_ms,
            )
            for r in o.resolutions
        ],
        reason=o.reason,
        pending_json=dumps(o.pending) if o.pending else "",
        audit_index=o.audit_index,
        outcome_json=outcome_json(o).decode(),  # the bytes the pipeline measured for its size bound
    )
    size = pb.ByteSize()
    if size > MAX_MESSAGE_BYTES:  # the core bounds outcomes (limits.max_outcome_bytes): a net
        raise ResourceExhausted(
            f"the outcome of task {o.task_id} is {size} bytes, more than a response may carry "
            f"({MAX_MESSAGE_BYTES}); lower agency.limits.max_outcome_bytes"
        )
    return pb


# ------------------------------------------------------- replies, client side
def entry_from_pb(pb: catalog_pb2.CatalogEntry) -> CatalogEntry:
    """A catalog entry as the server sent it (the client's side of :func:`entry_to_pb`)."""
    return CatalogEntry(
        contract=contract_from_pb(pb.contract),
        registered_at=pb.registered_at,  # pydantic parses RFC 3339
        last_heartbeat=pb.last_heartbeat,
        stale=pb.stale,
        revision=max(1, pb.revision),
    )


def outcome_from_pb(pb: agency_pb2.Outcome) -> Outcome:
    """The whole outcome a server sent (it travels as ``outcome_json``)."""
    return Outcome.model_validate_json(pb.outcome_json)


def decision_from_pb(pb: agency_pb2.RoutingDecision) -> RoutingDecision:
    """A routing decision as the server sent it (the client's side of :func:`decision_to_pb`)."""
    from ...constraints import Constraints
    from ...router import Candidate, Rejection

    return RoutingDecision(
        constraints=Constraints.model_validate(loads(pb.constraints_json, "constraints_json", default={})),
        chosen=pb.chosen,
        fallbacks=list(pb.fallbacks),
        candidates=[
            Candidate(
                agent=c.agent,
                score=c.score,
                slo_latency_ms=c.slo_latency_ms,
                success_rate=c.success_rate,
                load=c.load,
                samples=c.samples,
            )
            for c in pb.candidates
        ],
        rejected=[Rejection(agent=r.agent, constraint=r.constraint, reason=r.reason) for r in pb.rejected],
        rejected_omitted=pb.rejected_omitted,
        considered=pb.considered,
        explanation=pb.explanation,
    )


_DATETIME = TypeAdapter(datetime)


def smf_from_pb(pb: common_pb2.SMFMessage, prefix: str = "message") -> SMFMessage:
    """The pydantic SMF message for ``pb`` (``InvalidInput`` naming ``message.*`` fields)."""
    data: dict[str, Any] = {
        "sender": pb.sender,
        "receiver": pb.receiver,
        "content": loads(pb.content_json, f"{prefix}.content_json"),
        "metadata": {
            "provenance": {
                "source": pb.metadata.provenance.source,
                "reliability_score": pb.metadata.provenance.reliability_score,
            },
            "intention_trace": list(pb.metadata.intention_trace),
            "domain": pb.metadata.domain,
        },
    }
    for optional in ("freshness_ttl", "confidence_score"):  # unset = not given
        if pb.metadata.HasField(optional):
            data["metadata"][optional] = getattr(pb.metadata, optional)
    if not pb.HasField("metadata"):
        del data["metadata"]
    for name in ("message_id", "trace_id", "created_at"):
        value = getattr(pb, name)
        if value:
            data[name] = value
    return parse_model(SMFMessage, data, what="SMF message", prefix=prefix)


def smf_to_pb(m: SMFMessage) -> common_pb2.SMFMessage:
    """The protobuf SMF message for ``m`` (its times in the RFC 3339 text the sender signed)."""
    meta = m.metadata
    return common_pb2.SMFMessage(
        message_id=m.message_id,
        sender=m.sender,
        receiver=m.receiver,
        content_json=dumps(m.content),
        metadata=common_pb2.SMFMetadata(
            provenance=common_pb2.Provenance(
                source=meta.provenance.source, reliability_score=meta.provenance.reliability_score
            ),
            freshness_ttl=meta.freshness_ttl,
            confidence_score=meta.confidence_score,
            intention_trace=list(meta.intention_trace),
            domain=meta.domain,
        ),
        trace_id=m.trace_id,
        created_at=_rfc3339(m.created_at),
    )


def _rfc3339(value: datetime) -> str:
    # The same text pydantic produces in the canonical JSON the sender signed.
    return str(_DATETIME.dump_python(value, mode="json"))
