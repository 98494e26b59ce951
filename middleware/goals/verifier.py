"""The verification engine: runs a goal's steps on an output and returns verdicts as data.

Steps are compiled once (regexes, JSON paths, schemas, normalised needles) and the
compiled form is kept on the step. Built-in steps run inline; custom checks run
concurrently, each under its own timeout. Verification never raises for a bad
output: every problem is a failed step with expected, actual and the reason.

:class:`StagedVerifier` follows one task: :meth:`StagedVerifier.after_step` verifies
the stage bound to a step as soon as that step returns, :meth:`StagedVerifier.final`
verifies the goal's own steps on the final output.
"""

from __future__ import annotations

import asyncio
import json
import math
import operator
import time
import unicodedata
from collections.abc import Callable, Coroutine, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

from .._model import trusted as _trusted
from ..errors import InvalidInput, Problem
from ..jsonpath import JsonPath
from ..safe_regex import compile_linear
from ..schemas import compile_schema
from .checks import CheckRegistry, CheckResult
from .dates import within_reason
from .model import GoalAssertion, GoalStage, GoalVerdict, StepVerdict
from .stage_bindings import check_stage_bindings
from .steps import (
    WITHIN_OPS,
    AllOfStep,
    ContainsStep,
    CustomStep,
    EveryItemStep,
    JsonPathStep,
    JsonSchemaStep,
    LengthStep,
    ManualStep,
    NotContainsStep,
    RegexStep,
    _CompiledSlot,
    step_label,
)

__all__ = ["StagedVerifier", "Verifier", "text_of", "verify_goal"]

_MAX_SHOWN = 200  # characters of an actual value kept in a verdict
_MAX_PLANS = 4096  # compiled step lists a verifier keeps


def _utcnow() -> datetime:
    return datetime.now(UTC)


# The verifying Verifier's clock: compiled checks are shared by every verifier (they are
# kept on the steps), so date checks read "now" from the verification under way.
_CLOCK: ContextVar[Callable[[], datetime]] = ContextVar("verifier_clock", default=_utcnow)


def text_of(output: Any) -> str:
    """The text contains/regex steps look at.

    A string is itself; any other value is its compact JSON (``{"a":1,"b":[true]}``: no
    spaces, keys in the output's order, non-ASCII characters as they are), so a step can
    look for field names as well as values.
    """
    if isinstance(output, str):
        return output
    try:
        return orjson.dumps(output, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, ValueError):  # e.g. integers beyond 64 bits: the standard encoder
        try:
            return json.dumps(output, ensure_ascii=False, default=str, separators=(",", ":"))
        except (TypeError, ValueError, RecursionError):
            return str(output)


def _norm(text: str, case_sensitive: bool) -> str:
    text = unicodedata.normalize("NFKC", text)
    return text if case_sensitive else text.casefold()


