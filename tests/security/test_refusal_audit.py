"""Refusals leave audit records (issue 13, item 10): reading or resuming another client's
task (PERMISSION_DENIED), and calls with a missing or unknown token (UNAUTHENTICATED),
these aggregated per source and interval so a flood of them cannot flood the log."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit import MemoryAuditLog
from middleware.audit.record import AuditRecord
from middleware.demo import build_demo_agency
from middleware.errors import Unauthenticated
from middleware.refusals import RefusalAggregator, source_of
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.channel import open_channel
from middleware.server.grpc_api.server import GrpcServer
from middleware.server.settings import ServerConfig, hash_token

TOKENS = {"web": "web-frontend", "other": "other-frontend"}
TOKEN_FILE = "".join(f"{name} {hash_token(token)} client\n" for name, token in TOKENS.items())


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Agency, MemoryAuditLog, GrpcServer]]:
    (tmp_path / "tokens").write_text(TOKEN_FILE)
    config = ServerConfig.from_env({"AGENCY_AUTH_TOKENS": str(tmp_path / "tokens")})
    audit = MemoryAuditLog()

    async def no_sleep(_: float) -> None:
        return None

    agency = await build_demo_agency(Agency(audit=audit, sleep=no_sleep))
    server = build_server(agency, "127.0.0.1:0", token_hashes=config.token_hashes())
    await server.start()
    yield agency, audit, server
    await server.stop(0)
    await agency.close()


def refused(audit: MemoryAuditLog, rule: str) -> list[AuditRecord]:
    return [r for _, r in audit.records() if r.outcome == "refused" and r.rule == rule]


async def test_reading_or_resuming_another_clients_task_is_audited(gateway) -> None:
    _, audit, server = gateway
    address = f"127.0.0.1:{server.port}"
    async with (
        open_channel(address, token=TOKENS["web"]) as web,
        open_channel(address, token=TOKENS["other"]) as other,
    ):
        outcome = await agency_pb2_grpc.AgencyServiceStub(web).Submit(
            agency_pb2.SubmitRequest(
                text="I need a replacement for my shattered screen",
                input_json=json.dumps({"user_id": "u_1", "device_model": "PhoneX"}),
            ),
            timeout=10,
        )
        stub = agency_pb2_grpc.AgencyServiceStub(other)
        # one after the other (an aio call starts when it is made): the records' order is asserted
        for call in (
            lambda: stub.GetTask(agency_pb2.GetTaskRequest(task_id=outcome.task_id), timeout=5),
            lambda: stub.Resume(agency_pb2.ResumeRequest(task_id=outcome.task_id, answer="x"), timeout=5),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call()
            assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
    records = refused(audit, "PERMISSION_DENIED")
    assert [(r.detail["operation"], r.detail["client"], r.task_id) for r in records] == [
        ("AgencyService/GetTask", "other", outcome.task_id),
        ("AgencyService/Resume", "other", outcome.task_id),
    ]
    assert all(r.trace_id == outcome.trace_id for r in records)


async def test_a_flood_of_unauthenticated_calls_is_audited_once_per_source_with_a_count(gateway) -> None:
    _, audit, server = gateway
    address = f"127.0.0.1:{server.port}"
    calls = 300

    async def one(token: str | None) -> grpc.StatusCode:
        async with open_channel(address, token=token) as channel:
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            try:
                await stub.GetTask(agency_pb2.GetTaskRequest(task_id="t"), timeout=10)
            except grpc.aio.AioRpcError as err:
                return err.code()
        return grpc.StatusCode.OK

    codes = await asyncio.gather(*(one(None if i % 2 else "wrong-token") for i in range(calls)))
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
    during = refused(audit, "UNAUTHENTICATED")
    assert len(during) == 1  # one source, one interval: one record, not 300
    first = during[0].detail
    assert first["source"] == "ipv4:127.0.0.1" and first["count"] == 1 and not first["summary"]
    assert first["operation"] == "AgencyService/GetTask" and first["interval_s"] == 60
    await server.stop(0)  # the open interval is summed up
    records = refused(audit, "UNAUTHENTICATED")
    assert len(records) == 2 and records[1].detail["summary"]
    assert sum(r.detail["count"] for r in records) == calls


async def test_aggregation_per_source_and_interval() -> None:
    appended: list[AuditRecord] = []

    async def append(record: AuditRecord) -> int:
        appended.append(record)
        return len(appended)

    now = [0.0]
    agg = RefusalAggregator(append, node="n", interval=60, clock=lambda: now[0], max_sources=3)
    err = Unauthenticated("unknown bearer token")

    def counts() -> list[tuple[str, int, bool]]:
        return [(r.detail["source"], r.detail["count"], r.detail["summary"]) for r in appended]

    for _ in range(5):
        await agg.refused("ipv4:10.0.0.1", "Submit", err)
    await agg.refused("ipv4:10.0.0.2", "Submit", err)
    assert counts() == [("ipv4:10.0.0.1", 1, False), ("ipv4:10.0.0.2", 1, False)]
    now[0] = 61.0  # the interval is over: the next refusal of anyone sums up the open ones
    await agg.refused("ipv4:10.0.0.3", "Submit", err)
    assert counts()[2:] == [("ipv4:10.0.0.1", 4, True), ("ipv4:10.0.0.3", 1, False)]
    await agg.refused("ipv4:10.0.0.1", "Submit", err)  # a new interval: recorded at once
    assert counts()[-1] == ("ipv4:10.0.0.1", 1, False)
    # more sources than tracked: the table is summed up and starts again (memory bounded)
    for i in range(10):
        await agg.refused(f"ipv4:10.1.0.{i}", "Submit", err)
    assert len(agg._windows) <= 3
    await agg.flush()
    assert sum(c for _, c, _ in counts()) == 5 + 1 + 1 + 1 + 10


@pytest.mark.parametrize(
    ("peer", "source"),
    [
        ("ipv4:10.0.0.7:51234", "ipv4:10.0.0.7"),
        ("ipv6:[::1]:50051", "ipv6:[::1]"),
        ("unix:/tmp/sock", "unix:/tmp/sock"),
        ("", "unknown"),
    ],
)
def test_source_of_a_peer_drops_the_port(peer: str, source: str) -> None:
    assert source_of(peer) == source


async def test_a_flood_of_sends_with_a_wrong_agent_token_is_audited_once_per_source_with_a_count(
    gateway,
) -> None:
    """MessageService refusals for the agent token (the post office authenticates it) go
    through the same aggregation as the gateway's own token check."""
    from middleware._proto.agency.v1 import common_pb2, messages_pb2, messages_pb2_grpc

    _, audit, server = gateway
    address = f"127.0.0.1:{server.port}"
    calls = 200
    message = common_pb2.SMFMessage(
        sender="alice",
        receiver="bob",
        content_json='{"x": 1}',
        metadata=common_pb2.SMFMetadata(
            provenance=common_pb2.Provenance(source="test", reliability_score=1), intention_trace=["t"]
        ),
    )

    async with open_channel(address, token=TOKENS["web"]) as channel:  # a known client
        stub = messages_pb2_grpc.MessageServiceStub(channel)

        async def one(i: int) -> grpc.StatusCode:
            agent_token = () if i % 3 == 0 else (("agency-token", f"agt_wrong-{i}"),)
            try:
                if i % 2:
                    await stub.Pull(messages_pb2.PullRequest(), metadata=agent_token, timeout=10)
                else:
                    request = messages_pb2.SendMessageRequest(
                        message=message, content_type="application/json"
                    )
                    await stub.Send(request, metadata=agent_token, timeout=10)
            except grpc.aio.AioRpcError as err:
                return err.code()
            return grpc.StatusCode.OK

        codes = await asyncio.gather(*(one(i) for i in range(calls)))
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}
    during = refused(audit, "UNAUTHENTICATED")
    assert len(during) == 1  # one source, one interval: one record, not 200
    assert during[0].detail["source"] == "ipv4:127.0.0.1" and during[0].detail["count"] == 1
    assert during[0].detail["operation"].startswith("MessageService/")
    await server.stop(0)  # the open interval is summed up
    records = refused(audit, "UNAUTHENTICATED")
    assert len(records) == 2 and records[1].detail["summary"]
    assert sum(r.detail["count"] for r in records) == calls
