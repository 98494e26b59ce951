"""The tenancy pieces the isolation tests do not reach: the token file's tenant column, a
catalog write to another tenant's key, FindAgents over gRPC, and ``agency report`` per tenant."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import grpc
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc, messages_pb2, messages_pb2_grpc
from middleware.access import Principal, Role, acting_as
from middleware.audit import WalAuditLog
from middleware.cli import main as agency_main
from middleware.errors import InvalidInput
from middleware.messaging import PostOffice, generate_key, public_key_b64
from middleware.server.grpc_api import build_server
from middleware.server.settings import hash_token, read_token_hashes
from middleware.testing import ScriptedAgent


def test_the_token_file_names_each_clients_tenant(tmp_path: Path) -> None:
    good = tmp_path / "tokens"
    good.write_text(f"acme-web {hash_token('a')} client acme\nops {hash_token('b')} admin\n")
    assert read_token_hashes(good) == {
        hash_token("a"): Principal(name="acme-web", role=Role.CLIENT, tenant="acme"),
        hash_token("b"): Principal(name="ops", role=Role.ADMIN),
    }
    bad = tmp_path / "bad"
    bad.write_text(
        f"x {hash_token('c')} client Acme/Corp\n"
        f"y {hash_token('a')} client acme\ny {hash_token('a')} client globex\n"
    )
    with pytest.raises(InvalidInput) as info:
        read_token_hashes(bad)
    problems = {p.field: p.reason for p in info.value.problems}
    assert "'Acme/Corp' is not a tenant name" in problems[f"{bad}:1"]
    assert problems[f"{bad}:3"] == "the same token as line 2, for another client or role"


def auth(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


async def test_catalog_writes_and_find_agents_stay_within_the_callers_tenant() -> None:
    agency = Agency()
    await agency.register(
        {"name": "support_agent", "can_do": ["support"], "tenant": "globex"}, ScriptedAgent({})
    )
    office = PostOffice(audit=agency.audit)
    for name, tenant in (("acme_bot", "acme"), ("globex_bot", "globex")):
        await office.enroll(
            name, public_key_b64(generate_key()), hashlib.sha256(name.encode()).hexdigest(), tenant=tenant
        )
    tokens = {
        hash_token("acme-agent-token"): Principal(name="support_agent", role=Role.AGENT, tenant="acme"),
        hash_token("acme-web-token"): Principal(name="acme-web", role=Role.CLIENT, tenant="acme"),
    }
    server = build_server(agency, "127.0.0.1:0", token_hashes=tokens, post_office=office)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
            # acme's agent of the same name can neither beat nor remove globex's entry
            for call, request in (
                (catalog.Heartbeat, catalog_pb2.HeartbeatRequest(key="globex/support_agent@1.0.0")),
                (catalog.Deregister, catalog_pb2.DeregisterRequest(key="globex/support_agent@1.0.0")),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(request, metadata=auth("acme-agent-token"))
                assert info.value.code() == grpc.StatusCode.NOT_FOUND
            assert (await agency.catalog.get("globex/support_agent@1.0.0")).key
            messages = messages_pb2_grpc.MessageServiceStub(channel)
            found = await messages.FindAgents(
                messages_pb2.FindAgentsRequest(), metadata=auth("acme-web-token")
            )
        assert [a.name for a in found.agents] == ["acme_bot"]
    finally:
        await server.stop(0)


async def test_agency_report_per_tenant(tmp_path: Path, capsys) -> None:
    agency = Agency(audit=WalAuditLog(tmp_path / "audit", "node-1"))
    for tenant in ("acme", "globex"):
        await agency.register({"name": "w", "can_do": ["work"], "tenant": tenant}, ScriptedAgent({"ok": 1}))
    for tenant, n in (("acme", 2), ("globex", 1)):
        with acting_as(Principal(name=f"{tenant}-web", role=Role.CLIENT, tenant=tenant)):
            for _ in range(n):
                await agency.submit({"text": "work", "constraints": {"action": "work"}})
    await agency.submit({"text": "work", "constraints": {"action": "work"}})  # no tenant: refused (no agent)
    await agency.close()
    audit = str(tmp_path / "audit")
    assert agency_main(["report", "--audit-dir", audit, "--tenant", "acme", "--json"]) == 0
    acme = json.loads(capsys.readouterr().out)
    assert acme["tenant"] == "acme" and acme["tasks"] == 2 and acme["outcomes"] == {"completed": 2}
    assert agency_main(["report", "--audit-dir", audit, "--by-tenant", "--json"]) == 0
    reports = {r["tenant"]: r for r in json.loads(capsys.readouterr().out)}
    assert {t: r["tasks"] for t, r in reports.items()} == {"": 1, "acme": 2, "globex": 1}
    assert reports[""]["outcomes"] == {"rejected": 1}
    assert agency_main(["report", "--audit-dir", audit, "--tenant", "globex"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Tenant: globex\n") and "Tasks handled:            1" in text


async def test_agency_audit_export_filters_by_tenant(tmp_path: Path, capsys) -> None:
    agency = Agency(audit=WalAuditLog(tmp_path / "audit", "node-1"))
    await agency.register({"name": "w", "can_do": ["work"], "tenant": "acme"}, ScriptedAgent({"ok": 1}))
    with acting_as(Principal(name="acme-web", role=Role.CLIENT, tenant="acme")):
        mine = await agency.submit({"text": "work", "constraints": {"action": "work"}})
    other = await agency.submit({"text": "work", "constraints": {"action": "work"}})  # no tenant
    await agency.close()
    out = tmp_path / "acme.jsonl"
    code = agency_main(
        [
            "audit",
            "export",
            str(tmp_path / "audit"),
            "--format",
            "jsonl-flat",
            "--tenant",
            "acme",
            "-o",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr()
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    tasks = {r.get("task_id") for r in records}
    assert mine.task_id in tasks and other.task_id not in tasks