def _shown(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_SHOWN:
        return value[:_MAX_SHOWN] + "…"
    if isinstance(value, (dict, list)):
        text = text_of(value)
        return value if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"
    return value


class _Subject:
    """The output under check, with its text forms computed at most once."""

    __slots__ = ("_folded", "_nfkc", "_text", "value")

    def __init__(self, value: Any) -> None:
        self.value = value
        self._text: str | None = None
        self._nfkc: str | None = None
        self._folded: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = text_of(self.value)
        return self._text

    def normalised(self, case_sensitive: bool) -> str:
        if case_sensitive:
            if self._nfkc is None:
                self._nfkc = unicodedata.normalize("NFKC", self.text)
            return self._nfkc
        if self._folded is None:
            self._folded = _norm(self.text, False)
        return self._folded


def _verdict(step: str, kind: str, ok: bool, expected: Any, actual: Any, reason: str) -> StepVerdict:
    return _trusted(
        StepVerdict,
        {
            "step": step,
            "kind": kind,
            "passed": ok,
            "status": "passed" if ok else "failed",
            "expected": expected,
            "actual": actual,
            "reason": "" if ok else reason,
        },
    )


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


SyncCheck = Callable[[_Subject], StepVerdict]


class _Compiled:
    """A compiled step: ``run`` for built-in steps, ``arun`` when a custom check is inside."""

    __slots__ = ("is_async", "label", "run", "step")

    def __init__(self, step: Any, run: SyncCheck | None, is_async: bool) -> None:
        self.step = step
        self.label = step_label(step)
        self.run = run
        self.is_async = is_async


class _Plan:
    """The compiled steps of one step list, and whether any must be awaited."""

    __slots__ = ("compiled", "has_async", "runs", "source", "steps")

    def __init__(self, steps: Sequence[Any]) -> None:
        self.source = steps
        self.steps = tuple(steps)
        self.compiled = [_compile(s) for s in steps]
        self.has_async = any(c.is_async for c in self.compiled)
        self.runs: list[SyncCheck] = [c.run for c in self.compiled if c.run is not None]


def _scope(path: JsonPath | None, subject: _Subject) -> tuple[_Subject | None, str]:
    if path is None:
        return subject, ""
    found = path.find(subject.value)
    if not found:
        return None, f"{path.text} not found"
    return _Subject(found[0] if len(found) == 1 else found), ""


def _compile(step: Any) -> _Compiled:
    """The compiled form of ``step``, built once and kept on the step."""
    private = step.__pydantic_private__
    slot = private["_compiled"]
    hit = slot.value
    if hit is not None and hit.step is step:
        return hit  # type: ignore[no-any-return]
    if hit is not None:  # a copy of another step shares its slot: give this one its own
        slot = private["_compiled"] = _CompiledSlot()
    compiled = slot.value = _build(step)
    return compiled


def _build(step: Any) -> _Compiled:
    label = step_label(step)
    kind = step.kind
    scope = JsonPath.compile(step.path) if getattr(step, "path", None) and kind != "json_path" else None

    if isinstance(step, (ContainsStep, NotContainsStep)):
        needle = _norm(step.value, step.case_sensitive)
        want = isinstance(step, ContainsStep)
        expected = ("contains " if want else "does not contain ") + repr(step.value)
        cs = step.case_sensitive

        def contains(subject: _Subject) -> StepVerdict:
            target, missing = (subject, "") if scope is None else _scope(scope, subject)
            if target is None:
                return _verdict(label, kind, False, expected, None, missing)
            found = needle in target.normalised(cs)
            ok = found == want
            return _verdict(
                label,
                kind,
                ok,
                expected,
                "found" if found else "not found",
                f"{step.value!r} {'not found' if want else 'found'} in output",
            )

        return _Compiled(step, contains, False)

    if isinstance(step, RegexStep):
        rx = compile_linear(step.effective_pattern, field="pattern", ignore_case=step.ignore_case)
        expected = f"/{step.pattern}/" + (" (literal)" if step.literal else "")

        def regex(subject: _Subject) -> StepVerdict:
            target, missing = (subject, "") if scope is None else _scope(scope, subject)
            if target is None:
                return _verdict(label, kind, False, expected, None, missing)
            m = rx.search(target.text)
            return _verdict(
                label, kind, m is not None, expected, _shown(m.group(0)) if m else None, "no match in output"
            )

        return _Compiled(step, regex, False)

    if isinstance(step, JsonPathStep):
        return _Compiled(step, _json_path_check(step, label), False)

    if isinstance(step, JsonSchemaStep):
        schema = compile_schema(step.schema_)

        def schema_check(subject: _Subject) -> StepVerdict:
            target, missing = (subject, "") if scope is None else _scope(scope, subject)
            if target is None:
                return _verdict(label, kind, False, "matches JSON Schema", None, missing)
            if schema.is_valid(target.value):
                return _verdict(label, kind, True, "matches JSON Schema", "valid", "")
            problems = schema.problems(target.value)
            listed = "; ".join(str(p) for p in problems[:5]) or "does not match"
            return _verdict(label, kind, False, "matches JSON Schema", "invalid", listed)

        return _Compiled(step, schema_check, False)

    if isinstance(step, LengthStep):
        lo, hi = step.min, step.max
        expected = f"length {lo if lo is not None else 0}..{hi if hi is not None else '∞'}"

        def length(subject: _Subject) -> StepVerdict:
            target, missing = (subject, "") if scope is None else _scope(scope, subject)
            if target is None:
                return _verdict(label, kind, False, expected, None, missing)
            value = target.value
            if not isinstance(value, (str, list, dict)):
                return _verdict(
                    label, kind, False, expected, _shown(value), f"{type(value).__name__} has no length"
                )
            n = len(value)
            ok = (lo is None or n >= lo) and (hi is None or n <= hi)
            why = f"length {n} is {'below' if lo is not None and n < lo else 'above'} the bound"
            return _verdict(label, kind, ok, expected, n, why)

        return _Compiled(step, length, False)

    if isinstance(step, EveryItemStep):
        inner = _compile(step.step)
        path = JsonPath.compile(step.path)
        if inner.is_async:
            return _Compiled(step, None, True)

        def every(subject: _Subject) -> StepVerdict:
            items, why = _items(path, step, subject)
            if items is None:
                return _verdict(label, kind, False, f"every item: {inner.label}", None, why)
            assert inner.run is not None
            for i, item in enumerate(items):
                v = inner.run(_Subject(item))
                if not v.passed:
                    return _verdict(
                        label,
                        kind,
                        False,
                        f"every item: {inner.label}",
                        _shown(item),
                        f"item {i}: {v.reason}",
                    )
            return _verdict(label, kind, True, f"every item: {inner.label}", f"{len(items)} items", "")

        return _Compiled(step, every, False)

    if isinstance(step, ManualStep):

        def manual(subject: _Subject) -> StepVerdict:
            return _trusted(
                StepVerdict,
                {
                    "step": label,
                    "kind": kind,
                    "passed": False,
                    "status": "manual",
                    "expected": step.description,
                    "actual": None,
                    "reason": "awaits confirmation by a person",
                },
            )

        return _Compiled(step, manual, False)

    if isinstance(step, CustomStep):
        return _Compiled(step, None, True)

    if isinstance(step, AllOfStep):
        parts = [_compile(s) for s in step.steps]

        def all_of(subject: _Subject) -> StepVerdict:
            for part in parts:
                assert part.run is not None  # built-in checks only (the model refuses others)
                v = part.run(subject)
                if not v.passed:
                    return _verdict(label, kind, False, part.label, v.actual, f"{part.label}: {v.reason}")
            return _verdict(label, kind, True, label, None, "")

        return _Compiled(step, all_of, False)
    raise TypeError(f"unknown step type {type(step).__name__}")  # pragma: no cover - union is closed


def _items(path: JsonPath, step: EveryItemStep, subject: _Subject) -> tuple[list[Any] | None, str]:
    found = path.find(subject.value)
    if not found:
        return None, f"{step.path} not found"
    items = found[0] if len(found) == 1 and isinstance(found[0], list) else None
    if items is None:
        if len(found) > 1:
            items = found  # a wildcard path: the values it reaches are the items
        else:
            return None, f"{step.path} is {type(found[0]).__name__}, not a list"
    if not items and not step.allow_empty:
        return None, f"{step.path} is empty"
    return items, ""


def _json_path_check(step: JsonPathStep, label: str) -> SyncCheck:
    path = JsonPath.compile(step.path)
    op, arg, kind = step.op, step.value, step.kind
    expected: Any = {
        "exists": f"{step.path} exists",
        "not_exists": f"{step.path} absent",
    }.get(op, arg if op == "equals" else {op: arg})

    def holds(actual: Any) -> str:
        """Why ``actual`` fails the op ('' when it holds)."""
        if op == "exists":
            return ""
        if op == "equals":
            return "" if _json_equal(actual, arg) else f"is {_shown(actual)!r}, expected {arg!r}"
        if op == "one_of":
            return (
                ""
                if any(_json_equal(actual, a) for a in arg)
                else f"is {_shown(actual)!r}, not one of {arg!r}"
            )
        if op in WITHIN_OPS:
            return within_reason(
                actual, int(arg), WITHIN_OPS[op], now=_CLOCK.get()(), zone_name=step.timezone
            )
        if not _is_number(actual):
            return f"is {_shown(actual)!r}, not a number"
        if op == "gt":
            ok = actual > arg
        elif op == "ge":
            ok = actual >= arg
        elif op == "lt":
            ok = actual < arg
        elif op == "le":
            ok = actual <= arg
        else:
            ok = arg[0] <= actual <= arg[1]
        words = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "between": "between"}[op]
        return "" if ok else f"is {actual!r}, expected {words} {arg!r}"

    def check(subject: _Subject) -> StepVerdict:
        found = path.find(subject.value)
        if op == "not_exists":
            return _verdict(
                label,
                kind,
                not found,
                expected,
                _shown(found[0]) if found else None,
                f"{step.path} is present",
            )
        if not found:
            return _verdict(label, kind, False, expected, None, f"{step.path} not found")
        for actual in found:
            why = holds(actual)
            if why:
                return _verdict(label, kind, False, expected, _shown(actual), f"{step.path} {why}")
        shown = found[0] if len(found) == 1 else found
        return _verdict(label, kind, True, expected, _shown(shown), "")

    return check


