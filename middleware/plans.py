"""Plans: the steps a goal (or the governed planner) lays out for a task, as a small DAG.

A plan names its steps, the action each asks for, where each step's input comes from and
which steps wait for which (seed 003 §4.2: the orchestrator decomposes the request; seed 002:
a workflow's branches and joins)::

    plan:
      steps:
      - name: order                                  # after: omitted = the previous step
        action: get_order_detail
        input: {user_id: task.user_id}
      - name: warranty
        action: warranty_check
        input:
          device_model: [context.device_model, steps.order.device_model]   # the first known
          order: steps.order
          purchase_date: {from: context.purchase_date, optional: true}     # left out if unknown
      - {name: notify, action: notify_crm, after: [warranty], on_failure: continue}
      - {name: reply, action: compose_reply, after: [warranty, notify]}   # a join: waits for both

``after`` lists the earlier steps a step waits for (omitted: the step before it; ``[]``: none):
steps whose predecessors are done run at the same time (branches), a step with several waits
for all of them (a join). Every step leads to the last one, whose output is the task's.

A step's ``input`` maps each field its agent gets to references, tried in order:
``request.<path>`` (the request's structured input), ``context.<path>`` (what the intake agent
extracted, or the session carried over), ``steps.<name>[.<path>]`` (an earlier step's output,
only of a step it waits for, directly or not), ``task.<field>`` (``text``, ``user_id``,
``session_id``, ``language``, ``intent``), or a constant ``{value: ...}``. With a mapping the
agent gets exactly the mapped fields (the contracts' input schemas are checked against it);
without one it gets everything the task knows, as a client's step does. A field no reference
can fill is *missing*: the step asks for it (``supplied_by`` names an action whose agent is
asked first). :func:`check_plan` holds a plan against the catalog's contracts.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ._model import Model
from .contracts import CapabilityContract, normalise_label
from .errors import Problem

__all__ = [
    "ANCHOR_STEP",
    "MAIN_STEP",
    "PLANNER_ACTION",
    "PLANNER_STEP",
    "TASK_FIELDS",
    "InputSource",
    "Plan",
    "PlanStep",
    "check_plan",
    "required_inputs",
]

#: The gateway's own steps: the intake agent anchoring the goal, the planner's proposal, and
#: the one step of a task nothing plans (routed by its text, as before plans).
ANCHOR_STEP = "intake"
PLANNER_STEP = "plan"
MAIN_STEP = "main"
#: The action of the planner's step: never a contract's (labels cannot start with ``@``).
PLANNER_ACTION = "@planner"

#: What ``task.<field>`` may read.
TASK_FIELDS = ("text", "user_id", "session_id", "language", "intent")
SOURCES = ("request", "context", "steps", "task")

_STEP_NAME = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
_SEGMENT = re.compile(r"^[^.\s]{1,128}$")


@functools.lru_cache(maxsize=4096)
def parse_ref(ref: str) -> tuple[str, tuple[str, ...]]:
    """``(source, path)`` of a reference such as ``steps.order.purchase_date`` (cached: a plan's
    references are read for every step of every task).

    Raises:
        ValueError: the reference names no known source or has an empty segment.
    """
    parts = ref.split(".")
    source, path = parts[0], tuple(parts[1:])
    if source not in SOURCES:
        raise ValueError(f"{ref!r}: a reference starts with one of {', '.join(SOURCES)}")
    if not all(_SEGMENT.match(p) for p in path):
        raise ValueError(f"{ref!r}: empty or blank path segment")
    if source in ("request", "context") and not path:
        raise ValueError(f"{ref!r}: name a field ({source}.<field>)")
    if source == "steps" and not path:
        raise ValueError(f"{ref!r}: name a step (steps.<name>[.<field>])")
    if source == "task" and (len(path) != 1 or path[0] not in TASK_FIELDS):
        raise ValueError(f"{ref!r}: task.<field> reads one of {', '.join(TASK_FIELDS)}")
    return source, path


class InputSource(Model):
    """Where one input field of a step comes from.

    Written as a reference (``context.device_model``), a list of references (the first that
    is known wins), ``{from: ref-or-list, optional: true}`` or a constant ``{value: ...}``.
    """

    refs: list[str] = Field(default_factory=list, max_length=8, description="References, tried in order.")
    value: Any = Field(default=None, description="A constant (when no reference is given).")
    optional: bool = Field(default=False, description="Left out (not asked for) when nothing is known.")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"refs": [data]}
        if isinstance(data, list):
            return {"refs": data}
        if isinstance(data, Mapping) and "from" in data:
            data = dict(data)
            given = data.pop("from")
            data["refs"] = [given] if isinstance(given, str) else given
        return data

    @field_validator("refs")
    @classmethod
    def _refs(cls, v: list[str]) -> list[str]:
        for ref in v:
            parse_ref(ref)
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> InputSource:
        if self.refs and self.value is not None:
            raise ValueError("give references or a constant value, not both")
        if not self.refs and self.value is None:
            raise ValueError("give a reference (context.x, steps.y.z ...) or a constant {value: ...}")
        return self

    @property
    def constant(self) -> bool:
        return not self.refs


class PlanStep(Model):
    """One step of a plan: routed by contract like any step, run when the steps it waits for are done."""

    name: str = Field(pattern=_STEP_NAME, description="Unique in the plan; goal stages bind to it.")
    action: str = Field(default="", max_length=64, description="The action its agent must be able to do.")
    tags: list[str] = Field(default_factory=list, max_length=20, description="Tags its agent must carry.")
    text: str = Field(default="", max_length=10_000, description="Instruction (default: the request's).")
    after: list[str] | None = Field(
        default=None,
        max_length=64,
        description="Earlier steps it waits for (omitted: the step before it; []: none).",
    )
    input: dict[str, InputSource] | None = Field(
        default=None, description="Its agent's input, field by field (omitted: all the task knows)."
    )
    supplied_by: str = Field(
        default="",
        max_length=64,
        description="An action whose agent is asked for missing input before the user is.",
    )
    on_failure: Literal["stop", "continue"] = Field(
        default="stop",
        description="stop: a failure its policy cannot settle stops the task; continue: the plan "
        "goes on without this step's output.",
    )

    @field_validator("action", "supplied_by")
    @classmethod
    def _action(cls, v: str) -> str:
        return v if v.startswith("@") else normalise_label(v)

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return [normalise_label(t) for t in v]

    @field_validator("input")
    @classmethod
    def _input_names(cls, v: dict[str, InputSource] | None) -> dict[str, InputSource] | None:
        for name in v or {}:
            if not name or len(name) > 128:
                raise ValueError(f"input field {name!r} must be 1..128 characters")
        return v


class Plan(Model):
    """The steps of a task as a small DAG (see the module docstring).

    Validated when made: unique step names, ``after`` naming earlier steps only (so the order
    written is an order that can run, and no cycle can be written), references to steps the
    step waits for, every step leading to the last one.
    """

    steps: list[PlanStep] = Field(min_length=1, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {"steps": data} if isinstance(data, list) else data

    @model_validator(mode="after")
    def _shape(self) -> Plan:
        seen: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            if step.name in seen:
                raise ValueError(f"steps[{i}].name: {step.name!r} is also steps[{seen[step.name]}]")
            if step.after is None:  # written in order: it waits for the step before it
                step.after = [self.steps[i - 1].name] if i else []
            for name in step.after:
                if name not in seen:
                    why = "itself" if name == step.name else "no earlier step"
                    raise ValueError(f"steps[{i}].after: {name!r} is {why} (after names earlier steps)")
            if len(set(step.after)) != len(step.after):
                raise ValueError(f"steps[{i}].after: a step is named twice")
            seen[step.name] = i
        ancestors = self.ancestors()
        for i, step in enumerate(self.steps):
            for field, source in (step.input or {}).items():
                for ref in source.refs:
                    kind, path = parse_ref(ref)
                    if kind == "steps" and path[0] not in ancestors[step.name]:
                        raise ValueError(
                            f"steps[{i}].input.{field}: {ref!r} reads step {path[0]!r}, which "
                            f"{step.name!r} does not wait for (add it to after, directly or not)"
                        )
                skippable = source.refs and all(
                    parse_ref(r)[0] == "steps" and self.step(parse_ref(r)[1][0]).on_failure == "continue"
                    for r in source.refs
                )
                if skippable and not source.optional:
                    raise ValueError(
                        f"steps[{i}].input.{field}: only reads steps that may be skipped "
                        "(on_failure: continue); make it optional or add another reference"
                    )
        last = self.steps[-1]
        if last.on_failure == "continue":
            raise ValueError(f"steps[{len(self.steps) - 1}].on_failure: the last step's output is the task's")
        for i, step in enumerate(self.steps[:-1]):
            if step.name not in ancestors[last.name]:
                raise ValueError(
                    f"steps[{i}]: {step.name!r} leads nowhere; every step must lead to the last "
                    f"({last.name!r}), whose output is the task's"
                )
        return self

    def step(self, name: str) -> PlanStep:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def ancestors(self) -> dict[str, set[str]]:
        """Every step's ancestors: the steps it waits for, directly or not."""
        out: dict[str, set[str]] = {}
        for step in self.steps:  # earlier steps first, so theirs are known
            found: set[str] = set()
            for name in step.after or []:
                found.add(name)
                found |= out.get(name, set())
            out[step.name] = found
        return out

    def descendants(self, name: str) -> list[str]:
        """The steps that wait for ``name``, directly or not, in plan order."""
        ancestors = self.ancestors()
        return [s.name for s in self.steps if name in ancestors[s.name]]

    def branches(self) -> list[list[str]]:
        """Groups of steps that may run at the same time (neither waits for the other), in
        plan order; one group per set of steps sharing a start (for the audit log and people)."""
        ancestors = self.ancestors()
        groups: list[list[str]] = []
        for step in self.steps:
            for group in groups:
                if all(step.name not in ancestors[o] and o not in ancestors[step.name] for o in group):
                    group.append(step.name)
                    break
            else:
                groups.append([step.name])
        return [g for g in groups if len(g) > 1]

    def summary(self) -> list[dict[str, Any]]:
        """The steps as the audit log and the outcome show them: name, action, after, input
        fields (made once per plan: a plan is not changed once made; do not change the list)."""
        kept = _SUMMARIES.get(id(self))
        if kept is not None and kept[0]() is self:
            return kept[1]
        made = self._summary()
        key = id(self)
        _SUMMARIES[key] = (weakref.ref(self, lambda _: _SUMMARIES.pop(key, None)), made)
        return made

    def _summary(self) -> list[dict[str, Any]]:
        return [
            {
                "name": s.name,
                "action": s.action,
                "after": list(s.after or []),
                "input": sorted(s.input) if s.input is not None else None,
                **({"on_failure": s.on_failure} if s.on_failure != "stop" else {}),
                **({"supplied_by": s.supplied_by} if s.supplied_by else {}),
            }
            for s in self.steps
        ]


