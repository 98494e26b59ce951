"""Messages held by the post office's moderation reach the moderators' console inbox (issues 17
and 19): the rule and its evidence shown, the content only to those who may see quarantined
content, release / delete through the same post office operations as the gRPC RPCs, each
decision audited with the person, role and reason, a second decision and a person without the
role refused (and audited); with the board and the escalations in Redis shared by two replicas.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_processes import start_gateway, write_definition

from middleware import Agency
from middleware.access import HumanRole, Principal, Role
from middleware.client.messaging import AgentCredentials, MessagingClient
from middleware.errors import PermissionDenied
from middleware.messaging import PostOffice, generate_key, public_key_b64, sign_message
from middleware.messaging.moderation import (
    MESSAGE_DELETED,
    MESSAGE_RELEASED,
    DenyPhrases,
    MemoryBoard,
    QuarantineBoard,
    RedisBoard,
    RepeatedContent,
)
from middleware.people import Person, RedisEscalationStore
from middleware.people.desk import HumanDesk
from middleware.redis.mailbox import RedisMailbox
from middleware.server.console import build_app
from middleware.server.settings import hash_token
from middleware.smf import SMFMessage

from . import cases

TOKENS = {
    "mo": "tok-mo-moderator-0001",
    "rita": "tok-rita-moderator-reviewer",
    "dora": "tok-dora-compliance-routed",
    "alice": "tok-alice-operator-0004",
}
PHRASE_TEXT = "Please WIRE the money to account 7 <script>alert(1)</script>"


def people() -> list[Person]:
    return [
        Person(name="mo", roles=[HumanRole.MODERATOR], token_sha256=hash_token(TOKENS["mo"])),
        Person(
            name="rita",
            roles=[HumanRole.MODERATOR, HumanRole.QUARANTINE_REVIEWER],
            token_sha256=hash_token(TOKENS["rita"]),
        ),
        Person.model_validate(
            {
                "name": "dora",
                "roles": ["compliance_officer"],
                "token_sha256": hash_token(TOKENS["dora"]),
                "routes": [{"kinds": ["quarantine"], "tags": ["message"]}],
            }
        ),
        Person(name="alice", roles=[HumanRole.OPERATOR], token_sha256=hash_token(TOKENS["alice"])),
    ]


@dataclass
class Sender:
    name: str
    token: str
    key: Any

    def message(self, receiver: str, content: Any) -> SMFMessage:
        return SMFMessage.parse(
            {
                "sender": self.name,
                "receiver": receiver,
                "content": content,
                "metadata": {
                    "provenance": {"source": self.name, "reliability_score": 0.9},
                    "freshness_ttl": 600,
                    "confidence_score": 0.8,
                    "intention_trace": ["GOAL_MESSAGING_001"],
                },
            }
        )


async def enrol(po: PostOffice, name: str) -> Sender:
    key = generate_key()
    return Sender(name, await po.register(name, public_key_b64(key)), key)


async def send(po: PostOffice, who: Sender, to: str, content: Any) -> Any:
    msg = who.message(to, content)
    return await po.send(who.token, msg, signature=sign_message(who.key, msg))


@dataclass
class Replica:
    agency: Agency
    po: PostOffice
    desk: HumanDesk


async def replica(
    *,
    board: QuarantineBoard | None = None,
    transport: Any = None,
    store: Any = None,
    reports: int = 2,
    rules: list[Any] | None = None,
) -> Replica:
    agency = Agency()
    po = PostOffice(
        transport,
        audit=agency.audit,
        moderation=rules if rules is not None else [DenyPhrases(["wire the money"])],
        board=board or MemoryBoard(),
        reports_to_quarantine=reports,
    )
    desk = HumanDesk(agency, people(), store=store)
    await desk.attach_post_office(po)
    return Replica(agency, po, desk)


def client(desk: HumanDesk) -> httpx.AsyncClient:
    app = build_app(desk, secret="m" * 40)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console")


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


async def sign_in(c: httpx.AsyncClient, who: str) -> str:
    page = await c.get("/signin")
    r = await c.post("/signin", data={"csrf": csrf_of(page.text), "token": TOKENS[who]})
    assert r.status_code == 303
    return csrf_of((await c.get("/inbox")).text)


def audit(agency: Agency, event_type: str) -> list[Any]:
    return [r for _, r in agency.audit.records() if r.event_type == event_type]


@pytest.fixture
async def one() -> Replica:
    return await replica()


async def test_a_held_message_reaches_the_moderators_with_rule_and_evidence(one: Replica) -> None:
    shop, bank = await enrol(one.po, "shop"), await enrol(one.po, "bank")
    held = await send(one.po, shop, "bank", {"note": PHRASE_TEXT})
    assert held.quarantined and await one.po.pull(bank.token) == []
    (esc,) = await one.desk.inbox(one.desk.people["mo"])
    assert esc.kind == "quarantine" and esc.held_message == held.message_id
    assert esc.deciders == [HumanRole.MODERATOR] and esc.agent == "shop"
    assert await one.desk.inbox(one.desk.people["alice"]) == []  # an operator is not a moderator
    assert [e.id for e in await one.desk.inbox(one.desk.people["dora"])] == [esc.id]  # by her route
    # the notice in the moderator's mailbox says what waits, never the content
    (notice,) = await one.po.pull(TOKENS["mo"])
    assert notice.message.content["escalation_id"] == esc.id
    assert "money" not in str(notice.message.content)
    async with client(one.desk) as c:
        await sign_in(c, "mo")
        inbox = await c.get("/inbox")
        assert f'href="/inbox/{esc.id}"' in inbox.text and "deny_phrases" in inbox.text
        page = await c.get(f"/inbox/{esc.id}")
        assert page.status_code == 200 and 'id="held-rule"' in page.text
        assert "Matched phrase <b>wire the money</b>" in page.text
        assert "content withheld" in page.text and 'id="held-content"' not in page.text
        assert "account 7" not in page.text
        assert 'value="release" id="release"' in page.text and 'value="delete" id="delete"' in page.text
    async with client(one.desk) as c:
        await sign_in(c, "rita")  # moderator and quarantine_reviewer: sees the content, escaped
        page = await c.get(f"/inbox/{esc.id}")
        assert 'id="held-content"' in page.text and "account 7" in page.text
        assert "<script>alert(1)" not in page.text and "&lt;script&gt;alert(1)" in page.text


async def test_release_in_the_console_delivers_once_and_audits_the_person(one: Replica) -> None:
    shop, bank = await enrol(one.po, "shop"), await enrol(one.po, "bank")
    held = await send(one.po, shop, "bank", {"note": PHRASE_TEXT})
    (esc,) = await one.desk.inbox(one.desk.people["mo"])
    async with client(one.desk) as c:
        token = await sign_in(c, "mo")
        forged = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": "forged", "choice": "release"})
        assert forged.status_code == 403 and "CSRF" in forged.text
        assert await one.po.board.get(held.message_id) is not None  # nothing happened
        r = await c.post(
            f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "release", "note": "a real invoice"}
        )
        assert r.status_code == 303 and r.headers["location"] == "/inbox"
        assert "Nothing waits for you" in (await c.get("/inbox")).text
        again = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "delete", "note": "x"})
        assert again.status_code == 409 and "already answered by mo" in again.text
    (got,) = await one.po.pull(bank.token)  # delivered as sent, once
    assert got.message.message_id == held.message_id and await one.po.board.get(held.message_id) is None
    (released,) = audit(one.agency, MESSAGE_RELEASED)
    assert released.detail["by"] == "mo" and released.detail["role"] == "moderator"
    assert released.detail["note"] == "a real invoice" and released.detail["recipients"] == ["bank"]
    decisions = audit(one.agency, "human.decision")
    done = [d for d in decisions if d.outcome == "release"]
    assert len(done) == 1 and done[0].actors.user == "mo"
    assert (done[0].detail["person"], done[0].detail["role"], done[0].detail["reason"]) == (
        "mo",
        "moderator",
        "a real invoice",
    )
    assert done[0].detail["message_id"] == held.message_id
    refused = [d for d in decisions if d.outcome == "refused"]
    assert any("CSRF" in d.detail["why"] for d in refused)
    assert any("already answered by mo" in d.detail["why"] for d in refused)


async def test_a_person_without_the_role_is_refused_and_delete_needs_a_reason(one: Replica) -> None:
    shop, _ = await enrol(one.po, "shop"), await enrol(one.po, "bank")
    held = await send(one.po, shop, "bank", {"note": PHRASE_TEXT})
    (esc,) = await one.desk.inbox(one.desk.people["dora"])
    async with client(one.desk) as c:
        token = await sign_in(c, "dora")  # routed to her, but she is no moderator
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "release", "note": "ok"})
        assert r.status_code == 403 and "needs one of the roles moderator" in r.text
    async with client(one.desk) as c:
        token = await sign_in(c, "mo")
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "delete"})
        assert r.status_code == 400 and "say why the message is deleted" in r.text
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "publish"})
        assert r.status_code == 400 and "released or deleted" in r.text
        assert await one.po.board.get(held.message_id) is not None
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "delete", "note": "fraud"})
        assert r.status_code == 303
    assert await one.po.board.get(held.message_id) is None
    (deleted,) = audit(one.agency, MESSAGE_DELETED)
    assert (deleted.detail["by"], deleted.detail["role"], deleted.detail["note"]) == (
        "mo",
        "moderator",
        "fraud",
    )
    refusals = [d for d in audit(one.agency, "human.decision") if d.outcome == "refused"]
    dora = [d for d in refusals if d.detail["person"] == "dora"]
    assert (
        dora
        and dora[0].detail["roles"] == ["compliance_officer"]
        and dora[0].detail["reason_code"] == ("PERMISSION_DENIED")
    )


async def test_the_post_office_lets_a_moderator_person_decide_and_no_one_else(one: Replica) -> None:
    shop, _ = await enrol(one.po, "shop"), await enrol(one.po, "bank")
    held = await send(one.po, shop, "bank", {"note": PHRASE_TEXT})
    with pytest.raises(PermissionDenied, match="needs the moderator role"):
        await one.po.release(held.message_id, person="dora", roles=[HumanRole.COMPLIANCE_OFFICER])
    with pytest.raises(PermissionDenied, match="admin role"):
        await one.po.release(held.message_id, caller=Principal(name="app", role=Role.CLIENT))
    assert await one.po.release(held.message_id, person="mo", roles=[HumanRole.MODERATOR]) == ["bank"]


async def test_an_admin_decision_over_the_rpc_path_closes_the_console_item(one: Replica) -> None:
    shop, _ = await enrol(one.po, "shop"), await enrol(one.po, "bank")
    held = await send(one.po, shop, "bank", {"note": PHRASE_TEXT})
    (esc,) = await one.desk.inbox(one.desk.people["mo"])
    await one.po.delete_quarantined(held.message_id, caller=Principal(name="root", role=Role.ADMIN))
    assert await one.desk.inbox(one.desk.people["mo"]) == []
    async with client(one.desk) as c:
        token = await sign_in(c, "mo")
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "release"})
        assert r.status_code == 409 and "already closed by root" in r.text


async def test_reports_that_quarantine_a_message_show_each_reporter_and_reason(one: Replica) -> None:
    shop = await enrol(one.po, "shop")
    readers = [await enrol(one.po, n) for n in ("r1", "r2")]
    msg = await send(one.po, shop, "r1", {"offer": "cheap watches"})
    await one.po.report(readers[0].token, msg.message_id, "spam")
    assert await one.desk.inbox(one.desk.people["mo"]) == []  # one report is not enough
    await one.po.report(readers[1].token, msg.message_id, "looks like a scam")
    (esc,) = await one.desk.inbox(one.desk.people["mo"])
    assert esc.pending["rule"] == "reports"
    async with client(one.desk) as c:
        await sign_in(c, "mo")
        page = (await c.get(f"/inbox/{esc.id}")).text
        assert "Reported by <b>r1</b>: spam" in page and "Reported by <b>r2</b>: looks like a scam" in page


async def test_with_redis_a_message_held_on_one_replica_is_decided_on_the_other(
    redis_client: Any, redis_prefix: str
) -> None:
    def shared() -> dict[str, Any]:
        return {
            "board": RedisBoard(redis_client, prefix=redis_prefix),
            "transport": RedisMailbox(redis_client, prefix=redis_prefix),
            "store": RedisEscalationStore(redis_client, prefix=redis_prefix),
        }

    first, second = await replica(**shared()), await replica(**shared())
    try:
        shop, bank = await enrol(first.po, "shop"), await enrol(first.po, "bank")
        key = generate_key()  # the same agents known to the second replica (as the definition does)
        await second.po.enroll("shop", public_key_b64(shop.key), hash_token(shop.token))
        await second.po.enroll("bank", public_key_b64(key), hash_token(bank.token))
        held = await send(first.po, shop, "bank", {"note": PHRASE_TEXT})
        (esc,) = await second.desk.inbox(second.desk.people["mo"])  # seen through the shared store
        assert esc.held_message == held.message_id
        async with client(second.desk) as c:
            await sign_in(c, "rita")
            page = await c.get(f"/inbox/{esc.id}")  # the content comes from the shared board
            assert "account 7" in page.text
            token = csrf_of(page.text)
            r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "release"})
            assert r.status_code == 303
        (got,) = await first.po.pull(bank.token)  # the first replica delivers it
        assert got.message.message_id == held.message_id
        async with client(first.desk) as c:
            token = await sign_in(c, "mo")
            r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "delete", "note": "x"})
            assert r.status_code == 409 and "already answered by rita" in r.text
        assert await first.desk.inbox(first.desk.people["mo"]) == []
    finally:
        async for k in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(k)


async def test_a_served_gateway_escalates_a_held_message_to_its_console(tmp_path: Path) -> None:
    """``agency serve`` wires it: an agent's message held by the definition's moderation is
    released by a moderator in the served console and then pulled by its recipient."""
    shop, bank = AgentCredentials.generate("shop"), AgentCredentials.generate("bank")
    spec = cases.definition()  # its people include mo, a moderator and quarantine reviewer
    spec["messaging"] = {
        "agents": [shop.enrollment(), bank.enrollment()],
        "moderation": {"deny_phrases": ["wire the money"]},
    }
    config = write_definition(tmp_path / "agency.json", spec)
    gw = await start_gateway(config, "moderation-node", tmp_path, pythonpath=[Path(__file__).parent])
    try:
        console = re.search(r"operator console on (http://[\d.]+:\d+)", gw.output())
        assert console, gw.output()
        async with MessagingClient(shop, gw.address) as sender, MessagingClient(bank, gw.address) as receiver:
            sent = await sender.send("bank", {"note": PHRASE_TEXT})
            assert sent.recipients == ()
            async with httpx.AsyncClient(base_url=console.group(1)) as c:
                signin = await c.get("/signin")
                data = {"csrf": csrf_of(signin.text), "token": cases.TOKENS["mo"]}
                assert (await c.post("/signin", data=data)).status_code == 303
                inbox = (await c.get("/inbox")).text
                esc_id = re.search(r'href="/inbox/(esc_[^"]+)"', inbox)
                assert esc_id and "deny_phrases" in inbox, inbox
                page = (await c.get(f"/inbox/{esc_id.group(1)}")).text
                assert "Matched phrase <b>wire the money</b>" in page and "account 7" in page
                token = csrf_of(page)
                r = await c.post(
                    f"/inbox/{esc_id.group(1)}/decide",
                    data={"csrf": token, "choice": "release", "note": "checked with the bank"},
                )
                assert r.status_code == 303, r.text
            (got,) = await receiver.pull(wait=5)
            assert got.message.message_id == sent.message_id
    finally:
        assert await gw.stop() == 0, gw.output()


async def test_the_same_notice_to_every_moderator_is_not_held_as_spam() -> None:
    strict = await replica(rules=[DenyPhrases(["wire the money"]), RepeatedContent(1, 3600)])
    shop, _ = await enrol(strict.po, "shop"), await enrol(strict.po, "bank")
    await send(strict.po, shop, "bank", {"note": PHRASE_TEXT})
    (esc,) = await strict.desk.inbox(strict.desk.people["mo"])
    for who in ("mo", "rita", "dora"):  # the same notice content to three people
        (notice,) = await strict.po.pull(TOKENS[who])
        assert notice.message.content["escalation_id"] == esc.id
    assert [q.message_id for q in await strict.po.board.items()] == [esc.held_message]


async def test_a_message_taken_off_the_board_meanwhile_is_refused_not_reopened(one: Replica) -> None:
    shop, bank = await enrol(one.po, "shop"), await enrol(one.po, "bank")
    held = await send(one.po, shop, "bank", {"note": PHRASE_TEXT})
    (esc,) = await one.desk.inbox(one.desk.people["mo"])
    assert await one.po.board.take(held.message_id) is not None  # e.g. a decision racing this one
    async with client(one.desk) as c:
        token = await sign_in(c, "mo")
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "release"})
        assert r.status_code == 409 and "no longer on the quarantine board" in r.text
    assert (await one.desk.store.get(esc.id)).status == "closed"  # type: ignore[union-attr]
    assert await one.desk.inbox(one.desk.people["mo"]) == [] and await one.po.pull(bank.token) == []
    assert audit(one.agency, MESSAGE_RELEASED) == []