class Verifier:
    """Verifies goals and stages; owns the custom check registry.

    Args:
        checks: Custom checks goals may name (default: an empty registry).
        clock: The current time, for date checks such as "bought within 12 months"
            (injected in tests; the :class:`~middleware.pipeline.Agency` passes its own).
    """

    def __init__(
        self, checks: CheckRegistry | None = None, *, clock: Callable[[], datetime] = _utcnow
    ) -> None:
        self.checks = checks if checks is not None else CheckRegistry()
        self.clock = clock
        # Compiled plans by id of the step list (checked against the list and its steps).
        self._plans: dict[int, _Plan] = {}

    def _plan(self, steps: Sequence[Any]) -> _Plan:
        plan = self._plans.get(id(steps))
        if (
            plan is not None
            and plan.source is steps
            and len(plan.steps) == len(steps)
            and all(map(operator.is_, plan.steps, steps))
        ):
            return plan
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        plan = self._plans[id(steps)] = _Plan(steps)
        return plan

    def unknown_checks(self, goal: GoalAssertion) -> list[Problem]:
        """Custom steps of ``goal`` naming checks that are not registered."""
        out: list[Problem] = []

        def visit(steps: Sequence[Any], where: str) -> None:
            for i, step in enumerate(steps):
                if isinstance(step, CustomStep) and step.name not in self.checks:
                    out.append(
                        Problem(f"{where}[{i}].name", f"no custom check named {step.name!r} is registered")
                    )
                if isinstance(step, EveryItemStep):
                    visit([step.step], f"{where}[{i}].step")

        visit(goal.verification_steps, "verification_steps")
        for j, stage in enumerate(goal.stages):
            visit(stage.verification_steps, f"stages[{j}].verification_steps")
        return out

    def require_checks(self, goal: GoalAssertion) -> None:
        """Raise :class:`InvalidInput` naming every custom check ``goal`` needs but is missing."""
        problems = self.unknown_checks(goal)
        if problems:
            raise InvalidInput(problems, what="goal assertion")

    async def verify(
        self, goal: GoalAssertion, output: Any, *, stage: GoalStage | str | None = None
    ) -> GoalVerdict:
        """Check the goal's steps (or one stage's) against ``output``.

        Never raises for a bad output or a failing check; a custom check that raises or
        overruns its timeout is a failed step saying so.

        Args:
            goal: The goal.
            output: The output to check (text or any JSON value).
            stage: A stage (or its name) to verify instead of the goal's final steps.

        Raises:
            InvalidInput: ``stage`` names no stage of the goal.
        """
        token = _CLOCK.set(self.clock)
        try:
            return await self._verify(goal, output, stage)
        finally:
            _CLOCK.reset(token)

    async def _verify(self, goal: GoalAssertion, output: Any, stage: GoalStage | str | None) -> GoalVerdict:
        started = time.perf_counter()
        steps, stage_name = _steps_of(goal, stage)
        subject = _Subject(output)
        plan = self._plan(steps)
        if not plan.has_async:
            return _goal_verdict(goal.id, stage_name, [run(subject) for run in plan.runs], started)
        verdicts: list[StepVerdict | None] = [None if c.is_async else c.run(subject) for c in plan.compiled]  # type: ignore[misc]
        pending = [(i, c) for i, c in enumerate(plan.compiled) if c.is_async]
        results = await asyncio.gather(*(self._arun(c, subject) for _, c in pending))
        for (i, _), v in zip(pending, results, strict=True):
            verdicts[i] = v
        return _goal_verdict(goal.id, stage_name, verdicts, started)  # type: ignore[arg-type]

    def verify_sync(
        self, goal: GoalAssertion, output: Any, *, stage: GoalStage | str | None = None
    ) -> GoalVerdict:
        """:meth:`verify` for callers without an event loop.

        Goals with custom checks are run with ``asyncio.run``; from inside a running loop
        those checks fail with a reason telling to ``await`` :meth:`verify` instead.
        """
        token = _CLOCK.set(self.clock)
        try:
            return self._verify_sync(goal, output, stage)
        finally:
            _CLOCK.reset(token)

    def _verify_sync(self, goal: GoalAssertion, output: Any, stage: GoalStage | str | None) -> GoalVerdict:
        started = time.perf_counter()
        steps, stage_name = _steps_of(goal, stage)
        plan = self._plan(steps)
        subject = _Subject(output)
        if not plan.has_async:
            return _goal_verdict(goal.id, stage_name, [run(subject) for run in plan.runs], started)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.verify(goal, output, stage=stage))
        verdicts = [
            c.run(subject)
            if c.run is not None
            else _verdict(
                c.label,
                c.step.kind,
                False,
                "custom check",
                None,
                "custom checks need `await Verifier.verify`",
            )
            for c in plan.compiled
        ]
        return _goal_verdict(goal.id, stage_name, verdicts, started)

    async def _arun(self, compiled: _Compiled, subject: _Subject) -> StepVerdict:
        step = compiled.step
        if isinstance(step, EveryItemStep):
            return await self._every_async(compiled, step, subject)
        assert isinstance(step, CustomStep)
        return await self._custom(compiled.label, step, subject.value)

    async def _every_async(self, compiled: _Compiled, step: EveryItemStep, subject: _Subject) -> StepVerdict:
        inner = _compile(step.step)
        expected = f"every item: {inner.label}"
        items, why = _items(JsonPath.compile(step.path), step, subject)
        if items is None:
            return _verdict(compiled.label, step.kind, False, expected, None, why)
        results = await asyncio.gather(*(self._arun(inner, _Subject(item)) for item in items))
        for i, v in enumerate(results):
            if not v.passed:
                return _verdict(
                    compiled.label, step.kind, False, expected, _shown(items[i]), f"item {i}: {v.reason}"
                )
        return _verdict(compiled.label, step.kind, True, expected, f"{len(items)} items", "")

    async def _custom(self, label: str, step: CustomStep, output: Any) -> StepVerdict:
        expected = f"check {step.name} passes"
        if step.name not in self.checks:
            return _verdict(
                label, step.kind, False, expected, None, f"no custom check named {step.name!r} is registered"
            )
        check = self.checks.get(step.name)
        timeout = step.timeout_seconds or check.timeout_seconds
        try:
            if check.is_async:
                coro: Coroutine[Any, Any, Any] = check.fn(output, **step.args)
            else:
                coro = asyncio.to_thread(check.fn, output, **step.args)
            result = await asyncio.wait_for(coro, timeout)
            if asyncio.iscoroutine(result):  # a sync wrapper returning a coroutine
                result = await asyncio.wait_for(result, timeout)
        except TimeoutError:
            return _verdict(
                label,
                step.kind,
                False,
                expected,
                None,
                f"check {step.name} did not finish within {timeout:g} s",
            )
        except Exception as exc:  # a user's check failing is a failed step, not a crash
            return _verdict(
                label,
                step.kind,
                False,
                expected,
                None,
                f"check {step.name} raised {type(exc).__name__}: {exc}",
            )
        if isinstance(result, CheckResult):
            return _verdict(
                label,
                step.kind,
                result.passed,
                expected,
                _shown(result.actual),
                result.reason or "check failed",
            )
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool):
            return _verdict(label, step.kind, result[0], expected, None, str(result[1]) or "check failed")
        if isinstance(result, bool):
            return _verdict(label, step.kind, result, expected, result, f"check {step.name} returned false")
        return _verdict(
            label,
            step.kind,
            False,
            expected,
            _shown(repr(result)),
            f"check {step.name} returned {type(result).__name__}; "
            "expected bool, (bool, reason) or CheckResult",
        )