#: Each live plan's summary, by id (see :meth:`Plan.summary`).
_SUMMARIES: dict[int, tuple[weakref.ref[Plan], list[dict[str, Any]]]] = {}


def required_inputs(contract: CapabilityContract) -> list[str]:
    """The top-level fields a contract's input schema requires."""
    required = contract.input_schema.get("required") if isinstance(contract.input_schema, dict) else None
    return [str(r) for r in required] if isinstance(required, list) else []


def check_plan(
    plan: Plan,
    contracts: Iterable[CapabilityContract],
    *,
    prefix: str = "plan",
    scope_actions: Sequence[str] = (),
    stages: Mapping[str, str] | None = None,
    max_steps: int | None = None,
    require_contracts: bool = True,
    skip: Sequence[str] = (),
) -> list[Problem]:
    """Every reason ``plan`` cannot run on ``contracts`` (empty: it can).

    Args:
        plan: The plan (its shape is valid: :class:`Plan` checked it).
        contracts: The live contracts (a step's candidates are those that can do its action).
        prefix: How problems name the plan (``goal.plan``, ``proposal``).
        scope_actions: The goal's intention scope (empty: any action).
        stages: ``{stage: step}`` of the goal: each must bind to a step of the plan.
        max_steps: ``limits.max_steps_per_task``.
        require_contracts: Whether a step no contract can do is a problem (at registration a
            worker may register later: then only the contracts present are checked).
        skip: Steps not to check (the gateway's own: the intake step, the planner's).
    """
    by_action: dict[str, list[CapabilityContract]] = {}
    refused: dict[str, list[str]] = {}
    for contract in contracts:
        for action in contract.can_do:
            if action not in contract.cannot_do:
                by_action.setdefault(action, []).append(contract)
        for action in contract.cannot_do:
            refused.setdefault(action, []).append(contract.key)
    problems: list[Problem] = []
    if max_steps is not None and len(plan.steps) > max_steps:
        problems.append(
            Problem(
                f"{prefix}.steps",
                f"{len(plan.steps)} steps, more than limits.max_steps_per_task ({max_steps})",
            )
        )
    for i, step in enumerate(plan.steps):
        if step.name in skip:
            continue
        where = f"{prefix}.steps[{i}]"
        if not step.action:
            problems.append(Problem(f"{where}.action", "required: the action this step asks for"))
            continue
        if scope_actions and step.action not in scope_actions:
            problems.append(
                Problem(f"{where}.action", f"{step.action} is outside the goal's intention scope")
            )
        for action, field in ((step.action, "action"), (step.supplied_by, "supplied_by")):
            if action and action not in by_action and (require_contracts or action in refused):
                why = (
                    f"the contracts of {', '.join(sorted(refused[action]))} say they cannot do {action}"
                    if action in refused
                    else f"no live contract can do {action}"
                )
                problems.append(Problem(f"{where}.{field}", why))
        if step.input is None:
            continue
        for contract in by_action.get(step.action, []):
            for name in required_inputs(contract):
                source = step.input.get(name)
                if source is None:
                    problems.append(
                        Problem(
                            f"{where}.input.{name}",
                            f"{contract.key} requires {name!r}; the step's input does not map it",
                        )
                    )
                elif source.optional:
                    problems.append(
                        Problem(
                            f"{where}.input.{name}",
                            f"{contract.key} requires {name!r}; it cannot be optional",
                        )
                    )
    names = set(plan.names())
    for stage, step_name in (stages or {}).items():
        if step_name not in names:
            problems.append(
                Problem(
                    f"{prefix}.steps",
                    f"stage {stage!r} is bound to step {step_name!r}, which the plan does not have",
                )
            )
    return problems
