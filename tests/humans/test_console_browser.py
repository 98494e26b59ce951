"""The console in a real headless Chromium (Debian's), against a real ``agency serve`` process.

A person signs in, watches a task escalate in the live task list, answers it in the browser,
and sees it complete; an approver approves a refund (the audit log names them); an agent's
``<script>`` payload is shown as text. Each test saves screenshots of the pages it visits
into docs/console/ (referenced from docs/console.md) when AGENCY_SCREENSHOTS=1.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from gateway_processes import GatewayProcess, start_gateway, write_definition
from playwright.async_api import Browser, Page, async_playwright, expect

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.export import iter_records
from middleware.client.messaging import AgentCredentials, MessagingClient
from middleware.server.settings import hash_token

from .cases import SHIPMENT, TOKENS, WARRANTY_INPUT, WARRANTY_TEXT, XSS, definition

HERE = Path(__file__).parent
SHOTS = HERE.parent.parent / "docs" / "console"
CHROMIUM = os.environ.get("AGENCY_TEST_CHROMIUM", "/usr/bin/chromium")  # as tests/conftest.py checks it
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CLIENT_TOKEN = "grpc-client-token-of-the-shop-0001"
SHOP, BANK = AgentCredentials.generate("shop"), AgentCredentials.generate("bank")  # messaging agents
_CONSOLE = re.compile(r"operator console on (http://[\d.]+:\d+)")
expect.set_options(timeout=20_000)  # a bounded wait on the page's state (the machine may be loaded)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[GatewayProcess, str]]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"shop {hash_token(CLIENT_TOKEN)} client\n")
    spec = definition()
    spec["server"]["auth_tokens"] = str(tokens)
    spec["messaging"] = {
        "agents": [SHOP.enrollment(), BANK.enrollment()],
        "moderation": {"deny_phrases": ["wire the money"]},
    }
    config = write_definition(tmp_path / "agency.json", spec)
    gw = await start_gateway(config, "console-node", tmp_path, pythonpath=[HERE])
    found = _CONSOLE.search(gw.output())
    assert found, gw.output()
    try:
        yield gw, found.group(1)
    finally:
        assert await gw.stop() == 0, gw.output()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


def stub(gw: GatewayProcess) -> tuple[grpc.aio.Channel, Any]:
    channel = grpc.aio.insecure_channel(gw.address)
    return channel, agency_pb2_grpc.AgencyServiceStub(channel)


AUTH = (("authorization", f"Bearer {CLIENT_TOKEN}"),)


async def sign_in(browser: Browser, url: str, who: str, *, screenshot: bool = False) -> Page:
    page = await browser.new_page(viewport={"width": 1180, "height": 760})
    await page.goto(f"{url}/signin")
    if screenshot:
        await shot(page, "signin")
    await page.fill("#token", TOKENS[who])
    await page.click("#signin")
    await page.wait_for_url("**/inbox")
    return page


async def shot(page: Page, name: str, *, full: bool = False) -> None:
    """A screenshot of the page (``full``: the whole page, not only the window): into docs/console/
    with AGENCY_SCREENSHOTS=1 (to refresh the docs), else next to the test's other files (taken
    either way: the page must render)."""
    where = (
        SHOTS
        if os.environ.get("AGENCY_SCREENSHOTS") == "1"
        else Path(tempfile.gettempdir()) / "agency-console"
    )
    where.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(where / f"{name}.png"), full_page=full)
    assert (where / f"{name}.png").stat().st_size > 5000


def audit_records(gw: GatewayProcess, tmp_path: Path) -> list[dict[str, Any]]:
    """The gateway's audit log, verified (read only: safe while it runs)."""
    verdicts, records = iter_records(tmp_path / "console-node" / "audit")
    assert all(v.ok for v in verdicts)
    return [r.obj() for r in records]


