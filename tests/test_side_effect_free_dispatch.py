"""A contract's ``side_effect_free`` opt-in: an agent that cannot act on the world, run in
process, has its dispatch records made durable with the outcome (one durability wait per
task); every other agent — the default contract, a remote one, a callable that forwards the
message elsewhere — is called only once the dispatch is durable."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import yaml

from middleware import Agency, TaskState, WalAuditLog
from middleware._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from middleware.agents import AgentRegistry
from middleware.audit.record import AuditRecord, PlainRecord
from middleware.server.bootstrap import build_agency
from middleware.server.grpc_api import build_server
from middleware.server.settings import load_definition


class CountingWal(WalAuditLog):
    """A WAL that remembers each batch it was handed (one batch = one durability wait)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[list[str]] = []

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        self.batches.append(
            [r.event_type if isinstance(r, AuditRecord) else str(r["event_type"]) for r in records]
        )
        return await super().append_batch(records)


def contract(**kw: Any) -> dict[str, Any]:
    return {"name": "echo", "can_do": ["echo"], "slo_latency_ms": 5000, **kw}


async def run_one(tmp_path: Path, agents: AgentRegistry | None = None, **kw: Any) -> tuple[Any, ...]:
    """Submit one task to ``echo`` (registered with ``kw`` in its contract); return the outcome,
    the batches handed to the log and the event types of the task on disk when the agent ran."""
    given = kw.pop("_callable", None)
    audit = CountingWal(tmp_path, "n1")
    agency = Agency(audit=audit, agents=agents)
    on_disk_at_call: list[list[str]] = []

    def echo(request: Any) -> dict[str, Any]:
        on_disk_at_call.append([r.event_type for _, r in audit.records() if r.task_id == request.task_id])
        return {"echo": request.input}

    agent = getattr(agents, "fake_remote", None)
    if agent is not None:  # served "remotely": the registry's factory returns the callable
        agent.calls = echo
        await agency.register(contract(**kw))
    else:
        await agency.register(contract(**kw), given or echo)
    outcome = await agency.submit({"text": "echo", "input": {"x": 1}, "constraints": {"action": "echo"}})
    on_disk_after = [r.event_type for _, r in audit.records() if r.task_id == outcome.task_id]
    await agency.close()
    return outcome, audit.batches, on_disk_at_call, on_disk_after


async def test_a_side_effect_free_agent_in_process_costs_one_durability_wait(tmp_path):
    outcome, batches, at_call, after = await run_one(tmp_path, side_effect_free=True)
    assert outcome.state is TaskState.COMPLETED
    assert len(batches) == 1  # dispatch and outcome made durable together
    assert at_call == [[]]  # nothing of the task was on disk when the agent ran
    assert batches[0][0] == "task.submitted" and "agent.dispatch" in batches[0]
    assert batches[0][-1] == "task.completed"
    assert after == batches[0]  # every record on disk before the answer, in order
    assert outcome.audit_index > 0


async def test_the_default_contract_still_waits_before_the_dispatch(tmp_path):
    outcome, batches, at_call, after = await run_one(tmp_path)
    assert outcome.state is TaskState.COMPLETED
    assert len(batches) == 2
    assert batches[0][-1] == "agent.dispatch" and at_call == [batches[0]]
    assert after == batches[0] + batches[1] and after[-1] == "task.completed"


class FakeRemote:
    """Stands in for the transport to a remote worker (what ``RemoteAgent`` would be)."""

    def __init__(self) -> None:
        self.calls: Any = None

    def __call__(self, request: Any) -> Any:
        return self.calls(request)


async def test_a_remote_agent_declaring_no_side_effects_keeps_the_dispatch_barrier(tmp_path):
    remote = FakeRemote()
    agents = AgentRegistry(remote_factory=lambda _contract: remote)
    agents.fake_remote = remote  # type: ignore[attr-defined]
    outcome, batches, at_call, _ = await run_one(
        tmp_path, agents, side_effect_free=True, endpoint="worker.internal:50061"
    )
    assert outcome.state is TaskState.COMPLETED
    assert len(batches) == 2
    assert batches[0][-1] == "agent.dispatch" and at_call == [batches[0]]


async def test_an_in_process_callable_that_forwards_elsewhere_keeps_the_dispatch_barrier(tmp_path):
    class Forwarder:  # like an MCP tool over stdio: in process, no endpoint, the call leaves
        leaves_process = True

        def __init__(self) -> None:
            self.seen: list[str] = []

        def __call__(self, request: Any) -> Any:
            self.seen.append(request.task_id)
            return {"ok": True}

    forwarder = Forwarder()
    outcome, batches, _, _ = await run_one(tmp_path, side_effect_free=True, _callable=forwarder)
    assert outcome.state is TaskState.COMPLETED and forwarder.seen == [outcome.task_id]
    assert len(batches) == 2 and batches[0][-1] == "agent.dispatch"


async def test_side_effect_free_round_trips_through_grpc_register_and_get():
    agency = Agency()
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)
        for name, flag in (("lookup", True), ("mutator", False)):
            pb = common_pb2.CapabilityContract(name=name, can_do=["look"], side_effect_free=flag)
            entry = await stub.Register(catalog_pb2.RegisterRequest(contract=pb))
            assert entry.contract.side_effect_free is flag
            got = await stub.Get(catalog_pb2.GetCapabilityRequest(key=f"{name}@1.0.0"))
            assert got.contract.side_effect_free is flag
            assert (await agency.catalog.get(f"{name}@1.0.0")).contract.side_effect_free is flag
    finally:
        await channel.close()
        await server.stop(0)
        await agency.close()


async def test_side_effect_free_is_read_from_the_definition_file(tmp_path):
    scripted = {"factory": "middleware.testing:ScriptedAgent.of", "args": {"steps": [{"ok": 1}]}}
    agent = {**scripted, "contract": contract(side_effect_free=True)}
    other = {**scripted, "contract": {**contract(), "name": "other"}}
    path = tmp_path / "agency.yaml"
    path.write_text(yaml.safe_dump({"agents": [agent, other]}))
    definition = load_definition(path, env={"AGENCY_AUDIT_DIR": str(tmp_path / "audit")})
    assert [a.contract.side_effect_free for a in definition.agents] == [True, False]
    agency = await build_agency(definition)
    try:
        assert (await agency.catalog.get("echo@1.0.0")).contract.side_effect_free
        assert not (await agency.catalog.get("other@1.0.0")).contract.side_effect_free
    finally:
        await agency.close()