def _steps_of(goal: GoalAssertion, stage: GoalStage | str | None) -> tuple[Sequence[Any], str]:
    if stage is None:
        return goal.verification_steps, ""
    if isinstance(stage, str):
        found = next((s for s in goal.stages if s.name == stage), None)
        if found is None:
            raise InvalidInput.single("stage", f"goal {goal.id} has no stage {stage!r}")
        stage = found
    return stage.verification_steps, stage.name


def _goal_verdict(goal_id: str, stage: str, verdicts: list[StepVerdict], started: float) -> GoalVerdict:
    statuses = {v.status for v in verdicts}
    status = "failed" if "failed" in statuses else "pending_manual" if "manual" in statuses else "passed"
    return _trusted(
        GoalVerdict,
        {
            "goal_id": goal_id,
            "passed": status == "passed",
            "status": status,
            "stage": stage,
            "steps": verdicts,
            "duration_ms": (time.perf_counter() - started) * 1000,
        },
    )


def verify_goal(
    goal: GoalAssertion,
    output: Any,
    *,
    checks: CheckRegistry | None = None,
    clock: Callable[[], datetime] = _utcnow,
) -> GoalVerdict:
    """Check every final verification step of ``goal`` against ``output``; never raises.

    A synchronous convenience over :class:`Verifier` (see :meth:`Verifier.verify_sync`).
    """
    return Verifier(checks, clock=clock).verify_sync(goal, output)


