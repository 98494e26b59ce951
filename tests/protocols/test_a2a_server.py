"""The gateway as an A2A server: the real a2a-sdk client against the real Starlette app on uvicorn."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_data_parts, get_message_text
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct, Value

from middleware import Agency, AgentReply
from middleware.access import Principal
from middleware.access import Role as AgencyRole
from middleware.audit.record import AuditEventType
from middleware.demo import WARRANTY_GOAL, warranty_request
from middleware.server.protocols.a2a_server import build_a2a_app
from middleware.server.protocols.common import HttpServer
from middleware.testing import ScriptedAgent

pytestmark = pytest.mark.asyncio

A2A_CANCEL_SCRIPT = Path(__file__).resolve().parent.parent / "js" / "a2a_cancel.mjs"


def message(
    text: str, *, agency: dict[str, Any] | None = None, task_id: str = "", data: Any = None
) -> Message:
    parts = [Part(text=text)] if text else []
    if data is not None:
        parts.append(Part(data=ParseDict(data, Value())))
    msg = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=parts, task_id=task_id)
    if agency is not None:
        meta = Struct()
        meta.update({"agency": agency})
        msg.metadata.CopyFrom(meta)
    return msg


async def serve(agency: Agency, tokens: dict[str, Principal] | None = None) -> tuple[HttpServer, str]:
    """The app on port 0, with its card naming the real URL."""
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    url = server.url
    server.set_app(build_a2a_app(agency, url=url, token_hashes=tokens))
    await server.start()
    return server, url


async def send(
    url: str, msg: Message, *, token: str = "", streaming: bool = False, binding: str = "JSONRPC"
) -> list[StreamResponse]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
        client = await create_client(url, config)
        try:
            return [event async for event in client.send_message(SendMessageRequest(message=msg))]
        finally:
            await client.close()


def final_task(events: list[StreamResponse]) -> Task:
    assert events and events[-1].HasField("task"), events
    return events[-1].task


async def test_card_lists_the_contracts_actions_as_skills(demo_agency):
    server, url = await serve(demo_agency)
    try:
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{url}/.well-known/agent-card.json")).json()
    finally:
        await server.stop()
    skills = {s["id"]: s for s in card["skills"]}
    assert {"warranty_claim", "ship_replacement", "compose_reply", "compound_interest"} <= set(skills)
    assert "stock_prediction" not in skills  # a cannot_do is never offered
    assert "warranty_agent@2.1.0" in skills["warranty_claim"]["description"]
    bindings = {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]}
    assert bindings == {"JSONRPC": f"{url}/a2a/jsonrpc", "HTTP+JSON": f"{url}/a2a/rest"}
    assert card["capabilities"]["streaming"] is True
    assert "securitySchemes" not in card  # tokens off


async def test_warranty_case_completes_with_its_output_as_an_artifact(demo_agency):
    req = warranty_request()
    governance = {
        "goal_id": WARRANTY_GOAL.id,
        "input": req.input,
        "steps": [s.model_dump() for s in req.steps],
        "session_id": "s_a2a",
    }
    server, url = await serve(demo_agency)
    try:
        task = final_task(await send(url, message(req.text, agency=governance)))
    finally:
        await server.stop()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = task.artifacts
    [output] = get_data_parts(list(artifact.parts))
    assert output["tracking_number"] == "EXP123456"  # the backup shipper, after the retries
    [outcome] = get_data_parts(list(task.status.message.parts))
    assert outcome["goal_verdict"]["passed"] is True
    assert [f["type"] for f in outcome["failures"]][:1] == ["TOOL_TIMEOUT"]
    assert outcome["task_id"] == task.id  # the A2A task id is the governed task's id
    record = await demo_agency.tasks.get(task.id)
    assert record.request.provenance.source == "a2a:anonymous" and record.request.session_id == "s_a2a"


async def test_stock_price_request_is_rejected_with_the_reason(demo_agency):
    server, url = await serve(demo_agency)
    try:
        task = final_task(await send(url, message("Predict next quarter's stock price for ACME.")))
    finally:
        await server.stop()
    assert task.status.state == TaskState.TASK_STATE_REJECTED
    text = get_message_text(task.status.message)
    assert text.startswith("Refused:") and "stock_prediction" in text
    refused = [r for _, r in demo_agency.audit.records() if r.event_type == AuditEventType.ROUTING_REFUSED]
    assert [r.task_id for r in refused] == [task.id]


async def hedging_agency() -> tuple[Agency, ScriptedAgent]:
    agency = Agency()
    unsure = ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5))
    await agency.register(
        {"name": "planner", "can_do": ["plan_trip"], "output_schema": {"type": "object"}}, unsure
    )
    return agency, unsure


async def test_a_clarification_is_input_required_and_answered_by_a_follow_up_message():
    agency, unsure = await hedging_agency()
    server, url = await serve(agency)
    try:
        waiting = final_task(await send(url, message("plan my trip", agency={"skill": "plan_trip"})))
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        [pending] = get_data_parts(list(waiting.status.message.parts))
        assert [o["id"] for o in pending["pending"]["options"]] == ["accept", "retry"]
        assert "Answer with one of: accept" in get_message_text(waiting.status.message)

        refused = final_task(await send(url, message("", task_id=waiting.id, data={"answer": "maybe"})))
        assert refused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # still waiting
        assert "Not accepted" in get_message_text(refused.status.message)

        done = final_task(await send(url, message("accept", task_id=waiting.id)))
    finally:
        await server.stop()
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_data_parts(list(done.artifacts[0].parts)) == [{"plan": "probably plan A"}]
    assert unsure.calls == 1
    resumed = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.TASK_RESUMED]
    assert [(r.task_id, r.detail["answer"]) for r in resumed] == [(waiting.id, "accept")]


async def test_streaming_tells_each_pipeline_state_then_the_final_one(demo_agency):
    server, url = await serve(demo_agency)
    try:
        events = await send(url, message("compound interest on 1000 at 5%"), streaming=True)
    finally:
        await server.stop()
    updates = [e.status_update for e in events if e.HasField("status_update")]
    states = [u.status.state for u in updates]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    working = [
        dict(u.metadata)["agency_state"] for u in updates if u.status.state == TaskState.TASK_STATE_WORKING
    ]
    # the greeting agent first (the intake: no goal here), then the calculator, then the check
    assert working[:5] == ["routing", "dispatched", "routing", "dispatched", "verifying"]


async def test_a_time_critical_answer_tells_its_ttl_in_the_artifact_metadata(demo_agency):
    """Finance is time-critical (docs/semantics.md): a remote caller needs the answer's TTL."""
    server, url = await serve(demo_agency)
    try:
        task = final_task(await send(url, message("compound interest on 1000 at 5%")))
    finally:
        await server.stop()
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    ttl = dict(task.artifacts[0].metadata)["freshness_ttl"]
    assert 0 < ttl <= 300  # the demo's financial_calculator answers with a 300 s TTL


