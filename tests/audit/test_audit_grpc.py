"""AuditService over a real gRPC server on port 0, backed by a real WalAuditLog."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import audit_pb2, audit_pb2_grpc
from middleware.audit.checkpoint import Verifier
from middleware.audit.merkle import leaf_hash, verify_consistency, verify_inclusion
from middleware.demo import build_demo_agency, warranty_request
from middleware.server.grpc_api import build_server
from middleware.server.metrics import MeteredAuditLog, Metrics

from .helpers import open_log


@pytest.fixture
async def audit_gateway(tmp_path: Path):
    async def no_sleep(_: float) -> None:
        return None

    from prometheus_client import CollectorRegistry

    wal = open_log(tmp_path, checkpoint_every=5)
    audit = MeteredAuditLog(wal, Metrics(registry=CollectorRegistry()))
    agency = await build_demo_agency(Agency(audit=audit, sleep=no_sleep))
    outcome = await agency.submit(warranty_request())
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield wal, outcome, audit_pb2_grpc.AuditServiceStub(channel)
    await channel.close()
    await server.stop(0)
    await agency.close()


async def test_export_streams_verified_records_with_filters(audit_gateway) -> None:
    wal, outcome, stub = audit_gateway
    everything = [e async for e in stub.Export(audit_pb2.ExportRequest())]
    assert [e.index for e in everything] == list(range(1, wal.size + 1))
    assert all(e.node == "n1" for e in everything)
    for e in everything:  # the exact hashed bytes
        assert leaf_hash(e.record) == wal.tree.leaf(e.index - 1)
    only = [
        json.loads(e.record)
        async for e in stub.Export(
            audit_pb2.ExportRequest(trace_id=outcome.trace_id, event_types=["failure.event"])
        )
    ]
    assert len(only) == 3 and {r["event_type"] for r in only} == {"failure.event"}


async def test_export_with_a_bad_time_is_invalid_argument(audit_gateway) -> None:
    _, _, stub = audit_gateway
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Export(audit_pb2.ExportRequest(since="yesterday")):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(err.value.trailing_metadata())["agency-field"] == "since"


async def test_checkpoint_and_proofs_verify_client_side(audit_gateway) -> None:
    wal, _, stub = audit_gateway
    cp = await stub.LatestCheckpoint(audit_pb2.LatestCheckpointRequest())
    signed = Verifier(cp.vkey).verify(cp.note)
    assert (signed.size, signed.root) == (cp.size, cp.root) and cp.size >= 5
    records = {e.index: e.record async for e in stub.Export(audit_pb2.ExportRequest())}
    for index in (1, cp.size // 2, cp.size):
        proof = await stub.InclusionProof(audit_pb2.InclusionProofRequest(index=index))
        assert proof.tree_size == cp.size
        verify_inclusion(leaf_hash(records[index]), index - 1, cp.size, list(proof.proof), cp.root)
    older = await stub.ConsistencyProof(audit_pb2.ConsistencyProofRequest(old_size=5))
    verify_consistency(5, cp.size, wal.tree.root(5), cp.root, list(older.proof))


async def test_out_of_range_proofs_are_invalid_argument(audit_gateway) -> None:
    wal, _, stub = audit_gateway
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.InclusionProof(audit_pb2.InclusionProofRequest(index=wal.size + 10, tree_size=wal.size))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ConsistencyProof(audit_pb2.ConsistencyProofRequest(old_size=3, new_size=wal.size + 1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_consistency_proof_from_size_0_is_refused(audit_gateway) -> None:
    _, _, stub = audit_gateway
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.ConsistencyProof(audit_pb2.ConsistencyProofRequest(old_size=0))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    trailers = dict(err.value.trailing_metadata())
    assert trailers["agency-field"] == "old_size" and "RFC 9162" in (err.value.details() or "")


async def test_memory_audit_log_has_no_proofs(grpc_gateway) -> None:
    _, channel, _ = grpc_gateway
    stub = audit_pb2_grpc.AuditServiceStub(channel)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.LatestCheckpoint(audit_pb2.LatestCheckpointRequest())
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
