"""Two gateway processes (``agency serve --config``) on one Redis, as replicas run.

Both load one definition file naming the same agents (node id and audit directory per
process from ``AGENCY_NODE_ID`` / ``AGENCY_AUDIT_DIR``) and are driven over gRPC only: a
task submitted to one is resumed on the other, a catalog change made through either is
seen by both, the routing statistics one gathers steer the other, and each writes its
own audit log, which ``agency audit export`` merges in time order into one bundle that
verifies.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_processes import REDIS_URL, GatewayProcess, redis_definition, start_gateways, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc, common_pb2
from middleware.cli import main

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).resolve().parent  # replica_agents.py: the agents the definition names

AGENTS = [
    {
        "agent": "replica_agents:unsure",
        "contract": {"name": "unsure", "can_do": ["plan"], "slo_latency_ms": 2000},
    },
    # flaky has the better SLO, so it is chosen first, until its failures are known
    {
        "agent": "replica_agents:flaky",
        "contract": {"name": "flaky", "can_do": ["work"], "slo_latency_ms": 100},
    },
    {
        "agent": "replica_agents:steady",
        "contract": {"name": "steady", "can_do": ["work"], "slo_latency_ms": 2000},
    },
    {
        "agent": "replica_agents:held",
        "contract": {"name": "held", "can_do": ["hold"], "slo_latency_ms": 20000},
    },
]
PLAN = agency_pb2.SubmitRequest(text="plan the rollout", constraints_json='{"action": "plan"}')
WORK = agency_pb2.SubmitRequest(text="do the work", constraints_json='{"action": "work"}')
ROUTE_WORK = agency_pb2.RouteRequest(text="do the work", constraints_json='{"action": "work"}')


def _definition(prefix: str) -> dict[str, Any]:
    return redis_definition(
        prefix,
        agents=AGENTS,
        # a failed agent hands over to the backup at once (no retry backoff in a real process)
        agency={"failure_policies": {"TOOL_ERROR": {"resolution": "use_backup"}}},
    )


class Replica:
    """One gateway process and its gRPC stubs."""

    def __init__(self, gateway: GatewayProcess) -> None:
        self.gateway = gateway
        self.channel = grpc.aio.insecure_channel(gateway.address)
        self.agency = agency_pb2_grpc.AgencyServiceStub(self.channel)
        self.catalog = catalog_pb2_grpc.CatalogServiceStub(self.channel)


@pytest.fixture
async def replicas(tmp_path: Path, redis_client, redis_prefix: str) -> AsyncIterator[tuple[Replica, Replica]]:
    config = write_definition(tmp_path / "agency.yaml", _definition(redis_prefix))  # one file, two replicas
    gateways = await start_gateways(config, ["gw-a", "gw-b"], tmp_path, pythonpath=[HERE])
    a, b = Replica(gateways[0]), Replica(gateways[1])
    try:
        yield a, b
    finally:
        for r in (a, b):
            await r.channel.close()
        codes = [await g.stop() for g in gateways]
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)
    assert codes == [0, 0], [g.output() for g in gateways]


def _cli(*argv: str) -> Any:
    return asyncio.to_thread(main, list(argv))


async def test_a_task_submitted_to_one_gateway_is_resumed_on_the_other(
    replicas, redis_client, redis_prefix
) -> None:
    a, b = replicas
    waiting = await a.agency.Submit(PLAN, timeout=10)
    assert waiting.state == "input_required", waiting.reason
    pending = json.loads(waiting.pending_json)
    assert pending["kind"] == "clarification" and "accept" in [o["id"] for o in pending["options"]]
    # the task's state lives in Redis, under the deployment's key prefix
    assert await redis_client.exists(f"{redis_prefix}{{task:{waiting.task_id}}}") == 1

    on_b = await b.agency.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id), timeout=10)
    assert on_b.state == "input_required" and json.loads(on_b.pending_json) == pending

    done = await b.agency.Resume(
        agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="accept"), timeout=10
    )
    assert done.state == "completed", done.reason
    assert json.loads(done.output_json) == {"plan": "probably plan A"}
    assert done.trace_id == waiting.trace_id

    on_a = await a.agency.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id), timeout=10)
    assert on_a.state == "completed"
    with pytest.raises(grpc.aio.AioRpcError) as info:  # resumed once, whichever gateway is asked
        await a.agency.Resume(agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="accept"), timeout=10)
    assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION


async def _keys(replica: Replica) -> set[str]:
    return {e.key for e in (await replica.catalog.Query(catalog_pb2.QueryRequest(), timeout=10)).entries}


async def test_a_catalog_change_through_either_gateway_is_seen_by_both(replicas) -> None:
    a, b = replicas
    defined = {"unsure@1.0.0", "flaky@1.0.0", "steady@1.0.0", "held@1.0.0"}
    assert await _keys(a) == await _keys(b) == defined  # both registered the file's agents: one entry each

    for writer, reader, name in ((a, b, "from_a"), (b, a, "from_b")):
        contract = common_pb2.CapabilityContract(
            name=name, version="1.0.0", can_do=["ping"], slo_latency_ms=500
        )
        await writer.catalog.Register(catalog_pb2.RegisterRequest(contract=contract), timeout=10)
        seen = await reader.catalog.Get(catalog_pb2.GetCapabilityRequest(key=f"{name}@1.0.0"), timeout=10)
        assert seen.contract.can_do == ["ping"] and seen.contract.slo_latency_ms == 500
        assert await _keys(reader) == defined | {f"{name}@1.0.0"}

        await writer.catalog.Deregister(catalog_pb2.DeregisterRequest(key=f"{name}@1.0.0"), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await reader.catalog.Get(catalog_pb2.GetCapabilityRequest(key=f"{name}@1.0.0"), timeout=10)
        assert info.value.code() is grpc.StatusCode.NOT_FOUND
        assert await _keys(reader) == defined


def _stats(decision: agency_pb2.RoutingDecision) -> dict[str, tuple[float, int, float]]:
    return {c.agent: (c.success_rate, c.samples, c.load) for c in decision.candidates}


async def test_routing_statistics_gathered_by_one_gateway_steer_the_other(replicas) -> None:
    a, b = replicas
    before = await b.agency.Route(ROUTE_WORK, timeout=10)
    assert before.chosen == "flaky@1.0.0"  # the better SLO, and no history yet
    assert _stats(before)["flaky@1.0.0"] == (1.0, 0, 0.0)

    outcome = await a.agency.Submit(WORK, timeout=10)  # flaky fails on a, steady answers
    assert outcome.state == "completed", outcome.reason
    assert [f.type for f in outcome.failures] == ["TOOL_ERROR"]
    assert json.loads(outcome.output_json) == {"done": True}

    # b never dispatched anything: it sees a's outcomes once its numbers are re-read (at most
    # max_age_seconds, 1 s, after it last read them: middleware/redis/routing_stats.py)
    expected = {"flaky@1.0.0": (0.0, 1, 0.0), "steady@1.0.0": (1.0, 1, 0.0)}
    after = await _route_until(b, ROUTE_WORK, lambda s: s == expected)
    assert _stats(after) == expected
    assert after.chosen == "steady@1.0.0" and list(after.fallbacks) == ["flaky@1.0.0"]
    assert "success 100%" in after.explanation
    assert _stats(await a.agency.Route(ROUTE_WORK, timeout=10)) == _stats(after)  # one set of numbers


async def test_calls_in_flight_on_one_gateway_are_load_on_the_other(
    replicas, redis_client, redis_prefix
) -> None:
    a, b = replicas
    route = agency_pb2.RouteRequest(text="hold on", constraints_json='{"action": "hold"}')
    release = f"{redis_prefix}release"
    call = a.agency.Submit(
        agency_pb2.SubmitRequest(
            text="hold on",
            constraints_json='{"action": "hold"}',
            input_json=json.dumps({"redis_url": REDIS_URL, "release": release}),
        ),
        timeout=20,
    )
    try:
        deadline = time.monotonic() + 10  # the call reaching the agent in the other process
        while _stats(await b.agency.Route(route, timeout=10))["held@1.0.0"][2] == 0.0:
            assert time.monotonic() < deadline, "b never saw the call in flight on a"
            await asyncio.sleep(0.02)
        assert _stats(await b.agency.Route(route, timeout=10))["held@1.0.0"] == (1.0, 0, 1.0)
    finally:
        await redis_client.rpush(release, "go")
    outcome = await call
    assert outcome.state == "completed" and json.loads(outcome.output_json) == {"released": True}
    done = await _route_until(b, route, lambda s: s["held@1.0.0"] == (1.0, 1, 0.0))  # within max_age
    assert _stats(done)["held@1.0.0"] == (1.0, 1, 0.0)


async def _route_until(
    replica: Replica, route: agency_pb2.RouteRequest, seen: Any
) -> agency_pb2.RoutingDecision:
    """The first decision whose stats pass ``seen``: a bounded poll of another process."""
    deadline = time.monotonic() + 10
    while not seen(_stats(decision := await replica.agency.Route(route, timeout=10))):
        assert time.monotonic() < deadline, f"never seen: {_stats(decision)}"
        await asyncio.sleep(0.02)
    return decision


async def test_each_gateway_writes_its_own_audit_log_and_export_merges_them(
    replicas, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = replicas
    waiting = await a.agency.Submit(PLAN, timeout=10)
    done = await b.agency.Resume(
        agency_pb2.ResumeRequest(task_id=waiting.task_id, answer="accept"), timeout=10
    )
    assert done.state == "completed", done.reason
    assert [await r.gateway.stop() for r in (a, b)] == [0, 0]  # SIGTERM: drained, log sealed

    for node in ("gw-a", "gw-b"):  # each node's own directory holds exactly its own log
        audit_dir = tmp_path / node / "audit"
        assert [p.name for p in audit_dir.iterdir() if p.is_dir() and p.name != "keys"] == [node]
        # no --key pinned: intact, but who signed it is not checked (exit 3, issue 14)
        assert await _cli("audit", "verify", str(audit_dir)) == 5
        out = capsys.readouterr().out
        assert f"OK   {node}:" in out and "AUTHENTICITY NOT CHECKED" in out and "VERIFIED" not in out
        assert not (audit_dir / "keys").exists()  # the key lives beside the audit directory
        assert (tmp_path / node / "keys" / f"{node}.key").is_file()

    collected = tmp_path / "collected"  # the logs gathered in one place, as a backup would
    for node in ("gw-a", "gw-b"):
        await asyncio.to_thread(shutil.copytree, tmp_path / node / "audit" / node, collected / node)
    bundle = tmp_path / "merged.jsonl"
    assert await _cli("audit", "export", str(collected), "--output", str(bundle)) == 0
    lines = [json.loads(line) for line in (await asyncio.to_thread(bundle.read_text)).splitlines()]
    records = [line for line in lines if line["kind"] == "record"]
    assert {line["node"] for line in records} == {"gw-a", "gw-b"}
    assert all(line["record"]["node"] == line["node"] for line in records)
    times = [line["time_ns"] for line in records]
    assert times == sorted(times)  # merged in time order

    story = [
        (line["node"], line["record"]["event_type"])
        for line in records
        if line["record"]["task_id"] == waiting.task_id
    ]
    assert story[0] == ("gw-a", "task.submitted") and ("gw-b", "task.resumed") in story
    assert story[-1] == ("gw-b", "task.completed")
    nodes = [node for node, _ in story]
    assert nodes == sorted(nodes, key=["gw-a", "gw-b"].index)  # all of a's part, then all of b's
    task_traces = {
        line["record"]["trace_id"] for line in records if line["record"]["task_id"] == waiting.task_id
    }
    assert task_traces == {waiting.trace_id}

    assert await _cli("audit", "verify", str(bundle)) == 5
    assert "AUTHENTICITY NOT CHECKED" in capsys.readouterr().out