async def test_a_bad_metadata_key_is_refused_naming_the_field(demo_agency):
    server, url = await serve(demo_agency)
    try:
        with pytest.raises(A2AError) as info:
            await send(url, message("compound interest", agency={"goal": 3, "colour": "red"}))
    finally:
        await server.stop()
    assert "metadata.agency.colour" in str(info.value)


def token_file(*entries: tuple[str, str, AgencyRole]) -> dict[str, Principal]:
    return {hashlib.sha256(t.encode()).hexdigest(): Principal(name=n, role=r) for t, n, r in entries}


async def test_bearer_tokens_identify_the_caller_who_owns_the_task():
    agency, _ = await hedging_agency()
    tokens = token_file(("tok-alice", "alice", AgencyRole.CLIENT), ("tok-bob", "bob", AgencyRole.CLIENT))
    server, url = await serve(agency, tokens)
    try:
        async with httpx.AsyncClient() as http:
            card = (await http.get(f"{url}/.well-known/agent-card.json")).json()  # open: discovery
            assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
            anonymous = await http.post(
                f"{url}/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"}
            )
            assert anonymous.status_code == 401
            wrong = await http.post(f"{url}/a2a/jsonrpc", json={}, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401 and "unknown bearer token" in wrong.text
        waiting = final_task(
            await send(url, message("plan my trip", agency={"skill": "plan_trip"}), token="tok-alice")
        )
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        record = await agency.tasks.get(waiting.id)
        assert record.client == "alice" and record.request.provenance.source == "a2a:alice"

        with pytest.raises(A2AError):  # bob cannot see, let alone answer, alice's task
            await send(url, message("accept", task_id=waiting.id), token="tok-bob")
        assert (await agency.tasks.get(waiting.id)).state.value == "input_required"
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-alice"}) as http:
            client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
            seen = await client.get_task(GetTaskRequest(id=waiting.id))
            await client.close()
        assert seen.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    finally:
        await server.stop()


async def test_a_waiting_task_canceled_through_a2a_is_canceled_in_the_pipeline():
    from a2a.types.a2a_pb2 import CancelTaskRequest

    agency, _ = await hedging_agency()
    server, url = await serve(agency)
    try:
        waiting = final_task(await send(url, message("plan my trip", agency={"skill": "plan_trip"})))
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
            canceled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
            await client.close()
    finally:
        await server.stop()
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert (await agency.tasks.get(waiting.id)).state.value == "canceled"


async def test_a_task_whose_agents_all_fail_is_failed_and_an_unknown_goal_is_refused():
    from middleware.failures import FailurePolicy
    from middleware.server.settings import AgencyConfig
    from middleware.testing import Raise

    agency = Agency(config=AgencyConfig(failure_policy=FailurePolicy(max_retries=0, on_exhausted="abort")))
    await agency.register(
        {"name": "broken", "can_do": ["plan_trip"]}, ScriptedAgent(Raise(ValueError("bug")))
    )
    server, url = await serve(agency)
    try:
        failed = final_task(await send(url, message("plan my trip", agency={"skill": "plan_trip"})))
        with pytest.raises(A2AError) as info:
            await send(url, message("plan my trip", agency={"goal_id": "GOAL_NOPE"}))
    finally:
        await server.stop()
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert get_message_text(failed.status.message).startswith("Failed:")
    [outcome] = get_data_parts(list(failed.status.message.parts))
    assert {f["type"] for f in outcome["failures"]} == {"TOOL_ERROR"}
    assert "metadata.agency.goal_id" in str(info.value) and "GOAL_NOPE" in str(info.value)


async def test_the_http_json_binding_runs_the_same_governed_task(demo_agency):
    server, url = await serve(demo_agency)
    try:
        refused = final_task(
            await send(url, message("Predict the stock price of ACME."), binding="HTTP+JSON")
        )
        events = await send(
            url, message("compound interest on 1000 at 5%"), binding="HTTP+JSON", streaming=True
        )
    finally:
        await server.stop()
    assert refused.status.state == TaskState.TASK_STATE_REJECTED
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    assert (await demo_agency.tasks.get(last.task_id)).request.provenance.source == "a2a:anonymous"


async def test_a_goal_stage_bound_to_a_missing_step_is_refused_naming_it(demo_agency):
    goal = {
        "id": "GOAL_STAGED",
        "description": "staged",
        "verification_steps": [{"kind": "json_path", "path": "$.monthly_payment"}],
        "stages": [
            {"name": "early", "step": "nope", "verification_steps": [{"kind": "json_path", "path": "$.x"}]}
        ],
    }
    server, url = await serve(demo_agency)
    try:
        with pytest.raises(A2AError) as info:
            await send(url, message("compound interest on 1000 at 5%", agency={"goal": goal}))
    finally:
        await server.stop()
    assert "goal.stages[0].step" in str(info.value)


async def test_a_running_task_is_not_cancelable_and_runs_to_its_end():
    import asyncio

    from a2a.types.a2a_pb2 import CancelTaskRequest

    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(request):
        started.set()
        await release.wait()
        return {"plan": "done"}

    agency = Agency()
    await agency.register({"name": "slow", "can_do": ["plan_trip"], "slo_latency_ms": 60_000}, slow)
    server, url = await serve(agency)
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            client = await create_client(url, ClientConfig(streaming=False, polling=True, httpx_client=http))
            [first] = [
                e
                async for e in client.send_message(
                    SendMessageRequest(message=message("plan my trip", agency={"skill": "plan_trip"}))
                )
            ]
            task_id = first.task.id
            await started.wait()
            with pytest.raises(A2AError) as info:
                await client.cancel_task(CancelTaskRequest(id=task_id))
            release.set()
            record = await agency.tasks.get(task_id)
            for _ in range(500):  # the task finishes on the gateway's loop: a bounded wait for its record
                if record.state.terminal:
                    break
                await asyncio.sleep(0.01)
                record = await agency.tasks.get(task_id)
            await client.close()
    finally:
        await server.stop()
    assert "only a task waiting for input or interrupted can be canceled" in str(info.value)
    assert record.state.value == "completed"


async def test_an_interrupted_task_this_gateway_never_saw_through_a2a_is_canceled():
    """Taken over from a gateway that died (its A2A task store died with it): canceled here."""
    from a2a.types.a2a_pb2 import CancelTaskRequest

    from middleware.takeover import mark_interrupted
    from middleware.tasks import TaskRecord, TaskRequest
    from middleware.tasks import TaskState as AgencyState

    agency = Agency()
    record = TaskRecord.start(TaskRequest(text="plan my trip"), None, "trace-1")
    record.state = AgencyState.ROUTING  # as the dead gateway last saved it
    await agency.tasks.create(record)
    mark_interrupted(record, dead_node="gw-dead", node="gw-here", reason="gateway gw-dead stopped")
    await agency.tasks.save(record)  # as the replica that took it over leaves it
    server, url = await serve(agency)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
            canceled = await client.cancel_task(CancelTaskRequest(id=record.task_id))
            await client.close()
    finally:
        await server.stop()
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert (await agency.tasks.get(record.task_id)).state.value == "canceled"


async def test_the_official_javascript_sdk_cancels_a_waiting_task():
    """tests/js/a2a_cancel.mjs: @a2a-js/sdk sends, cancels (CancelTask), cancels again (refused)."""
    import asyncio
    import json

    agency, _ = await hedging_agency()
    server, url = await serve(agency)
    script = A2A_CANCEL_SCRIPT
    try:
        proc = await asyncio.create_subprocess_exec(
            "node", str(script), url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await server.stop()
    assert proc.returncode == 0, err.decode()
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["before"] == "TASK_STATE_INPUT_REQUIRED" and seen["after"] == "TASK_STATE_CANCELED"
    assert "cannot be canceled" in seen["again"]
    record = await agency.tasks.get(seen["task_id"])
    assert record.state.value == "canceled"
    [resumed] = [r for _, r in agency.audit.records() if r.event_type == "task.resumed"]
    assert resumed.outcome == "cancel" and resumed.detail["why"] == "canceled through A2A"
