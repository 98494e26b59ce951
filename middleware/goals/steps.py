"""Verification steps: structured, machine-checkable checks of an output.

Every step is a small model with a ``kind`` and its arguments; the union
:data:`VerificationStep` is discriminated by ``kind``. Where a step takes an optional
``path`` (a JSON path such as ``$.warranty.fee``), it looks only at the value found
there instead of the whole output.

======================  ===========================================================
kind                    passes when
======================  ===========================================================
``contains``            the text contains ``value`` (NFKC + casefold unless
                        ``case_sensitive``)
``not_contains``        the text does not contain ``value``
``regex``               ``pattern`` matches (``literal: true`` escapes the text)
``json_path``           ``path`` resolves and ``op`` holds: exists, not_exists,
                        equals, one_of, gt, ge, lt, le, between,
                        within_days / within_months / within_years (a date
                        no more than ``value`` calendar units before today,
                        :mod:`.dates`)
``json_schema``         the value matches the JSON Schema ``schema``
``length``              the value's length (characters / items / keys) is within
                        ``min`` .. ``max``
``every_item``          every item of the list at ``path`` satisfies ``step``
``custom``              the user-registered check ``name`` returns true in time
``manual``              never by itself: a person must confirm (reported pending)
``all_of``              every one of ``steps`` passes (one sentence, several checks)
======================  ===========================================================
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import jsonschema
from jsonschema.exceptions import SchemaError
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .._model import Model
from ..errors import InvalidInput
from ..jsonpath import JsonPath, JsonPathError
from ..safe_regex import linear_error
from ..schema_guard import check_schema_bounds
from .dates import Unit, time_zone

__all__ = [
    "COMPARISONS",
    "JSON_PATH_OPS",
    "STEP_KINDS",
    "WITHIN_OPS",
    "AllOfStep",
    "ContainsStep",
    "CustomStep",
    "EveryItemStep",
    "JsonPathStep",
    "JsonSchemaStep",
    "LengthStep",
    "ManualStep",
    "NotContainsStep",
    "RegexStep",
    "StepSpec",
    "VerificationStep",
    "step_label",
]

JSON_PATH_OPS = (
    "exists",
    "not_exists",
    "equals",
    "one_of",
    "gt",
    "ge",
    "lt",
    "le",
    "between",
    "within_days",
    "within_months",
    "within_years",
)
#: The ops that take a duration: calendar arithmetic on dates (:mod:`.dates`).
WITHIN_OPS: dict[str, Unit] = {"within_days": "days", "within_months": "months", "within_years": "years"}
COMPARISONS = ("gt", "ge", "lt", "le", "between")
_CHECK_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")


def _valid_path(v: str | None) -> str | None:
    if v is None:
        return v
    try:
        JsonPath.compile(v)
    except JsonPathError as exc:
        raise ValueError(str(exc)) from None
    return v


class _CompiledSlot:
    """Holds a step's compiled form. A cache: it never makes two steps unequal."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CompiledSlot)

    __hash__ = None  # type: ignore[assignment]


class _Step(Model):
    # Steps are immutable: the verifier compiles each once and keeps the compiled form.
    model_config = ConfigDict(frozen=True)

    description: str = Field(default="", max_length=2000, description="Human wording shown in verdicts.")

    # The verifier's compiled form of this step (regexes, paths, schemas), built on first use.
    _compiled: _CompiledSlot = PrivateAttr(default_factory=lambda: _CompiledSlot())


class _Scoped(_Step):
    path: str | None = Field(default=None, description="Look only at the value at this JSON path.")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return _valid_path(v)


class ContainsStep(_Scoped):
    """The output (as text) contains ``value``.

    Both sides are NFKC-normalised (full-width letters match their ASCII form) and,
    unless ``case_sensitive``, case-folded (``ß`` matches ``SS``).
    """

    kind: Literal["contains"] = "contains"
    value: str = Field(min_length=1, max_length=10_000)
    case_sensitive: bool = False


class NotContainsStep(_Scoped):
    """The output (as text) does not contain ``value`` (same normalisation as contains)."""

    kind: Literal["not_contains"] = "not_contains"
    value: str = Field(min_length=1, max_length=10_000)
    case_sensitive: bool = False


