"""The console over HTTP (in process): sign-in, sessions, CSRF, decisions, escaping, every page."""

from __future__ import annotations

import re

import httpx
import pytest

from middleware import Agency, CapabilityContract, GoalAssertion, TaskRequest, TaskStep
from middleware.people import ApprovalGate, ApprovalGates, Person
from middleware.people.desk import HumanDesk
from middleware.server.console import build_app

from .cases import CONTRACTS, GOAL, SHIPMENT, TOKENS, WARRANTY_INPUT, WARRANTY_TEXT, make, people


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def desk() -> HumanDesk:
    from middleware.server.settings import AgencyConfig

    agency = Agency(
        sleep=_no_sleep,
        config=AgencyConfig.model_validate(
            {"failure_policy": {"max_retries": 0, "on_exhausted": "escalate_to_human"}}
        ),
        approvals=ApprovalGates([ApprovalGate(agent="refund_executor", path="$.amount", above=100)]),
    )
    for c in CONTRACTS:
        await agency.register(CapabilityContract.model_validate(c), make(c["name"]))
    agency.register_goal(GoalAssertion.model_validate(GOAL))
    return HumanDesk(agency, [Person.model_validate(p) for p in people()])


def client(desk: HumanDesk) -> httpx.AsyncClient:
    app = build_app(desk, secret="s" * 40)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console")


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


async def sign_in(c: httpx.AsyncClient, who: str) -> str:
    page = await c.get("/signin")
    r = await c.post("/signin", data={"csrf": csrf_of(page.text), "token": TOKENS[who]})
    assert r.status_code == 303 and r.headers["location"] == "/inbox"
    return csrf_of((await c.get("/inbox")).text)


def warranty() -> TaskRequest:
    return TaskRequest(
        text=WARRANTY_TEXT,
        goal_id=GOAL["id"],
        user_id="u_789",
        input=WARRANTY_INPUT,
        steps=[
            TaskStep(name="warranty", action="warranty_claim"),
            TaskStep(name="shipping", action="ship_replacement"),
            TaskStep(name="reply", action="compose_reply"),
        ],
    )


def refund(amount: float) -> TaskRequest:
    return TaskRequest(
        text=f"refund {amount}",
        input={"order_id": "42", "amount": amount},
        steps=[TaskStep(name="refund", action="refund")],
        user_id="customer-7",
    )


async def test_sign_in_sets_a_strict_httponly_session_without_the_token(desk: HumanDesk) -> None:
    async with client(desk) as c:
        assert (await c.get("/inbox")).headers["location"] == "/signin"
        page = await c.get("/signin")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        bad = await c.post("/signin", data={"csrf": csrf_of(page.text), "token": "nope"})
        assert bad.status_code == 401 and "Unknown token" in bad.text
        r = await c.post("/signin", data={"csrf": csrf_of(page.text), "token": TOKENS["alice"]})
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert TOKENS["alice"] not in r.headers["set-cookie"]
        inbox = await c.get("/inbox")
        assert inbox.status_code == 200 and "Alice (operator)" in inbox.text


async def test_a_post_without_the_sessions_csrf_token_is_refused_and_audited(desk: HumanDesk) -> None:
    waiting = await desk.agency.submit(refund(500))
    (esc,) = await desk.inbox(desk.people["bob"])
    async with client(desk) as c:
        await sign_in(c, "bob")
        forged = await c.post(f"/inbox/{esc.id}/decide", data={"choice": "approve", "csrf": "forged"})
        assert forged.status_code == 403 and "CSRF" in forged.text
    assert (await desk.agency.get_task(waiting.task_id)).state.value == "input_required"
    refusals = [r for _, r in desk.agency.audit.records() if r.event_type == "human.decision"]
    assert refusals and refusals[-1].outcome == "refused" and "CSRF" in refusals[-1].detail["why"]


