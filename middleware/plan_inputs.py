"""A plan step's input, built from what the task knows (``middleware.plans``: the mapping).

:func:`resolve_input` fills each mapped field from its references in order (the request's
input, the task's context, earlier outputs, the task's own fields, a constant) and lists the
fields nothing could fill; :func:`step_payload` is what the dispatcher sends an agent: the
mapped fields for a mapped step, else everything the task knows (as for a client's step).

A field nothing fills is looked for last in the context under the name a question asked it
by (:func:`answer_key`): a user's answer to "which device_model?" joins the context there,
so every later step finds it too.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .plans import PLANNER_STEP, InputSource, Plan, PlanStep, parse_ref
from .tasks import TaskRecord, TaskStep

__all__ = ["Missing", "Resolved", "answer_key", "building", "plan_step", "resolve_input", "step_payload"]

_ABSENT = object()


@dataclass(frozen=True)
class Missing:
    """An input field of a step nothing the task knows could fill."""

    field: str
    refs: tuple[str, ...]

    @property
    def key(self) -> str:
        return answer_key(self.field, self.refs)

    def described(self) -> dict[str, Any]:
        return {"field": self.field, "from": list(self.refs), "answer_as": self.key}


@dataclass
class Resolved:
    """A step's input as far as it could be built."""

    values: dict[str, Any] = field(default_factory=dict)
    missing: list[Missing] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # field -> the reference that filled it


def answer_key(name: str, refs: tuple[str, ...] | list[str]) -> str:
    """Where an answer for input ``name`` joins the task's context: the field of its first
    one-segment ``context.<field>`` reference, else ``name`` itself."""
    for ref in refs:
        source, path = parse_ref(ref)
        if source == "context" and len(path) == 1:
            return path[0]
    return name


def plan_step(run: TaskRecord, name: str) -> PlanStep | None:
    """The plan step ``name`` of the task's plan (None: no plan, or not one of its steps)."""
    plan: Plan | None = run.plan
    if plan is None:
        return None
    for step in plan.steps:
        if step.name == name:
            return step
    return None


def _walk(value: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _ABSENT
    return value


def _read(run: TaskRecord, ref: str) -> Any:
    source, path = parse_ref(ref)
    if source == "request":
        return _walk(run.request.input, path)
    if source == "context":
        return _walk(run.context, path)
    if source == "steps":
        record = run.step_record(path[0])
        if record is None or record.status != "completed" or path[0] not in run.outputs:
            return _ABSENT
        return _walk(run.outputs[path[0]], path[1:])
    task = {
        "text": run.request.text,
        "user_id": run.request.user_id,
        "session_id": run.request.session_id,
        "language": run.language,
        "intent": run.intent,
    }
    value = task.get(path[0], "")
    return value if value else _ABSENT


def _fill(run: TaskRecord, name: str, source: InputSource) -> tuple[Any, str]:
    if source.constant:
        return source.value, "value"
    for ref in source.refs:
        value = _read(run, ref)
        if value is not _ABSENT and value is not None:
            return value, ref
    key = answer_key(name, source.refs)  # an answer to an earlier question
    if key in run.context and run.context[key] is not None:
        return run.context[key], f"context.{key}"
    return _ABSENT, ""


def resolve_input(run: TaskRecord, step: PlanStep) -> Resolved:
    """``step``'s input from what ``run`` knows now (``step.input`` must be given)."""
    out = Resolved()
    for name, source in (step.input or {}).items():
        value, ref = _fill(run, name, source)
        if value is _ABSENT:
            if not source.optional:
                out.missing.append(Missing(name, tuple(source.refs)))
            continue
        out.values[name], out.sources[name] = value, ref
    return out


#: The input the runner just built for a step (task id, step name, values), so that its
#: dispatches do not build it again: nothing a step's own attempts do changes what it reads.
_BUILT: contextvars.ContextVar[tuple[str, str, dict[str, Any]] | None] = contextvars.ContextVar(
    "agency_plan_input", default=None
)


@contextlib.contextmanager
def building(run: TaskRecord, step: PlanStep, resolved: Resolved) -> Iterator[None]:
    """Keep ``step``'s input as just ``resolved`` for its dispatches while the block runs."""
    token = _BUILT.set((run.task_id, step.name, resolved.values))
    try:
        yield
    finally:
        _BUILT.reset(token)


def step_payload(run: TaskRecord, step: TaskStep, extra: dict[str, Any]) -> dict[str, Any]:
    """The input an agent gets for ``step``: its plan step's mapped fields (and the step's own
    input, and what a resume added); without a mapping, everything the task knows — with
    the task's ``user_id`` when the input names none, for the steps of a plan."""
    planned = plan_step(run, step.name) if run.plan is not None else None
    if planned is not None and planned.input is not None:
        built = _BUILT.get()
        if built is not None and built[0] == run.task_id and built[1] == step.name:
            return {**built[2], **step.input, **extra}
        return {**resolve_input(run, planned).values, **step.input, **extra}
    outputs = run.outputs if run.plan is None else {k: v for k, v in run.outputs.items() if k != PLANNER_STEP}
    payload = {**run.request.input, **run.context, **outputs, **step.input, **extra}
    if run.plan is not None and "user_id" not in payload:
        payload["user_id"] = run.request.user_id
    return payload
