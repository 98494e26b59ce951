"""Long tasks in process: submit without waiting, follow a task's events, resume a broken
stream, an agent's progress, the runner that owns background tasks, and task lists."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from middleware import Agency, AgentReply, PermissionDenied, TaskState
from middleware.access import Principal, Role
from middleware.errors import InvalidInput, NotFound, ResourceExhausted, Unavailable
from middleware.task_events import OUTCOME, PROGRESS, TaskEvent
from middleware.task_progress import TaskProgress, emit_progress
from middleware.task_runner import TaskRunner
from middleware.testing import GatedAgent

pytestmark = pytest.mark.timeout(30)

ALICE = Principal(name="alice", role=Role.CLIENT)
BOB = Principal(name="bob", role=Role.CLIENT)
ADMIN = Principal(name="root", role=Role.ADMIN)


def contract(name: str, action: str, **extra):
    return {"name": name, "can_do": [action], "slo_latency_ms": 60_000, **extra}


def request(action: str = "think", **extra):
    return {"text": f"please {action}", "constraints": {"action": action}, **extra}


async def events_of(agency: Agency, task_id: str, after: int = 0) -> list[TaskEvent]:
    return [e async for e in agency.watch(task_id, after=after, wait_s=1.0)]


def audited(agency: Agency, task_id: str) -> list[tuple[int, object]]:
    return [(i, r) for i, r in agency.audit.records() if r.task_id == task_id]


async def test_submit_without_waiting_answers_once_the_task_is_durable_before_the_agent_answers():
    agency = Agency()
    agent = GatedAgent({"answer": 42})
    await agency.register(contract("slow", "think"), agent)

    accepted = await agency.submit(request(), client="alice", wait=False)

    assert accepted.state is TaskState.SUBMITTED and accepted.task_id and accepted.trace_id
    assert agent.calls == 0  # the agent has not even been called
    stored = await agency.tasks.get(accepted.task_id)  # the record exists ...
    assert stored.client == "alice"
    kinds = [r.event_type for _, r in audited(agency, accepted.task_id)]
    assert kinds == ["task.submitted", "message.accepted"]  # ... and its acceptance is in the log
    assert accepted.audit_index == audited(agency, accepted.task_id)[-1][0]

    await agent.entered.wait()  # it runs on in the gateway, owned by the runner
    assert agency.runner.running == 1
    agent.release()
    events = await events_of(agency, accepted.task_id)
    assert events[-1].type == OUTCOME and events[-1].ends_task
    assert events[-1].final is not None and events[-1].final.output == {"answer": 42}
    assert events[-1].final.state is TaskState.COMPLETED
    await agency.close()


async def test_the_stream_is_the_tasks_audit_records_in_order_with_their_ids_times_and_indexes():
    agency = Agency()
    agent = GatedAgent({"answer": 42})
    await agency.register(contract("slow", "think"), agent)
    accepted = await agency.submit(request(), wait=False)
    agent.release()
    events = await events_of(agency, accepted.task_id)

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    records = audited(agency, accepted.task_id)
    from_log = [e for e in events if e.audit_index]
    assert [(e.id, e.type, e.audit_index, e.outcome, e.rule) for e in from_log] == [
        (r.event_id, r.event_type, i, r.outcome, r.rule) for i, r in records
    ]
    assert [datetime.fromisoformat(e.time.replace("Z", "+00:00")) for e in from_log] == [
        r.time for _, r in records
    ]
    assert [e.detail for e in from_log] == [r.detail for _, r in records]
    # what a client follows: each state, the routing decision, the dispatch and the answer
    kinds = [(e.type, e.state) for e in events]
    assert kinds == [
        ("task.submitted", "submitted"),
        ("message.accepted", "submitted"),
        ("task.transition", "routing"),
        ("routing.decision", "routing"),
        ("task.transition", "dispatched"),
        ("agent.dispatch", "dispatched"),
        ("agent.result", "dispatched"),
        ("task.transition", "verifying"),
        ("task.transition", "completed"),
        ("task.completed", "completed"),
        (OUTCOME, "completed"),
    ]
    dispatch = next(e for e in events if e.type == "agent.dispatch")
    assert (dispatch.step, dispatch.agent) == ("main", "slow@1.0.0")
    await agency.close()


async def test_a_follower_that_breaks_off_resumes_after_its_last_seq_and_misses_nothing():
    agency = Agency()
    agent = GatedAgent({"answer": 42})
    await agency.register(contract("slow", "think"), agent)
    accepted = await agency.submit(request(), wait=False)

    first: list[TaskEvent] = []
    async for event in agency.watch(accepted.task_id, wait_s=1.0):
        first.append(event)
        if event.type == "agent.dispatch":
            break  # the follower goes away mid-task
    agent.release()
    rest = await events_of(agency, accepted.task_id, after=first[-1].seq)

    whole = await events_of(agency, accepted.task_id)
    assert [e.id for e in first + rest] == [e.id for e in whole]
    assert rest[0].seq == first[-1].seq + 1 and rest[-1].ends_task
    assert await events_of(agency, accepted.task_id, after=whole[-1].seq) == []  # ended: nothing more
    await agency.close()


async def test_a_finished_task_whose_events_are_gone_still_ends_its_stream_with_the_outcome():
    from middleware.memory_task_events import MemoryTaskEventLog

    agency = Agency(events=MemoryTaskEventLog(max_tasks=1))
    await agency.register(contract("quick", "think"), lambda req: {"ok": True})
    old = await agency.submit(request())
    await agency.submit(request())  # the log keeps one task's events: the first task's are dropped
    events = await events_of(agency, old.task_id)
    assert [e.type for e in events] == [OUTCOME]
    assert events[0].final is not None and events[0].final.output == {"ok": True}
    await agency.close()


async def test_only_the_owner_or_an_admin_follows_a_task():
    agency = Agency()
    await agency.register(contract("quick", "think"), lambda req: {"ok": True})
    done = await agency.submit(request(), client="alice")
    with pytest.raises(PermissionDenied):
        await anext(agency.watch(done.task_id, caller=BOB))
    assert any(
        r.event_type == "message.rejected" and r.rule == "PERMISSION_DENIED" and r.task_id == done.task_id
        for _, r in agency.audit.records()
    )
    assert (await events_of_as(agency, done.task_id, ADMIN))[-1].ends_task
    assert (await events_of_as(agency, done.task_id, ALICE))[-1].ends_task
    with pytest.raises(NotFound):
        await anext(agency.watch("task_nope", caller=ALICE))
    with pytest.raises(InvalidInput) as bad:
        await anext(agency.watch(done.task_id, after=-1))
    assert bad.value.field == "after_seq"
    await agency.close()


async def events_of_as(agency: Agency, task_id: str, caller: Principal) -> list[TaskEvent]:
    return [e async for e in agency.watch(task_id, caller=caller, wait_s=1.0)]


async def test_a_wait_for_input_and_the_decision_are_in_the_stream_which_ends_with_the_task():
    agency = Agency()

    async def unsure(req):
        return AgentReply(output={"plan": "probably A"}, confidence_score=0.4)

    await agency.register(contract("unsure", "plan"), unsure)
    waiting = await agency.submit(request("plan"))
    assert waiting.state is TaskState.INPUT_REQUIRED
    seen: list[TaskEvent] = []
    asked = asyncio.Event()

    async def follow() -> None:
        async for event in agency.watch(waiting.task_id, wait_s=1.0):
            seen.append(event)
            if event.type == OUTCOME and event.state == "input_required":
                asked.set()

    follower = asyncio.create_task(follow())
    await asyncio.wait_for(asked.wait(), 10)
    assert not follower.done()  # a wait is not the end
    question = seen[-1].detail["pending"]
    assert question["kind"] == "clarification" and "accept" in [o["id"] for o in question["options"]]
    await agency.resume(waiting.task_id, answer="accept")
    await asyncio.wait_for(follower, 10)
    kinds = [e.type for e in seen]
    resumed = kinds.index("task.resumed")
    assert kinds.index(OUTCOME) < resumed  # the wait, then the decision
    assert seen[resumed].outcome == "accept"
    assert seen[-1].ends_task and seen[-1].final is not None and seen[-1].final.state is TaskState.COMPLETED
    await agency.close()


async def test_failures_retries_and_backups_are_in_the_stream_with_type_and_resolution():
    agency = Agency(sleep=lambda _: asyncio.sleep(0))

    async def broken(req):
        raise RuntimeError("down")

    await agency.register(contract("broken", "work", slo_latency_ms=10), broken)
    await agency.register(contract("steady", "work"), lambda req: {"done": True})
    done = await agency.submit(request("work"))
    assert done.state is TaskState.COMPLETED
    events = await events_of(agency, done.task_id)
    failures = [e for e in events if e.type == "failure.event"]
    assert failures and all(f.outcome == "TOOL_ERROR" and f.agent == "broken@1.0.0" for f in failures)
    resolutions = [e.outcome for e in events if e.type == "failure.resolution"]
    assert resolutions[-1] == "use_backup"
    assert [e.agent for e in events if e.type == "agent.dispatch"][-1] == "steady@1.0.0"
    await agency.close()


async def test_progress_of_an_agent_that_asks_for_it_is_streamed_between_dispatch_and_answer_never_audited():
    agency = Agency()
    agent = GatedAgent(
        {"text": "Hello"},
        progress=[("token", {"text": "Hel"}), ("token", {"text": "lo"}), ("progress", {"percent": 50})],
    )
    await agency.register(contract("talker", "talk", stream_progress=True), agent)
    accepted = await agency.submit(request("talk"), wait=False)
    await agent.entered.wait()
    agent.release()
    events = await events_of(agency, accepted.task_id)
    kinds = [e.type for e in events]
    progress = [e for e in events if e.type == PROGRESS]
    assert kinds.index("agent.dispatch") < kinds.index(PROGRESS) < kinds.index("agent.result")
    assert "".join(e.detail["data"]["text"] for e in progress if e.outcome == "token") == "Hello"
    assert [e.detail["data"] for e in progress if e.outcome == "progress"] == [{"percent": 50}]
    assert all(e.audit_index == 0 and e.agent == "talker@1.0.0" and e.step == "main" for e in progress)
    logged = {r.event_id for _, r in agency.audit.records()}
    assert not logged & {e.id for e in progress}
    await agency.close()


async def test_progress_is_opt_in_per_contract():
    agency = Agency()
    agent = GatedAgent({"ok": True}, progress=[("token", {"text": "secret"})])
    agent.release()
    await agency.register(contract("quiet", "talk"), agent)
    done = await agency.submit(request("talk"))
    assert [e for e in await events_of(agency, done.task_id) if e.type == PROGRESS] == []
    emit_progress("token", {"text": "nobody listens"})  # outside a call: nothing happens
    await agency.close()


async def test_progress_of_a_side_effect_free_agent_waits_for_its_dispatch_record_to_be_durable():
    agency = Agency()

    async def talker(req):
        emit_progress("token", {"text": "hi"})
        return {"ok": True}

    await agency.register(contract("pure", "talk", stream_progress=True, side_effect_free=True), talker)
    done = await agency.submit(request("talk"))
    events = await events_of(agency, done.task_id)
    dispatch = next(e for e in events if e.type == "agent.dispatch")
    token = next(e for e in events if e.type == PROGRESS)
    assert dispatch.audit_index and dispatch.seq < token.seq  # in the log before anything of the call
    await agency.close()


async def test_a_sync_agent_reports_progress_from_its_worker_thread():
    agency = Agency()

    def sync_talker(req):
        emit_progress("token", {"text": "from a thread"})
        return {"ok": True}

    await agency.register(contract("sync", "talk", stream_progress=True), sync_talker)
    done = await agency.submit(request("talk"))
    texts = [e.detail["data"]["text"] for e in await events_of(agency, done.task_id) if e.type == PROGRESS]
    assert texts == ["from a thread"]
    await agency.close()


async def test_an_agent_call_stores_at_most_its_limit_and_says_how_many_were_dropped():
    stored: list[TaskEvent] = []

    async def publish(events: list[TaskEvent]) -> None:
        stored.extend(events)

    progress = TaskProgress(publish, task_id="t", trace_id="tr", step="s", agent="a", node="n", limit=3)
    for i in range(10):
        progress.emit("progress", {"i": i})
    await progress.close()
    assert [e.detail["data"] for e in stored] == [{"i": 0}, {"i": 1}, {"i": 2}, {"dropped": 7, "limit": 3}]
    progress.emit("progress", {"i": 99})  # closed: taken no more
    assert len(stored) == 4


async def test_a_progress_store_that_fails_is_raised_when_the_call_ends():
    async def publish(events: list[TaskEvent]) -> None:
        raise Unavailable("the store is down")

    progress = TaskProgress(publish, task_id="t", trace_id="tr", step="s", agent="a", node="n")
    progress.emit("token", {"text": "x"})
    with pytest.raises(Unavailable):
        await progress.close()


async def test_the_runner_refuses_beyond_its_bound_and_while_draining_before_creating_anything():
    agency = Agency(runner=TaskRunner(max_tasks=1))
    agent = GatedAgent({"ok": True})
    await agency.register(contract("slow", "think"), agent)
    first = await agency.submit(request(), wait=False)
    with pytest.raises(ResourceExhausted):
        await agency.submit(request(task_id="task_second"), wait=False)
    with pytest.raises(NotFound):
        await agency.tasks.get("task_second")  # refused before anything was created
    assert not [r for _, r in agency.audit.records() if r.task_id == "task_second"]
    agent.release()
    assert await agency.runner.drain(10) == 0  # the running task ended within the drain time
    assert (await agency.get_task(first.task_id)).state is TaskState.COMPLETED
    with pytest.raises(Unavailable):
        await agency.submit(request(), wait=False)  # draining: no new background task
    await agency.close()


async def test_a_background_task_still_running_at_shutdown_ends_in_the_log_as_interrupted():
    agency = Agency()
    agent = GatedAgent({"ok": True})
    await agency.register(contract("slow", "think"), agent)
    accepted = await agency.submit(request(), wait=False)
    await agent.entered.wait()
    assert await agency.runner.drain(0) == 1
    await agency.close()
    last = audited(agency, accepted.task_id)[-1][1]
    assert last.event_type == "task.interrupted"
    assert last.detail["reason"] == "the gateway shut down before the task ended"


async def test_a_task_list_shows_a_client_its_own_tasks_and_an_admin_everyones():
    agency = Agency()
    await agency.register(contract("quick", "think"), lambda req: {"ok": True})
    await agency.register(
        contract("unsure", "plan"), lambda req: AgentReply(output="maybe", confidence_score=0.3)
    )
    mine = [await agency.submit(request(), client="alice") for _ in range(3)]
    waiting = await agency.submit(request("plan"), client="alice")
    theirs = await agency.submit(request(), client="bob")

    page = await agency.list_tasks({}, caller=ALICE)
    assert [t.task_id for t in page.tasks] == [waiting.task_id, *[o.task_id for o in reversed(mine)]]
    assert page.next_page_token == ""
    assert {t.client for t in page.tasks} == {"alice"}
    assert page.tasks[0].state is TaskState.INPUT_REQUIRED and page.tasks[0].text == "please plan"

    everyone = await agency.list_tasks({}, caller=ADMIN)
    assert everyone.tasks[0].task_id == theirs.task_id and len(everyone.tasks) == 5
    only_bob = await agency.list_tasks({"client": "bob"}, caller=ADMIN)
    assert [t.task_id for t in only_bob.tasks] == [theirs.task_id]
    with pytest.raises(PermissionDenied):
        await agency.list_tasks({"client": "bob"}, caller=ALICE)
    assert (await agency.list_tasks({"client": "ALICE"}, caller=ALICE)).tasks  # one's own name, any case

    waiting_only = await agency.list_tasks({"states": ["input_required"]}, caller=ALICE)
    assert [t.task_id for t in waiting_only.tasks] == [waiting.task_id]
    middle = page.tasks[2]
    since = await agency.list_tasks({"created_after": middle.created_at}, caller=ALICE)
    assert [t.task_id for t in since.tasks] == [t.task_id for t in page.tasks[:3]]
    before = await agency.list_tasks({"created_before": middle.created_at}, caller=ALICE)
    assert [t.task_id for t in before.tasks] == [page.tasks[3].task_id]
    await agency.close()


async def test_pages_of_a_task_list_cover_every_task_once():
    agency = Agency()
    await agency.register(contract("quick", "think"), lambda req: {"ok": True})
    ids = [(await agency.submit(request(), client="alice")).task_id for _ in range(7)]
    seen: list[str] = []
    token = ""
    while True:
        page = await agency.list_tasks({"page_size": 3, "page_token": token}, caller=ALICE)
        seen += [t.task_id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(ids))
    with pytest.raises(InvalidInput) as bad:
        await agency.list_tasks({"page_token": "not-a-token"}, caller=ALICE)
    assert bad.value.field == "page_token"
    with pytest.raises(InvalidInput) as bad:
        await agency.list_tasks({"page_size": 501, "states": ["sleeping"]}, caller=ALICE)
    assert {p.field for p in bad.value.problems} == {"page_size", "states[0]"}
    await agency.close()


async def test_a_running_task_is_listed_in_its_live_state():
    agency = Agency()
    agent = GatedAgent({"ok": True})
    await agency.register(contract("slow", "think"), agent)
    running = await agency.submit(request(), client="alice", wait=False)
    await agent.entered.wait()
    assert (await agency.tasks.get(running.task_id)).state is TaskState.SUBMITTED  # as stored
    row = (await agency.list_tasks({}, caller=ALICE)).tasks[0]
    assert (row.task_id, row.state, row.a2a_state) == (
        running.task_id,
        TaskState.DISPATCHED,
        "TASK_STATE_WORKING",
    )
    found = await agency.list_tasks({"states": ["dispatched"]}, caller=ALICE)
    assert [t.task_id for t in found.tasks] == [running.task_id]
    assert (await agency.list_tasks({"states": ["submitted"]}, caller=ALICE)).tasks == []
    agent.release()
    await agency.runner.drain(10)
    done = await agency.list_tasks({"states": ["completed"]}, caller=ALICE)
    assert [t.task_id for t in done.tasks] == [running.task_id]
    await agency.close()


async def test_with_the_personal_data_guard_the_stream_holds_the_guarded_records_only():
    """The stream is made of the records once the guard replaced their finds (what the audit log
    holds, not what the client sent); the final outcome is the task's, as GetTask answers it."""
    from guards.test_personal_data import PHONE, RESIDENT_ID, guarded, two_agents
    from guards.test_personal_data import request as personal_request

    agency = Agency(config=guarded())
    await two_agents(agency, {})
    outcome = await agency.submit(personal_request())
    events = [e async for e in agency.watch(outcome.task_id)]
    audited = [e for e in events if e.audit_index]
    shown = repr([e.detail for e in events])
    assert audited and RESIDENT_ID not in shown and PHONE not in shown
    records = {r.event_id: r.detail for _, r in agency.audit.records() if r.task_id == outcome.task_id}
    assert all(e.detail == records[e.id] for e in audited)
    assert events[-1].final is not None and events[-1].final.output == outcome.output
    await agency.close()