async def test_approve_in_the_console_resumes_the_task_once(desk: HumanDesk) -> None:
    waiting = await desk.agency.submit(refund(500))
    async with client(desk) as c:
        token = await sign_in(c, "bob")
        inbox = await c.get("/inbox")
        esc_id = re.search(r'href="/inbox/(esc_[^"]+)"', inbox.text).group(1)  # type: ignore[union-attr]
        page = await c.get(f"/inbox/{esc_id}")
        assert "$.amount = 500 is above 100" in page.text
        assert "bob: role approver may approve" in page.text  # why it reached bob
        assert "bob: role approver may approve" in (await c.get(f"/tasks/{waiting.task_id}")).text
        r = await c.post(f"/inbox/{esc_id}/decide", data={"csrf": token, "choice": "approve", "note": "ok"})
        assert r.status_code == 303 and r.headers["location"] == f"/tasks/{waiting.task_id}"
        task = await c.get(r.headers["location"])
        assert 'id="task-state">completed' in task.text and "bob" in task.text
        replay = await c.post(f"/inbox/{esc_id}/decide", data={"csrf": token, "choice": "approve"})
        assert replay.status_code == 409 and "already answered by bob" in replay.text
    outcome = await desk.agency.get_task(waiting.task_id)
    assert outcome.output == {"refunded": 500, "order_id": "42"}
    assert len([s for s in outcome.steps if s.name == "refund"]) == 1 and outcome.steps[0].attempts == 1


async def test_refusals_an_operator_approving_and_an_answer_outside_the_options(desk: HumanDesk) -> None:
    await desk.agency.submit(refund(500))
    (esc,) = await desk.inbox(desk.people["bob"])
    await desk.agency.submit(warranty())
    (handover,) = await desk.inbox(desk.people["alice"])
    async with client(desk) as c:
        token = await sign_in(c, "alice")
        r = await c.post(f"/inbox/{esc.id}/decide", data={"csrf": token, "choice": "approve"})
        assert r.status_code == 403 and "needs one of the roles approver" in r.text
        r = await c.post(f"/inbox/{handover.id}/decide", data={"csrf": token, "choice": "use_magic"})
        assert r.status_code == 400 and "must be one of" in r.text
        r = await c.post(f"/inbox/{handover.id}/decide", data={"csrf": token, "choice": "provide_output"})
        assert r.status_code == 400 and "output" in r.text


async def test_the_warranty_handover_answered_in_the_console_completes_the_task(desk: HumanDesk) -> None:
    import orjson

    waiting = await desk.agency.submit(warranty())
    assert waiting.pending["kind"] == "human_handover"
    async with client(desk) as c:
        token = await sign_in(c, "alice")
        (esc,) = await desk.inbox(desk.people["alice"])
        page = await c.get(f"/inbox/{esc.id}")
        assert "courier API unreachable" in page.text and "Suggested reply" in page.text
        r = await c.post(
            f"/inbox/{esc.id}/decide",
            data={"csrf": token, "choice": "provide_output", "output": orjson.dumps(SHIPMENT).decode()},
        )
        assert r.status_code == 303
    done = await desk.agency.get_task(waiting.task_id)
    assert done.state.value == "completed" and "EXP123456" in done.output["reply"]


async def test_agent_output_is_escaped_on_every_page(desk: HumanDesk) -> None:
    done = await desk.agency.submit(
        TaskRequest(text="echo <b>this</b>", steps=[TaskStep(name="echo", action="echo")])
    )
    async with client(desk) as c:
        await sign_in(c, "alice")
        for path in (f"/tasks/{done.task_id}", "/tasks", "/contracts", "/audit"):
            r = await c.get(path)
            assert r.status_code == 200, path
            assert "<script>window.__xss" not in r.text and "<b>this</b>" not in r.text, path
        assert "&lt;script&gt;window.__xss" in (await c.get(f"/tasks/{done.task_id}")).text
        data = await c.get("/tasks.json")  # data, rendered by the page's script as text nodes
        assert data.headers["content-type"] == "application/json"
        assert data.headers["x-content-type-options"] == "nosniff"


async def test_tasks_json_needs_a_session(desk: HumanDesk) -> None:
    async with client(desk) as c:
        assert (await c.get("/tasks.json")).status_code == 401
