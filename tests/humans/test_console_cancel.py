"""The console's Cancel button: an operator cancels a waiting task (CSRF-checked, audited with who
and why); other roles are refused and audited; a finished task shows no button and is refused."""

from __future__ import annotations

from middleware.people.desk import HumanDesk

from .test_console_http import client, desk, refund, sign_in, warranty

__all__ = ["desk"]  # the fixture, shared with test_console_http


async def test_an_operator_cancels_a_waiting_task_from_its_page(desk: HumanDesk) -> None:
    waiting = await desk.agency.submit(warranty())
    assert waiting.state.value == "input_required"
    async with client(desk) as c:
        token = await sign_in(c, "alice")
        page = await c.get(f"/tasks/{waiting.task_id}")
        assert 'id="cancel-task"' in page.text
        forged = await c.post(f"/tasks/{waiting.task_id}/cancel", data={"csrf": "forged", "reason": "x"})
        assert forged.status_code == 403
        assert (await desk.agency.get_task(waiting.task_id)).state.value == "input_required"
        r = await c.post(
            f"/tasks/{waiting.task_id}/cancel", data={"csrf": token, "reason": "customer withdrew"}
        )
        assert r.status_code == 303 and r.headers["location"] == f"/tasks/{waiting.task_id}"
        after = await c.get(r.headers["location"])
        assert 'id="task-state">canceled' in after.text and 'id="cancel-task"' not in after.text
        again = await c.post(f"/tasks/{waiting.task_id}/cancel", data={"csrf": token, "reason": "again"})
        assert again.status_code == 303  # already canceled: the same outcome
    outcome = await desk.agency.get_task(waiting.task_id)
    assert outcome.state.value == "canceled" and "alice" in outcome.reason
    [resumed] = [
        r
        for _, r in desk.agency.audit.records()
        if r.event_type == "task.resumed" and r.task_id == waiting.task_id
    ]
    assert resumed.outcome == "cancel" and resumed.detail["by"] == "alice"
    assert "operator" in resumed.detail["role"].split(",") and resumed.detail["why"] == "customer withdrew"


async def test_a_person_without_the_operator_role_and_a_finished_task_are_refused(desk: HumanDesk) -> None:
    waiting = await desk.agency.submit(refund(500))
    done = await desk.agency.submit(refund(50))  # below the approval threshold: completes
    async with client(desk) as c:
        token = await sign_in(c, "bob")  # an approver
        assert 'id="cancel-task"' not in (await c.get(f"/tasks/{waiting.task_id}")).text
        r = await c.post(f"/tasks/{waiting.task_id}/cancel", data={"csrf": token})
        assert r.status_code == 403 and "operator role" in r.text
    async with client(desk) as c:
        token = await sign_in(c, "alice")
        assert 'id="cancel-task"' not in (await c.get(f"/tasks/{done.task_id}")).text
        r = await c.post(f"/tasks/{done.task_id}/cancel", data={"csrf": token})
        assert r.status_code == 409 and "is completed" in r.text
    assert (await desk.agency.get_task(waiting.task_id)).state.value == "input_required"
    refusals = [r for _, r in desk.agency.audit.records() if r.event_type == "human.decision"]
    assert refusals[-1].outcome == "refused" and refusals[-1].detail["person"] == "bob"
