"""Two gateway processes sharing Redis: a refund held on one is approved in the console of the
other after the first has stopped (nothing of it lives in that process), runs there at once, and
a restarted first gateway sees it completed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import grpc
import httpx
import pytest
from gateway_processes import REDIS_URL, start_gateway, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc

from .cases import TOKENS, definition

HERE = Path(__file__).parent
_CONSOLE = re.compile(r"operator console on (http://[\d.]+:\d+)")


@pytest.mark.redis
async def test_an_approval_in_one_replicas_console_resumes_a_task_held_by_another(tmp_path, redis_prefix):
    storage = {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix}
    a_conf = write_definition(tmp_path / "a.json", definition(console="", storage=storage))
    b_conf = write_definition(tmp_path / "b.json", definition(console="127.0.0.1:0", storage=storage))
    a = await start_gateway(a_conf, "node-a", tmp_path, pythonpath=[HERE])
    try:
        b = await start_gateway(b_conf, "node-b", tmp_path, pythonpath=[HERE])
        try:
            console = _CONSOLE.search(b.output())
            assert console and "operator console" not in a.output()
            async with grpc.aio.insecure_channel(a.address) as channel:
                stub = agency_pb2_grpc.AgencyServiceStub(channel)
                waiting = await stub.Submit(
                    agency_pb2.SubmitRequest(
                        text="refund order 42",
                        input_json=json.dumps({"order_id": "42", "amount": 900}),
                        steps=[agency_pb2.TaskStep(name="refund", action="refund")],
                    )
                )
                assert waiting.a2a_state == "TASK_STATE_AUTH_REQUIRED"
            assert await a.stop() == 0, a.output()  # the gateway that holds the task goes away
            async with httpx.AsyncClient(base_url=console.group(1)) as c:
                page = await c.get("/signin")
                csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
                await c.post("/signin", data={"csrf": csrf, "token": TOKENS["bob"]})
                inbox = (await c.get("/inbox")).text
                assert waiting.task_id in inbox
                esc_id = re.search(r'href="/inbox/(esc_[^"]+)"', inbox).group(1)  # type: ignore[union-attr]
                csrf = re.search(r'name="csrf" value="([^"]+)"', inbox).group(1)  # type: ignore[union-attr]
                r = await c.post(f"/inbox/{esc_id}/decide", data={"csrf": csrf, "choice": "approve"})
                assert r.status_code == 303, r.text
            a = await start_gateway(a_conf, "node-a", tmp_path, pythonpath=[HERE])  # restarted
            async with grpc.aio.insecure_channel(a.address) as channel:
                stub = agency_pb2_grpc.AgencyServiceStub(channel)
                done = await stub.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id))
                assert done.state == "completed"
                assert json.loads(done.output_json) == {"refunded": 900, "order_id": "42"}
        finally:
            assert await b.stop() == 0, b.output()
    finally:
        assert await a.stop() == 0, a.output()
