"""End to end through a real ``agency serve`` process and the tests' own OIDC provider.

The gateway is configured with ``identity.oidc`` (gRPC bearer tokens) and
``humans.console.oidc`` (the console's single sign-on). A JWT from the provider submits a
task over gRPC, an expired one is refused and audited, and a person signs in to the console
in Debian's Chromium through the provider's authorization-code flow with PKCE — a person the
agency does not know is refused, audited.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_processes import GatewayProcess, free_port, start_gateway, write_definition
from humans.cases import definition
from playwright.async_api import Browser, async_playwright, expect

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.export import iter_records

from .oidc_provider import OidcProvider

pytestmark = pytest.mark.asyncio

HUMANS = Path(__file__).parent.parent / "humans"
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-sync",
    "--no-first-run",
]
expect.set_options(timeout=20_000)


@pytest.fixture
def idp() -> Iterator[OidcProvider]:
    provider = OidcProvider(
        users={
            "dana": {"roles": ["agency-client"]},  # a person of the agency (SSO only)
            "eve": {"roles": ["agency-client"]},  # known to the provider, not to the agency
        },
        clients={},
        now=time.time,  # the gateway process checks tokens against its own clock
    )
    with provider:
        yield provider


@pytest.fixture
async def gateway(idp: OidcProvider, tmp_path: Path) -> AsyncIterator[tuple[GatewayProcess, str]]:
    port = free_port()
    console = f"http://127.0.0.1:{port}"
    idp.clients["agency-console"] = f"{console}/oidc/callback"
    spec = definition(console=f"127.0.0.1:{port}")
    spec["humans"]["people"].append({"name": "dana", "display_name": "Dana (SSO)", "roles": ["operator"]})
    spec["humans"]["console"]["oidc"] = {"issuer": idp.issuer, "client_id": "agency-console"}
    spec["identity"] = {
        "oidc": {
            "issuer": idp.issuer,
            "audience": "agency-gateway",
            "claims": {"name": "sub", "roles": "roles"},
            "roles": {"agency-client": "client", "agency-admin": "admin"},
        }
    }
    config = write_definition(tmp_path / "agency.json", spec)
    gw = await start_gateway(config, "sso-node", tmp_path, pythonpath=[HUMANS])
    try:
        yield gw, console
    finally:
        assert await gw.stop() == 0, gw.output()


def audit(tmp_path: Path) -> list[dict[str, Any]]:
    verdicts, records = iter_records(tmp_path / "sso-node" / "audit")
    assert all(v.ok for v in verdicts)
    return [r.obj() for r in records]


async def test_an_oidc_token_submits_over_grpc_and_an_expired_one_is_refused_and_audited(
    gateway: tuple[GatewayProcess, str], idp: OidcProvider, tmp_path: Path
) -> None:
    gw, _ = gateway
    request = agency_pb2.SubmitRequest(text="say hello", constraints_json='{"action": "echo"}')
    async with grpc.aio.insecure_channel(gw.address) as channel:
        stub = agency_pb2_grpc.AgencyServiceStub(channel)
        token = idp.mint({"sub": "shop-frontend", "roles": ["agency-client"]})
        done = await stub.Submit(request, metadata=[("authorization", f"Bearer {token}")])
        assert done.state == "completed", done.reason
        seen = await stub.GetTask(
            agency_pb2.GetTaskRequest(task_id=done.task_id), metadata=[("authorization", f"Bearer {token}")]
        )
        assert seen.task_id == done.task_id
        # the task belongs to the token's subject: another subject of the same issuer may not read it
        other = idp.mint({"sub": "other-frontend", "roles": ["agency-client"]})
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.GetTask(
                agency_pb2.GetTaskRequest(task_id=done.task_id),
                metadata=[("authorization", f"Bearer {other}")],
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "'other-frontend' (role client)" in (denied.value.details() or "")
        expired = idp.mint({"sub": "shop-frontend", "roles": ["agency-client"]}, expires_in=-600)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Submit(request, metadata=[("authorization", f"Bearer {expired}")])
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "token expired" in (info.value.details() or "")
    assert idp.jwks_fetches == 1  # fetched once, cached for the second call
    records = audit(tmp_path)
    refused = [r for r in records if r.get("rule") == "UNAUTHENTICATED"]
    assert refused and "token expired" in refused[0]["detail"]["why"]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


async def test_the_console_signs_a_person_in_through_the_provider_with_pkce(
    gateway: tuple[GatewayProcess, str], idp: OidcProvider, browser: Browser, tmp_path: Path
) -> None:
    _, console = gateway
    page = await browser.new_page()
    await page.goto(f"{console}/signin")
    await expect(page.locator("#token")).to_be_visible()  # token sign-in stays beside it
    await page.click("#signin-sso")
    await page.wait_for_url(f"{idp.issuer}/authorize**")
    await page.fill("#username", "dana")
    await page.click("#login")
    await page.wait_for_url(f"{console}/inbox")
    await expect(page.locator("#whoami")).to_contain_text("Dana (SSO)")
    await expect(page.locator("#empty")).to_be_visible()
    assert not idp.codes  # the code was redeemed, once

    # someone the provider knows but the agency does not: refused, audited
    other = await browser.new_page()
    await other.goto(f"{console}/signin")
    await other.click("#signin-sso")
    await other.fill("#username", "eve")
    await other.click("#login")
    await expect(other.locator("#error")).to_contain_text("eve is not a person of this agency")
    await other.goto(f"{console}/inbox")
    await other.wait_for_url(f"{console}/signin")

    # a callback replayed without the browser's flow cookie (another browser, a forged link)
    forged = await browser.new_page()
    await forged.goto(f"{console}/oidc/callback?code=stolen&state=guess")
    await expect(forged.locator("#error")).to_contain_text("no sign-in was started in this browser")
    refusals = [r["detail"].get("why", "") for r in audit(tmp_path) if r.get("outcome") == "refused"]
    assert any("eve" in why and "no such person" in why for why in refusals), refusals  # named
    # anonymous: like an unknown token, per source and minute
    assert any("single sign-on refused: no sign-in was started" in why for why in refusals), refusals
