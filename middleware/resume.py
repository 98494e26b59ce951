"""Resuming a task that waits for input, or that was interrupted: from the answer to what
the pipeline does next.

:func:`plan_resume` is pure: it checks that the task is waiting (or interrupted), that the
answer is one of the offered options (or that a human decision fits the handover), and says
where the task continues. An interrupted task continues where it was cut off; the step that
was in flight is dispatched again only when its agent's contract allows it (the task's
``pending["redispatch"]``: ``side_effect_free`` or ``idempotency``). ``Agency.resume``
applies the plan under the task's lock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .contracts import check_against_schema
from .errors import FailedPrecondition, InvalidInput, Problem
from .facts import replace_at
from .interventions import ACCEPT, RETRY, Clarification, HumanDecision, InputRequest, check_answer
from .router import RoutingDecision
from .smf import Provenance
from .tasks import TaskRecord, TaskState, TaskStep

__all__ = ["ResumePlan", "apply_plan", "plan_resume", "prefer"]


@dataclass
class ResumePlan:
    """Where a resumed task continues.

    ``accept``: ``output`` becomes the output of step ``step_index`` (its goal stage is
    verified again) and the task moves on; ``rerun``: step ``step_index`` runs again (on
    ``agent``, or routed afresh), with ``extra_input`` added and ``context`` (input the user
    gave) joining the task's context; ``approve``: the step's output stands unverified (a human
    vouches for it); ``continue``: an interrupted task goes on where it was cut off (its step in
    flight on ``agent``; ``require_agent``: on that agent only, whose idempotency key makes the
    repeat safe); ``fail`` / ``cancel``: the task ends.
    """

    action: Literal["accept", "rerun", "approve", "continue", "fail", "cancel"]
    step_index: int
    reason: str
    output: Any = None
    agent: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)  # where an accepted output comes from
    extra_input: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    require_agent: bool = False


def plan_resume(
    task: TaskRecord,
    steps: list[TaskStep],
    *,
    answer: str | None = None,
    decision: HumanDecision | Mapping[str, Any] | None = None,
    input: Mapping[str, Any] | None = None,
) -> ResumePlan:
    """What resuming ``task`` with ``answer`` (an option id), ``input`` (the fields a plan step
    asked for) or ``decision`` means.

    Raises:
        FailedPrecondition: the task is not waiting for input (nor interrupted); an
            interrupted step that may have acted would be dispatched again.
        InvalidInput: the answer is not an offered option, the input lacks an asked field or
            holds one not asked for or of the wrong type, the decision is malformed, or the
            wrong kind of reply was given.
    """
    if task.state is TaskState.INTERRUPTED:
        if input is not None:
            raise InvalidInput.single(
                "input", "this task was interrupted, it does not wait for input fields", what="resume"
            )
        return _interrupted(task, answer, decision, steps)
    if task.state is not TaskState.INPUT_REQUIRED:
        raise FailedPrecondition(
            f"task {task.task_id} is {task.state.value}, not waiting for input",
            details={"state": task.state.value},
        )
    kind = task.pending.get("kind", "")
    index = min(task.step_index, len(steps) - 1)
    if kind == "approval":
        return _approval(task, decision, index)
    if input is not None and decision is None:
        if kind != "missing_input":
            raise InvalidInput.single("input", "this task does not wait for input fields", what="resume")
        return _given(task, InputRequest.parse(task.pending, what="pending input request"), input, index)
    if kind == "missing_input" and decision is None:
        asked = InputRequest.parse(task.pending, what="pending input request")
        if answer and len(asked.fields) == 1:  # one field asked: a plain answer gives it (a chat reply)
            name = asked.fields[0]
            return _given(task, asked, {name: _typed(answer, asked.schemas.get(name))}, index)
        fields = ", ".join(asked.fields)
        raise InvalidInput.single("input", f"required: this task waits for {fields}", what="resume")
    if decision is not None:
        return _human(task, HumanDecision.parse(decision, what="human decision"), index, steps)
    if kind == "human_handover":
        raise InvalidInput.single("decision", "this task waits for a human decision", what="resume")
    if not answer:
        raise InvalidInput.single("answer", "required: the id of one of the offered options", what="resume")
    question = Clarification.parse(task.pending, what="pending clarification")
    option = check_answer(question, answer)
    audit = {"answer": option.id, "label": option.label}
    held = task.held
    if question.kind == "conflict":
        fact = str(question.conflict.get("fact", ""))
        keys = question.conflict.get("keys") or [fact]  # where the answer stated it (top level before)
        try:
            output = replace_at(held.get("output") or {}, keys, option.value)
        except (KeyError, IndexError, TypeError, ValueError):
            raise FailedPrecondition(
                f"the held output of task {task.task_id} no longer has {fact} at "
                f"{question.conflict.get('path', fact)}",
                details={"fact": fact},
            ) from None
        return ResumePlan(
            "accept",
            index,
            f"conflict on {fact} settled: {option.label}",
            output=output,
            agent=str(held.get("agent", "")),
            provenance=dict(held.get("provenance") or {}),
            audit=audit,
        )
    if option.id == ACCEPT:
        return ResumePlan(
            "accept",
            index,
            "user confirmed the answer",
            output=held.get("output"),
            agent=str(held.get("agent", "")),
            provenance=dict(held.get("provenance") or {}),
            audit=audit,
        )
    clarification = {"question": question.question, "answer": option.label}
    if option.id != RETRY:
        clarification["value"] = option.value
    return ResumePlan(
        "rerun",
        index,
        f"user clarified: {option.label}",
        agent=str(held.get("agent", "")),
        extra_input={"clarification": clarification},
        audit=audit,
    )


def _typed(answer: str, schema: Any) -> Any:
    """A text answer as the value its field's schema wants (``"false"`` for a boolean field)."""
    wanted = schema.get("type") if isinstance(schema, dict) else None
    if wanted in (None, "string") or (isinstance(wanted, list) and "string" in wanted):
        return answer
    try:
        return json.loads(answer)
    except ValueError:
        return answer  # refused by the schema check, naming the field


