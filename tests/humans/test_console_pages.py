"""The console's pages for an operator who handles a hundred items a day (issue 27, sixth item):
the failure sentence once, outputs readable, agent bars not slivers beside a human wait, the
approval's request and submitter, no form for who cannot decide, the reply in the user's language.
Over HTTP in process; tests/humans/test_console_browser.py looks at the same pages in Chromium."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
import pytest

from middleware import (
    Agency,
    CapabilityContract,
    GoalAssertion,
    TaskRequest,
    TaskStep,
)
from middleware.audit.record import AuditRecord
from middleware.people import ApprovalGate, ApprovalGates, Person
from middleware.people.desk import HumanDesk
from middleware.server.console import build_app
from middleware.server.console.views import Bar, Bars, task_bars, timeline_layout

from .cases import CONTRACTS, GOAL, TOKENS, WARRANTY_INPUT, WARRANTY_TEXT, make, people


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


async def sign_in(c: httpx.AsyncClient, who: str) -> None:
    page = await c.get("/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
    r = await c.post("/signin", data={"csrf": csrf, "token": TOKENS[who]})
    assert r.status_code == 303


def main_of(html: str) -> str:
    return html.split("<main>", 1)[1]


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


async def test_a_handover_says_each_thing_once_and_shows_outputs_as_fields(desk: HumanDesk) -> None:
    await desk.agency.submit(warranty())
    (esc,) = await desk.inbox(desk.people["alice"])
    async with client(desk) as c:
        await sign_in(c, "alice")
        page = main_of((await c.get(f"/inbox/{esc.id}")).text)
    # the failure sentence once (it was three times), the escalation's reason once
    assert page.count("courier API unreachable") == 1
    assert page.count("no backup left") == 1
    assert re.search(r'<h2 id="title">Tool unavailable at step shipping</h2>', page)
    assert 'id="request">My phone bought last week' in page and "Submitted by user u_789" in page
    # outputs as fields (a table per step), not a raw JSON block
    outputs = page.split('id="outputs"', 1)[1].split("</div>", 1)[0]
    assert '<details class="step-output"' in outputs and '<table class="kv">' in outputs
    assert "<th>fault_type</th><td>screen_shattered</td>" in outputs and '"fault_type"' not in outputs
    # one suggested reply (the packet's), in the user's language
    assert page.count("Suggested reply") == 1


async def test_the_approval_shows_the_request_and_who_submitted_it(desk: HumanDesk) -> None:
    await desk.agency.submit(
        TaskRequest(
            text="refund order 42: the parcel never arrived",
            input={"order_id": "42", "amount": 250},
            steps=[TaskStep(name="refund", action="refund")],
            user_id="customer-7",
        ),
        client="shop",
    )
    (esc,) = await desk.inbox(desk.people["bob"])
    async with client(desk) as c:
        await sign_in(c, "bob")
        page = main_of((await c.get(f"/inbox/{esc.id}")).text)
    assert 'id="request">refund order 42: the parcel never arrived</p>' in page
    assert 'id="submitted-by">Submitted by client shop, user customer-7</p>' in page
    assert "$.amount = 250 is above 100" in page
    assert "<th>amount</th><td>250</td>" in page  # the step's input as fields
    assert 'id="decide"' in page  # bob may approve


async def test_who_cannot_decide_sees_why_and_no_form(desk: HumanDesk) -> None:
    waiting = await desk.agency.submit(
        TaskRequest(
            text="refund my own order",
            input={"order_id": "43", "amount": 300},
            steps=[TaskStep(name="refund", action="refund")],
            user_id="bob",  # bob, an approver, submitted it
        )
    )
    assert await desk.inbox(desk.people["bob"]) == []  # his own approval does not reach him
    esc = await desk.store.open_for_task(waiting.task_id)
    assert esc is not None
    async with client(desk) as c:
        await sign_in(c, "bob")  # opens it by its address anyway
        page = main_of((await c.get(f"/inbox/{esc.id}")).text)
        assert 'id="decide"' not in page and "Approve: run the step" not in page
        assert 'id="cannot-decide"' in page and "you submitted this task" in page
        assert "separation of duties" in page
    async with client(desk) as c:
        await sign_in(c, "alice")  # an operator, not an approver
        page = main_of((await c.get(f"/inbox/{esc.id}")).text)
        assert 'id="decide"' not in page and "needs one of the roles approver" in page


async def test_a_conflict_shows_the_values_by_path_and_a_chinese_reply_for_a_chinese_request(
    desk: HumanDesk,
) -> None:
    agency = desk.agency  # its intake_agent and claims_agent disagree on accidental (cases.py)
    waiting = await agency.submit(
        TaskRequest(
            text="我的手机摔了一下，屏幕碎了，要换新",
            steps=[
                TaskStep(name="intake", action="read_request"),
                TaskStep(name="check", action="check_claim"),
            ],
        )
    )
    assert waiting.pending["kind"] == "conflict"
    (esc,) = await desk.inbox(desk.people["alice"])
    async with client(desk) as c:
        await sign_in(c, "alice")
        page = main_of((await c.get(f"/inbox/{esc.id}")).text)
    conflict = page.split('id="conflict"', 1)[1].split("</table>", 1)[0]
    assert "<code>$.context.accidental</code>" in conflict and "<code>$.accidental</code>" in conflict
    reply = page.split('id="reply"', 1)[1].split("</section>", 1)[0]
    assert "您好" in reply and "Hello" not in reply
    assert page.count("Suggested reply") == 1
    assert "true from greeting_agent (at $.context.accidental of step intake)" in page  # the option


def test_agent_bars_are_not_slivers_beside_a_human_wait() -> None:
    """Three 2-5 ms agent calls around a 2-hour wait: the wait is drawn short on a broken axis,
    marked with its real length; every bar at least the minimum width."""
    bars = Bars(
        bars=[
            Bar("warranty", "step warranty", 0.0, 2.0, "ok"),
            Bar("shipping", "step shipping", 2.0, 5.0, "fail"),
            Bar("waiting for a person (alice)", "people", 5.0, 7_200_005.0, "wait"),
            Bar("reply", "step reply", 7_200_005.0, 7_200_010.0, "ok"),
        ],
        total_ms=7_200_010.0,
    )
    layout = timeline_layout(bars, width=900, min_width=6, wait_width=110)
    widths = {r.bar.label: r.w for r in layout.rows}
    assert widths["waiting for a person (alice)"] == pytest.approx(110)
    assert widths["warranty"] >= 100 and widths["shipping"] >= 100 and widths["reply"] >= 100
    assert [label for _, _, label in layout.breaks] == ["waited 2 h 00 min"]
    xs = [(r.x, r.x + r.w) for r in layout.rows]
    assert all(0 <= a < b <= 900 + 1e-6 for a, b in xs)
    assert xs[0][1] <= xs[1][0] + 1e-6 and xs[2][1] <= xs[3][0] + 1e-6  # in time order
    # a task without a long wait keeps a plain linear axis, short bars still visible
    plain = timeline_layout(
        Bars(bars=[Bar("a", "s", 0, 1, "ok"), Bar("b", "s", 1, 1000, "ok")], total_ms=1000)
    )
    assert plain.breaks == [] and plain.rows[0].w == 6


async def test_the_task_page_draws_the_broken_axis_and_readable_output(desk: HumanDesk) -> None:
    from .cases import SHIPMENT

    waiting = await desk.agency.submit(warranty())
    (esc,) = await desk.inbox(desk.people["alice"])
    await desk.decide(esc.id, desk.people["alice"], choice="provide_output", output=SHIPMENT)
    records = [r for _, r in desk.agency.audit.records() if r.task_id == waiting.task_id]
    # the person took two hours: move the records after the wait by two hours (a fixed history)
    resumed = next(i for i, r in enumerate(records) if r.event_type == "task.resumed")
    later = [
        AuditRecord.model_validate({**r.model_dump(), "time": r.time + timedelta(hours=2)})
        if i >= resumed
        else r
        for i, r in enumerate(records)
    ]
    layout = timeline_layout(task_bars(later))
    assert layout.breaks and all(r.w >= 6 for r in layout.rows)
    async with client(desk) as c:
        await sign_in(c, "alice")
        page = main_of((await c.get(f"/tasks/{waiting.task_id}")).text)
    output = page.split('id="task-output"', 1)[1].split("</div>", 1)[0]
    assert '<table class="kv">' in output and "<th>tracking_number</th><td>EXP123456</td>" in output
    assert '<details class="raw"><summary>JSON</summary>' in page  # the raw JSON one click away


async def test_a_handover_offers_only_decisions_the_task_would_take(desk: HumanDesk) -> None:
    await desk.agency.submit(warranty())  # blocked at shipping, which has no output to approve
    (esc,) = await desk.inbox(desk.people["alice"])
    async with client(desk) as c:
        await sign_in(c, "alice")
        page = main_of((await c.get(f"/inbox/{esc.id}")).text)
    offered = re.findall(r'name="choice" value="([a-z_]+)"', page)
    assert offered == ["retry", "provide_output", "abort", "cancel"]
    assert "Provide the output: you give the step" in page
