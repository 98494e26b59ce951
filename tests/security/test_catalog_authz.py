"""Roles on bearer tokens: who may write the catalog and register goals (real server, port 0).

The gateway reads a token file as ``agency serve`` does. ``translator`` is an agent (it
writes only ``translator@*``), ``legacy`` a two-column line (the default role, agent),
``web`` a client (no catalog or goal writes), ``ops`` an admin. Every refusal is
PERMISSION_DENIED naming the client and the contract, and is audited.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from middleware import Agency, AgentRequest, NotFound
from middleware._proto.agency.v1 import (
    agency_pb2,
    agency_pb2_grpc,
    audit_pb2,
    catalog_pb2,
    catalog_pb2_grpc,
    goals_pb2,
    goals_pb2_grpc,
    messages_pb2,
)
from middleware.access import Permission, Principal, Role, authorize
from middleware.agents import AgentRegistry
from middleware.audit import MemoryAuditLog
from middleware.cli import main
from middleware.contracts import CapabilityContract
from middleware.demo import build_demo_agency
from middleware.errors import PermissionDenied
from middleware.grants import AgentGrant
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.auth import PERMISSIONS
from middleware.server.grpc_api.channel import open_channel
from middleware.server.grpc_api.convert import contract_to_pb
from middleware.server.remote_agent import RemoteAgent
from middleware.server.settings import ServerConfig, hash_token
from middleware.server.worker import Worker

TOKENS = {"translator": "agt_translator", "legacy": "agt_legacy", "web": "web-frontend", "ops": "ops-admin"}
TOKEN_FILE = (
    "# name sha256 [role]\n"
    f"translator {hash_token(TOKENS['translator'])} agent\n"
    f"legacy {hash_token(TOKENS['legacy'])}\n"
    f"web {hash_token(TOKENS['web'])} client\n"
    f"ops {hash_token(TOKENS['ops'])} admin\n"
)

#: What the agent tokens may declare (issue 14: granted by an admin).
GRANTS = {
    name: AgentGrant(actions=["translate"], endpoints=["127.0.0.1", "10.0.0.7:50061"])
    for name in ("translator", "legacy")
}


def contract(name: str, version: str = "1.0.0", endpoint: str = "") -> catalog_pb2.CapabilityContract:
    data: dict[str, Any] = {"name": name, "version": version, "can_do": ["translate"]}
    if endpoint:
        data["endpoint"] = endpoint
    return contract_to_pb(CapabilityContract.parse(data))


@dataclass
class Gateway:
    agency: Agency
    audit: MemoryAuditLog
    address: str

    def refusals(self) -> list[dict[str, Any]]:
        return [
            {"event": r.event_type, "agent": r.actors.agent, **r.detail}
            for _, r in self.audit.records()
            if r.outcome == "refused" and r.rule == "PERMISSION_DENIED"
        ]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    (tmp_path / "tokens").write_text(TOKEN_FILE)
    config = ServerConfig.from_env({"AGENCY_AUTH_TOKENS": str(tmp_path / "tokens")})
    audit = MemoryAuditLog()

    async def no_sleep(_: float) -> None:
        return None

    agency = await build_demo_agency(
        Agency(audit=audit, sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    )
    server = build_server(agency, "127.0.0.1:0", token_hashes=config.token_hashes(), grants=GRANTS)
    await server.start()
    yield Gateway(agency, audit, f"127.0.0.1:{server.port}")
    await server.stop(0)
    await agency.close()


class As:
    """Stubs on a channel carrying one client's token."""

    def __init__(self, gw: Gateway, who: str | None) -> None:
        self.channel = open_channel(gw.address, token=TOKENS[who] if who else None)
        self.catalog = catalog_pb2_grpc.CatalogServiceStub(self.channel)
        self.agency = agency_pb2_grpc.AgencyServiceStub(self.channel)
        self.goals = goals_pb2_grpc.GoalServiceStub(self.channel)

    async def __aenter__(self) -> As:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close()


