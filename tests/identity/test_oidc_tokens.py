"""OIDC bearer tokens against a real provider run by the test (discovery, JWKS over HTTP).

Every check the verifier makes is tried: a good token, one expired (and one inside the clock
skew), a wrong audience, a wrong issuer, a signature by a key that is not the issuer's, an
unknown key id (keys fetched again at once, at most once per ``jwks_min_refresh``), key
rotation, claims mapped to role and tenant. Then over gRPC, A2A and MCP with the static token
file beside it, each refusal audited like a refused static token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import grpc
import httpx
import pytest

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.access import Principal, Role
from middleware.audit.record import AuditEventType
from middleware.errors import Unauthenticated
from middleware.server.grpc_api import build_server
from middleware.server.identity import Identities
from middleware.server.identity_settings import ClaimNames, OidcSettings
from middleware.server.oidc import JwksCache, OidcVerifier
from middleware.testing import ScriptedAgent

from .oidc_provider import OidcProvider

pytestmark = pytest.mark.asyncio

NOW = 1_900_000_000.0  # a fixed wall clock (2030-03-17): no test depends on today's date


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture
def idp() -> Iterator[OidcProvider]:
    provider = OidcProvider(users={"ann": {"roles": ["agency-client"], "tenant": "acme"}}, now=lambda: NOW)
    with provider:
        yield provider


def settings(idp: OidcProvider, **over: Any) -> OidcSettings:
    base: dict[str, Any] = {
        "issuer": idp.issuer,
        "audience": "agency-gateway",
        "clock_skew": timedelta(seconds=30),
        "jwks_min_refresh": timedelta(seconds=30),
        "claims": ClaimNames(name="sub", roles="roles", tenant="tenant"),
        "roles": {"agency-admin": Role.ADMIN, "agency-client": Role.CLIENT, "agency-auditor": Role.AUDITOR},
    }
    return OidcSettings.model_validate({**base, **over})


def verifier(
    idp: OidcProvider, *, wall: Clock | None = None, mono: Clock | None = None, **over: Any
) -> OidcVerifier:
    s = settings(idp, **over)
    keys = JwksCache(
        s.issuer,
        clock=mono or Clock(0.0),
        max_age=s.jwks_max_age.total_seconds(),
        min_refresh=s.jwks_min_refresh.total_seconds(),
    )
    return OidcVerifier(s, keys=keys, now=wall or Clock(NOW))


CLAIMS = {"sub": "ann", "roles": ["agency-client"], "tenant": "acme"}


async def test_a_good_token_names_the_caller_its_role_and_tenant(idp: OidcProvider):
    v = verifier(idp)
    principal = await v.verify(idp.mint(CLAIMS))
    assert principal == Principal(name="ann", role=Role.CLIENT, tenant="acme", via="oidc")
    # the keys came from the issuer's discovery document, then its jwks_uri
    assert v.keys.jwks_uri == f"{idp.issuer}/jwks" and idp.jwks_fetches == 1
    # the most privileged mapped role wins; unmapped groups are ignored
    admin = await v.verify(idp.mint({**CLAIMS, "roles": ["staff", "agency-client", "agency-admin"]}))
    assert admin.role is Role.ADMIN
    await v.aclose()


async def test_expired_tokens_are_refused_beyond_the_clock_skew_only(idp: OidcProvider):
    wall = Clock(NOW)
    v = verifier(idp, wall=wall)
    token = idp.mint(CLAIMS, expires_in=60)
    wall.at = NOW + 60 + 29  # expired 29 s ago: within the 30 s skew
    assert (await v.verify(token)).name == "ann"
    wall.at = NOW + 60 + 31
    with pytest.raises(Unauthenticated, match="token expired"):
        await v.verify(token)
    # issued in the future beyond the skew (the provider's clock runs ahead)
    wall.at = NOW
    with pytest.raises(Unauthenticated, match="not valid yet"):
        await v.verify(idp.mint(CLAIMS, issued_at=NOW + 120))
    await v.aclose()


async def test_wrong_audience_wrong_issuer_and_foreign_signatures_are_refused(idp: OidcProvider):
    v = verifier(idp)
    with pytest.raises(Unauthenticated, match="wrong audience 'another-api'"):
        await v.verify(idp.mint(CLAIMS, audience="another-api"))
    assert (await v.verify(idp.mint(CLAIMS, audience=["another-api", "agency-gateway"]))).name == "ann"
    with pytest.raises(Unauthenticated, match=r"wrong issuer 'https://evil\.example'"):
        await v.verify(idp.mint(CLAIMS, issuer="https://evil.example"))
    # a key the attacker made, claiming the issuer's key id
    from joserfc.jwk import RSAKey

    forged = RSAKey.generate_key(2048)
    with pytest.raises(Unauthenticated, match="bad signature"):
        await v.verify(idp.mint(CLAIMS, key=forged, kid=idp.signing_key.kid))
    # no role the definition maps, no tenant claim
    with pytest.raises(Unauthenticated, match="names no role"):
        await v.verify(idp.mint({**CLAIMS, "roles": ["staff"]}))
    with pytest.raises(Unauthenticated, match="'tenant' claim"):
        await v.verify(idp.mint({"sub": "ann", "roles": ["agency-client"]}))
    defaulted = verifier(idp, default_role="client")
    assert (await defaulted.verify(idp.mint({**CLAIMS, "roles": []}))).role is Role.CLIENT
    # HMAC or none are never accepted, whatever the token says
    with pytest.raises(ValueError, match="HS256: not accepted"):
        settings(idp, algorithms=["HS256"])
    await v.aclose()
    await defaulted.aclose()


async def test_rotated_keys_are_fetched_on_an_unknown_kid_at_most_once_per_interval(idp: OidcProvider):
    mono = Clock(0.0)
    v = verifier(idp, mono=mono)
    assert (await v.verify(idp.mint(CLAIMS))).name == "ann"
    assert idp.jwks_fetches == 1

    idp.rotate(keep_old=False)  # the issuer rotates: the old key is withdrawn at once
    mono.at = 31.0  # past jwks_min_refresh
    assert (await v.verify(idp.mint(CLAIMS))).name == "ann"  # new kid: fetched again, accepted
    assert idp.jwks_fetches == 2

    # made-up key ids: one fetch per interval at most, the rest refused without asking the issuer
    mono.at = 40.0
    for n in range(20):
        with pytest.raises(Unauthenticated, match="unknown key id"):
            await v.verify(idp.mint(CLAIMS, kid=f"made-up-{n}"))
    assert idp.jwks_fetches == 2  # 9 s after the last fetch: none
    mono.at = 62.0
    with pytest.raises(Unauthenticated, match="unknown key id"):
        await v.verify(idp.mint(CLAIMS, kid="made-up-again"))
    assert idp.jwks_fetches == 3
    # the keys are fetched again once older than jwks_max_age (1 h), even with known kids
    mono.at = 62.0 + 3600
    await v.verify(idp.mint(CLAIMS))
    assert idp.jwks_fetches == 4
    await v.aclose()


# -- over the transports ---------------------------------------------------------------------------

STATIC = "static-token-of-the-legacy-client-0001"


async def governed_agency() -> Agency:
    agency = Agency()
    agent = ScriptedAgent({"sum": 3})
    calc = {"name": "calc", "can_do": ["add"], "output_schema": {"type": "object"}, "shared_with": ["*"]}
    await agency.register(calc, agent)  # shared: the OIDC caller is of tenant acme, the legacy one of none
    return agency


def identities(idp: OidcProvider) -> Identities:
    static = {hashlib.sha256(STATIC.encode()).hexdigest(): Principal(name="legacy", role=Role.CLIENT)}
    return Identities(static, verifier=verifier(idp))


async def test_grpc_accepts_oidc_tokens_beside_static_ones_and_audits_refusals(idp: OidcProvider):
    agency = await governed_agency()
    ids = identities(idp)
    server = build_server(agency, "127.0.0.1:0", token_hashes=ids)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    request = agency_pb2.SubmitRequest(text="add these", constraints_json='{"action": "add"}')
    try:
        for token, owner in ((idp.mint(CLAIMS), "ann"), (STATIC, "legacy")):
            reply = await stub.Submit(request, metadata=[("authorization", f"Bearer {token}")])
            assert reply.state == "completed", reply.reason
            assert (await agency.tasks.get(reply.task_id)).client == owner
        refusals = {
            "token expired": idp.mint(CLAIMS, expires_in=-120),
            "wrong audience": idp.mint(CLAIMS, audience="another-api"),
            "wrong issuer": idp.mint(CLAIMS, issuer="https://evil.example"),
        }
        for why, token in refusals.items():
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Submit(request, metadata=[("authorization", f"Bearer {token}")])
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and why in (
                info.value.details() or ""
            )
    finally:
        await channel.close()
        await server.stop(0)
        await ids.aclose()
    records = [r for _, r in agency.audit.records() if r.event_type == AuditEventType.MESSAGE_REJECTED.value]
    # the first refusal from this source is recorded at once with its reason; the others are counted
    assert records and records[0].rule == "UNAUTHENTICATED" and "token expired" in records[0].detail["why"]
    assert sum(r.detail["count"] for r in records) == 3


async def test_a2a_and_mcp_accept_oidc_tokens_and_audit_refusals(idp: OidcProvider):
    import httpx2
    from a2a.client import ClientConfig, create_client
    from a2a.types.a2a_pb2 import Message, Part, SendMessageRequest, TaskState
    from a2a.types.a2a_pb2 import Role as A2ARole
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from middleware.server.protocols.a2a_server import build_a2a_app
    from middleware.server.protocols.common import HttpServer
    from middleware.server.protocols.mcp_server import build_mcp_http_app

    agency = await governed_agency()
    ids = identities(idp)
    a2a = HttpServer(None, "127.0.0.1:0", name="a2a")
    a2a.set_app(build_a2a_app(agency, url=a2a.url, token_hashes=ids))
    mcp = HttpServer(build_mcp_http_app(agency, token_hashes=ids), "127.0.0.1:0", name="mcp")
    await a2a.start()
    await mcp.start()
    good = idp.mint(CLAIMS)
    try:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {good}"}, timeout=60) as http:
            client = await create_client(a2a.url, ClientConfig(streaming=False, httpx_client=http))
            msg = Message(role=A2ARole.ROLE_USER, message_id="m1", parts=[Part(text="add these")])
            msg.metadata.update({"agency": {"skill": "add"}})
            events = [e async for e in client.send_message(SendMessageRequest(message=msg))]
            await client.close()
        task = events[-1].task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert (await agency.tasks.get(task.id)).client == "ann"

        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {good}"}) as http2,
            Client(streamable_http_client(f"{mcp.url}/mcp", http_client=http2)) as session,
        ):
            done = await session.call_tool("add", {})
        assert not done.is_error
        assert (await agency.tasks.get(done.meta["agency/governance"]["task_id"])).client == "ann"

        expired = idp.mint(CLAIMS, expires_in=-120)
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {expired}"}) as http:
            a2a_refused = await http.post(f"{a2a.url}/a2a/jsonrpc", json={})
            mcp_refused = await http.post(f"{mcp.url}/mcp", json={})
        for refused in (a2a_refused, mcp_refused):
            assert refused.status_code == 401 and "token expired" in refused.text
    finally:
        await a2a.stop()
        await mcp.stop()
        await ids.aclose()
    records = [r for _, r in agency.audit.records() if r.rule == "UNAUTHENTICATED"]
    assert {r.detail["operation"].split()[0] for r in records} == {"A2A", "MCP"}
    assert all("token expired" in r.detail["why"] and r.detail["source"] == "http:127.0.0.1" for r in records)
