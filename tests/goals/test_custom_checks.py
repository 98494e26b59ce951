"""Custom checks: registered by the user, sync or async, each under its own timeout."""

from __future__ import annotations

import asyncio
import threading

import pytest

from middleware import InvalidInput, NotFound
from middleware.errors import AlreadyExists
from middleware.goals import CheckRegistry, CheckResult, GoalAssertion, Verifier, verify_goal


def goal(*steps) -> GoalAssertion:
    return GoalAssertion.parse(
        {"id": "GOAL_CHECK_001", "description": "d", "verification_steps": list(steps)}
    )


@pytest.fixture
def checks() -> CheckRegistry:
    registry = CheckRegistry(default_timeout_seconds=2)

    @registry.register("licensed")
    def licensed(output, field="sources"):
        return all(s.get("license") for s in output[field])

    @registry.register("async_licensed")
    async def async_licensed(output, field="sources"):
        await asyncio.sleep(0)
        return CheckResult(
            passed=all(s.get("license") for s in output[field]),
            actual=len(output[field]),
            reason="unlicensed source",
        )

    registry.register("why_not", lambda output: (False, "because of reasons"))
    registry.register("broken", lambda output: 1 / 0)
    registry.register("says_maybe", lambda output: "maybe")
    return registry


GOOD = {"sources": [{"name": "crm", "license": "DPA-1"}]}
BAD = {"sources": [{"name": "crm", "license": "DPA-1"}, {"name": "scrape"}]}


@pytest.mark.parametrize("name", ["licensed", "async_licensed"])
async def test_sync_and_async_checks_pass_and_fail(checks, name):
    verifier = Verifier(checks)
    g = goal({"kind": "custom", "name": name, "args": {"field": "sources"}})
    assert (await verifier.verify(g, GOOD)).passed
    verdict = await verifier.verify(g, BAD)
    assert not verdict.passed
    assert verdict.steps[0].kind == "custom" and verdict.steps[0].step == f"custom check {name}"


async def test_check_result_and_reason_pairs_are_reported(checks):
    verifier = Verifier(checks)
    v = (await verifier.verify(goal({"kind": "custom", "name": "async_licensed"}), BAD)).steps[0]
    assert v.actual == 2 and v.reason == "unlicensed source"
    v = (await verifier.verify(goal({"kind": "custom", "name": "why_not"}), GOOD)).steps[0]
    assert not v.passed and v.reason == "because of reasons"


async def test_a_raising_or_confused_check_is_a_failed_step_not_a_crash(checks):
    verifier = Verifier(checks)
    v = (await verifier.verify(goal({"kind": "custom", "name": "broken"}), GOOD)).steps[0]
    assert not v.passed and "raised ZeroDivisionError" in v.reason
    v = (await verifier.verify(goal({"kind": "custom", "name": "says_maybe"}), GOOD)).steps[0]
    assert not v.passed and "returned str" in v.reason


async def test_async_check_past_its_timeout_fails_in_time():
    registry = CheckRegistry()
    never = asyncio.Event()

    @registry.register("slow", timeout_seconds=0.05)
    async def slow(output):
        await never.wait()
        return True

    loop = asyncio.get_running_loop()
    started = loop.time()
    verdict = await Verifier(registry).verify(
        goal({"kind": "custom", "name": "slow"}, "output contains a"), "a"
    )
    assert loop.time() - started < 2
    assert not verdict.passed
    assert verdict.steps[0].reason == "check slow did not finish within 0.05 s"
    assert verdict.steps[1].passed  # other steps still ran


async def test_sync_check_timeout_and_step_override():
    registry = CheckRegistry()
    release = threading.Event()
    registry.register("blocking", lambda output: release.wait(5), timeout_seconds=30)
    try:
        verdict = await Verifier(registry).verify(
            goal({"kind": "custom", "name": "blocking", "timeout_seconds": 0.05}), {}
        )
    finally:
        release.set()  # let the worker thread finish
    assert verdict.steps[0].reason == "check blocking did not finish within 0.05 s"


async def test_custom_checks_run_concurrently():
    registry = CheckRegistry()
    started = [asyncio.Event(), asyncio.Event()]

    async def waits_for_the_other(output, me: int):
        started[me].set()
        await asyncio.wait_for(started[1 - me].wait(), 1)
        return True

    registry.register("pair", waits_for_the_other)
    verdict = await Verifier(registry).verify(
        goal(
            {"kind": "custom", "name": "pair", "args": {"me": 0}},
            {"kind": "custom", "name": "pair", "args": {"me": 1}},
        ),
        {},
    )
    assert verdict.passed, verdict


async def test_every_item_with_a_custom_check(checks):
    registry = CheckRegistry()

    async def has_license(item):
        return bool(item.get("license"))

    registry.register("has_license", has_license)
    g = goal({"kind": "every_item", "path": "$.sources", "step": {"kind": "custom", "name": "has_license"}})
    assert (await Verifier(registry).verify(g, GOOD)).passed
    v = (await Verifier(registry).verify(g, BAD)).steps[0]
    assert not v.passed and v.reason.startswith("item 1:") and v.actual == {"name": "scrape"}


async def test_unknown_check_fails_the_step_and_is_refused_at_registration():
    from middleware import Agency

    verdict = await Verifier().verify(goal({"kind": "custom", "name": "ghost"}), {})
    assert "no custom check named 'ghost'" in verdict.steps[0].reason
    agency = Agency()
    with pytest.raises(InvalidInput) as info:
        agency.register_goal(goal({"kind": "custom", "name": "ghost"}, {"kind": "custom", "name": "ghost2"}))
    assert [p.field for p in info.value.problems] == [
        "verification_steps[0].name",
        "verification_steps[1].name",
    ]
    agency.verifier.checks.register("ghost", lambda o: True)
    agency.verifier.checks.register("ghost2", lambda o: True)
    agency.register_goal(goal({"kind": "custom", "name": "ghost"}, {"kind": "custom", "name": "ghost2"}))


def test_verify_goal_without_a_loop_runs_custom_checks(checks):
    assert verify_goal(goal({"kind": "custom", "name": "async_licensed"}), GOOD, checks=checks).passed


async def test_verify_sync_inside_a_loop_explains_custom_steps(checks):
    verdict = Verifier(checks).verify_sync(
        goal({"kind": "custom", "name": "licensed"}, "output contains crm"), GOOD
    )
    assert "await Verifier.verify" in verdict.steps[0].reason
    assert verdict.steps[1].passed


def test_registry_refuses_bad_registrations():
    registry = CheckRegistry()
    registry.register("ok", lambda o: True)
    with pytest.raises(AlreadyExists):
        registry.register("ok", lambda o: False)
    registry.register("ok", lambda o: False, replace=True)
    with pytest.raises(InvalidInput):
        registry.register("bad name", lambda o: True)
    with pytest.raises(InvalidInput):
        registry.register("x", "not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        registry.register("y", lambda o: True, timeout_seconds=0)
    with pytest.raises(NotFound):
        registry.get("nope")
    assert registry.names() == ["ok"]