async def test_a_task_list_stays_within_the_callers_tenant():
    """Two tenants' clients of one name are two clients; a tenant's admin sees its tenant only;
    an admin without a tenant sees every tenant's tasks; following another tenant's task is refused."""
    agency = Agency()
    await agency.register(contract("quick", "think"), lambda req: {"ok": True})
    alice_t1 = Principal(name="alice", role=Role.CLIENT, tenant="t1")
    alice_t2 = Principal(name="alice", role=Role.CLIENT, tenant="t2")
    admin_t1 = Principal(name="ops", role=Role.ADMIN, tenant="t1")
    one = await agency.submit(request(), client="alice", tenant="t1")
    two = await agency.submit(request(), client="alice", tenant="t2")

    assert [t.task_id for t in (await agency.list_tasks({}, caller=alice_t1)).tasks] == [one.task_id]
    assert [t.task_id for t in (await agency.list_tasks({}, caller=alice_t2)).tasks] == [two.task_id]
    tenant_admin = await agency.list_tasks({}, caller=admin_t1)
    assert [(t.task_id, t.tenant) for t in tenant_admin.tasks] == [(one.task_id, "t1")]
    assert {t.task_id for t in (await agency.list_tasks({}, caller=ADMIN)).tasks} == {
        one.task_id,
        two.task_id,
    }
    with pytest.raises(PermissionDenied):
        await anext(agency.watch(two.task_id, caller=alice_t1))
    await agency.close()
