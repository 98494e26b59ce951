"""Two tenants on one gateway, with the same agent names: neither can see or route to the
other's agents, tasks, sessions or records — over gRPC, A2A, MCP, the console and messaging.

Tenant ``acme`` and tenant ``globex`` each register ``support_agent`` (the same name, two
catalog keys: ``acme/support_agent@1.0.0``, ``globex/support_agent@1.0.0``); ``translator`` has
no tenant and is shared with every tenant; ``globex`` alone has ``invoice_agent``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest

from middleware import Agency, AgentReply
from middleware._proto.agency.v1 import (
    agency_pb2,
    agency_pb2_grpc,
    audit_pb2,
    audit_pb2_grpc,
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
)
from middleware.access import Principal, Role
from middleware.audit import WalAuditLog
from middleware.messaging import PostOffice, generate_key, public_key_b64
from middleware.people import Person
from middleware.people.desk import HumanDesk
from middleware.server.console import build_app
from middleware.server.grpc_api import build_server
from middleware.testing import ScriptedAgent

TOKENS = {
    "acme-web": ("client", "acme"),
    "globex-web": ("client", "globex"),
    "acme-admin": ("admin", "acme"),
    "acme-auditor": ("auditor", "acme"),
    "ops": ("admin", ""),
    "global-auditor": ("auditor", ""),
}


def token_of(name: str) -> str:
    return f"token-of-{name}-0123456789"


def token_hashes() -> dict[str, Principal]:
    return {
        hashlib.sha256(token_of(n).encode()).hexdigest(): Principal(name=n, role=Role(role), tenant=tenant)
        for n, (role, tenant) in TOKENS.items()
    }


def auth(name: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token_of(name)}")]


def answers(who: str) -> ScriptedAgent:
    return ScriptedAgent(lambda request: AgentReply(output={"who": who, "input": request.input}))


async def two_tenants(audit: Any = None, **options: Any) -> Agency:
    agency = Agency(audit=audit, **options) if audit is not None else Agency(**options)
    for tenant in ("acme", "globex"):
        await agency.register(
            {
                "name": "support_agent",
                "can_do": ["support"],
                "tenant": tenant,
                "output_schema": {"type": "object"},
            },
            answers(tenant),
        )
    await agency.register(
        {
            "name": "invoice_agent",
            "can_do": ["invoice"],
            "tenant": "globex",
            "output_schema": {"type": "object"},
        },
        answers("globex-invoices"),
    )
    await agency.register(
        {
            "name": "translator",
            "can_do": ["translate"],
            "shared_with": ["*"],
            "output_schema": {"type": "object"},
        },
        answers("shared"),
    )
    return agency


@pytest.fixture
async def gateway(tmp_path) -> AsyncIterator[tuple[Agency, grpc.aio.Channel]]:
    agency = await two_tenants(WalAuditLog(tmp_path / "audit", "node-1"))
    server = build_server(agency, "127.0.0.1:0", token_hashes=token_hashes())
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield agency, channel
    finally:
        await channel.close()
        await server.stop(0)
        await agency.close()


def submit(text: str, action: str, **extra: Any) -> agency_pb2.SubmitRequest:
    return agency_pb2.SubmitRequest(text=text, constraints_json=json.dumps({"action": action}), **extra)


async def test_grpc_routing_catalog_tasks_sessions_and_audit_stay_within_a_tenant(gateway) -> None:
    _, channel = gateway
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
    audit = audit_pb2_grpc.AuditServiceStub(channel)

    # the same agent name routes to each tenant's own agent
    acme = await stub.Submit(submit("help me", "support", session_id="sess-acme"), metadata=auth("acme-web"))
    globex = await stub.Submit(submit("help me", "support"), metadata=auth("globex-web"))
    assert json.loads(acme.output_json)["who"] == "acme" and json.loads(globex.output_json)["who"] == "globex"
    # the shared agent serves both; the other tenant's own agent serves neither
    shared = await stub.Submit(submit("translate", "translate"), metadata=auth("acme-web"))
    assert json.loads(shared.output_json)["who"] == "shared"
    refused = await stub.Submit(submit("bill me", "invoice"), metadata=auth("acme-web"))
    assert refused.state == "rejected" and "globex" not in refused.outcome_json
    route = await stub.Route(
        agency_pb2.RouteRequest(text="x", constraints_json='{"action": "support"}'), metadata=auth("acme-web")
    )
    assert route.chosen == "acme/support_agent@1.0.0" and "globex" not in route.SerializeToString().decode(
        "latin-1"
    )

    # the catalog: Query, Get and Watch show a tenant its own agents and the shared ones
    keys = {
        e.key for e in (await catalog.Query(catalog_pb2.QueryRequest(), metadata=auth("acme-web"))).entries
    }
    assert keys == {"acme/support_agent@1.0.0", "translator@1.0.0"}
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await catalog.Get(
            catalog_pb2.GetCapabilityRequest(key="globex/invoice_agent@1.0.0"), metadata=auth("acme-web")
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    watch = catalog.Watch(catalog_pb2.WatchRequest(include_existing=True), metadata=auth("globex-web"))
    seen = set()
    async for event in watch:
        seen.add(event.key)
        if len(seen) == 3:
            break
    watch.cancel()
    assert seen == {"globex/support_agent@1.0.0", "globex/invoice_agent@1.0.0", "translator@1.0.0"}
    global_keys = {
        e.key for e in (await catalog.Query(catalog_pb2.QueryRequest(), metadata=auth("ops"))).entries
    }
    assert len(global_keys) == 4  # a global admin sees every tenant's

    # tasks: another tenant's task is refused to its clients and its admins; a global admin reads it
    for who in ("globex-web", "acme-admin"):
        target = acme.task_id if who == "globex-web" else globex.task_id
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetTask(agency_pb2.GetTaskRequest(task_id=target), metadata=auth(who))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "its own tenant" in (
            info.value.details() or ""
        )
    assert (await stub.GetTask(agency_pb2.GetTaskRequest(task_id=acme.task_id), metadata=auth("ops"))).task_id

    # sessions: globex cannot continue (or read) acme's conversation
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.Submit(submit("and then?", "support", session_id="sess-acme"), metadata=auth("globex-web"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED

    # an agent of a tenant registers into it; never into another tenant
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await catalog.Register(
            catalog_pb2.RegisterRequest(
                contract=common_pb2.CapabilityContract(name="spy", can_do=["support"], tenant="globex")
            ),
            metadata=auth("acme-admin"),
        )
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    entry = await catalog.Register(
        catalog_pb2.RegisterRequest(contract=common_pb2.CapabilityContract(name="helper", can_do=["help"])),
        metadata=auth("acme-admin"),
    )
    assert entry.key == "acme/helper@1.0.0" and entry.contract.tenant == "acme"

    # the audit log: a tenant's auditor exports that tenant's records only; a global one all
    async def exported(who: str) -> list[dict[str, Any]]:
        return [
            json.loads(e.record) async for e in audit.Export(audit_pb2.ExportRequest(), metadata=auth(who))
        ]

    mine = await exported("acme-auditor")
    assert mine and {r["actors"].get("tenant") for r in mine} == {"acme"}
    assert globex.task_id not in {r["task_id"] for r in mine} and acme.task_id in {r["task_id"] for r in mine}
    everything = await exported("global-auditor")
    assert {acme.task_id, globex.task_id} <= {r["task_id"] for r in everything}
    # and a global auditor can ask for one tenant
    only = [
        json.loads(e.record)
        async for e in audit.Export(audit_pb2.ExportRequest(tenant="globex"), metadata=auth("global-auditor"))
    ]
    assert only and {r["actors"]["tenant"] for r in only} == {"globex"}


async def test_a2a_and_mcp_show_and_route_a_tenant_its_own_agents_only() -> None:
    import httpx2
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, SendMessageRequest
    from a2a.types.a2a_pb2 import Role as A2ARole
    from a2a.utils.errors import A2AError
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from middleware.server.protocols.a2a_server import build_a2a_app
    from middleware.server.protocols.common import HttpServer
    from middleware.server.protocols.mcp_server import build_mcp_http_app

    agency = await two_tenants()
    a2a = HttpServer(None, "127.0.0.1:0", name="a2a")
    a2a.set_app(build_a2a_app(agency, url=a2a.url, token_hashes=token_hashes()))
    mcp = HttpServer(build_mcp_http_app(agency, token_hashes=token_hashes()), "127.0.0.1:0", name="mcp")
    await a2a.start()
    await mcp.start()
    try:
        async with httpx.AsyncClient() as http:  # the public card names no tenant's agent
            card = (await http.get(f"{a2a.url}/.well-known/agent-card.json")).text
        assert "translator" in card and "support_agent" not in card and "invoice" not in card

        async def a2a_send(who: str, action: str) -> Any:
            async with httpx.AsyncClient(
                headers={"Authorization": f"Bearer {token_of(who)}"}, timeout=60
            ) as http:
                client = await create_client(a2a.url, ClientConfig(streaming=False, httpx_client=http))
                msg = Message(role=A2ARole.ROLE_USER, message_id=f"m-{who}-{action}", parts=[Part(text="hi")])
                msg.metadata.update({"agency": {"skill": action}})
                events = [e async for e in client.send_message(SendMessageRequest(message=msg))]
                await client.close()
            return events[-1].task

        acme_task = await a2a_send("acme-web", "support")
        assert "acme" in str(acme_task.artifacts) and "globex" not in str(acme_task.artifacts)
        assert (await agency.tasks.get(acme_task.id)).tenant == "acme"
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token_of('globex-web')}"}) as http:
            client = await create_client(a2a.url, ClientConfig(streaming=False, httpx_client=http))
            with pytest.raises(A2AError):
                await client.get_task(GetTaskRequest(id=acme_task.id))
            await client.close()

        async def tools(who: str) -> set[str]:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token_of(who)}"}) as http2,
                Client(streamable_http_client(f"{mcp.url}/mcp", http_client=http2)) as session,
            ):
                return {t.name for t in (await session.list_tools()).tools}

        assert "invoice" not in await tools("acme-web") and "invoice" in await tools("globex-web")
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token_of('globex-web')}"}) as http2,
            Client(streamable_http_client(f"{mcp.url}/mcp", http_client=http2)) as session,
        ):
            done = await session.call_tool("support", {})
        assert done.structured_content["who"] == "globex"
    finally:
        await a2a.stop()
        await mcp.stop()


async def test_the_console_shows_a_person_their_tenants_inbox_tasks_and_contracts_only() -> None:
    from middleware.access import acting_as
    from middleware.people import ApprovalGate, ApprovalGates

    # the same agent name in both tenants, behind an approval gate: each task waits for a person
    agency = await two_tenants(approvals=ApprovalGates([ApprovalGate(agent="planner")]))
    for tenant in ("acme", "globex"):
        await agency.register({"name": "planner", "can_do": ["plan"], "tenant": tenant}, answers(tenant))
    people = [
        Person(
            name=name, roles=["approver"], token_sha256=hashlib.sha256(token.encode()).hexdigest(), tenant=t
        )
        for name, token, t in (
            ("alice", "alice-token-000000", "acme"),
            ("gus", "gus-token-00000000", "globex"),
        )
    ]
    desk = HumanDesk(agency, people)
    agency.humans = desk
    outcomes = {}
    for tenant in ("acme", "globex"):
        with acting_as(Principal(name=f"{tenant}-web", role=Role.CLIENT, tenant=tenant)):
            outcomes[tenant] = await agency.submit({"text": "plan", "constraints": {"action": "plan"}})
    assert all(o.state.value == "input_required" for o in outcomes.values())

    app = build_app(desk, secret="s" * 40)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as c:
        page = await c.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        await c.post("/signin", data={"csrf": csrf, "token": "alice-token-000000"})
        inbox = (await c.get("/inbox")).text
        tasks = (await c.get("/tasks.json")).json()["tasks"]
        own = await c.get(f"/tasks/{outcomes['acme'].task_id}")
        other = await c.get(f"/tasks/{outcomes['globex'].task_id}")
        contracts = (await c.get("/contracts")).text
    acme_esc = [e for e in await desk.store.list_open() if e.task_id == outcomes["acme"].task_id]
    globex_esc = [e for e in await desk.store.list_open() if e.task_id == outcomes["globex"].task_id]
    # the escalations were routed within each tenant, and the inbox shows alice only acme's
    assert acme_esc[0].assignees == ["alice"] and globex_esc[0].assignees == ["gus"]
    assert acme_esc[0].id in inbox and globex_esc[0].id not in inbox
    assert [t["task_id"] for t in tasks] == [outcomes["acme"].task_id]
    assert own.status_code == 200 and other.status_code == 404
    assert "acme/planner@1.0.0" in contracts and "globex" not in contracts


async def test_messaging_agents_reach_and_find_their_own_tenant_only() -> None:
    from messaging.helpers import Agent

    office = PostOffice()
    agents = {}
    for name, tenant in (("acme_bot", "acme"), ("acme_peer", "acme"), ("globex_bot", "globex")):
        key, token = generate_key(), f"agt_{name}_token_0123456789"
        await office.enroll(
            name, public_key_b64(key), hashlib.sha256(token.encode()).hexdigest(), tenant=tenant
        )
        agents[name] = Agent(name, token, key, office.clock)
    acme_bot = agents["acme_bot"]

    def signed(receiver: str) -> dict[str, Any]:
        msg = acme_bot.message(receiver)
        return {"message": msg, "signature": acme_bot.sign(msg)}

    await office.send(acme_bot.token, **signed("acme_peer"))  # within the tenant: delivered
    from middleware.errors import NotFound

    with pytest.raises(NotFound, match="no registered agent 'globex_bot'"):
        await office.send(acme_bot.token, **signed("globex_bot"))
    found = {r.name for r, _ in await office.find_agents(tenant="acme")}
    assert found == {"acme_bot", "acme_peer"}
    # a topic reaches the sender's tenant's subscribers only
    await office.subscribe(agents["acme_peer"].token, "news.daily")
    await office.subscribe(agents["globex_bot"].token, "news.daily")
    from middleware.messaging import SendOptions

    news = acme_bot.message("news.daily")
    signature = acme_bot.sign(news, SendOptions(kind="topic", topic="news.daily"))
    result = await office.publish(acme_bot.token, "news.daily", news, signature=signature)
    assert result.recipients == ("acme_peer",)