async def denied(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    err = info.value
    assert err.code() is grpc.StatusCode.PERMISSION_DENIED, (err.code(), err.details())
    assert dict(err.trailing_metadata() or ()).get("agency-reason") == "PERMISSION_DENIED"
    return err


GOAL = json.dumps(
    {
        "id": "GOAL_TRANSLATED_001",
        "description": "translated",
        "verification_steps": [{"kind": "contains", "value": "translated"}],
    }
)


async def test_an_agent_writes_its_own_contracts_every_version(gateway: Gateway) -> None:
    async with As(gateway, "translator") as me:
        entry = await me.catalog.Register(
            catalog_pb2.RegisterRequest(contract=contract("translator")), timeout=5
        )
        assert entry.contract.name == "translator"
        await me.catalog.Register(
            catalog_pb2.RegisterRequest(contract=contract("translator", "2.0.0")), timeout=5
        )
        await me.catalog.Register(  # re-register (the worker's restart) with replace
            catalog_pb2.RegisterRequest(
                contract=contract("translator", endpoint="10.0.0.7:50061"), replace=True
            ),
            timeout=5,
        )
        await me.catalog.Update(
            catalog_pb2.UpdateRequest(contract=contract("translator", "2.0.0")), timeout=5
        )
        beat = await me.catalog.Heartbeat(catalog_pb2.HeartbeatRequest(key="translator@1.0.0"), timeout=5)
        assert beat.contract.endpoint == "10.0.0.7:50061"
        await me.catalog.Deregister(catalog_pb2.DeregisterRequest(key="translator@2.0.0"), timeout=5)
        # and it reads like any client
        listed = await me.catalog.Query(catalog_pb2.QueryRequest(name="translator"), timeout=5)
        assert [e.contract.version for e in listed.entries] == ["1.0.0"]
    with pytest.raises(NotFound):
        await gateway.agency.catalog.get("translator@2.0.0")
    assert gateway.refusals() == []


async def test_an_agent_cannot_hijack_or_remove_another_agents_contract(gateway: Gateway) -> None:
    victim = await gateway.agency.catalog.get("warranty_agent@2.1.0")  # the demo's, registered by the gateway
    async with As(gateway, "translator") as attacker:
        hijack = catalog_pb2.RegisterRequest(
            contract=contract("warranty_agent", "2.1.0", endpoint="evil.example:1"), replace=True
        )
        err = await denied(attacker.catalog.Register(hijack, timeout=5))
        assert err.details() == (
            "client 'translator' (role agent) may not CatalogService/Register warranty_agent@2.1.0: "
            "an agent writes only contracts named 'translator'"
        )
        # a new version under another name, an update, a heartbeat, a removal: all refused
        await denied(
            attacker.catalog.Register(
                catalog_pb2.RegisterRequest(contract=contract("warranty_agent", "9.0.0"))
            )
        )
        await denied(
            attacker.catalog.Update(catalog_pb2.UpdateRequest(contract=contract("warranty_agent", "2.1.0")))
        )
        await denied(attacker.catalog.Heartbeat(catalog_pb2.HeartbeatRequest(key="warranty_agent@2.1.0")))
        err = await denied(
            attacker.catalog.Deregister(catalog_pb2.DeregisterRequest(key="warranty_agent@2.1.0"))
        )
        assert "'translator'" in err.details() and "warranty_agent@2.1.0" in err.details()
        # a name that merely starts like its own is another name
        await denied(attacker.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("translator2"))))
    after = await gateway.agency.catalog.get("warranty_agent@2.1.0")
    assert after.contract == victim.contract and after.revision == victim.revision  # untouched
    with pytest.raises(NotFound):
        await gateway.agency.catalog.get("warranty_agent@9.0.0")

    refusals = gateway.refusals()
    assert [(r["event"], r["operation"], r["agent"]) for r in refusals] == [
        ("catalog.change", "CatalogService/Register", "warranty_agent@2.1.0"),
        ("catalog.change", "CatalogService/Register", "warranty_agent@9.0.0"),
        ("catalog.change", "CatalogService/Update", "warranty_agent@2.1.0"),
        ("catalog.change", "CatalogService/Heartbeat", "warranty_agent@2.1.0"),
        ("catalog.change", "CatalogService/Deregister", "warranty_agent@2.1.0"),
        ("catalog.change", "CatalogService/Register", "translator2@1.0.0"),
    ]
    assert all(r["client"] == "translator" and r["role"] == "agent" for r in refusals)
    assert "may not CatalogService/Register" in refusals[0]["why"]