def _given(task: TaskRecord, asked: InputRequest, given: Mapping[str, Any], index: int) -> ResumePlan:
    """The user's values for the fields a plan step asked for: each asked field, of its type."""
    if not isinstance(given, Mapping):
        raise InvalidInput.single("input", "must be an object of the asked fields", what="resume")
    problems = [Problem(f"input.{f}", "required (asked for)") for f in asked.fields if given.get(f) is None]
    problems += [
        Problem(f"input.{k}", f"not asked for (asked: {', '.join(asked.fields)})")
        for k in given
        if k not in asked.fields
    ]
    for name in asked.fields:
        schema = asked.schemas.get(name)
        if given.get(name) is not None and isinstance(schema, dict):
            try:
                check_against_schema(schema, given[name], what=f"input.{name}")
            except InvalidInput as exc:
                problems += [Problem(f"input.{name}", p.reason) for p in exc.problems]
    if problems:
        raise InvalidInput(problems, what="resume")
    values = {k: given[k] for k in asked.fields}
    return ResumePlan(
        "rerun",
        index,
        f"user gave {', '.join(asked.fields)}",
        context=values,
        audit={"input": sorted(values)},
    )


def _approval(task: TaskRecord, decision: HumanDecision | Mapping[str, Any] | None, index: int) -> ResumePlan:
    """An approval gate: ``approve`` runs the held step on its agent; ``abort`` / ``cancel`` end it."""
    if decision is None:
        raise InvalidInput.single(
            "decision", "this task waits for an approval: decide approve or abort", what="resume"
        )
    d = HumanDecision.parse(decision, what="human decision")
    audit = {"decision": d.model_dump(mode="json"), "gate": task.pending.get("gate", "")}
    who = d.by or "human"
    note = f" ({d.note})" if d.note else ""
    step = str(task.pending.get("step", ""))
    if d.action == "approve":
        agent = str(task.pending.get("agent", ""))
        return ResumePlan(
            "rerun", index, f"{step} on {agent} approved by {who}{note}", agent=agent, audit=audit
        )
    if d.action == "abort":
        return ResumePlan("fail", index, f"approval of {step} rejected by {who}{note}", audit=audit)
    if d.action == "cancel":
        return ResumePlan("cancel", index, f"canceled by {who}{note}", audit=audit)
    raise InvalidInput.single(
        "decision.action", f"an approval is decided with approve or abort, not {d.action}", what="resume"
    )


