"""Helpers for the failure-semantics tests: contracts, scripted agents, an Agency that never sleeps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from middleware import Agency, AgencyConfig, CapabilityContract, TaskRequest
from middleware.executor import MemoryAlertSink


class FakeSleep:
    """Records every backoff the executor asks for, and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class Clock:
    """A settable monotonic clock."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def contract(name: str, action: str = "lookup", *, slo_ms: int = 200, **extra: Any) -> CapabilityContract:
    return CapabilityContract(name=name, can_do=[action], slo_latency_ms=slo_ms, **extra)


def task(text: str = "please look this up", *, action: str = "lookup", **extra: Any) -> TaskRequest:
    return TaskRequest(text=text, constraints={"action": action}, **extra)


def audit_types(agency: Agency, task_id: str | None = None) -> list[str]:
    return [r.event_type for _, r in agency.audit.records() if task_id is None or r.task_id == task_id]


def audit_records(agency: Agency, event_type: str, task_id: str | None = None) -> list[Any]:
    return [
        r
        for _, r in agency.audit.records()
        if r.event_type == event_type and (task_id is None or r.task_id == task_id)
    ]


async def build(
    agents: Iterable[tuple[CapabilityContract, Any]],
    *,
    config: AgencyConfig | None = None,
    **kwargs: Any,
) -> tuple[Agency, FakeSleep, MemoryAlertSink]:
    sleep, alerts = FakeSleep(), MemoryAlertSink()
    kwargs.setdefault("sleep", sleep)
    kwargs.setdefault("alerts", alerts)
    agency = Agency(config=config, **kwargs)
    for c, agent in agents:
        await agency.register(c, agent)
    return agency, sleep, alerts


@pytest.fixture
def clock() -> Clock:
    return Clock()