async def test_a_two_column_line_is_an_agent_for_its_own_name(gateway: Gateway) -> None:
    async with As(gateway, "legacy") as legacy:
        await legacy.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("legacy")), timeout=5)
        err = await denied(
            legacy.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("warranty_agent", "3.0.0")))
        )
        assert "client 'legacy' (role agent)" in err.details()
        await denied(legacy.goals.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=GOAL)))


async def test_a_client_submits_and_reads_but_writes_neither_catalog_nor_goals(gateway: Gateway) -> None:
    async with As(gateway, "web") as web:
        outcome = await web.agency.Submit(
            agency_pb2.SubmitRequest(
                text="I need a replacement for my shattered screen",
                input_json=json.dumps({"user_id": "u_1", "device_model": "PhoneX"}),
            ),
            timeout=10,
        )
        assert outcome.state == "completed", outcome.reason
        listed = await web.catalog.Query(catalog_pb2.QueryRequest(name="warranty_agent"), timeout=5)
        assert [e.contract.version for e in listed.entries] == ["2.1.0"]
        assert (await web.goals.GetGoal(goals_pb2.GetGoalRequest(goal_id="GOAL_WARRANTY_001"))).id
        watch = web.catalog.Watch(catalog_pb2.WatchRequest(include_existing=True), timeout=5)
        first = await watch.read()
        watch.cancel()
        assert first.type == "existing"
        err = await denied(web.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("web"))))
        assert err.details() == (
            "client 'web' (role client) may not CatalogService/Register web@1.0.0: "
            "catalog writes need the agent role (its own contracts) or admin"
        )
        await denied(web.catalog.Deregister(catalog_pb2.DeregisterRequest(key="warranty_agent@2.1.0")))
        err = await denied(web.goals.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=GOAL)))
        assert err.details() == (
            "client 'web' (role client) may not GoalService/RegisterGoal: this needs the admin role"
        )
    assert [(r["event"], r["client"], r["operation"]) for r in gateway.refusals()] == [
        ("catalog.change", "web", "CatalogService/Register"),
        ("catalog.change", "web", "CatalogService/Deregister"),
        ("message.rejected", "web", "GoalService/RegisterGoal"),
    ]
    await gateway.agency.catalog.get("warranty_agent@2.1.0")  # still there


async def test_an_admin_may_do_everything(gateway: Gateway) -> None:
    async with As(gateway, "ops") as ops:
        replaced = contract("warranty_agent", "2.1.0", endpoint="10.0.0.9:50061")
        await ops.catalog.Register(catalog_pb2.RegisterRequest(contract=replaced, replace=True), timeout=5)
        await ops.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("translator")), timeout=5)
        await ops.catalog.Heartbeat(catalog_pb2.HeartbeatRequest(key="translator@1.0.0"), timeout=5)
        await ops.catalog.Update(catalog_pb2.UpdateRequest(contract=contract("translator")), timeout=5)
        await ops.catalog.Deregister(catalog_pb2.DeregisterRequest(key="translator@1.0.0"), timeout=5)
        goal = await ops.goals.RegisterGoal(goals_pb2.RegisterGoalRequest(goal_json=GOAL), timeout=5)
        assert goal.id == "GOAL_TRANSLATED_001"
    assert (await gateway.agency.catalog.get("warranty_agent@2.1.0")).contract.endpoint == "10.0.0.9:50061"
    assert gateway.refusals() == []