class StagedVerifier:
    """Verification of one goal along one task: each stage as its step returns, then the end.

    Args:
        goal: The anchored goal.
        verifier: The engine (and its custom checks).
    """

    def __init__(self, goal: GoalAssertion, verifier: Verifier) -> None:
        self.goal = goal
        self.verifier = verifier
        self.verdicts: list[GoalVerdict] = []

    def check_bindings(self, step_names: Sequence[str]) -> None:
        """Raise :class:`InvalidInput` for stages bound to steps the task does not have
        (:func:`middleware.goals.stage_bindings.check_stage_bindings`)."""
        check_stage_bindings(self.goal, step_names)

    async def after_step(self, step: str, output: Any) -> GoalVerdict | None:
        """Verify the stage bound to ``step`` (``None`` when no stage is bound to it)."""
        stage = self.goal.stage_for(step)
        if stage is None:
            return None
        verdict = await self.verifier.verify(self.goal, output, stage=stage)
        self.verdicts.append(verdict)
        return verdict

    async def final(self, output: Any) -> GoalVerdict:
        """Verify the goal's own steps on the final output (passes when it has none)."""
        return await self.verifier.verify(self.goal, output)

    @property
    def failed_stage(self) -> str:
        """The first stage that did not pass, or ``''``."""
        return next((v.stage for v in self.verdicts if not v.passed), "")
