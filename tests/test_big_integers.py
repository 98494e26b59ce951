"""A client's JSON may hold an integer beyond 64 bits (JSON sets no limit; Python keeps it
exactly). orjson refuses to write one, and a task's event stream is written with orjson: such a
Submit ended INTERNAL ("Integer exceeds 64-bit range", found by tests/fuzz/test_fuzz_every_rpc.py
with ``constraints_json: {"": -9223372036854775809}``). The events now fall back to the json
module, exactly, in memory and on Redis, as the audit records already did
(``fast_canonical_json``)."""

from __future__ import annotations

from typing import Any

import pytest

from middleware import Agency, CapabilityContract, TaskState
from middleware.memory_catalog import MemoryCatalog
from middleware.redis.task_events import RedisTaskEventLog
from middleware.router import Router
from middleware.routing_stats import MemoryRoutingStats
from middleware.task_events import OUTCOME, TaskEvent
from middleware.tasks import Outcome

BIG = -9223372036854775809  # one below int64's least
HUGE = 2**100


def test_an_event_with_integers_beyond_64_bits_round_trips_exactly() -> None:
    outcome = Outcome(task_id="t1", trace_id="0" * 32, state=TaskState.COMPLETED, output={"n": HUGE})
    event = TaskEvent(
        id="evt_1",
        time="2026-02-28T23:59:59Z",
        task_id="t1",
        seq=1,
        type=OUTCOME,
        state="completed",
        detail={"": BIG, "deep": [HUGE]},
        final=outcome,
    )
    back = TaskEvent.from_json(event.to_json())
    assert back.detail == {"": BIG, "deep": [HUGE]}
    assert back.final is not None and back.final.output == {"n": HUGE}


async def _echo(request: Any) -> Any:
    return request.input


@pytest.mark.parametrize("where", ["constraints", "input"])
async def test_a_submit_holding_a_huge_integer_completes_in_memory(where: str) -> None:
    agency = Agency()
    await agency.register(CapabilityContract(name="echo", can_do=["echo"], slo_latency_ms=5000), _echo)
    request: dict[str, Any] = {"text": "echo it", "constraints": {"action": "echo"}, "input": {"n": 1}}
    if where == "constraints":
        request["constraints"] = {"action": "echo", "": BIG}
    else:
        request["input"] = {"n": HUGE}
    outcome = await agency.submit(request)
    assert outcome.state in (TaskState.COMPLETED, TaskState.FAILED, TaskState.REJECTED), outcome
    if where == "input":
        assert outcome.state is TaskState.COMPLETED and outcome.output == {"n": HUGE}
    await agency.close()


async def test_a_submit_holding_a_huge_integer_completes_with_events_on_redis(
    redis_client: Any, redis_prefix: str
) -> None:
    catalog = MemoryCatalog()
    events = RedisTaskEventLog(redis_client, prefix=redis_prefix)
    agency = Agency(catalog=catalog, router=Router(catalog, stats=MemoryRoutingStats()), events=events)
    await agency.register(CapabilityContract(name="echo", can_do=["echo"], slo_latency_ms=5000), _echo)
    outcome = await agency.submit(
        {"text": "echo it", "constraints": {"action": "echo"}, "input": {"n": HUGE}}
    )
    assert outcome.state is TaskState.COMPLETED and outcome.output == {"n": HUGE}
    last = await events.last(outcome.task_id)  # read back from Redis: the outcome, exactly
    assert last is not None and last.final is not None and last.final.output == {"n": HUGE}
    await agency.close()