async def test_unknown_tokens_are_still_unauthenticated_and_malformed_writes_invalid(
    gateway: Gateway,
) -> None:
    async with As(gateway, None) as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await anonymous.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("translator")))
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    async with As(gateway, "translator") as agent:
        raw = agent.channel.unary_unary("/agency.v1.CatalogService/Register")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await raw(b"\xff\xff\xff", timeout=5)  # not a RegisterRequest: refused before any check
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert gateway.refusals() == []


async def test_without_a_token_file_anyone_writes_the_catalog_as_before(demo_agency: Agency) -> None:
    server = build_server(demo_agency, "127.0.0.1:0")
    await server.start()
    try:
        async with open_channel(f"127.0.0.1:{server.port}") as channel:
            stub = catalog_pb2_grpc.CatalogServiceStub(channel)
            await stub.Register(catalog_pb2.RegisterRequest(contract=contract("translator")), timeout=5)
            await stub.Deregister(catalog_pb2.DeregisterRequest(key="warranty_agent@2.1.0"), timeout=5)
            await goals_pb2_grpc.GoalServiceStub(channel).RegisterGoal(
                goals_pb2.RegisterGoalRequest(goal_json=GOAL), timeout=5
            )
    finally:
        await server.stop(0)


# ----------------------------------------------------------------------- workers


async def translate(request: AgentRequest) -> str:
    return f"translated: {request.text}"


WORKER_CONTRACT = {"name": "translator", "version": "1.0.0", "can_do": ["translate"], "slo_latency_ms": 3000}


async def test_a_worker_with_its_agent_token_registers_heartbeats_and_deregisters(gateway: Gateway) -> None:
    beats = asyncio.Event()
    worker = Worker(
        translate,
        WORKER_CONTRACT,
        gateway=gateway.address,
        token=TOKENS["translator"],
        heartbeat_interval=0.05,
        on_heartbeat=lambda n: beats.set(),
    )
    async with worker:
        entry = await gateway.agency.catalog.get("translator@1.0.0")
        assert entry.contract.endpoint == worker.endpoint
        await asyncio.wait_for(beats.wait(), 10)
    with pytest.raises(NotFound):  # deregistered on stop, with the same token
        await gateway.agency.catalog.get("translator@1.0.0")
    assert gateway.refusals() == []


async def test_a_worker_with_another_agents_token_is_refused_and_told_why(gateway: Gateway) -> None:
    worker = Worker(translate, WORKER_CONTRACT, gateway=gateway.address, token=TOKENS["legacy"])
    with pytest.raises(PermissionDenied) as info:
        await asyncio.wait_for(worker.start(), 10)
    message = str(info.value)
    assert "refused translator@1.0.0" in message and "client 'legacy' (role agent)" in message
    assert "must be named 'translator', role agent" in message
    with pytest.raises(NotFound):
        await gateway.agency.catalog.get("translator@1.0.0")


# ----------------------------------------------------------------------- the policy