class RegexStep(_Scoped):
    """``pattern`` is found in the output (a search, as ``re.search``).

    Patterns run on RE2 (:mod:`middleware.safe_regex`), in time linear in the output:
    backreferences and lookaround are refused when the goal is read. With
    ``literal: true`` the pattern is user text matched as written (escaped).
    """

    kind: Literal["regex"] = "regex"
    # ``literal`` is declared before ``pattern`` so the pattern's validator sees it.
    literal: bool = False
    ignore_case: bool = False
    pattern: str = Field(min_length=1, max_length=10_000)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str, info: ValidationInfo) -> str:
        if info.data.get("literal"):
            return v
        why = linear_error(v)
        if why is not None:
            raise ValueError(f"regex does not compile: {why}")
        return v

    @property
    def effective_pattern(self) -> str:
        """The pattern actually searched for (escaped when ``literal``)."""
        return re.escape(self.pattern) if self.literal else self.pattern


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class JsonPathStep(_Step):
    """The value(s) at ``path`` satisfy ``op``.

    ``path`` may use wildcards (``$.items[*].price``): then every value found must
    satisfy the op, and at least one must be found (except for ``not_exists``).
    Shorthands are accepted: ``{"path": "$.a", "equals": 3}`` is
    ``{"path": "$.a", "op": "equals", "value": 3}``; likewise ``one_of``, ``gt``,
    ``ge``, ``lt``, ``le``, ``between`` and ``exists: false``.
    """

    kind: Literal["json_path"] = "json_path"
    path: str = Field(min_length=1, max_length=1000)
    op: Literal[
        "exists",
        "not_exists",
        "equals",
        "one_of",
        "gt",
        "ge",
        "lt",
        "le",
        "between",
        "within_days",
        "within_months",
        "within_years",
    ] = "exists"
    value: Any = Field(default=None, description="Argument of the op (none for exists / not_exists).")
    timezone: str = Field(
        default="UTC",
        max_length=64,
        exclude_if=lambda zone: zone == "UTC",  # a goal's JSON names a zone only when it is not UTC
        description="For the within_* ops: the time zone whose calendar days are compared (UTC, "
        "or an IANA name such as Asia/Shanghai).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = [k for k in ("equals", "one_of", "gt", "ge", "lt", "le", "between", *WITHIN_OPS) if k in data]
        if "exists" in data:
            given.append("exists")
        if not given:
            return data
        if len(given) > 1 or "op" in data or "value" in data:
            raise ValueError(
                f"give one op per step: either op/value or one of equals, one_of, gt, ge, lt, le, "
                f"between, exists (got {', '.join(given + [k for k in ('op', 'value') if k in data])})"
            )
        out = dict(data)
        key = given[0]
        arg = out.pop(key)
        if key == "exists":
            if not isinstance(arg, bool):
                raise ValueError("exists must be true or false")
            out["op"] = "exists" if arg else "not_exists"
        else:
            out["op"], out["value"] = key, arg
        return out

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _valid_path(v) or v

    @model_validator(mode="after")
    def _arguments(self) -> JsonPathStep:
        op, v = self.op, self.value
        if op in ("exists", "not_exists") and v is not None:
            raise ValueError(f"op {op} takes no value")
        if op == "one_of" and (not isinstance(v, list) or not v):
            raise ValueError("one_of needs a non-empty list of values")
        if op in WITHIN_OPS:
            if not _is_number(v) or v <= 0 or v != int(v) or v > 10_000:
                raise ValueError(f"{op} needs a whole number of {WITHIN_OPS[op]} (1..10000), got {v!r}")
            try:
                time_zone(self.timezone)
            except ValueError as exc:
                raise ValueError(f"timezone: {exc}") from None
        elif self.timezone != "UTC":
            raise ValueError(f"timezone applies to the within_days/months/years ops, not {op}")
        if op in ("gt", "ge", "lt", "le") and not _is_number(v):
            raise ValueError(f"{op} needs a number, got {v!r}")
        if op == "between":
            if not (isinstance(v, list) and len(v) == 2 and all(_is_number(x) for x in v)):
                raise ValueError("between needs [low, high], two numbers")
            if v[0] > v[1]:
                raise ValueError(f"between: low {v[0]} is above high {v[1]}")
        return self


class JsonSchemaStep(_Scoped):
    """The value matches the JSON Schema ``schema``."""

    kind: Literal["json_schema"] = "json_schema"
    schema_: dict[str, Any] = Field(alias="schema", min_length=1)

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    @field_validator("schema_")
    @classmethod
    def _valid(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:  # size and patterns first (the schema comes from a client)
            check_schema_bounds(v, field="$")
        except InvalidInput as exc:
            raise ValueError("; ".join(f"{p.field}: {p.reason}" for p in exc.problems)) from None
        try:
            jsonschema.validators.validator_for(v).check_schema(v)
        except SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(root)"
            raise ValueError(f"not a valid JSON Schema at {where}: {exc.message}") from None
        return v


class LengthStep(_Scoped):
    """The value's length is within ``min`` .. ``max`` (inclusive).

    A string counts characters, a list its items, an object its keys.
    """

    kind: Literal["length"] = "length"
    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> LengthStep:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class CustomStep(_Step):
    """A check the user registered under ``name``, called with ``args``.

    ``timeout_seconds`` overrides the timeout the check was registered with.
    """

    kind: Literal["custom"] = "custom"
    name: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _CHECK_NAME_RE.match(v):
            raise ValueError("check names use letters, digits, _ . : - and start with a letter or _")
        return v


class ManualStep(_Step):
    """A check only a person can make. Never passes by itself: reported as pending."""

    kind: Literal["manual"] = "manual"
    description: str = Field(min_length=1, max_length=2000)


class EveryItemStep(_Step):
    """Every item of the list at ``path`` satisfies ``step`` (checked with the item as output)."""

    kind: Literal["every_item"] = "every_item"
    path: str = Field(min_length=1, max_length=1000)
    step: StepSpec
    allow_empty: bool = Field(default=True, description="Whether an empty list passes.")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return _valid_path(v) or v

    @model_validator(mode="after")
    def _no_manual(self) -> EveryItemStep:
        if isinstance(self.step, ManualStep):
            raise ValueError("step: a manual step cannot be applied to every item; put it at the top level")
        return self


class AllOfStep(_Step):
    """Every one of ``steps`` passes: one sentence that states several checks
    (“故障类型为屏幕碎裂且非人为损坏” is a fault-type check and a damage check)."""

    kind: Literal["all_of"] = "all_of"
    steps: list[StepSpec] = Field(min_length=1, max_length=20)

    @model_validator(mode="after")
    def _machine_checks(self) -> AllOfStep:
        for i, step in enumerate(self.steps):
            if isinstance(step, (ManualStep, CustomStep)):
                raise ValueError(f"steps[{i}]: all_of combines built-in checks only (not {step.kind})")
        return self


def _coerce(value: Any) -> Any:
    """Sentences become structured steps before the union is validated."""
    from .sentences import coerce_step

    return coerce_step(value)


VerificationStep = Annotated[
    ContainsStep
    | NotContainsStep
    | RegexStep
    | JsonPathStep
    | JsonSchemaStep
    | LengthStep
    | EveryItemStep
    | CustomStep
    | ManualStep
    | AllOfStep,
    Field(discriminator="kind"),
]

#: A step as users may write it: a structured step, or a sentence (see ``sentences``).
StepSpec = Annotated[VerificationStep, BeforeValidator(_coerce)]

EveryItemStep.model_rebuild()
AllOfStep.model_rebuild()

STEP_KINDS = (
    "contains",
    "not_contains",
    "regex",
    "json_path",
    "json_schema",
    "length",
    "every_item",
    "custom",
    "manual",
    "all_of",
)


def step_label(step: Any) -> str:
    """How a step is named in verdicts: its description, else a short rendering."""
    if step.description:
        return str(step.description)
    where = f" at {step.path}" if getattr(step, "path", None) and step.kind != "json_path" else ""
    kind = step.kind
    if kind in ("contains", "not_contains"):
        return f"{kind} {step.value!r}{where}"
    if kind == "regex":
        return f"regex /{step.pattern}/{where}" + (" (literal)" if step.literal else "")
    if kind == "json_path":
        zone = f" ({step.timezone})" if step.timezone != "UTC" else ""
        return (
            f"{step.path} {step.op}"
            + ("" if step.op in ("exists", "not_exists") else f" {step.value!r}")
            + zone
        )
    if kind == "json_schema":
        return f"matches JSON Schema{where}"
    if kind == "length":
        return f"length{where} in {step.min if step.min is not None else 0}..{step.max or '∞'}"
    if kind == "every_item":
        return f"every item of {step.path}: {step_label(step.step)}"
    if kind == "custom":
        return f"custom check {step.name}"
    if kind == "all_of":
        return " and ".join(step_label(s) for s in step.steps)
    return f"manual: {step.description}"
