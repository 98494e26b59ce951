"""Every task that began in the audit log ends in it, whatever cuts it short."""

from __future__ import annotations

import asyncio

import pytest

from middleware import Agency, AgentRequest
from middleware.audit import MemoryAuditLog
from middleware.audit.open_tasks import open_tasks

pytestmark = pytest.mark.timeout(20)


async def _hosting_a_hung_agent() -> tuple[Agency, MemoryAuditLog, asyncio.Event]:
    audit = MemoryAuditLog()
    agency = Agency(audit=audit)
    called = asyncio.Event()

    async def hangs(request: AgentRequest) -> dict[str, bool]:
        called.set()
        await asyncio.Event().wait()
        return {"never": True}

    await agency.register({"name": "hung", "can_do": ["wait"], "slo_latency_ms": 60000}, hangs)
    return agency, audit, called


def _ends(audit: MemoryAuditLog) -> list[tuple[str, str]]:
    return [
        (r.event_type, str(r.detail.get("reason", "")))
        for _, r in audit.records()
        if r.event_type in ("task.completed", "task.interrupted")
    ]


async def test_a_cancelled_call_ends_its_task_as_interrupted() -> None:
    agency, audit, called = await _hosting_a_hung_agent()
    task = asyncio.ensure_future(agency.submit({"text": "wait", "constraints": {"action": "wait"}}))
    await called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _ends(audit) == [("task.interrupted", "the call was cancelled before the task ended")]
    assert not open_tasks(r for _, r in audit.records())
    await agency.close()


async def test_closing_the_agency_ends_running_tasks_as_interrupted() -> None:
    agency, audit, called = await _hosting_a_hung_agent()
    task = asyncio.ensure_future(agency.submit({"text": "wait", "constraints": {"action": "wait"}}))
    await called.wait()
    await agency.close()  # the gateway shutting down with the task still running
    assert _ends(audit) == [("task.interrupted", "the gateway shut down before the task ended")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(_ends(audit)) == 1  # ended once
