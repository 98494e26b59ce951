"""Rebuilding held and interrupted tasks from the audit log's task records."""

from __future__ import annotations

from typing import Any

from middleware.memory_task_store import MemoryTaskStore
from middleware.task_recovery import rebuild_tasks
from middleware.tasks import TaskRecord, TaskRequest, TaskState


def _held(task_id: str) -> dict[str, Any]:
    run = TaskRecord.start(TaskRequest(task_id=task_id, text="refund"), None, "trace-1")
    run.state, run.pending = TaskState.INPUT_REQUIRED, {"kind": "approval", "gate": "g"}
    return run.model_dump(mode="json")


def _rec(event: str, task_id: str, **detail: Any) -> dict[str, Any]:
    return {"event_type": event, "task_id": task_id, "detail": detail}


async def test_waiting_tasks_come_back_waiting_interrupted_ones_failed_known_ones_untouched() -> None:
    store = MemoryTaskStore()
    known = TaskRecord.start(TaskRequest(task_id="t3", text="x"), None, "trace-3")
    await store.create(known)
    records = [
        _rec("task.submitted", "t1"),
        _rec("task.completed", "t1", task=_held("t1")),
        _rec("task.submitted", "t2"),
        _rec("task.completed", "t2", task=_held("t2")),
        _rec("task.resumed", "t2"),
        _rec("task.interrupted", "t2", reason="killed"),
        _rec("task.completed", "t3", task=_held("t3")),
        _rec("task.submitted", "t4"),  # never waited: nothing to rebuild from
        _rec("task.completed", "t5", task={"not": "a task"}),
        _rec("task.completed", "t6", task=_held("t6")),
        _rec("task.cancelled", "t6", reason="the customer withdrew"),  # a kind this release does not know
    ]
    done = await rebuild_tasks(records, store)
    assert (done.waiting, done.interrupted, done.unreadable) == (["t1"], ["t2", "t6"], ["t5"])
    t6 = await store.get("t6")
    assert t6.state is TaskState.CANCELED and t6.reason == "the customer withdrew"
    assert (await store.get("t1")).state is TaskState.INPUT_REQUIRED
    t2 = await store.get("t2")
    assert t2.state is TaskState.FAILED and t2.reason == "interrupted: killed" and not t2.pending
    assert (await store.get("t3")).state is TaskState.SUBMITTED


async def test_sealed_personal_data_is_opened_and_an_erased_subject_is_never_resumed() -> None:
    from middleware.audit.shredding import MemoryKeyStore, SubjectSealer, key_id, reveal

    keys = MemoryKeyStore()
    sealer = SubjectSealer(keys)
    held = []
    for task_id, subject in (("t1", "alice"), ("t2", "bob"), ("t3", "carol")):
        snap = _held(task_id)
        snap["request"]["text"] = sealer.seal(subject, "email", f"{subject}@example.com")
        held.append(_rec("task.completed", task_id, task=snap))
    held[2]["detail"]["task"]["request"]["text"] = "[redacted:email]"  # sealing was off: only redacted
    keys.erase(key_id("bob"))

    store = MemoryTaskStore()
    done = await rebuild_tasks(held, store, reveal=lambda text: reveal(text, keys, allowed=True))
    assert done.waiting == ["t1"] and done.interrupted == ["t2", "t3"]
    assert (await store.get("t1")).request.text == "alice@example.com"
    for task_id in ("t2", "t3"):
        lost = await store.get(task_id)
        assert lost.state is TaskState.FAILED and "not in the audit log in clear" in lost.reason
