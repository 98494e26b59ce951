"""Checkpoints are signed on time too, so the unsigned tail of the log is seconds old.

Before, a checkpoint was signed only every 1,000 records and on close: a gateway that
had served a whole scenario answered LatestCheckpoint with NOT_FOUND, and the last
records could be cut or altered unnoticed. Now one is signed (and published) about a
second (``audit.checkpoint_interval``) after the first record no checkpoint covers.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import pytest
from gateway_processes import start_gateway, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, audit_pb2, audit_pb2_grpc
from middleware.audit.checkpoint import Checkpoint
from middleware.audit.record import AuditRecord
from middleware.audit.verify import verify_path
from middleware.errors import InvalidInput
from middleware.server.definition import AgencyDefinition

from .helpers import open_log

pytestmark = pytest.mark.timeout(60)

SERVICE_DIR = Path(__file__).resolve().parents[1] / "service"  # replica_agents.py


async def _until(condition, within: float = 15) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def _published(node_dir: Path) -> int:
    path = node_dir / "checkpoint"
    return Checkpoint.parse(path.read_text()).size if path.exists() else -1


async def test_a_few_records_are_signed_and_published_without_a_close(tmp_path: Path) -> None:
    log = open_log(tmp_path, checkpoint_interval=0.2)  # checkpoint_every stays 1000
    try:
        for i in range(3):
            await log.append(AuditRecord(event_type="agent.step", node="n1", detail={"i": i}))
        await _until(lambda: _published(tmp_path / "n1") == 3)  # the file verifiers check the log against
        assert log.latest_checkpoint() is not None
        await log.append(AuditRecord(event_type="agent.step", node="n1", detail={"i": 3}))
        await _until(lambda: _published(tmp_path / "n1") == 4)
    finally:
        await log.close()


async def test_without_an_interval_only_count_and_close_sign(tmp_path: Path) -> None:
    log = open_log(tmp_path, checkpoint_interval=None, checkpoint_every=1000)
    await log.append(AuditRecord(event_type="agent.step", node="n1"))
    assert log.latest_checkpoint() is None
    await log.close()


def test_the_interval_is_a_definition_setting() -> None:
    definition = AgencyDefinition.from_data({"audit": {"checkpoint_interval": "0.5s"}})
    assert definition.audit.checkpoint_interval.total_seconds() == 0.5
    assert AgencyDefinition.from_data({}).audit.checkpoint_interval.total_seconds() == 1.0
    with pytest.raises(InvalidInput) as info:
        AgencyDefinition.from_data({"audit": {"checkpoint_interval": "0s"}})
    assert "audit.checkpoint_interval" in str(info.value)


async def test_a_serving_gateway_publishes_a_checkpoint_covering_its_tail(tmp_path: Path) -> None:
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "agents": [{"agent": "replica_agents:steady", "contract": {"name": "steady", "can_do": ["work"]}}],
    }
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateway = await start_gateway(config, "g1", tmp_path, pythonpath=[SERVICE_DIR])
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(
                agency_pb2.SubmitRequest(text="do the work", constraints_json='{"action": "work"}'),
                timeout=10,
            )
            assert outcome.state == "completed"
            audit = audit_pb2_grpc.AuditServiceStub(channel)
            last = max([e.index async for e in audit.Export(audit_pb2.ExportRequest())])
            deadline = time.monotonic() + 15
            while True:  # the gateway's observable state: its latest checkpoint
                try:
                    cp = await audit.LatestCheckpoint(audit_pb2.LatestCheckpointRequest())
                    if cp.size >= last:
                        break
                except grpc.aio.AioRpcError as exc:
                    if exc.code() is not grpc.StatusCode.NOT_FOUND:
                        raise
                assert time.monotonic() < deadline, "no checkpoint covers the records of a finished task"
                await asyncio.sleep(0.05)
            published_file = tmp_path / "g1" / "audit" / "g1" / "checkpoint"
            while not (published_file.exists() and Checkpoint.parse(published_file.read_text()).size >= last):
                # the file follows the durable checkpoint the RPC handed out (published on time)
                assert time.monotonic() < deadline, "the checkpoint file does not follow the log"
                await asyncio.sleep(0.05)
        gateway.proc.send_signal(signal.SIGKILL)  # no close: what is signed is what was signed on time
        await gateway.proc.wait()
    finally:
        await gateway.stop()
    verdict = verify_path(tmp_path / "g1" / "audit")
    assert verdict.ok, verdict.first_failure
    published = Checkpoint.parse((tmp_path / "g1" / "audit" / "g1" / "checkpoint").read_text())
    assert published.size >= last  # cutting any record of the task would contradict it
