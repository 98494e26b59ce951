"""The pipeline hands a task's records to the log as one batch per durability barrier."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from middleware import Agency, TaskState
from middleware.audit import AuditRecord, MemoryAuditLog
from middleware.audit.record import PlainRecord, plain_record, record_bytes, utc_now_text, utc_text_of
from middleware.task_journal import TaskJournal
from middleware.testing import ScriptedAgent


class CountingLog(MemoryAuditLog):
    """A memory log that remembers how records arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []
        self.singles: list[str] = []

    async def append(self, record: AuditRecord) -> int:
        self.singles.append(record.event_type)
        return await super().append(record)

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        self.batches.append([r["event_type"] if isinstance(r, dict) else r.event_type for r in records])
        return await super().append_batch(records)


async def test_one_batch_per_barrier_and_every_record_its_own_entry() -> None:
    audit = CountingLog()
    agency = Agency(audit=audit)
    await agency.register({"name": "w", "can_do": ["work"], "slo_latency_ms": 5000}, ScriptedAgent({"ok": 1}))
    goal = {"id": "GOAL_OK_001", "description": "ok", "verification_steps": ["output contains ok"]}
    singles_before = len(audit.singles)
    outcome = await agency.submit({"text": "work", "goal": goal, "constraints": {"action": "work"}})
    assert outcome.state is TaskState.COMPLETED
    assert len(audit.singles) == singles_before, "a task's records go in batches"
    # a barrier ends each batch: before the dispatch, at the outcome
    assert [b[-1] for b in audit.batches] == ["agent.dispatch", "task.completed"]
    kinds = [r.event_type for _, r in audit.records() if r.task_id == outcome.task_id]
    assert kinds == [k for b in audit.batches for k in b]  # each record its own entry, in order
    assert len(kinds) > len(audit.batches)
    assert outcome.audit_index == len(list(audit.records()))
    await agency.close()


async def test_a_journal_record_is_the_plain_record_of_its_step() -> None:
    """Built from the task's template, a record is what ``plain_record`` builds: the same keys in
    the same order, the same canonical bytes, and it validates to the same ``AuditRecord``."""
    log = CountingLog()
    journal = TaskJournal(
        log,
        node="gw-1",
        task_id="task_1",
        trace_id="t" * 32,
        goal_id="",
        user="u",
        session="s",
        observer=None,
    )
    detail = {"from": "routing", "to": "dispatched", "note": "é ✓"}
    journal.add("task.transition", "dispatched", detail, agent="w@1.0.0", rule="r")
    journal.goal_id = "GOAL_1"  # anchored mid-task
    journal.add("goal.anchored", "anchored", {})
    first, second = journal._pending
    for record, goal, agent, rule, outcome, event, det in [
        (first, "", "w@1.0.0", "r", "dispatched", "task.transition", detail),
        (second, "GOAL_1", "", "", "anchored", "goal.anchored", {}),
    ]:
        plain = plain_record(
            event,
            node="gw-1",
            outcome=outcome,
            detail=det,
            agent=agent,
            rule=rule,
            task_id="task_1",
            trace_id="t" * 32,
            goal_id=goal,
            user="u",
            session="s",
        )
        plain.update(event_id=record["event_id"], time=record["time"])
        assert list(record) == list(plain) and record == plain
        assert record_bytes(record) == record_bytes(plain) == AuditRecord.model_validate(record).canonical()
    assert first["actors"] is not second["actors"] and first["event_id"] != second["event_id"]
    assert await journal.flush() == 2 and journal._pending == []


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=2**62))
def test_the_record_time_is_pydantics_json_of_now(ns: int) -> None:
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    assert utc_text_of(ns) == at.isoformat().replace("+00:00", "Z")
    assert AuditRecord(event_type="x", node="n", time=at).model_dump(mode="json")["time"] == utc_text_of(ns)


def test_the_record_time_is_now() -> None:
    before = datetime.now(UTC)
    text = utc_now_text()
    after = datetime.now(UTC)
    assert before <= datetime.fromisoformat(text) <= after
