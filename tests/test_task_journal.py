"""The pipeline hands a task's records to the log as one batch per durability barrier."""

from __future__ import annotations

from collections.abc import Sequence

from middleware import Agency, TaskState
from middleware.audit import AuditRecord, MemoryAuditLog
from middleware.audit.record import PlainRecord
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
