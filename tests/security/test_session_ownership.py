"""A session belongs to the client that opened it, like a task (over gRPC, with tokens)."""

from __future__ import annotations

import json

from test_catalog_authz import As, Gateway, denied, gateway  # noqa: F401 - the fixture

from middleware._proto.agency.v1 import agency_pb2


def _submit(text: str, session: str) -> agency_pb2.SubmitRequest:
    return agency_pb2.SubmitRequest(
        text=text,
        session_id=session,
        input_json=json.dumps({"user_id": "u_1", "device_model": "PhoneX"}),
        steps=[agency_pb2.TaskStep(name="track", action="track_shipment")],
    )


async def test_another_client_may_not_use_a_session(gateway: Gateway) -> None:  # noqa: F811
    async with As(gateway, "web") as web, As(gateway, "legacy") as other:
        first = await web.agency.Submit(_submit("where is my parcel", "s_web"), timeout=10)
        assert first.state == "completed"
        again = await web.agency.Submit(_submit("and now?", "s_web"), timeout=10)
        assert again.state == "completed"
        err = await denied(other.agency.Submit(_submit("let me see", "s_web"), timeout=10))
        assert "may not use session s_web" in err.details()
    state = await gateway.agency.sessions.get("s_web")
    assert state.client == "web" and state.task_ids == [first.task_id, again.task_id]
    refused = [r for _, r in gateway.audit.records() if r.rule == "session_owner"]
    assert len(refused) == 1 and refused[0].actors.session == "s_web"