def test_every_served_method_has_a_rule() -> None:
    """A new RPC must be given a rule (unlisted methods need admin): the list comes from the protos."""
    served = {
        f"/{service.full_name}/{method.name}"
        for module in (agency_pb2, catalog_pb2, goals_pb2, audit_pb2, messages_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert served == set(PERMISSIONS)
    writes = {
        m
        for m, rule in PERMISSIONS.items()
        if rule.permission not in (Permission.CALL, Permission.AUDIT_READ)
    }
    assert writes == {
        "/agency.v1.CatalogService/Register",
        "/agency.v1.CatalogService/Update",
        "/agency.v1.CatalogService/Deregister",
        "/agency.v1.CatalogService/Heartbeat",
        "/agency.v1.GoalService/RegisterGoal",
        "/agency.v1.MessageService/ApproveAgent",  # admins approve agent registrations
        "/agency.v1.MessageService/ListQuarantine",  # and decide about quarantined messages
        "/agency.v1.MessageService/ReleaseQuarantined",
        "/agency.v1.MessageService/DeleteQuarantined",
    }
    audit_reads = {m for m, rule in PERMISSIONS.items() if rule.permission is Permission.AUDIT_READ}
    assert audit_reads == {m for m in served if m.startswith("/agency.v1.AuditService/")}


@pytest.mark.parametrize(
    ("role", "permission", "capability", "allowed"),
    [
        (Role.CLIENT, Permission.CALL, "", True),
        (Role.CLIENT, Permission.CATALOG_WRITE, "web", False),
        (Role.CLIENT, Permission.GOAL_WRITE, "", False),
        (Role.AGENT, Permission.CALL, "", True),
        (Role.AGENT, Permission.CATALOG_WRITE, "translator", True),
        (Role.AGENT, Permission.CATALOG_WRITE, " Translator ", True),  # as the catalog stores names
        (Role.AGENT, Permission.CATALOG_WRITE, "translator_v2", False),
        (Role.AGENT, Permission.CATALOG_WRITE, "", False),
        (Role.AGENT, Permission.GOAL_WRITE, "", False),
        (Role.CLIENT, Permission.AUDIT_READ, "", False),
        (Role.AGENT, Permission.AUDIT_READ, "", False),
        (Role.AUDITOR, Permission.AUDIT_READ, "", True),
        (Role.AUDITOR, Permission.CATALOG_WRITE, "audrey", False),
        (Role.AUDITOR, Permission.GOAL_WRITE, "", False),
        (Role.ADMIN, Permission.AUDIT_READ, "", True),
        (Role.AGENT, Permission.ADMIN, "", False),
        (Role.ADMIN, Permission.CATALOG_WRITE, "anything", True),
        (Role.ADMIN, Permission.GOAL_WRITE, "", True),
        (Role.ADMIN, Permission.ADMIN, "", True),
    ],
)
def test_roles(role: Role, permission: Permission, capability: str, allowed: bool) -> None:
    principal = Principal(name="translator", role=role)
    if allowed:
        authorize(principal, permission, operation="op", capability=capability)
    else:
        with pytest.raises(PermissionDenied) as info:
            authorize(principal, permission, operation="op", capability=capability, target="t")
        assert info.value.details["client"] == "translator" and info.value.details["role"] == role.value


# ----------------------------------------------------------------------- agency serve / config check


async def test_serve_warns_about_lines_without_a_role(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from middleware.cli.serve import serve

    (tmp_path / "tokens").write_text(TOKEN_FILE + f"old-worker {hash_token('x')}\n")
    config = ServerConfig.from_env(
        {},
        address="127.0.0.1:0",
        data_dir=tmp_path / "data",
        metrics_address="",
        auth_tokens=tmp_path / "tokens",
    )
    stop = asyncio.Event()
    stop.set()  # start, then stop at once
    with caplog.at_level(logging.INFO, logger="agency.serve"):
        assert await serve(config, stop=stop) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "no role on the lines of legacy, old-worker: they get the 'agent' role" in warnings[0]
    # and no grant for any agent (issue 14): they may register nothing until an admin grants it
    assert "agent tokens without a grant may register nothing: legacy, old-worker, translator" in warnings[1]
    info = [r.getMessage() for r in caplog.records if r.getMessage().startswith("bearer tokens from")]
    assert info and "client: web; agent: legacy, old-worker, translator; admin: ops" in info[0]


def test_a_bad_role_stops_serve_and_fails_config_check_naming_the_line(tmp_path: Path, capsys) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKEN_FILE + f"ops2 {hash_token('y')} superuser\n")
    serve = [
        "serve",
        "--auth-tokens",
        str(tokens),
        "--data-dir",
        str(tmp_path / "d"),
        "--address",
        "127.0.0.1:0",
    ]
    assert main([*serve, "--metrics-address", ""]) == 2
    assert not (tmp_path / "d").exists()  # refused before anything was opened
    err = capsys.readouterr().err
    assert f"{tokens}:6: unknown role 'superuser' (expected client, agent, auditor, admin)" in err

    definition = tmp_path / "agency.yaml"
    definition.write_text(f"server:\n  auth_tokens: {tokens}\n")
    assert main(["config", "check", str(definition)]) == 1
    assert f"{tokens}:6: unknown role 'superuser'" in capsys.readouterr().err

    tokens.write_text(TOKEN_FILE)
    assert main(["config", "check", str(definition)]) == 0
    out = capsys.readouterr().out
    assert "client tokens: web, agent tokens: legacy, translator, admin tokens: ops" in out


async def test_agency_catalog_takes_a_token_file_and_shows_a_refusal(
    gateway: Gateway, tmp_path: Path
) -> None:
    from middleware.cli import build_parser
    from middleware.cli.catalog import _main
    from middleware.errors import PermissionDenied, Unauthenticated

    async def catalog(*argv: str) -> str:
        out = io.StringIO()
        assert (
            await _main(build_parser().parse_args(["catalog", *argv, "--address", gateway.address]), out) == 0
        )
        return out.getvalue()

    for who in ("ops", "web"):
        (tmp_path / who).write_text(TOKENS[who] + "\n")
    (tmp_path / "c.json").write_text(json.dumps({"name": "translator", "version": "1.0.0", "can_do": ["x"]}))
    assert "registered translator@1.0.0" in await catalog(
        "register", str(tmp_path / "c.json"), "--token-file", str(tmp_path / "ops")
    )
    # a client token reads (watch is a server stream: the token goes there too) but may not write
    events = await catalog(
        "watch", "--include-existing", "--count", "1", "--token-file", str(tmp_path / "web")
    )
    assert json.loads(events.splitlines()[0])["type"] == "existing"
    with pytest.raises(PermissionDenied, match=r"client 'web' \(role client\)"):
        await catalog("deregister", "translator@1.0.0", "--token-file", str(tmp_path / "web"))
    with pytest.raises(Unauthenticated, match=r"--token-file FILE"):
        await catalog("list")


async def test_catalog_changes_are_recorded_under_the_client_that_made_them(gateway: Gateway) -> None:
    async with As(gateway, "translator") as me:
        await me.catalog.Register(catalog_pb2.RegisterRequest(contract=contract("translator")))
        await me.catalog.Deregister(catalog_pb2.DeregisterRequest(key="translator@1.0.0"))
    changes = [
        (r.outcome, r.actors.agent, r.actors.user)
        for _, r in gateway.audit.records()
        if r.event_type == "catalog.change" and r.actors.agent == "translator@1.0.0"
    ]
    assert changes == [
        ("registered", "translator@1.0.0", "translator"),
        ("deregistered", "translator@1.0.0", "translator"),
    ]


async def test_a_task_is_read_and_resumed_by_the_client_that_submitted_it_or_an_admin(
    gateway: Gateway,
) -> None:
    async with As(gateway, "web") as web, As(gateway, "legacy") as other, As(gateway, "ops") as admin:
        outcome = await web.agency.Submit(
            agency_pb2.SubmitRequest(
                text="I need a replacement for my shattered screen",
                input_json=json.dumps({"user_id": "u_1", "device_model": "PhoneX"}),
            ),
            timeout=10,
        )
        task = agency_pb2.GetTaskRequest(task_id=outcome.task_id)
        assert (await web.agency.GetTask(task, timeout=5)).state == "completed"
        assert (await admin.agency.GetTask(task, timeout=5)).task_id == outcome.task_id
        err = await denied(other.agency.GetTask(task, timeout=5))
        assert err.details() == (
            f"client 'legacy' (role agent) may not AgencyService/GetTask {outcome.task_id}: "
            "a task is read and resumed by the client that submitted it, or an admin"
        )
        await denied(
            other.agency.Resume(agency_pb2.ResumeRequest(task_id=outcome.task_id, answer="x"), timeout=5)
        )
        # the owner gets past the check (the task is finished: nothing to resume)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await web.agency.Resume(agency_pb2.ResumeRequest(task_id=outcome.task_id, answer="x"), timeout=5)
        assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert gateway.agency.tasks is not None
    assert (await gateway.agency.tasks.get(outcome.task_id)).client == "web"
