"""The task engine passes named results and keyword arguments: ``Dispatcher.attempt`` answers an
:class:`AttemptResult`, ``TaskRecord.failure_event`` takes its fields by keyword."""

from __future__ import annotations

from typing import Any

import pytest

from middleware.demo import warranty_request
from middleware.dispatcher import AttemptResult, Dispatcher
from middleware.failures import FailureType
from middleware.smf import Provenance
from middleware.tasks import TaskRecord


async def test_each_successful_attempt_answers_a_named_result(demo_agency, monkeypatch) -> None:
    results: list[Any] = []
    attempt = Dispatcher.attempt

    async def recording(self: Dispatcher, *args: Any) -> Any:
        result = await attempt(self, *args)
        results.append(result)
        return result

    monkeypatch.setattr(Dispatcher, "attempt", recording)
    outcome = await demo_agency.submit(warranty_request())
    assert results
    assert all(isinstance(r, AttemptResult) for r in results)
    assert all(isinstance(r.provenance, Provenance) for r in results)
    assert results[-1].output == outcome.output


async def test_a_failure_event_takes_its_fields_by_keyword_only(demo_agency) -> None:
    outcome = await demo_agency.submit(warranty_request())
    run = await demo_agency.tasks.get(outcome.task_id)
    assert isinstance(run, TaskRecord)
    event = run.failure_event(FailureType.TOOL_TIMEOUT, step="s", agent="a", attempt=2, detail="late")
    assert (event.step, event.agent, event.attempt, event.fallbacks, event.detail, event.context) == (
        "s",
        "a",
        2,
        [],
        "late",
        {},
    )
    assert event.task_id == run.task_id
    with pytest.raises(TypeError):
        run.failure_event(FailureType.TOOL_TIMEOUT, "s", "a", 2, [], "late")  # type: ignore[misc]
