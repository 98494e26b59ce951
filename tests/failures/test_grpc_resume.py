"""AgencyService.Resume and GetTask over a real gRPC server."""

from __future__ import annotations

import json

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.server.grpc_api import build_server
from middleware.testing import Raise, ScriptedAgent

from .conftest import build, contract

HEDGED = {"plan": "probably plan A"}


@pytest.fixture
async def stub():
    from middleware import AgentReply

    picker = ScriptedAgent(AgentReply(output=HEDGED, confidence_score=0.4))
    down = ScriptedAgent(Raise(ConnectionRefusedError("refused")))
    agency, _, _ = await build([(contract("picker", "pick"), picker), (contract("down", "ship"), down)])
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield agency_pb2_grpc.AgencyServiceStub(channel)
    await channel.close()
    await server.stop(0)


async def test_submit_get_task_and_resume_with_an_answer(stub):
    waiting = await stub.Submit(
        agency_pb2.SubmitRequest(text="pick one", constraints_json='{"action": "pick"}')
    )
    assert waiting.state == "input_required" and waiting.a2a_state == "TASK_STATE_INPUT_REQUIRED"
    pending = json.loads(waiting.pending_json)
    assert pending["kind"] == "clarification" and len(pending["options"]) == 2

    got = await stub.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id))
    assert got.state == "input_required" and json.loads(got.pending_json) == pending

    done = await stub.Resume(agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="accept"))
    assert done.state == "completed" and json.loads(done.output_json) == HEDGED
    assert (await stub.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id))).state == "completed"


async def test_resume_with_a_human_decision(stub):
    waiting = await stub.Submit(
        agency_pb2.SubmitRequest(text="ship it", constraints_json='{"action": "ship"}')
    )
    assert json.loads(waiting.pending_json)["kind"] == "human_handover"
    decision = {"action": "provide_output", "output": {"tracking": "EXP123456"}, "by": "bob"}
    done = await stub.Resume(
        agency_pb2.ResumeRequest(task_id=waiting.task_id, decision_json=json.dumps(decision))
    )
    assert done.state == "completed" and json.loads(done.output_json) == {"tracking": "EXP123456"}


async def test_errors_map_to_status_codes(stub):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.GetTask(agency_pb2.GetTaskRequest(task_id="task_nope"))
    assert info.value.code() is grpc.StatusCode.NOT_FOUND

    waiting = await stub.Submit(
        agency_pb2.SubmitRequest(text="pick one", constraints_json='{"action": "pick"}')
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Resume(agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="nonsense"))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert dict(info.value.trailing_metadata())["agency-field"] == "answer"

    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Resume(agency_pb2.ResumeRequest(task_id=waiting.task_id, decision_json="{not json"))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT

    await stub.Resume(agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="accept"))
    with pytest.raises(grpc.aio.AioRpcError) as info:  # already resumed
        await stub.Resume(agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="accept"))
    assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