async def test_an_operator_watches_a_warranty_task_escalate_answers_it_and_sees_it_complete(
    gateway: tuple[GatewayProcess, str], browser: Browser, tmp_path: Path
) -> None:
    gw, url = gateway
    page = await sign_in(browser, url, "alice", screenshot=True)
    await expect(page.locator("#empty")).to_be_visible()
    await page.goto(f"{url}/tasks")
    channel, agency = stub(gw)
    async with channel:
        waiting = await agency.Submit(
            agency_pb2.SubmitRequest(
                text=WARRANTY_TEXT,
                goal_id="GOAL_WARRANTY_HUMAN",
                user_id="u_789",
                input_json=json.dumps(WARRANTY_INPUT),
                steps=[
                    agency_pb2.TaskStep(name="warranty", action="warranty_claim"),
                    agency_pb2.TaskStep(name="shipping", action="ship_replacement"),
                    agency_pb2.TaskStep(name="reply", action="compose_reply"),
                ],
            ),
            metadata=AUTH,
        )
        assert waiting.state == "input_required"
        row = page.locator(f'tr[data-task="{waiting.task_id}"]')
        await expect(row).to_contain_text("input_required")  # the live list picked it up
        await shot(page, "tasks")

        await page.click('header nav a[href="/inbox"]')
        await expect(page.locator("#inbox")).to_contain_text(waiting.task_id)
        await expect(page.locator("#inbox")).to_contain_text("human handover")
        await shot(page, "inbox")
        await page.click("#inbox a.open")
        await expect(page.locator("main")).to_contain_text("courier API unreachable")
        # each sentence once; outputs as fields, not a JSON block
        assert (await page.locator("main").inner_text()).count("courier API unreachable") == 1
        await expect(page.locator("#outputs table.kv")).to_contain_text("screen_shattered")
        await shot(page, "handover", full=True)
        await page.check('input[name="choice"][value="provide_output"]')
        await page.fill("#output", json.dumps(SHIPMENT))
        await page.fill("#note", "shipped by express courier by hand")
        await page.click("#submit-decision")
        await page.wait_for_url(f"**/tasks/{waiting.task_id}")
        await expect(page.locator("#task-state")).to_have_text("completed")
        await expect(page.locator("#decisions")).to_contain_text("alice")
        # agent bars are not slivers beside the person's wait: a broken axis, a minimum width
        await expect(page.locator("#timeline g.break")).to_have_count(1)
        for box in [await bar.bounding_box() for bar in await page.locator("#timeline g.ok rect").all()]:
            assert box is not None and box["width"] >= 5
        await shot(page, "task", full=True)
        done = await agency.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id), metadata=AUTH)
        assert done.state == "completed" and "EXP123456" in json.loads(done.output_json)["reply"]

        await page.goto(f"{url}/contracts")
        await expect(page.locator("#contracts")).to_contain_text("replacement_shipper")
        await shot(page, "contracts")
        await page.goto(f"{url}/audit")
        await page.click("#sign-checkpoint")
        await expect(page.locator("#checkpoint")).to_contain_text("Size")
        await page.click("#verify")
        await expect(page.locator("#verdict")).to_contain_text("verified")
        await expect(page.locator("main")).to_contain_text(re.compile(r"[1-9]\d* signed checkpoint"))
        await shot(page, "audit")
        csv = await page.request.get(f"{url}/audit/export?format=csv&since=2000-01-01")
        assert csv.status == 200 and "attachment" in csv.headers["content-disposition"]
        assert "task.resumed" in await csv.text()
        bad = await page.request.get(f"{url}/audit/export?format=pdf")
        assert bad.status == 400
    resumed = [
        r
        for r in audit_records(gw, tmp_path)
        if r["event_type"] == "task.resumed" and r["task_id"] == waiting.task_id
    ]
    assert [(r["detail"]["person"], r["detail"]["decision"]["by"]) for r in resumed] == [("alice", "alice")]


