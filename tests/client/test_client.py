"""The public client (middleware.client) against a real gRPC server on port 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from middleware import Agency, AgentReply
from middleware.client import AgencyClient, SyncAgencyClient
from middleware.demo import build_demo_agency, warranty_request
from middleware.errors import (
    AlreadyExists,
    AuditCorrupted,
    ContractViolation,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    Unavailable,
)
from middleware.server.grpc_api import build_server
from middleware.testing import ScriptedAgent

WARRANTY_STEPS = [
    {"name": "intake", "action": "extract_intent"},
    {"name": "order", "action": "get_order_detail"},
    {"name": "warranty", "action": "warranty_check"},
    {"name": "shipping", "action": "ship_replacement"},
    {"name": "reply", "action": "compose_reply"},
]
WARRANTY_TEXT = "我上周买的手机屏幕碎了，要换新"  # the seed's request: greeting_agent anchors the goal
WARRANTY_INPUT = {"user_id": "u_789", "device": "fp_7f3a"}


@pytest.fixture
async def client(grpc_gateway):
    _, _, server = grpc_gateway
    async with AgencyClient(f"127.0.0.1:{server.port}") as c:
        yield c


async def test_submit_route_and_get_task_return_core_models(client) -> None:
    outcome = await client.submit(WARRANTY_TEXT, user_id="u_789", input=WARRANTY_INPUT, steps=WARRANTY_STEPS)
    assert outcome.state == "completed" and outcome.goal_verdict and outcome.goal_verdict.passed
    assert outcome.goal_id == "GOAL_WARRANTY_001"
    assert outcome.output["tracking_number"] == "EXP123456"
    assert outcome.steps[2].agent == "warranty_agent@2.1.0"
    again = await client.get_task(outcome.task_id)
    assert again.state == "completed" and again.trace_id == outcome.trace_id

    decision = await client.route("I need a replacement for my shattered screen")
    assert decision.chosen == "warranty_agent@2.1.0" and not decision.refused
    assert decision.constraints.action == "warranty_claim"
    refused = await client.route("anything", {"action": "stock_prediction"})
    assert refused.refused and refused.rejected[0].constraint == "cannot_do"


async def test_errors_are_the_library_errors_with_every_problem(client) -> None:
    with pytest.raises(InvalidInput) as info:
        await client.submit("")
    assert info.value.field == "text" and info.value.details["grpc_code"] == "INVALID_ARGUMENT"
    with pytest.raises(NotFound):
        await client.get_task("task_nope")
    with pytest.raises(NotFound):
        await client.catalog.get("nobody@1.0.0")
    with pytest.raises(AlreadyExists):
        await client.catalog.register(
            {"name": "warranty_agent", "version": "2.1.0", "can_do": ["warranty_claim"]}
        )
    with pytest.raises(FailedPrecondition):  # the demo's log is in memory: no proofs
        await client.audit.latest_checkpoint()


async def test_reasons_map_to_the_most_specific_class() -> None:
    import grpc

    from middleware.errors import ConcurrentUpdate, RoutingRefused
    from middleware.server.grpc_api.status import error_from_status

    e = error_from_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        "contract schema violation: a: b",
        {"agency-reason": "SCHEMA_VIOLATION", "agency-problems": '[{"field": "a", "reason": "b"}]'},
    )
    assert (
        type(e) is ContractViolation
        and e.problems[0].field == "a"
        and str(e) == "contract schema violation: a: b"
    )
    assert (
        type(
            error_from_status(grpc.StatusCode.FAILED_PRECONDITION, "x", {"agency-reason": "ROUTING_REFUSED"})
        )
        is RoutingRefused
    )
    busy = error_from_status(
        grpc.StatusCode.FAILED_PRECONDITION,
        "x",
        {"agency-reason": "CONCURRENT_UPDATE", "agency-retry-after-ms": "50"},
    )
    assert type(busy) is ConcurrentUpdate and busy.retryable and busy.details["retry_after_ms"] == 50
    assert type(error_from_status(grpc.StatusCode.NOT_FOUND, "gone")) is NotFound


async def test_catalog_round_trip_and_watch(client) -> None:
    entry = await client.catalog.register(
        {"name": "refund_agent", "version": "1.0.0", "can_do": ["issue_refund"], "tags": ["Payments"]}
    )
    assert entry.key == "refund_agent@1.0.0" and entry.contract.tags == ["payments"]
    updated = await client.catalog.update(
        {"name": "refund_agent", "version": "1.0.0", "can_do": ["issue_refund", "void"]}
    )
    assert updated.revision == 2
    assert [e.key for e in await client.catalog.query(action="void")] == ["refund_agent@1.0.0"]
    assert (await client.catalog.heartbeat("refund_agent@1.0.0")).key == "refund_agent@1.0.0"
    changes = client.catalog.watch(include_existing=True)
    first = await anext(changes)
    assert first.type == "existing" and first.entry is not None
    await client.catalog.deregister("refund_agent@1.0.0")
    async for change in changes:
        if change.type == "deregistered":
            assert change.key == "refund_agent@1.0.0" and change.entry is None
            break
    await changes.aclose()
    with pytest.raises(NotFound):
        await client.catalog.update({"name": "refund_agent", "version": "1.0.0", "can_do": ["x"]})
    with pytest.raises(InvalidInput) as info:  # checked here, before any call
        await client.catalog.register({"name": "x", "version": "nope", "can_do": ["a"]})
    assert info.value.field == "version"


async def test_goals_register_and_get(client) -> None:
    goal = await client.goals.register(
        {
            "id": "GOAL_CLIENT_001",
            "description": "says hello",
            "verification_steps": ["output contains hello"],
        }
    )
    assert goal.id == "GOAL_CLIENT_001" and goal.verification_steps[0].kind == "contains"
    assert (await client.goals.get("GOAL_CLIENT_001")).description == "says hello"
    with pytest.raises(NotFound):
        await client.goals.get("GOAL_NOPE")


async def test_resume_a_task_waiting_for_an_answer() -> None:
    from middleware import CapabilityContract

    agency = Agency()
    await agency.register(
        CapabilityContract(name="picker", can_do=["pick"], slo_latency_ms=200),
        ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.4)),
    )
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    try:
        async with AgencyClient(f"127.0.0.1:{server.port}") as c:
            waiting = await c.submit("pick one", constraints={"action": "pick"})
            assert waiting.state == "input_required" and waiting.pending["kind"] == "clarification"
            done = await c.resume(waiting.task_id, answer="accept")
            assert done.state == "completed" and done.output == {"plan": "probably plan A"}
            with pytest.raises(FailedPrecondition):
                await c.resume(waiting.task_id, answer="accept")
    finally:
        await server.stop(0)
        await agency.close()


async def test_an_absent_gateway_is_unavailable_naming_the_address() -> None:
    async with AgencyClient("127.0.0.1:1", timeout=5) as c:
        with pytest.raises(Unavailable) as info:
            await c.route("x")
    assert "127.0.0.1:1" in str(info.value) and "agency serve" in str(info.value)


@pytest.fixture
async def audit_client(tmp_path: Path):
    from audit.helpers import open_log
    from prometheus_client import CollectorRegistry

    from middleware.server.metrics import MeteredAuditLog, Metrics

    async def no_sleep(_: float) -> None:
        return None

    wal = open_log(tmp_path, checkpoint_every=5)
    agency = await build_demo_agency(
        Agency(audit=MeteredAuditLog(wal, Metrics(registry=CollectorRegistry())), sleep=no_sleep)
    )
    outcome = await agency.submit(warranty_request())
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    async with AgencyClient(f"127.0.0.1:{server.port}") as c:
        yield wal, outcome, c
    await server.stop(0)
    await agency.close()


async def test_audit_export_and_proofs_are_verified_on_the_client(audit_client) -> None:
    from audit.helpers import SIGNER, record

    wal, outcome, c = audit_client
    entries = [e async for e in c.audit.export()]
    assert [e.index for e in entries] == list(range(1, wal.size + 1))
    failures = [e async for e in c.audit.export(trace_id=outcome.trace_id, event_types=["failure.event"])]
    assert len(failures) == 3 and {e.obj()["event_type"] for e in failures} == {"failure.event"}
    by_prefix = [e async for e in c.audit.export(trace_id=outcome.trace_id[:10].upper())]
    assert by_prefix and {e.obj()["trace_id"] for e in by_prefix} == {outcome.trace_id}  # ids match one way

    cp = await c.audit.latest_checkpoint(vkey=SIGNER.vkey)
    assert cp.pinned and cp.size >= 5 and cp.node == "n1"
    for entry in (entries[0], entries[cp.size - 1]):
        await c.audit.prove_included(entry, cp)
    tampered = type(entries[0])(
        entries[0].node, 1, entries[0].time_ns, entries[0].record.replace(b"{", b"{ ", 1)
    )
    with pytest.raises(AuditCorrupted):
        (await c.audit.inclusion_proof(1, cp.size)).verify(tampered.record, cp)

    old = await c.audit.latest_checkpoint()
    await wal.append(record(99))
    await wal.checkpoint()
    new = await c.audit.latest_checkpoint(vkey=SIGNER.vkey)
    assert new.size > old.size
    await c.audit.prove_consistent(old, new)
    with pytest.raises(AuditCorrupted):  # swapped: the newer tree is not a prefix of the older one
        (await c.audit.consistency_proof(old.size, new.size)).verify(new, old)

    from middleware.audit.checkpoint import Signer

    with pytest.raises(AuditCorrupted):  # a key we did not pin
        await c.audit.latest_checkpoint(vkey=Signer("someone-else").vkey)


def test_the_sync_client_does_the_same_without_await() -> None:
    from served_in_thread import ServedInThread

    class Served(ServedInThread):
        async def start(self) -> None:
            async def no_sleep(_: float) -> None:
                return None

            self.agency = await build_demo_agency(Agency(sleep=no_sleep))
            self.server = build_server(self.agency, "127.0.0.1:0")
            await self.server.start()

        async def stop(self) -> None:
            await self.server.stop(0)
            await self.agency.close()

    with Served() as served, SyncAgencyClient(f"127.0.0.1:{served.server.port}") as client:
        outcome = client.submit(WARRANTY_TEXT, user_id="u_789", input=WARRANTY_INPUT, steps=WARRANTY_STEPS)
        assert outcome.state == "completed"
        assert client.get_task(outcome.task_id).trace_id == outcome.trace_id
        assert client.route("predict the stock price").refused
        shippers = {e.key for e in client.catalog.query(action="ship_replacement")}
        assert {"replacement_shipper@1.0.0", "express_shipper@1.0.0"} <= shippers
        assert client.goals.get("GOAL_WARRANTY_001").id == "GOAL_WARRANTY_001"
        watch = client.catalog.watch(include_existing=True)
        assert next(watch).type == "existing"
        watch.close()
        with pytest.raises(NotFound):
            client.get_task("task_nope")
