"""A client's bad request is not an SMF validation failure (issue 13, item 7).

``smf_validation_errors_total`` and the ERROR line "SMF validation failed" -- what the
operations guide says to alert on -- are kept for SMF messages between agents that do not
validate. Refused client requests are counted apart, by reason, in
``agency_requests_refused_total{reason}`` and logged at INFO (invalid input) or WARNING."""

from __future__ import annotations

import logging

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit import MemoryAuditLog
from middleware.errors import InvalidInput, Unauthenticated
from middleware.messaging import generate_key, public_key_b64
from middleware.messaging.post_office import PostOffice
from middleware.server.grpc_api import build_server
from middleware.server.metrics import MeteredAuditLog, Metrics


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_clients_bad_request_is_counted_as_refused_not_as_smf_failure(caplog) -> None:
    metrics = Metrics()
    agency = Agency(audit=MeteredAuditLog(MemoryAuditLog(), metrics))
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    caplog.set_level(logging.INFO, logger="agency.pipeline")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            for request in (
                agency_pb2.SubmitRequest(text="x", user_id="u" * 300),  # the core refuses it
                agency_pb2.SubmitRequest(text="x", input_json='{"a": NaN}'),  # the transport does
            ):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Submit(request)
                assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await server.stop(0)
        await agency.close()
    assert value(metrics, "smf_validation_errors_total") == 0
    assert value(metrics, "agency_requests_refused_total", reason="invalid_input") == 2
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    refused = [r for r in caplog.records if r.getMessage().startswith("request refused (invalid_input)")]
    assert len(refused) == 2 and all(r.levelno == logging.INFO for r in refused)


async def test_an_smf_message_between_agents_that_fails_validation_stays_an_smf_failure(caplog) -> None:
    metrics = Metrics()
    office = PostOffice(audit=MeteredAuditLog(MemoryAuditLog(), metrics))
    token = await office.register("alice", public_key_b64(generate_key()))
    await office.register("bob", public_key_b64(generate_key()))
    caplog.set_level(logging.INFO, logger="agency.pipeline")
    with pytest.raises(InvalidInput):
        await office.send(token, {"sender": "alice", "receiver": "bob", "content": "x", "metadata": 7})
    assert value(metrics, "smf_validation_errors_total") == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and errors[0].getMessage().startswith("SMF validation failed")
    # an agent without a valid token is a refused request, not an SMF failure
    with pytest.raises(Unauthenticated):
        await office.send("wrong", {"sender": "alice", "receiver": "bob", "content": "x"})
    assert value(metrics, "smf_validation_errors_total") == 1
    assert value(metrics, "agency_requests_refused_total", reason="unauthenticated") == 1
