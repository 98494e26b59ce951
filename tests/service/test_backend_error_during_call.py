"""A Redis error in the middle of a call: UNAVAILABLE for the client, and the task ends in the log.

The task store is a real Redis (a private ``redis-server`` the test starts); the agent
stops that server while the task is running, so the task store fails when the task
stops. The client gets ``UNAVAILABLE`` with reason ``BACKEND_UNAVAILABLE`` (not
``INTERNAL``), and the audit log ends the task it began with a ``task.interrupted``
record; a task cut off by a crash is ended so when the log is opened again, and
``agency audit verify`` names tasks left open.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
import time
from pathlib import Path

import grpc
import pytest
from gateway_processes import free_port, start_gateway, start_redis, write_definition
from redis.asyncio import Redis

from middleware import Agency, AgentRequest
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit import MemoryAuditLog
from middleware.audit.open_tasks import open_tasks
from middleware.audit.verify import verify_path
from middleware.audit.wal_reader import WalLogReader
from middleware.cli import main
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.redis.task_store import RedisTaskStore
from middleware.router import Router
from middleware.server.bootstrap import build_agency
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api import build_server

pytestmark = pytest.mark.timeout(60)


async def test_a_redis_error_during_a_call_is_unavailable_and_the_task_ends_in_the_log() -> None:
    port = free_port()
    redis_proc = start_redis(port)
    client = Redis(host="127.0.0.1", port=port)
    store = RedisTaskStore(client)
    audit = MemoryAuditLog()
    catalog = MemoryCatalog()
    # task state and routing statistics in Redis, as replicas keep them
    router = Router(catalog, stats=RedisRoutingStats(client))
    agency = Agency(tasks=store, audit=audit, catalog=catalog, router=router)

    async def pulls_the_plug(request: AgentRequest) -> dict[str, bool]:
        redis_proc.terminate()  # Redis goes away while the task runs
        redis_proc.wait(timeout=10)
        return {"done": True}

    await agency.register({"name": "plug", "can_do": ["work"]}, pulls_the_plug)
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = agency_pb2_grpc.AgencyServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Submit(
                    agency_pb2.SubmitRequest(text="work", constraints_json='{"action": "work"}'), timeout=20
                )
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE, info.value
        assert dict(info.value.trailing_metadata() or ())["agency-reason"] == "BACKEND_UNAVAILABLE"
        assert "redis" in (info.value.details() or "")
    finally:
        await server.stop(0)
        await agency.close()
        await client.aclose()
        redis_proc.kill()
        redis_proc.wait()
    records = [r for _, r in audit.records()]
    task_ids = {r.task_id for r in records if r.event_type == "task.submitted"}
    assert len(task_ids) == 1
    interrupted = [r for r in records if r.event_type == "task.interrupted"]
    assert [r.task_id for r in interrupted] == list(task_ids)
    assert "BACKEND_UNAVAILABLE" in interrupted[0].detail["reason"]
    assert not open_tasks(records)


CRASH = textwrap.dedent(
    """
    import asyncio, os, sys
    from middleware.audit import WalAuditLog
    from middleware.audit.record import AuditRecord

    async def main():
        log = WalAuditLog(sys.argv[1], "g1")
        for task in ("t-done", "t-cut"):
            await log.append(
                AuditRecord(event_type="task.submitted", node="g1", task_id=task, trace_id="tr-" + task)
            )
        await log.append(AuditRecord(event_type="task.completed", node="g1", task_id="t-done"))
        os._exit(0)  # a crash: no close, no interrupted record

    asyncio.run(main())
    """
)


async def test_tasks_a_crash_cut_off_are_reported_by_verify_and_ended_at_recovery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit_dir = tmp_path / "audit"
    crash = await asyncio.create_subprocess_exec(sys.executable, "-c", CRASH, str(audit_dir))
    assert await asyncio.wait_for(crash.wait(), 30) == 0

    assert main(["audit", "verify", str(audit_dir)]) == 5  # intact (unpinned key): a fact, not a broken log
    out = capsys.readouterr().out
    assert "1 task(s) left open (began in the log, never ended): t-cut" in out, out

    definition = AgencyDefinition.from_data(
        {"audit": {"directory": str(audit_dir)}, "agency": {"node_id": "g1"}}
    )
    agency = await build_agency(definition)  # opening the log recovers it
    await agency.close()
    records = [r for _, r in WalLogReader(audit_dir).records()]
    cut = [r for r in records if r.event_type == "task.interrupted"]
    assert [(r.task_id, r.trace_id) for r in cut] == [("t-cut", "tr-t-cut")]
    assert "before the task ended" in cut[0].detail["reason"]
    assert not open_tasks(records)
    assert main(["audit", "verify", str(audit_dir)]) == 5  # intact, no --key pinned
    assert "left open" not in capsys.readouterr().out


async def test_a_task_a_kill_9_cut_off_ends_in_the_log_when_the_gateway_restarts(tmp_path: Path) -> None:
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "agents": [
            {  # never answers within the test: the task is in flight when the gateway dies
                "factory": "middleware.demo:demo_agent",
                "args": {"name": "replacement_shipper"},
                "contract": {"name": "replacement_shipper", "can_do": ["ship"], "slo_latency_ms": 60000},
            }
        ],
    }
    config = write_definition(tmp_path / "agency.yaml", definition)
    audit_dir = tmp_path / "g1" / "audit"
    gateway = await start_gateway(config, "g1", tmp_path)
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            call = agency_pb2_grpc.AgencyServiceStub(channel).Submit(
                agency_pb2.SubmitRequest(text="ship it", constraints_json='{"action": "ship"}'), timeout=30
            )
            waiting = asyncio.ensure_future(call)
            deadline = time.monotonic() + 20
            while not any(  # the gateway's log (read without its lock): the agent was called
                r.event_type == "agent.dispatch" for _, r in WalLogReader(audit_dir).records()
            ):
                assert time.monotonic() < deadline and not waiting.done(), "the task was not dispatched"
                await asyncio.sleep(0.05)
            gateway.proc.send_signal(signal.SIGKILL)
            await gateway.proc.wait()
            with pytest.raises(grpc.aio.AioRpcError):
                await waiting
    finally:
        await gateway.stop()
    assert list(open_tasks(r for _, r in WalLogReader(audit_dir).records()))  # cut off, open

    again = await start_gateway(config, "g1", tmp_path)  # opening the log recovers it
    assert await again.stop() == 0, again.output()
    records = [r for _, r in WalLogReader(audit_dir).records()]
    assert not open_tasks(records)
    interrupted = [r for r in records if r.event_type == "task.interrupted"]
    assert len(interrupted) == 1 and "found open when the log was opened" in interrupted[0].detail["reason"]
    assert verify_path(audit_dir).ok
