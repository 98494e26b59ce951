"""The vocabulary, pure handlers, operator policies, custom handlers (API and entry point)."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pytest
from middleware.handlers._common import backoff_ms

from middleware import (
    Agency,
    AgencyConfig,
    FailureEvent,
    FailurePolicy,
    FailureProcessor,
    FailureType,
    InvalidInput,
    Resolution,
    ResolutionKind,
    TaskState,
    handlers,
)
from middleware.failures import ALLOWED_RESOLUTIONS, DEFAULT_RESOLUTION, ENTRY_POINT_GROUP
from middleware.testing import Raise, ScriptedAgent

from .conftest import build, contract, task

ISSUE_VOCABULARY = {
    "TOOL_TIMEOUT",
    "TOOL_UNAVAILABLE",
    "TOOL_ERROR",
    "CONTEXT_AMBIGUITY",
    "POLICY_VIOLATION",
    "DATA_INCONSISTENCY",
    "SCHEMA_VIOLATION",
    "GOAL_UNMET",
    "GOAL_TIMEOUT",
    "CAPABILITY_MISMATCH",
    "STALE_DATA",
    "INTENT_DRIFT",
}


def event(ftype: FailureType, **kw) -> FailureEvent:
    base = {"type": ftype, "task_id": "t1", "trace_id": "tr", "step": "main", "agent": "a@1.0.0"}
    base.update(kw)
    return FailureEvent(**base)


def test_twelve_types_are_constants_with_a_default_and_allowed_resolutions():
    assert {t.value for t in FailureType} == ISSUE_VOCABULARY
    for t in FailureType:
        assert DEFAULT_RESOLUTION[t] in ALLOWED_RESOLUTIONS[t]


def test_every_handler_module_documents_trigger_default_and_alternatives():
    for t in FailureType:
        module = importlib.import_module(f"middleware.handlers.{t.value.lower()}")
        doc = module.__doc__ or ""
        assert module.TYPE is t
        assert "Trigger:" in doc and "Default resolution:" in doc and "Configurable instead" in doc
        for kind in ALLOWED_RESOLUTIONS[t] - {DEFAULT_RESOLUTION[t]}:
            assert kind.value in doc, f"{t}: {kind.value} not documented"


@pytest.mark.parametrize("ftype", list(FailureType))
def test_builtin_handlers_are_pure_and_idempotent(ftype):
    e = event(
        ftype,
        fallbacks=["b@1.0.0"],
        context={
            "options": [{"id": "x", "label": "X"}, {"id": "y", "label": "Y"}],
            "conflict": {
                "fact": "price",
                "values": [{"value": 1, "source": "s1"}, {"value": 2, "source": "s2"}],
            },
        },
    )
    before = e.model_dump()
    processor = FailureProcessor(load_entry_points=False)
    first, second = processor.process(e), processor.process(e)
    assert first == second  # same event, same resolution (jitter included)
    assert e.model_dump() == before  # the event is not touched
    assert first.failure_type is ftype
    assert first.kind in ALLOWED_RESOLUTIONS[ftype]


@pytest.mark.parametrize(
    "bad",
    [
        lambda p: p.register("TOOL_EXPLODED", lambda e, pol: None),
        lambda p: p.set_policy("NOPE", FailurePolicy()),
        lambda p: p.handler_for("tool_timeout"),
        lambda p: FailureType.of("SOMETHING"),
        lambda p: FailureEvent.parse({"type": "SOMETHING", "task_id": "t", "trace_id": "x"}),
    ],
)
def test_unknown_failure_types_are_rejected(bad):
    processor = FailureProcessor(load_entry_points=False)
    with pytest.raises(InvalidInput) as info:
        bad(processor)
    assert "unknown failure type" in str(info.value) or "Input should be" in str(info.value)
    assert info.value.field in ("type", "policies")


def test_register_refuses_a_non_callable_handler():
    with pytest.raises(InvalidInput) as info:
        FailureProcessor(load_entry_points=False).register(FailureType.TOOL_ERROR, "not a function")  # type: ignore[arg-type]
    assert info.value.field == "handler"


def test_a_forced_resolution_must_be_allowed_for_its_type():
    with pytest.raises(InvalidInput) as info:
        FailureProcessor(
            load_entry_points=False,
            policies={FailureType.POLICY_VIOLATION: FailurePolicy(resolution=ResolutionKind.RETRY)},
        )
    assert info.value.field == "policies.POLICY_VIOLATION.resolution"
    assert "allowed: abort, escalate_to_human, quarantine" in str(info.value)
    with pytest.raises(InvalidInput) as info:
        AgencyConfig.parse({"failure_policies": {"GOAL_TIMEOUT": {"resolution": "retry"}}})
    assert "GOAL_TIMEOUT" in str(info.value)
    with pytest.raises(InvalidInput):  # a forced resolution is per type, never global
        FailureProcessor(load_entry_points=False, policy=FailurePolicy(resolution=ResolutionKind.ABORT))


def test_operator_configured_resolution_is_applied():
    processor = FailureProcessor(
        load_entry_points=False,
        policies={
            FailureType.TOOL_TIMEOUT: FailurePolicy(resolution=ResolutionKind.ESCALATE_TO_HUMAN),
            FailureType.TOOL_UNAVAILABLE: FailurePolicy(backup_agent="standby@1.0.0"),
        },
    )
    assert processor.process(event(FailureType.TOOL_TIMEOUT)).kind is ResolutionKind.ESCALATE_TO_HUMAN
    fallbacks = ["router_pick@1.0.0", "standby@1.0.0"]
    backup = processor.process(event(FailureType.TOOL_UNAVAILABLE, fallbacks=fallbacks))
    assert backup.kind is ResolutionKind.USE_BACKUP and backup.agent == "standby@1.0.0"
    # the configured backup is a preference among agents the contracts allow, never around them
    backup = processor.process(event(FailureType.TOOL_UNAVAILABLE, fallbacks=["router_pick@1.0.0"]))
    assert backup.agent == "router_pick@1.0.0"


def test_retry_cap_and_exponential_backoff_with_bounded_jitter():
    policy = FailurePolicy(max_retries=3, backoff_base_ms=100, backoff_max_ms=350, jitter=0.2)
    processor = FailureProcessor(load_entry_points=False, policies={FailureType.TOOL_ERROR: policy})
    delays = []
    for attempt in (1, 2, 3):
        r = processor.process(event(FailureType.TOOL_ERROR, attempt=attempt, fallbacks=["b@1.0.0"]))
        assert r.kind is ResolutionKind.RETRY
        delays.append(r.delay_ms)
    assert 80 <= delays[0] <= 120 and 160 <= delays[1] <= 240 and 280 <= delays[2] <= 420  # capped at 350
    done = processor.process(event(FailureType.TOOL_ERROR, attempt=4, fallbacks=["b@1.0.0"]))
    assert done.kind is ResolutionKind.USE_BACKUP
    # jitter spreads different events but is stable per event
    spread = {round(backoff_ms(event(FailureType.TOOL_ERROR), policy), 6) for _ in range(20)}
    assert len(spread) > 1


async def test_retry_backoff_is_awaited_through_the_injected_sleeper_only():
    flaky = ScriptedAgent(Raise(ValueError("x")), Raise(ValueError("x")), {"ok": True})
    agency, sleep, _ = await build([(contract("flaky", slo_ms=50), flaky)])
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED
    assert len(sleep.delays) == 2 and sleep.delays[1] > sleep.delays[0]
    assert [r.delay_ms / 1000 for r in out.resolutions] == pytest.approx(sleep.delays)


async def test_custom_handler_through_the_api_overrides_the_builtin():
    calls = []

    def always_abort(e: FailureEvent, policy: FailurePolicy) -> Resolution:
        calls.append(e.type)
        return Resolution(kind=ResolutionKind.ABORT, failure_type=e.type, reason="house rule: no retries")

    processor = FailureProcessor(load_entry_points=False)
    processor.register(FailureType.TOOL_ERROR, always_abort)
    agency, sleep, _ = await build(
        [(contract("buggy"), ScriptedAgent(Raise(ValueError("x"))))], failures=processor
    )
    out = await agency.submit(task())
    assert out.state is TaskState.FAILED and out.reason == "house rule: no retries"
    assert calls == [FailureType.TOOL_ERROR] and sleep.delays == []


def test_a_handler_returning_something_else_is_a_bug():
    processor = FailureProcessor(load_entry_points=False, handlers={"TOOL_ERROR": lambda e, p: "retry"})
    with pytest.raises(TypeError):
        processor.process(event(FailureType.TOOL_ERROR))


def _install_plugin(tmp: Path, name: str, entry_points: dict[str, str], module_src: str) -> None:
    """A tiny installed distribution (a dist-info directory) declaring entry points."""
    (tmp / f"{name}.py").write_text(textwrap.dedent(module_src))
    dist = tmp / f"{name}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}\n")


@pytest.fixture
def plugin_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("acme_")]:
        del sys.modules[mod]


async def test_custom_handler_shipped_by_a_package_through_the_entry_point_group(plugin_path):
    _install_plugin(
        plugin_path,
        "acme_handlers",
        {"TOOL_ERROR": "acme_handlers:escalate_errors"},
        """
        from middleware.failures import Resolution, ResolutionKind

        def escalate_errors(event, policy):
            return Resolution(kind=ResolutionKind.ESCALATE_TO_HUMAN, failure_type=event.type,
                              reason="acme: errors go to a person")
        """,
    )
    assert "TOOL_ERROR" in {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    processor = FailureProcessor(load_entry_points=True)
    assert set(processor.plugins) == {FailureType.TOOL_ERROR}
    agency, _, _ = await build(
        [(contract("buggy"), ScriptedAgent(Raise(ValueError("x"))))], failures=processor
    )
    out = await agency.submit(task())
    assert out.state is TaskState.INPUT_REQUIRED
    assert out.reason == "acme: errors go to a person"
    # explicit registration still wins over the plugin
    processor.register(FailureType.TOOL_ERROR, handlers.builtin_handlers()[FailureType.TOOL_ERROR])
    assert (
        processor.handler_for(FailureType.TOOL_ERROR) is handlers.builtin_handlers()[FailureType.TOOL_ERROR]
    )


def test_an_entry_point_for_an_unknown_type_is_rejected(plugin_path):
    _install_plugin(
        plugin_path, "acme_bad", {"TOOL_EXPLODED": "acme_bad:handler"}, "def handler(e, p): pass\n"
    )
    with pytest.raises(InvalidInput) as info:
        FailureProcessor(load_entry_points=True)
    assert "unknown failure type" in str(info.value) and "TOOL_EXPLODED" in str(info.value)


def test_entry_points_are_loaded_only_when_asked(plugin_path):
    # A broken plugin installed: only asking for discovery loads (and refuses) it.
    _install_plugin(
        plugin_path, "acme_broken", {"TOOL_ERROR": "acme_broken:handler"}, "raise ImportError('x')\n"
    )
    looked: list[str] = []

    def entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
        looked.append(group)
        return list(importlib.metadata.entry_points(group=group))

    processor = FailureProcessor(entry_points=entry_points)
    assert looked == [] and processor.plugins == {}
    assert (
        processor.handler_for(FailureType.TOOL_ERROR) is handlers.builtin_handlers()[FailureType.TOOL_ERROR]
    )
    assert Agency().failures.plugins == {}
    assert "acme_broken" not in sys.modules
    with pytest.raises(ImportError):
        FailureProcessor(load_entry_points=True, entry_points=entry_points)
    assert looked == [ENTRY_POINT_GROUP]


async def test_the_served_gateway_asks_for_entry_point_handlers(plugin_path, tmp_path):
    from middleware.server.bootstrap import build_agency
    from middleware.server.definition import AgencyDefinition

    _install_plugin(
        plugin_path,
        "acme_served",
        {"TOOL_ERROR": "acme_served:handler"},
        "def handler(event, policy):\n    raise AssertionError('not called here')\n",
    )
    agency = await build_agency(
        AgencyDefinition.model_validate({"audit": {"directory": str(tmp_path / "audit")}})
    )
    try:
        assert set(agency.failures.plugins) == {FailureType.TOOL_ERROR}
    finally:
        await agency.close()


def test_the_operator_policy_overrides_a_custom_handler():
    # The processor applies the forced resolution itself: a custom handler decides only the default.
    calls: list[FailureType] = []

    def always_retry(ev: FailureEvent, policy: FailurePolicy) -> Resolution:
        calls.append(ev.type)
        return Resolution(kind=ResolutionKind.RETRY, failure_type=ev.type, reason="custom: retry")

    processor = FailureProcessor(
        handlers={FailureType.TOOL_ERROR: always_retry, FailureType.TOOL_TIMEOUT: always_retry},
        policies={FailureType.TOOL_ERROR: FailurePolicy(resolution=ResolutionKind.ABORT)},
    )
    forced = processor.process(event(FailureType.TOOL_ERROR))
    assert forced.kind is ResolutionKind.ABORT and calls == []
    default = processor.process(event(FailureType.TOOL_TIMEOUT))
    assert default.reason == "custom: retry" and calls == [FailureType.TOOL_TIMEOUT]


async def test_an_agent_reports_a_typed_failure_of_its_own_tool():
    from middleware import AgentFailure

    warranty = ScriptedAgent(
        Raise(
            AgentFailure(
                "TOOL_TIMEOUT", "replacement_shipper timed out", context={"tool": "replacement_shipper"}
            )
        ),
        {"ok": True},
    )
    agency, sleep, _ = await build([(contract("warranty", slo_ms=50), warranty)])
    out = await agency.submit(task())
    assert out.state is TaskState.COMPLETED
    assert [f.type for f in out.failures] == [FailureType.TOOL_TIMEOUT]
    assert out.failures[0].context == {"tool": "replacement_shipper"}
    assert "replacement_shipper timed out" in out.failures[0].detail
    assert [r.kind for r in out.resolutions] == [ResolutionKind.RETRY] and len(sleep.delays) == 1


def test_raising_a_failure_of_an_unknown_type_is_an_error():
    from middleware import AgentFailure

    with pytest.raises(InvalidInput) as info:
        AgentFailure("TOOL_MELTED", "boom")
    assert info.value.field == "type" and "unknown failure type 'TOOL_MELTED'" in str(info.value)


async def test_a_handler_cannot_switch_to_an_agent_the_contracts_do_not_allow():
    def rogue(e: FailureEvent, policy: FailurePolicy) -> Resolution:
        return Resolution(
            kind=ResolutionKind.USE_BACKUP, failure_type=e.type, agent="outsider@1.0.0", reason="rogue"
        )

    outsider = ScriptedAgent({"ok": True})
    processor = FailureProcessor(load_entry_points=False, handlers={FailureType.TOOL_ERROR: rogue})
    agency, _, _ = await build(
        [
            (contract("buggy"), ScriptedAgent(Raise(ValueError("x")))),
            (contract("outsider", "other"), outsider),
        ],
        failures=processor,
    )
    out = await agency.submit(task())
    assert out.state is TaskState.INPUT_REQUIRED and out.pending["kind"] == "human_handover"
    assert outsider.calls == 0
