"""Goal assertions: the user's goal as machine-checkable steps, verified on outputs.

A goal is anchored when a task starts and verified against the output when it ends.
Each verification step is a structured object (a ``kind`` plus arguments). Steps may
also be written as short English or Chinese sentences for the common cases
("output contains the tracking number", "检查输出是否包含DataController字段"); the
parser turns them into structured steps, and a sentence it cannot turn into a check
is refused at registration.
"""

from __future__ import annotations

import json
import re
import time
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from ._model import Model
from .jsonpath import JsonPath, JsonPathError

__all__ = [
    "ContainsStep",
    "GoalAssertion",
    "GoalVerdict",
    "JsonPathStep",
    "NotContainsStep",
    "RegexStep",
    "StepVerdict",
    "VerificationStep",
    "parse_step_sentence",
    "text_of",
    "verify_goal",
]

_GOAL_ID_RE = re.compile(r"^[A-Z][A-Z0-9_]{2,63}$")


class ContainsStep(Model):
    """The output (as text) contains ``value`` (case-insensitive unless ``case_sensitive``)."""

    kind: Literal["contains"] = "contains"
    value: str = Field(min_length=1)
    case_sensitive: bool = False
    description: str = ""


class NotContainsStep(Model):
    """The output (as text) does not contain ``value``."""

    kind: Literal["not_contains"] = "not_contains"
    value: str = Field(min_length=1)
    case_sensitive: bool = False
    description: str = ""


class RegexStep(Model):
    """The output (as text) matches ``pattern`` (``re.search``)."""

    kind: Literal["regex"] = "regex"
    pattern: str = Field(min_length=1)
    description: str = ""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"regex does not compile: {exc}") from None
        return v


class JsonPathStep(Model):
    """A JSON path resolves in the output; with ``equals``, its value equals that."""

    kind: Literal["json_path"] = "json_path"
    path: str = Field(min_length=1)
    equals: Any = None
    check_equals: bool = Field(default=False, description="Set when ``equals`` was given.")
    description: str = ""

    @field_validator("path")
    @classmethod
    def _parses(cls, v: str) -> str:
        try:
            JsonPath.compile(v)
        except JsonPathError as exc:
            raise ValueError(str(exc)) from None
        return v

    def model_post_init(self, __context: Any) -> None:
        if "equals" in self.model_fields_set:
            object.__setattr__(self, "check_equals", True)


VerificationStep = Annotated[
    ContainsStep | NotContainsStep | RegexStep | JsonPathStep, Field(discriminator="kind")
]

_SENTENCES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"^(?:检查)?输出(?:是否)?不包含[“\"'「]?(?P<v>.+?)[”\"'」]?(?:字段)?[。.]?$"),
        "not_contains",
    ),
    (re.compile(r"^(?:检查)?输出(?:是否)?包含[“\"'「]?(?P<v>.+?)[”\"'」]?(?:字段)?[。.]?$"), "contains"),
    (
        re.compile(
            r"^(?:the )?output (?:does not|doesn't|must not) contains? ['\"]?(?P<v>.+?)['\"]?\.?$", re.I
        ),
        "not_contains",
    ),
    (re.compile(r"^(?:the )?output (?:must )?contains? ['\"]?(?P<v>.+?)['\"]?\.?$", re.I), "contains"),
    (re.compile(r"^(?:the )?output matches (?:regex )?/(?P<v>.+)/\.?$", re.I), "regex"),
]


def parse_step_sentence(sentence: str) -> ContainsStep | NotContainsStep | RegexStep:
    """Turn a short sentence into a structured step.

    Raises:
        ValueError: when the sentence is not a check a machine can perform.
    """
    text = sentence.strip()
    for pattern, kind in _SENTENCES:
        m = pattern.match(text)
        if not m:
            continue
        value = m.group("v").strip()
        if kind == "regex":
            return RegexStep(pattern=value, description=text)
        if kind == "not_contains":
            return NotContainsStep(value=value, description=text)
        return ContainsStep(value=value, description=text)
    raise ValueError(
        f"cannot turn {sentence!r} into a machine check; write a structured step "
        "(kind: contains | not_contains | regex | json_path)"
    )


