"""Task size limits (issue 13, item 6): too many steps is refused before anything runs, an
agent answer too large is a typed failure, an outcome too large ends the task failed with
a reason naming the limit -- never a response the transport cannot send."""

from __future__ import annotations

import json

import grpc
import pytest

from middleware import Agency, FailureType, InvalidInput, TaskState
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.record import AuditEventType
from middleware.limits import MiB, TaskLimits
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api import build_server
from middleware.server.settings import AgencyConfig


async def no_sleep(_: float) -> None:
    return None


def contract(name: str, action: str) -> dict[str, object]:
    return {"name": name, "version": "1.0.0", "can_do": [action], "slo_latency_ms": 1000}


def big(size: int):
    def agent(request: object) -> dict[str, str]:
        return {"blob": "x" * size}

    return agent


def _kinds(agency: Agency) -> list[str]:
    return [r.event_type for _, r in agency.audit.records()]


async def test_too_many_steps_are_refused_before_anything_runs() -> None:
    agency = Agency(sleep=no_sleep, config=AgencyConfig(limits=TaskLimits(max_steps_per_task=3)))
    calls: list[object] = []
    await agency.register(contract("calc", "compute"), lambda r: calls.append(r) or {"ok": 1})
    steps = [{"name": f"s{i}", "action": "compute"} for i in range(4)]
    with pytest.raises(InvalidInput) as info:
        await agency.submit({"text": "go", "steps": steps})
    assert info.value.field == "steps"
    assert "limits.max_steps_per_task (3)" in info.value.message
    assert not calls
    assert AuditEventType.TASK_SUBMITTED not in _kinds(agency)
    assert AuditEventType.MESSAGE_REJECTED in _kinds(agency)
    ok = await agency.submit({"text": "go", "steps": steps[:3]})
    assert ok.state is TaskState.COMPLETED and len(calls) == 3


async def test_the_default_step_limit_refuses_a_huge_step_list_over_grpc() -> None:
    agency = Agency(sleep=no_sleep)
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            steps = [agency_pb2.TaskStep(name=f"s{i}", action="x") for i in range(50_000)]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Submit(agency_pb2.SubmitRequest(text="go", steps=steps))
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            md = dict(info.value.trailing_metadata() or ())
            assert md["agency-field"] == "steps"
            assert "max_steps_per_task (64)" in (info.value.details() or "")
    finally:
        await server.stop(0)
        await agency.close()
    assert AuditEventType.DISPATCH not in _kinds(agency)


async def test_an_answer_over_the_output_limit_is_a_typed_failure() -> None:
    limits = TaskLimits(max_output_bytes=4096, max_outcome_bytes=8192)
    agency = Agency(sleep=no_sleep, config=AgencyConfig(limits=limits))
    await agency.register(contract("chatty", "talk"), big(10_000))
    outcome = await agency.submit({"text": "talk", "steps": [{"name": "a", "action": "talk"}]})
    assert outcome.state is not TaskState.COMPLETED  # resolved like a schema violation (a handover)
    assert outcome.output is None
    violations = [f for f in outcome.failures if f.type is FailureType.SCHEMA_VIOLATION]
    assert violations and "limits.max_output_bytes (4096)" in violations[0].detail
    failures = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.FAILURE]
    assert failures and failures[0].detail["context"]["limit"] == "max_output_bytes"


async def test_an_outcome_over_its_limit_ends_failed_naming_the_limit() -> None:
    limits = TaskLimits(max_output_bytes=8192, max_outcome_bytes=16384)
    agency = Agency(sleep=no_sleep, config=AgencyConfig(limits=limits))
    await agency.register(contract("writer", "write"), big(6000))
    steps = [{"name": f"s{i}", "action": "write"} for i in range(4)]  # 4 x 6 KB answers: each fits
    outcome = await agency.submit({"text": "write", "steps": steps})
    assert outcome.state is TaskState.FAILED
    assert "limits.max_outcome_bytes (16384)" in outcome.reason
    assert outcome.output is None and all(s.output is None for s in outcome.steps)
    assert len(outcome.model_dump_json()) <= 16384
    stored = await agency.get_task(outcome.task_id)
    assert stored.state is TaskState.FAILED and len(stored.model_dump_json()) <= 16384
    ends = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.TASK_COMPLETED]
    assert ends[-1].outcome == "failed" and "max_outcome_bytes" in ends[-1].detail["reason"]


async def test_a_task_with_megabytes_of_answers_gets_an_outcome_over_grpc() -> None:
    """Issue 13: a Submit under 4 MiB produced a 4.36 MB Outcome the client never got."""
    agency = Agency(sleep=no_sleep)
    await agency.register(contract("writer", "write"), big(900_000))
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{server.port}", options=[("grpc.max_receive_message_length", -1)]
        ) as channel:
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            steps = [agency_pb2.TaskStep(name=f"s{i}", action="write") for i in range(3)]
            outcome = await stub.Submit(agency_pb2.SubmitRequest(text="write", steps=steps))
    finally:
        await server.stop(0)
        await agency.close()
    assert outcome.state == "failed"
    assert "limits.max_outcome_bytes" in outcome.reason
    assert outcome.ByteSize() < 4 * MiB
    assert json.loads(outcome.outcome_json)["state"] == "failed"


def test_limits_are_definition_file_settings() -> None:
    definition = AgencyDefinition.parse(
        {"agency": {"limits": {"max_steps_per_task": 8, "max_output_bytes": 65536}}}
    )
    assert definition.agency.limits.max_steps_per_task == 8
    assert definition.agency.limits.max_outcome_bytes == 3 * MiB // 2
    with pytest.raises(InvalidInput) as info:
        AgencyDefinition.parse({"agency": {"limits": {"max_output_bytes": 4 * MiB}}})
    assert info.value.field.startswith("agency.limits")


@pytest.mark.parametrize("output", [{"a": "\ud800"}, {"a": float("nan")}, [float("-inf")]])
async def test_an_answer_json_cannot_hold_is_a_typed_failure_not_a_crash(output: object) -> None:
    """A lone surrogate crashed the task (the log could not write it); NaN was logged as null."""
    agency = Agency(sleep=no_sleep)
    await agency.register(contract("odd", "odd"), lambda r: output)
    outcome = await agency.submit({"text": "odd", "steps": [{"name": "a", "action": "odd"}]})
    assert outcome.state is not TaskState.COMPLETED and outcome.output is None
    assert outcome.failures[0].type is FailureType.SCHEMA_VIOLATION
    assert "answered what JSON cannot hold" in outcome.failures[0].detail
