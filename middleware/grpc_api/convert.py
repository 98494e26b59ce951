"""Protobuf <-> core model conversions. Protobuf types stop here."""

from __future__ import annotations

import json
from typing import Any

from .._model import parse_model
from .._proto.agency.v1 import agency_pb2, catalog_pb2, common_pb2
from ..catalog import CatalogEntry, CatalogQuery
from ..contracts import CapabilityContract
from ..errors import InvalidInput, Problem
from ..router import RoutingDecision
from ..schema_guard import check_schema_text
from ..tasks import Outcome

__all__ = [
    "contract_from_pb",
    "contract_to_pb",
    "decision_to_pb",
    "dumps",
    "entry_to_pb",
    "loads",
    "outcome_to_pb",
    "query_from_pb",
    "task_from_pb",
]


#: Deeper JSON is refused at the boundary (deep nesting exhausts recursion further in).
MAX_JSON_DEPTH = 64


def loads(text: str, field: str, *, default: Any = None, want: type | None = None) -> Any:
    """Parse a ``*_json`` field; bad JSON is an InvalidInput naming the field."""
    if not text:
        return default
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidInput([Problem(field, f"not valid JSON: {exc}")]) from None
    except RecursionError:
        raise InvalidInput([Problem(field, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")]) from None
    if _too_deep(value):
        raise InvalidInput([Problem(field, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")])
    if want is not None and not isinstance(value, want):
        raise InvalidInput(
            [Problem(field, f"must be a JSON {want.__name__ if want is not dict else 'object'}")]
        )
    return value


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
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
    return agency_pb2.Outcome(
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
        outcome_json=o.model_dump_json(),
    )