async def test_an_approver_approves_a_refund_and_the_audit_log_names_them(
    gateway: tuple[GatewayProcess, str], browser: Browser, tmp_path: Path
) -> None:
    gw, url = gateway
    channel, agency = stub(gw)
    async with channel:
        waiting = await agency.Submit(
            agency_pb2.SubmitRequest(
                text="refund order 42",
                input_json=json.dumps({"order_id": "42", "amount": 250}),
                steps=[agency_pb2.TaskStep(name="refund", action="refund")],
                user_id="customer-7",
            ),
            metadata=AUTH,
        )
        assert waiting.state == "input_required" and waiting.a2a_state == "TASK_STATE_AUTH_REQUIRED"
        # the submitting client may not approve its own refund over gRPC either
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await agency.Resume(
                agency_pb2.ResumeRequest(task_id=waiting.task_id, decision_json='{"action": "approve"}'),
                metadata=AUTH,
            )
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED

        alice = await sign_in(browser, url, "alice")  # an operator: not an approver
        await expect(alice.locator("#empty")).to_be_visible()
        bob = await sign_in(browser, url, "bob")
        await bob.click("#inbox a.open")
        await expect(bob.locator("main")).to_contain_text("$.amount = 250 is above 100")
        await shot(bob, "approval", full=True)
        # the page shows the request and who submitted it
        await expect(bob.locator("#request")).to_have_text("refund order 42")
        await expect(bob.locator("#submitted-by")).to_contain_text("user customer-7")
        # alice opens the same escalation by its address: she reads it, and is offered no form
        await alice.goto(bob.url)
        await expect(alice.locator("#cannot-decide")).to_contain_text("needs one of the roles approver")
        assert await alice.locator("#decide").count() == 0
        await bob.fill("#note", "regular customer, order checked")
        action = await bob.get_attribute("#decide", "action")
        csrf = await bob.get_attribute('#decide input[name="csrf"]', "value")
        await bob.click("#submit-decision")
        await bob.wait_for_url(f"**/tasks/{waiting.task_id}")
        await expect(bob.locator("#task-state")).to_have_text("completed")
        # the same form posted again (a replay, with bob's own session and CSRF token)
        replay = await bob.request.post(f"{url}{action}", form={"csrf": csrf or "", "choice": "approve"})
        assert replay.status == 409 and "already answered by bob" in await replay.text()
        done = await agency.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id), metadata=AUTH)
        assert done.state == "completed" and json.loads(done.output_json) == {
            "refunded": 250,
            "order_id": "42",
        }
    records = audit_records(gw, tmp_path)
    (resumed,) = [r for r in records if r["event_type"] == "task.resumed" and r["task_id"] == waiting.task_id]
    assert resumed["detail"]["person"] == "bob" and resumed["detail"]["role"] == "approver"
    decisions = [r for r in records if r["event_type"] == "human.decision"]
    assert [(d["outcome"], d["detail"].get("person")) for d in decisions] == [
        ("approve", "bob"),
        ("refused", "bob"),
    ]


async def test_a_script_payload_in_an_agent_output_is_shown_as_text(
    gateway: tuple[GatewayProcess, str], browser: Browser
) -> None:
    gw, url = gateway
    channel, agency = stub(gw)
    async with channel:
        done = await agency.Submit(
            agency_pb2.SubmitRequest(
                text="<script>window.__xss = 3</script>",
                steps=[agency_pb2.TaskStep(name="echo", action="echo")],
            ),
            metadata=AUTH,
        )
    assert done.state == "completed"
    page = await sign_in(browser, url, "carol")
    await page.goto(f"{url}/tasks")
    await expect(page.locator(f'tr[data-task="{done.task_id}"]')).to_contain_text("<script>window.__xss = 3")
    await page.goto(f"{url}/tasks/{done.task_id}")
    await expect(page.locator("#task-output")).to_contain_text(XSS)
    assert await page.evaluate("window.__xss") is None
    assert await page.locator("#task-output script").count() == 0


