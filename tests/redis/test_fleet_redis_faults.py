"""The fleet under a Redis fault: 3 gateways + 2 workers under client load, then a ``SENTINEL
FAILOVER`` of the primary (servers with ``min-replicas-to-write 1``, max lag 1 s), or kill -9 of a
Cluster master (its replica promoted).

The pytest twins of ``python -m bench.bench_fleet --redis sentinel --min-replicas 1`` and
``--redis cluster`` (the same deployments and faults: tests/fleet_redis.py; the same fleet:
tests/fleet_scenario.py). What must hold, whatever the machine's speed (no timing thresholds; the
figures are the benchmark's):

* nothing acknowledged is lost: every task a client was told about is found afterwards, in the
  state it was told -- on the Sentinel set except what it loses by design even with
  ``min-replicas-to-write 1``: tasks told between the ``SENTINEL FAILOVER`` command and the
  Sentinels naming the new primary (asynchronous replication; :func:`_outside_window`);
* nothing is left running: every task reaches a stopped state (polled, bounded); the lease (2 s)
  is shorter than the Sentinel set's refusal window (~12 s, see docs/operations.md), so tasks in
  flight may be taken over and ``interrupted`` (the documented behaviour): each of them resumes
  to ``completed``;
* after the fault every gateway is SERVING and completes a task, and every client loop
  completes a task sent after the fault took effect;
* no client is told INTERNAL (a Redis fault is UNAVAILABLE / BACKEND_UNAVAILABLE, or a stale
  write refused after a takeover).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fleet_redis import Deployment, background, deployment
from fleet_scenario import RUNNING, Fleet

pytestmark = pytest.mark.timeout(300)

GATEWAYS = {"gw-1", "gw-2", "gw-3"}


@pytest.fixture
def redis_sentinel_min_replicas(tmp_path: Path) -> Iterator[Deployment]:
    """A Sentinel set of its own (1 primary, 1 replica, 3 Sentinels), ``min-replicas-to-write 1``."""
    with deployment("sentinel", tmp_path, min_replicas=1) as d:
        yield d


@pytest.fixture
def redis_cluster_deployment(tmp_path: Path) -> Iterator[Deployment]:
    """A Cluster of its own (3 masters + 1 replica each); its fault kills the busiest master."""
    with deployment("cluster", tmp_path) as d:
        yield d


@contextlib.asynccontextmanager
async def _fleet(tmp: Path, redis: Deployment) -> AsyncIterator[Fleet]:
    (tmp / "fleet").mkdir()
    fleet = Fleet(tmp / "fleet", "fleet-faults:", lease=2.0, loops=4, agent_ms=20, redis_url=redis.url)
    try:
        await fleet.start()
        yield fleet
    finally:
        await fleet.stop()
        while background:  # the demotion being timed by the Sentinel fault
            await background.pop()


@pytest.fixture
async def sentinel_fleet(tmp_path: Path, redis_sentinel_min_replicas: Deployment) -> AsyncIterator[Fleet]:
    async with _fleet(tmp_path, redis_sentinel_min_replicas) as fleet:
        yield fleet


@pytest.fixture
async def cluster_fleet(tmp_path: Path, redis_cluster_deployment: Deployment) -> AsyncIterator[Fleet]:
    async with _fleet(tmp_path, redis_cluster_deployment) as fleet:
        yield fleet


async def _fault_under_load(fleet: Fleet, redis: Deployment) -> None:
    assert redis.fault is not None
    fleet.start_load()
    await fleet.load_for(40)

    recovery = await fleet.disrupt(redis.fault_name, redis.fault, within=150)
    assert set(recovery.serving) == set(recovery.routing) == GATEWAYS  # SERVING and routing again
    assert set(recovery.loops) == set(range(fleet.loops))  # every client loop completes again
    await fleet.load_for(40, within=120)
    await fleet.stop_load()
    while background:
        await background.pop()

    audit = await fleet.audit()  # waits (bounded) until no task runs
    assert _outside_window(fleet, redis, audit.lost) == [], _lost(fleet, redis, audit.lost)
    assert audit.stuck == []
    assert not set(audit.states) & RUNNING, audit.states
    assert audit.states.get("completed", 0) > 80, audit.states
    # a lease shorter than the outage: tasks in flight may be taken over; they resume and complete
    ends = await fleet.resume(audit.interrupted)
    assert set(ends) <= {"completed"}, ends
    assert not [e for e in fleet.summary()["other_errors"] if e.startswith("INTERNAL")], fleet.summary()


def _outside_window(fleet: Fleet, redis: Deployment, lost: list[str]) -> list[str]:
    """The lost tasks, less those a Sentinel failover may lose by design: told between the
    ``SENTINEL FAILOVER`` command and the Sentinels naming the new primary. Replication is
    asynchronous and Sentinel does not pause the old primary: a write it acknowledged just before
    the replica's promotion, not yet replicated, is gone even with ``min-replicas-to-write 1``
    (seen in about 1 run of 10 here: 1 task, told ``completed`` 0.2 s after the command; see
    docs/operations.md). On a Cluster (no timeline) every lost task counts."""
    steps = redis.timeline or {}
    if "command" not in steps or "promoted" not in steps:
        return list(lost)
    told = {a.task_id: a.ended for a in fleet.attempts}
    return [t for t in lost if not steps["command"] <= told[t] <= steps["promoted"]]


def _lost(fleet: Fleet, redis: Deployment, lost: list[str]) -> str:
    """What each lost task's client was told, and when (seconds after the fault's steps)."""
    steps = dict(redis.timeline or {})
    rows = []
    for a in fleet.attempts:
        if a.task_id in lost:
            when = ", ".join(
                f"sent {a.sent - t:+.2f} s / told {a.ended - t:+.2f} s after {name}"
                for name, t in steps.items()
            )
            rows.append(f"{a.task_id}: told {a.state or a.error} ({a.reason[:120]}); {when}")
    return "lost (told one thing, stored another or nothing):\n" + "\n".join(rows)


async def test_sentinel_failover_with_min_replicas_under_load_nothing_lost_nothing_stuck(
    sentinel_fleet: Fleet, redis_sentinel_min_replicas: Deployment
) -> None:
    await _fault_under_load(sentinel_fleet, redis_sentinel_min_replicas)
    assert redis_sentinel_min_replicas.timeline and "promoted" in redis_sentinel_min_replicas.timeline


async def test_cluster_master_kill_9_under_load_nothing_lost_nothing_stuck(
    cluster_fleet: Fleet, redis_cluster_deployment: Deployment
) -> None:
    await _fault_under_load(cluster_fleet, redis_cluster_deployment)
