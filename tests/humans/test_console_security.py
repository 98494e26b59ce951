"""The console's own security (issue 26): who may sign a checkpoint, what the audit page
shows, task ids that hold '/', sign-in floods and sessions ended server-side."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from middleware import Agency, TaskRequest
from middleware.audit.checkpoint import Signer
from middleware.audit.wal import WalAuditLog, WalOptions
from middleware.people import Person
from middleware.people.desk import HumanDesk
from middleware.server.console import build_app
from middleware.server.settings import hash_token
from middleware.testing import ScriptedAgent

from .cases import TOKENS
from .test_console_http import csrf_of, sign_in

AUDREY = "console-token-audrey-auditor-00005"


@pytest.fixture
async def desk(tmp_path: Path) -> HumanDesk:
    # no timed checkpoints: the tests count the checkpoints a person signs
    options = WalOptions(checkpoint_interval=None)
    audit = WalAuditLog(tmp_path / "audit", "n1", signer=Signer("console-test"), options=options)
    agency = Agency(audit=audit)
    await agency.register(
        {"name": "echo_agent", "can_do": ["echo"], "slo_latency_ms": 2000},
        ScriptedAgent(*([{"reply": "ok"}] * 10), name="echo_agent"),
    )
    people = [
        Person(name="alice", roles=["operator"], token_sha256=hash_token(TOKENS["alice"])),
        Person(name="audrey", roles=["auditor"], token_sha256=hash_token(AUDREY)),
    ]
    desk = HumanDesk(agency, people)
    yield desk
    await agency.close()


def client(desk: HumanDesk) -> httpx.AsyncClient:
    app = build_app(desk, secret="s" * 40)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console")


async def sign_in_as(c: httpx.AsyncClient, token: str) -> str:
    page = await c.get("/signin")
    r = await c.post("/signin", data={"csrf": csrf_of(page.text), "token": token})
    assert r.status_code == 303, r.text
    return csrf_of((await c.get("/inbox")).text)


async def test_only_an_auditor_signs_a_checkpoint_and_a_refusal_is_audited(desk: HumanDesk) -> None:
    log = desk.agency.audit
    async with client(desk) as alice:
        csrf = await sign_in(alice, "alice")
        page = await alice.get("/audit")
        assert "sign-checkpoint" not in page.text  # no button for an operator
        before = len(log.checkpoints())
        r = await alice.post("/audit/checkpoint", data={"csrf": csrf})
        assert r.status_code == 403 and "needs the role auditor" in r.text
        assert len(log.checkpoints()) == before
    refused = [
        r
        for _, r in log.records()
        if r.event_type == "human.decision" and r.detail.get("form") == "checkpoint"
    ]
    assert refused and refused[-1].outcome == "refused" and refused[-1].detail["person"] == "alice"
    async with client(desk) as audrey:
        csrf = await sign_in_as(audrey, AUDREY)
        assert "sign-checkpoint" in (await audrey.get("/audit")).text
        r = await audrey.post("/audit/checkpoint", data={"csrf": csrf})
        assert r.status_code == 303
    assert len(log.checkpoints()) == before + 1


async def test_the_audit_page_never_shows_the_servers_log_path(desk: HumanDesk) -> None:
    location = str(desk.agency.audit.location)
    async with client(desk) as audrey:
        await sign_in_as(audrey, AUDREY)
        for url in ("/audit", "/audit?verify=1"):
            page = await audrey.get(url)
            assert page.status_code == 200
            assert location not in page.text and str(Path(location).parent) not in page.text, url
        assert "verified" in (await audrey.get("/audit?verify=1")).text


@pytest.mark.parametrize("task_id", ["orders/42/refund", "a b?c#d"])
async def test_a_task_whose_id_holds_a_slash_opens(desk: HumanDesk, task_id: str) -> None:
    outcome = await desk.agency.submit(TaskRequest(text="echo this", task_id=task_id))
    assert outcome.task_id == task_id
    from urllib.parse import quote

    async with client(desk) as alice:
        await sign_in(alice, "alice")
        for path in (f"/tasks/{quote(task_id, safe='/')}", f"/tasks/{quote(task_id, safe='')}"):
            page = await alice.get(path)
            assert page.status_code == 200, (path, page.text[:300])
            assert 'id="task-state"' in page.text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_sign_in_flood_is_rate_limited_and_audited_per_source(desk: HumanDesk) -> None:
    """The report: 1,000 sign-in POSTs wrote 1,000 audit records, no 429."""
    clock = Clock()
    app = build_app(desk, secret="s" * 40, signin_per_minute=6, signin_burst=5, clock=clock)
    log = desk.agency.audit
    before = sum(1 for _ in log.records())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as c:
        csrf = csrf_of((await c.get("/signin")).text)
        answers = [
            (await c.post("/signin", data={"csrf": csrf, "token": f"guess-{i}"})).status_code
            for i in range(200)
        ]
        assert answers[:5] == [401] * 5 and set(answers[5:]) == {429}
        r = await c.post("/signin", data={"csrf": csrf, "token": AUDREY})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1  # even the right token waits
        forged = await c.post("/signin", data={"csrf": "forged", "token": "x"})
        assert forged.status_code == 429
        clock.now += 10  # one attempt back (6 a minute)
        r = await c.post("/signin", data={"csrf": csrf, "token": AUDREY})
        assert r.status_code == 303
    written = [r for i, r in log.records() if i >= before and r.event_type != "catalog.change"]
    assert len(written) <= 2, [(r.event_type, r.rule, r.detail) for r in written]  # one per source and reason
    assert {(r.event_type, r.rule) for r in written} == {
        ("message.rejected", "UNAUTHENTICATED"),
        ("message.rejected", "RESOURCE_EXHAUSTED"),
    }
    assert all(r.detail["operation"] == "console/signin" and r.detail["count"] == 1 for r in written)
    await app.state.refusals.flush()  # the rest of the minute, summed up
    summaries = [r for i, r in log.records() if i >= before and r.detail.get("summary")]
    assert sum(r.detail["count"] for r in summaries) == 4 + 196  # 4 more unknown tokens, 196 too many


async def test_sign_out_ends_the_session_a_copied_cookie_included(desk: HumanDesk) -> None:
    """The report: after sign-out a copied cookie kept working for 8 h."""
    app = build_app(desk, secret="s" * 40)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as c:
        csrf = await sign_in_as(c, AUDREY)
        copied = dict(c.cookies)
        assert (await c.get("/inbox")).status_code == 200
        assert (await c.post("/signout", data={"csrf": csrf})).status_code == 303
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://console", cookies=copied
    ) as thief:
        for path in ("/inbox", "/audit", "/tasks"):
            r = await thief.get(path)
            assert r.status_code == 303 and r.headers["location"] == "/signin", path
        assert (await thief.get("/tasks.json")).status_code == 401