def _interrupted(
    task: TaskRecord,
    answer: str | None,
    decision: HumanDecision | Mapping[str, Any] | None,
    steps: list[TaskStep],
) -> ResumePlan:
    """An interrupted task: go on (the step in flight again only where its contract allows
    it), or a person's ``provide_output`` / ``abort`` / ``cancel``."""
    if answer:
        raise InvalidInput.single(
            "answer", "an interrupted task is resumed without an answer, or with a decision", what="resume"
        )
    pending = task.pending
    index = task.step_index
    agent = str(pending.get("agent", ""))
    in_flight = bool(pending.get("in_flight"))
    allowed = str(pending.get("redispatch", ""))
    where = f"step {pending.get('step') or 'the final verification'}"
    d = HumanDecision.parse(decision, what="human decision") if decision is not None else None
    audit: dict[str, Any] = {"interrupted_at": pending.get("node", ""), "step": pending.get("step", "")}
    if d is not None:
        audit["decision"] = d.model_dump(mode="json")
        who = d.by or "human"
        note = f" ({d.note})" if d.note else ""
        if d.action == "abort":
            return ResumePlan("fail", min(index, len(steps) - 1), f"aborted by {who}{note}", audit=audit)
        if d.action == "cancel":
            return ResumePlan("cancel", min(index, len(steps) - 1), f"canceled by {who}{note}", audit=audit)
        if index >= len(steps) and d.action != "retry":
            raise InvalidInput.single(
                "decision.action",
                f"the task was interrupted at its final verification: continue it (no decision, or "
                f"retry), abort or cancel, not {d.action}",
                what="resume",
            )
        if d.action == "provide_output":
            return ResumePlan(
                "accept",
                index,
                f"output of {where} provided by {who}{note} after an interruption",
                output=d.output,
                agent=f"human:{who}",
                provenance={"source": f"human:{who}", "reliability_score": 1.0},
                audit=audit,
            )
        if d.action == "approve":
            raise InvalidInput.single(
                "decision.action",
                "an interrupted step has no output to approve: provide_output, retry, abort or cancel",
                what="resume",
            )
    if in_flight and not allowed:
        raise FailedPrecondition(
            f"task {task.task_id} was interrupted while {agent} ran {where} (gateway "
            f"{pending.get('node', '?')} stopped): {agent}'s contract declares neither side_effect_free "
            "nor an idempotency key, so running the step again could repeat what it did. A person "
            "decides instead: provide_output (what the step did), abort or cancel",
            details={"state": task.state.value, "step": str(pending.get("step", "")), "agent": agent},
        )
    if d is not None and d.action == "use_agent":
        if in_flight and allowed == "idempotency" and d.agent != agent:
            raise InvalidInput.single(
                "decision.agent",
                f"{where} was in flight on {agent}, whose idempotency key makes a repeat safe only on "
                f"{agent}: use_agent {agent}, or provide_output, abort or cancel",
                what="resume",
            )
        agent = d.agent
    again = f" dispatched again: {allowed}" if in_flight else ""
    why = f"continued after an interruption ({where}{again})"
    return ResumePlan(
        "continue",
        index,
        why,
        agent=agent if in_flight or (d is not None and d.action == "use_agent") else "",
        audit=audit,
        require_agent=in_flight and allowed == "idempotency",
    )


def _human(task: TaskRecord, d: HumanDecision, index: int, steps: list[TaskStep]) -> ResumePlan:
    audit = {"decision": d.model_dump(mode="json")}
    who = d.by or "human"
    note = f" ({d.note})" if d.note else ""
    if d.action == "abort":
        return ResumePlan("fail", index, f"aborted by {who}{note}", audit=audit)
    if d.action == "cancel":
        return ResumePlan("cancel", index, f"canceled by {who}{note}", audit=audit)
    if d.action == "approve":
        name = steps[index].name
        if name not in task.outputs:
            raise InvalidInput.single(
                "decision.action", f"nothing to approve: step {name} has no output", what="resume"
            )
        return ResumePlan("approve", index, f"output of {name} approved by {who}{note}", audit=audit)
    if d.action == "provide_output":
        return ResumePlan(
            "accept",
            index,
            f"output provided by {who}{note}",
            output=d.output,
            agent=f"human:{who}",
            provenance={"source": f"human:{who}", "reliability_score": 1.0},
            audit=audit,
        )
    agent = d.agent if d.action == "use_agent" else ""
    return ResumePlan("rerun", index, f"{d.action} decided by {who}{note}", agent=agent, audit=audit)


def apply_plan(task: TaskRecord, plan: ResumePlan, steps: list[TaskStep]) -> TaskState:
    """Record an ``accept``, ``rerun``, ``approve`` or ``continue`` plan on ``task``; the state
    the resume claims it in."""
    task.pending = {}
    if plan.action == "continue":  # where it was cut off: the steps done so far stand
        return TaskState.ROUTING if task.step_index < len(steps) else TaskState.VERIFYING
    task.step_index = plan.step_index
    name = steps[plan.step_index].name
    if plan.action == "approve":
        task.step_index += 1
        return TaskState.ROUTING if task.step_index < len(steps) else TaskState.VERIFYING
    if plan.action == "accept":
        provenance = Provenance.parse(plan.provenance or {"source": "user", "reliability_score": 1.0})
        task.complete_step(name, plan.output, agent=plan.agent, provenance=provenance)
        staged = task.goal is not None and task.goal.stage_for(name) is not None
        return TaskState.ROUTING if task.step_index < len(steps) and not staged else TaskState.VERIFYING
    if plan.context:  # input the user gave: the task knows it now (every later step too)
        task.context.update(plan.context)
    if plan.extra_input:  # kept with the task: it still applies if the step is redone
        task.step_inputs[name] = {**task.step_inputs.get(name, {}), **plan.extra_input}
    return TaskState.ROUTING


def prefer(decision: RoutingDecision, agent: str) -> RoutingDecision:
    """``decision`` with ``agent`` first, if the router found it fit; unchanged otherwise."""
    fit = [decision.chosen, *decision.fallbacks] if decision.chosen else []
    if agent not in fit:
        return decision
    return decision.model_copy(
        update={
            "chosen": agent,
            "fallbacks": [a for a in fit if a != agent],
            "explanation": f"{decision.explanation}; resumed on {agent}",
        }
    )
