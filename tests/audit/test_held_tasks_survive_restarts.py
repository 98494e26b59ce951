"""A task held for approval on the embedded memory store survives SIGTERM and kill -9 of a
real ``agency serve``: rebuilt from the audit log at start, approved exactly once afterwards."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import grpc
import pytest
from gateway_processes import GatewayProcess, start_gateway, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.wal_reader import WalLogReader

pytestmark = pytest.mark.timeout(120)

HUMANS = Path(__file__).parents[1] / "humans"  # the refund agent and its gate (cases.py)


def _definition() -> dict[str, object]:
    import sys

    sys.path.insert(0, str(HUMANS))
    try:
        from cases import definition  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(HUMANS))
    d = definition(console="")
    d.pop("storage", None)  # the embedded default: tasks in memory
    return d


async def _stop(gw: GatewayProcess, how: str) -> None:
    if how == "kill -9":
        gw.proc.send_signal(signal.SIGKILL)
        await gw.proc.wait()
    else:
        assert await gw.stop() == 0, gw.output()


async def _call(gw: GatewayProcess, method: str, request: object) -> object:
    async with grpc.aio.insecure_channel(gw.address) as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)
        return await getattr(stub, method)(request)


def _refunds(audit: Path) -> int:
    """How many times the refund agent was called, by the log."""
    return sum(
        1
        for _, r in WalLogReader(audit).records()
        if r.event_type == "agent.dispatch" and r.actors.agent.startswith("refund_executor@")
    )


@pytest.mark.parametrize("how", ["SIGTERM", "kill -9"])
async def test_a_held_approval_survives_a_restart_and_is_approved_once(tmp_path: Path, how: str) -> None:
    config = write_definition(tmp_path / "agency.json", _definition())
    gw = await start_gateway(config, "gw", tmp_path, pythonpath=[HUMANS])
    try:
        held = await _call(
            gw,
            "Submit",
            agency_pb2.SubmitRequest(
                text="refund order 42",
                input_json=json.dumps({"order_id": "42", "amount": 900}),
                steps=[agency_pb2.TaskStep(name="refund", action="refund")],
            ),
        )
        assert held.a2a_state == "TASK_STATE_AUTH_REQUIRED"  # type: ignore[attr-defined]
        task_id = held.task_id  # type: ignore[attr-defined]
    finally:
        await _stop(gw, how)

    gw = await start_gateway(config, "gw", tmp_path, pythonpath=[HUMANS])
    try:
        waiting = await _call(gw, "GetTask", agency_pb2.GetTaskRequest(task_id=task_id))
        assert waiting.state == "input_required", gw.output()  # type: ignore[attr-defined]
        approve = agency_pb2.ResumeRequest(task_id=task_id, decision_json='{"action": "approve"}')
        done = await _call(gw, "Resume", approve)
        assert json.loads(done.output_json) == {"refunded": 900, "order_id": "42"}  # type: ignore[attr-defined]
        with pytest.raises(grpc.aio.AioRpcError) as again:
            await _call(gw, "Resume", approve)
        assert again.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    finally:
        assert await gw.stop() == 0, gw.output()

    gw = await start_gateway(config, "gw", tmp_path, pythonpath=[HUMANS])  # and once more
    try:
        with pytest.raises(grpc.aio.AioRpcError) as late:
            await _call(gw, "Resume", approve)
        assert late.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)
    finally:
        assert await gw.stop() == 0, gw.output()
    assert await asyncio.to_thread(_refunds, tmp_path / "gw" / "audit") == 1