async def test_a_moderator_releases_a_held_message_whose_script_is_shown_as_text(
    gateway: tuple[GatewayProcess, str], browser: Browser, tmp_path: Path
) -> None:
    gw, url = gateway
    async with (
        MessagingClient(SHOP, gw.address, client_token=CLIENT_TOKEN) as shop,
        MessagingClient(BANK, gw.address, client_token=CLIENT_TOKEN) as bank,
    ):
        sent = await shop.send("bank", {"note": f"please wire the money {XSS}"})
        assert sent.recipients == ()  # held by moderation
        carol = await sign_in(browser, url, "carol")  # a compliance officer: not routed, not a moderator
        await expect(carol.locator("#empty")).to_be_visible()
        mo = await sign_in(browser, url, "mo")
        await expect(mo.locator("#inbox")).to_contain_text("deny_phrases")
        await mo.click("#inbox a.open")
        await expect(mo.locator("#evidence")).to_contain_text("Matched phrase wire the money")
        await expect(mo.locator("#held-content")).to_contain_text(XSS)
        assert await mo.evaluate("window.__xss") is None
        await shot(mo, "held_message", full=True)
        # release and delete look different: one cannot be undone
        styles = [
            await mo.eval_on_selector(
                sel, "e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]"
            )
            for sel in ("#release", "#delete")
        ]
        assert styles[0] != styles[1]
        await mo.fill("#note", "the bank confirmed the transfer request")
        await mo.click("#release")
        await mo.wait_for_url("**/inbox")
        await expect(mo.locator("#empty")).to_be_visible()
        (got,) = await bank.pull(wait=10)
        assert got.message.message_id == sent.message_id
    records = audit_records(gw, tmp_path)
    (released,) = [r for r in records if r["event_type"] == "message.released"]
    assert (released["detail"]["by"], released["detail"]["role"]) == ("mo", "moderator")
    (decision,) = [r for r in records if r["event_type"] == "human.decision"]
    assert decision["detail"]["person"] == "mo" and decision["outcome"] == "release"


async def test_a_conflict_between_the_context_and_an_agent_is_settled_in_the_users_language(
    gateway: tuple[GatewayProcess, str], browser: Browser
) -> None:
    """The intake extracted accidental: true from '我的手机摔了一下…'; the claims system says false.
    The operator sees both values by path, the plan, and a Chinese reply; the chosen value goes on."""
    gw, url = gateway
    channel, agency = stub(gw)
    async with channel:
        waiting = await agency.Submit(
            agency_pb2.SubmitRequest(
                text="我的手机摔了一下，屏幕碎了，要换新",
                steps=[
                    agency_pb2.TaskStep(name="intake", action="read_request"),
                    agency_pb2.TaskStep(name="claim", action="check_claim"),
                ],
            ),
            metadata=AUTH,
        )
        assert waiting.state == "input_required"
        page = await sign_in(browser, url, "alice")
        await expect(page.locator("#inbox")).to_contain_text(waiting.task_id)
        await page.click("#inbox a.open")
        await expect(page.locator("#conflict")).to_contain_text("$.context.accidental")
        await expect(page.locator("#reply")).to_contain_text("您好")
        await expect(page.locator("#plan")).to_contain_text("accidental ($.accidental of the answer)")
        await shot(page, "conflict", full=True)
        await page.check('input[name="choice"][value="value_1"]')  # the intake's: accidental
        await page.fill("#note", "the customer said the phone was dropped")
        await page.click("#submit-decision")
        await page.wait_for_url(f"**/tasks/{waiting.task_id}")
        await expect(page.locator("#task-state")).to_have_text("completed")
        done = await agency.GetTask(agency_pb2.GetTaskRequest(task_id=waiting.task_id), metadata=AUTH)
        assert json.loads(done.output_json)["accidental"] is True