class GoalAssertion(Model):
    """A user goal, anchored when a task starts and verified when it ends."""

    id: str = Field(description="Global goal id such as ``GOAL_FINANCE_001``.")
    description: str = Field(min_length=1, max_length=2000)
    verification_steps: list[VerificationStep] = Field(min_length=1)
    timeout_seconds: int = Field(default=300, ge=1, le=3600)
    criticality: Literal["low", "medium", "high"] = "medium"

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _GOAL_ID_RE.match(v):
            raise ValueError("must be upper-case letters, digits and _ (e.g. GOAL_FINANCE_001)")
        return v

    @field_validator("verification_steps", mode="before")
    @classmethod
    def _sentences(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return v
        out: list[Any] = []
        for step in v:
            out.append(parse_step_sentence(step).model_dump() if isinstance(step, str) else step)
        return out


class StepVerdict(Model):
    """The verdict of one verification step, with expected vs actual."""

    step: str
    kind: str
    passed: bool
    expected: Any = None
    actual: Any = None
    reason: str = ""


class GoalVerdict(Model):
    """The result of verifying one goal against one output."""

    goal_id: str
    passed: bool
    steps: list[StepVerdict]
    duration_ms: float = 0.0

    @property
    def failed_steps(self) -> list[StepVerdict]:
        return [s for s in self.steps if not s.passed]


def text_of(output: Any) -> str:
    """The text a contains/regex step looks at: strings as they are, JSON otherwise."""
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, sort_keys=True, default=str)


def _label(step: Any) -> str:
    if step.description:
        return str(step.description)
    if isinstance(step, (ContainsStep, NotContainsStep)):
        return f"{step.kind} {step.value!r}"
    if isinstance(step, RegexStep):
        return f"regex /{step.pattern}/"
    return f"json_path {step.path}" + (f" == {step.equals!r}" if step.check_equals else "")


def _check(step: Any, output: Any, text: str) -> StepVerdict:
    label = _label(step)
    if isinstance(step, (ContainsStep, NotContainsStep)):
        hay, needle = (text, step.value) if step.case_sensitive else (text.casefold(), step.value.casefold())
        found = needle in hay
        want = isinstance(step, ContainsStep)
        return StepVerdict(
            step=label,
            kind=step.kind,
            passed=found == want,
            expected=("contains " if want else "does not contain ") + repr(step.value),
            actual="found" if found else "not found",
            reason="" if found == want else f"{step.value!r} {'not found' if want else 'found'} in output",
        )
    if isinstance(step, RegexStep):
        m = re.search(step.pattern, text)
        return StepVerdict(
            step=label,
            kind=step.kind,
            passed=m is not None,
            expected=f"/{step.pattern}/",
            actual=m.group(0) if m else None,
            reason="" if m else "no match in output",
        )
    path = JsonPath.compile(step.path)
    found_values = path.find(output)
    if not found_values:
        return StepVerdict(
            step=label, kind=step.kind, passed=False, expected=step.path, reason=f"{step.path} not found"
        )
    actual = found_values[0]
    if step.check_equals:
        ok = (actual == step.equals and type(actual) is type(step.equals)) or (
            isinstance(actual, (int, float))
            and isinstance(step.equals, (int, float))
            and not isinstance(actual, bool)
            and actual == step.equals
        )
        return StepVerdict(
            step=label,
            kind=step.kind,
            passed=bool(ok),
            expected=step.equals,
            actual=actual,
            reason="" if ok else f"{step.path} is {actual!r}, expected {step.equals!r}",
        )
    return StepVerdict(step=label, kind=step.kind, passed=True, expected=step.path, actual=actual)


def verify_goal(goal: GoalAssertion, output: Any) -> GoalVerdict:
    """Check every verification step of ``goal`` against ``output``; never raises."""
    started = time.perf_counter()
    text = text_of(output)
    verdicts = [_check(step, output, text) for step in goal.verification_steps]
    return GoalVerdict(
        goal_id=goal.id,
        passed=all(v.passed for v in verdicts),
        steps=verdicts,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
