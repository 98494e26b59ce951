"""Running a plan: which plan a task gets, and its steps in order, branches at the same time.

:class:`PlanRunner` is the pipeline's orchestrator for tasks that name no steps (seed 003
§4.2: the L2 orchestrator decomposes the request). It decides the plan once
(:meth:`PlanRunner.prepare`):

* the task's goal declares a plan → that plan;
* no goal yet, and an intake agent is live (a contract that may ``anchor_goal``) → the intake
  step first; when it anchors a goal, the goal's plan joins after it (:meth:`on_anchor`);
* otherwise the governed planner, when the agency has one (``middleware.planner``), or the one
  step routed by the request's text, as before plans. A request the router refuses outright
  (its action is one no contract may do) is still refused before any agent runs.

Every plan is checked against the live contracts before it runs and audited
(``plan.accepted`` / ``plan.refused``). Then :meth:`run` runs it as a DAG: the steps whose
predecessors are done run together, each branch through the pipeline's own step (routing,
dispatch, its failures handled by its own policy); a step that stops waits for the branches
still running, then the task stops there (``on_failure: continue`` lets the plan go on without
the step instead). While branches run at once the task stays ``dispatched`` (their own
dispatch, result and failure records tell each branch apart).

A step whose input cannot be built asks for it (:meth:`_ask`: ``CONTEXT_AMBIGUITY`` with the
missing fields), after asking the agent of its ``supplied_by`` action when the plan names one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ._model import trusted
from .audit.record import AuditEventType
from .catalog import Catalog, CatalogEntry
from .errors import InvalidInput, Problem
from .executor import Directive, ResolutionExecutor, StepCursor, handover
from .failures import FailureEvent, FailureType, Resolution
from .goals import GoalAssertion, GoalVerdict
from .guards.content_guard import ContentGuard
from .guards.redaction import redact_text, redact_value, redacted
from .intake import ANCHOR_ACTION
from .plan_inputs import Missing, building, resolve_input
from .planner import CatalogAction, Planner, PlanProposal, PlanRequest
from .plans import (
    ANCHOR_STEP,
    MAIN_STEP,
    PLANNER_ACTION,
    PLANNER_STEP,
    Plan,
    PlanStep,
    check_plan,
    required_inputs,
)
from .resume import ResumePlan
from .router import Router
from .tasks import Outcome, StepRecord, TaskRecord, TaskState, TaskStep

__all__ = ["PlanRunner", "check_client_steps", "task_steps"]

RunStep = Callable[..., Awaitable[Outcome | None]]
Audit = Callable[..., Awaitable[None]]

#: Task states a task moves through while working (suppressed while branches run at once).
WORKING = frozenset({TaskState.ROUTING, TaskState.DISPATCHED, TaskState.RETRYING, TaskState.VERIFYING})


@dataclass
class _Stop:
    """How a step asked the task to stop (the pipeline's ``_finish`` arguments), held until the
    steps running beside it have settled."""

    state: TaskState
    output: Any
    verdict: GoalVerdict | None
    reason: str
    pending: dict[str, Any]
    held: dict[str, Any]


@dataclass
class _Branch:
    """One step running under the runner (its own asyncio context: see ``_BRANCH``)."""

    task_id: str
    step: str
    stop: _Stop | None = None
    supplied: list[str] = field(default_factory=list)


#: The step the current asyncio task runs for the runner; the pipeline's ``_finish`` defers to it.
_BRANCH: contextvars.ContextVar[_Branch | None] = contextvars.ContextVar("agency_plan_branch", default=None)


def task_steps(run: TaskRecord) -> list[TaskStep]:
    """The steps of a task with a plan, as the pipeline (resume, bindings) sees them."""
    assert run.plan is not None
    return [
        trusted(
            TaskStep,
            {"name": s.name, "action": s.action, "tags": list(s.tags), "text": s.text, "input": {}},
        )
        for s in run.plan.steps
    ]


def check_client_steps(goal: GoalAssertion, steps: list[TaskStep]) -> None:
    """A client's steps against its goal's plan: a step named as one of the plan's does the
    plan's action (InvalidInput naming each that does not)."""
    if goal.plan is None:
        return
    actions = {s.name: s.action for s in goal.plan.steps}
    problems = [
        Problem(
            f"steps[{i}].action",
            f"step {step.name!r} of goal {goal.id}'s plan does {actions[step.name]}, not {step.action}",
        )
        for i, step in enumerate(steps)
        if step.name in actions and step.action and step.action != actions[step.name]
    ]
    if problems:
        raise InvalidInput(problems, what="task request")


class PlanRunner:
    """Chooses and runs tasks' plans for the pipeline (see the module docstring).

    Args:
        catalog: Where the live contracts are (plans are checked against them).
        router: Reads a request's action (a request refused outright is not planned).
        planner: Proposes plans no goal declares (None: off).
        max_steps: ``limits.max_steps_per_task``.
        run_step: The pipeline's step (route, dispatch, failures, its goal stage).
        verify: The pipeline's final verification (None: its policy retries the last step).
        finish: The pipeline's end of a task segment.
        resolve: A failure event to its resolution (audited).
        executor: Applies resolutions.
        audit: Appends a record of the task.
        transition: Moves the task's state.
        guard: The content guards (with the personal-data guard on, what the planner's model is
            told of the request and the context is redacted first: the model is not an agent
            whose contract lists data classes).
    """

    def __init__(
        self,
        *,
        catalog: Catalog,
        router: Router,
        planner: Planner | None,
        max_steps: int,
        run_step: RunStep,
        verify: Callable[[TaskRecord], Awaitable[Outcome | None]],
        finish: Callable[..., Awaitable[Outcome]],
        resolve: Callable[[TaskRecord, FailureEvent], Awaitable[Resolution]],
        executor: ResolutionExecutor,
        audit: Audit,
        transition: Callable[[TaskRecord, TaskState], Awaitable[None]],
        guard: ContentGuard | None = None,
    ) -> None:
        self._guard = guard
        self._catalog, self._router, self.planner = catalog, router, planner
        self._max_steps = max_steps
        self._run_step, self._verify, self._finish = run_step, verify, finish
        self._resolve, self._executor = resolve, executor
        self._audit, self._transition = audit, transition
        self._parallel: set[str] = set()  # tasks with branches running at once

    # ----------------------------------------------------------- pipeline hooks
    def in_parallel(self, run: TaskRecord, state: TaskState) -> bool:
        """Whether a move of ``run`` to ``state`` is one of its branches' working states
        (not applied: the task stays ``dispatched`` until the branches settled)."""
        return run.task_id in self._parallel and state in WORKING

    def defer(
        self,
        run: TaskRecord,
        state: TaskState,
        *,
        output: Any,
        verdict: GoalVerdict | None,
        reason: str,
        pending: dict[str, Any] | None,
    ) -> Outcome | None:
        """Hold a stop asked for by a step this runner runs (None: not one of its steps)."""
        branch = _BRANCH.get()
        if branch is None or branch.task_id != run.task_id:
            return None
        if branch.stop is None:
            held = dict(run.held) if run.held.get("step") == branch.step else {}
            branch.stop = _Stop(state, output, verdict, reason, dict(pending or {}), held)
        return run.outcome(state)

    # ---------------------------------------------------------------- choosing
    def stage_steps(self, steps: list[TaskStep], goal: GoalAssertion) -> list[str] | None:
        """The steps a task's goal stages must bind to: the client's, else the goal's plan's, else
        the one routed step; None when the planner will propose them (its plan is checked then)."""
        if steps:
            return [s.name for s in steps]
        if goal.plan is not None:
            return goal.plan.names()
        return None if self.planner is not None else [MAIN_STEP]

    def wants_plan(self, run: TaskRecord) -> bool:
        """Whether the runner decides how ``run`` goes (nothing decided yet, no steps given)."""
        return run.plan is None and not run.plan_source and not run.request.steps and not run.steps

    async def prepare(self, run: TaskRecord) -> Outcome | None:
        """Decide the plan of a task that names no steps (once); an Outcome if it stops here."""
        run.plan_source = "none"
        goal = run.goal
        if goal is not None:
            if goal.plan is not None:
                return await self._adopt(run, goal.plan, f"goal:{goal.id}", goal)
            if self.planner is not None:
                run.plan, run.plan_source = Plan(steps=[_planner_step([])]), "planner"
            return None
        if run.request.constraints.get("action") or await self._refused_outright(run):
            return None  # the client named the action, or no contract may do it: one routed step
        if await self._live(ANCHOR_ACTION, tenant=run.tenant):
            intake = PlanStep(name=ANCHOR_STEP, action=ANCHOR_ACTION, after=[])
            run.plan, run.plan_source = Plan(steps=[intake]), "intake"
        elif self.planner is not None:
            run.plan, run.plan_source = Plan(steps=[_planner_step([])]), "planner"
        return None

    async def on_anchor(self, run: TaskRecord, goal: GoalAssertion, names: list[str]) -> list[str] | None:
        """An intake agent anchored ``goal``: the goal's plan joins after the intake step. The step
        names the goal's stages must bind to (None: the planner's plan will be checked instead).

        Raises:
            InvalidInput: the client's steps contradict the goal's plan, or the goal's plan
                cannot run on the live contracts.
        """
        if run.plan is None:
            check_client_steps(goal, run.request.steps)
            return names
        if run.plan_source != "intake":
            return names
        intake = run.plan.steps[0].name
        if goal.plan is not None:
            plan = _joined(run.plan, goal.plan, after=intake)
            problems = await self._problems(run, plan, goal, skip=(intake,))
            if problems:
                await self._audit(run, AuditEventType.PLAN_REFUSED, "refused", _refusal(plan, problems))
                raise InvalidInput(problems, what=f"plan of {goal.id}")
            run.plan, run.plan_source = plan, f"goal:{goal.id}"  # audited after goal.anchored (_step)
            return plan.names()
        if self.planner is not None:
            run.plan = _joined(run.plan, Plan(steps=[_planner_step([])]), after=intake)
            run.plan_source = "planner"
            return None
        return names

    # ------------------------------------------------------------------ running
    async def run(self, run: TaskRecord, first: ResumePlan | None = None) -> Outcome:
        """Run ``run``'s plan from where it is to its verified end or a stop."""
        while True:
            plan = run.plan
            assert plan is not None
            settled = _settled(run)
            if all(s.name in settled for s in plan.steps):
                grown = await self._grow(run)
                if isinstance(grown, Outcome):
                    return grown
                if grown:
                    continue
                verified = await self._verify(run)
                if verified is None:  # the goal's policy retries the last step
                    continue
                return verified
            ready = [
                s for s in plan.steps if s.name not in settled and all(a in settled for a in s.after or [])
            ]
            if len(ready) == 1:
                branch = _Branch(run.task_id, ready[0].name)
                token = _BRANCH.set(branch)
                try:
                    await self._step(run, ready[0], first, branch)
                finally:
                    _BRANCH.reset(token)
                branches = [branch]
            else:
                branches = await self._branches(run, ready, first)
            first = None
            stopped = await self._settle(run, branches)
            if stopped is not None:
                return stopped

    async def _branches(
        self, run: TaskRecord, ready: list[PlanStep], first: ResumePlan | None
    ) -> list[_Branch]:
        """Run ``ready`` at the same time, starting each later step as soon as the steps it waits
        for are done while others still run, until nothing runs; no new step starts once one
        asked the task to stop."""
        if run.state in (TaskState.SUBMITTED, TaskState.VERIFYING):
            await self._transition(run, TaskState.ROUTING)
        await self._transition(run, TaskState.DISPATCHED)
        plan = run.plan
        assert plan is not None
        finished: list[_Branch] = []
        done: asyncio.Queue[_Branch] = asyncio.Queue()
        running: set[str] = set()
        self._parallel.add(run.task_id)
        try:
            async with asyncio.TaskGroup() as group:

                def start(step: PlanStep) -> None:
                    branch = _Branch(run.task_id, step.name)
                    running.add(step.name)
                    group.create_task(self._branch(run, step, first, branch, done), name=f"plan:{step.name}")

                for step in ready:
                    start(step)
                while running:
                    branch = await done.get()
                    running.discard(branch.step)
                    finished.append(branch)
                    await self._skip_if_allowed(run, branch)
                    if not running or any(b.stop is not None for b in finished):
                        continue  # nothing left beside it (the next steps start afresh), or a stop
                    settled = _settled(run) - running  # a branch is done when it says so
                    for step in plan.steps:
                        waits = step.after or []
                        if (
                            step.name not in settled
                            and step.name not in running
                            and all(a in settled for a in waits)
                        ):
                            start(step)
        except BaseExceptionGroup as group_error:  # a branch's own error, not a group of them
            raise group_error.exceptions[0] from None
        finally:
            self._parallel.discard(run.task_id)
        return finished

    async def _branch(
        self,
        run: TaskRecord,
        step: PlanStep,
        first: ResumePlan | None,
        branch: _Branch,
        done: asyncio.Queue[_Branch],
    ) -> None:
        _BRANCH.set(branch)  # this task's own context
        try:
            await self._step(run, step, first, branch)
        finally:
            done.put_nowait(branch)

    async def _step(self, run: TaskRecord, step: PlanStep, first: ResumePlan | None, branch: _Branch) -> None:
        """One step: its input built (or asked for), then the pipeline's step."""
        if step.action == PLANNER_ACTION:
            await self._plan(run, step)
            return
        built: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if step.input is not None:
            resolved = resolve_input(run, step)
            if resolved.missing and step.supplied_by and not _tried_supply(run, step):
                await self._supply(run, step, resolved.missing)
                if branch.stop is not None:
                    return
                resolved = resolve_input(run, step)
            if resolved.missing:
                await self._ask(run, step, resolved.missing)
                return
            built = building(run, step, resolved)
        names = [s.name for s in run.plan.steps] if run.plan is not None else []
        agent = first.agent if first is not None and names.index(step.name) == first.step_index else ""
        with built:
            await self._run_step(run, _task_step(step), agent=agent, extra=run.step_inputs.get(step.name))
        if run.plan is not None and len(run.plan.steps) > len(names) and run.plan_source.startswith("goal:"):
            await self._accepted(run, run.goal)  # the intake anchored a goal: its plan joined
        record = run.step_record(step.name)
        if branch.stop is None and (record is None or record.status != "completed"):
            self._redo(run, step)

    def _redo(self, run: TaskRecord, step: PlanStep) -> None:
        """A step that returned without its output: redo the step an input went stale in (and
        what came after it), or this one (its goal stage's policy retries it)."""
        stale = next(
            (
                str(f.context.get("stale_step", ""))
                for f in reversed(run.failures)
                if f.step == step.name and f.type is FailureType.STALE_DATA
            ),
            "",
        )
        plan = run.plan
        if not stale or plan is None or stale not in plan.names():
            return
        for name in [stale, *plan.descendants(stale)]:
            record = run.step_record(name)
            if record is not None and record.status == "completed":
                record.status = "pending"

    async def _settle(self, run: TaskRecord, branches: list[_Branch]) -> Outcome | None:
        """End the task with the first stop the branches asked for (None: none did)."""
        for branch in branches:
            stop = branch.stop
            if stop is None or await self._skip_if_allowed(run, branch):
                continue
            assert run.plan is not None
            run.step_index = run.plan.names().index(branch.step)
            if stop.held:
                run.held = stop.held
            return await self._finish(
                run,
                stop.state,
                output=stop.output,
                verdict=stop.verdict,
                reason=stop.reason,
                pending=stop.pending,
            )
        return None

    async def _skip_if_allowed(self, run: TaskRecord, branch: _Branch) -> bool:
        """A stopped step whose plan says ``on_failure: continue`` is skipped: the plan goes on
        without it (never an approval, nor a goal stage that failed)."""
        stop = branch.stop
        if stop is None or run.plan is None:
            return False
        step = run.plan.step(branch.step)
        if (
            step.on_failure != "continue"
            or stop.verdict is not None
            or stop.pending.get("kind") == "approval"
        ):
            return False
        branch.stop = None
        record = run.step_record(step.name)
        if record is None:
            record = StepRecord.begin(step.name)
            run.steps.append(record)
        record.status = "skipped"
        await self._audit(
            run,
            AuditEventType.PLAN_SKIPPED,
            "skipped",
            {
                "step": step.name,
                "reason": stop.reason,
                "failure": next((f.detail for f in reversed(run.failures) if f.step == step.name), ""),
                "stopped_as": stop.state.value,
            },
        )
        return True

    # ---------------------------------------------------------- missing input
    async def _supply(self, run: TaskRecord, step: PlanStep, missing: list[Missing]) -> None:
        """Ask the agent of ``step.supplied_by`` for what ``step`` is missing: a governed step of
        its own (``<step>-supply``); what it answers joins the task's context."""
        name = f"{step.name}-supply"
        text = step.text or run.request.text
        supply = trusted(
            TaskStep,
            {
                "name": name,
                "action": step.supplied_by,
                "tags": [],
                "text": text,
                "input": {"missing": [m.field for m in missing]},
            },
        )
        await self._run_step(run, supply, agent="", extra={})
        record = run.step_record(name)
        output = run.outputs.get(name) if record is not None and record.status == "completed" else None
        if not isinstance(output, dict):
            return
        context = output.get("context")
        found: dict[str, Any] = context if isinstance(context, dict) else {}
        for m in missing:
            for candidate in (output, found):
                if m.field in candidate and candidate[m.field] is not None:
                    run.context.setdefault(m.key, candidate[m.field])
                    break

    async def _ask(self, run: TaskRecord, step: PlanStep, missing: list[Missing]) -> None:
        """``CONTEXT_AMBIGUITY`` with the missing fields: by default the user is asked for them
        (a ``missing_input`` question, answered by ``resume(input=...)``)."""
        fields = [m.key for m in missing]
        record = run.step_record(step.name)
        if record is None:
            record = StepRecord.begin(step.name)
            run.steps.append(record)
        record.status = "pending"
        event = run.failure_event(
            FailureType.CONTEXT_AMBIGUITY,
            step=step.name,
            detail=f"{step.name} needs {', '.join(fields)}, which the task does not know",
            context={
                "missing": [m.described() for m in missing],
                "question": _question(run, step, missing),
                "schemas": await self._schemas(step, missing, tenant=run.tenant),
            },
        )
        await self._stop_for(run, event)

    async def _schemas(self, step: PlanStep, missing: list[Missing], *, tenant: str) -> dict[str, Any]:
        """The JSON Schema of each missing field, from a contract that can do the step (one a
        task of ``tenant`` may be routed to)."""
        out: dict[str, Any] = {}
        for entry in await self._catalog.candidates(step.action):
            properties = entry.contract.input_schema.get("properties")
            if entry.stale or step.action not in entry.contract.can_do or not isinstance(properties, dict):
                continue
            if not entry.contract.routable_for(tenant):
                continue
            for m in missing:
                if m.field in properties and m.key not in out:
                    out[m.key] = properties[m.field]
        return out

    async def _stop_for(self, run: TaskRecord, event: FailureEvent) -> None:
        """Resolve ``event`` and stop the step (a resolution that would retry or switch agents
        cannot supply what is missing: a person decides)."""
        resolution = await self._resolve(run, event)
        cursor = StepCursor(agent="", fallbacks=[])
        directive = await self._executor.apply(resolution, event, cursor, run)
        if directive is not Directive.STOP:
            cursor.pending = handover(run, event, resolution.reason).model_dump(mode="json")
            cursor.stop_state, cursor.stop_reason = TaskState.INPUT_REQUIRED, resolution.reason
        if run.state in (TaskState.SUBMITTED, TaskState.VERIFYING):
            await self._transition(run, TaskState.ROUTING)
        await self._finish(
            run,
            cursor.stop_state or TaskState.FAILED,
            reason=cursor.stop_reason,
            pending=cursor.pending,
            output=None,
            verdict=None,
        )

    # ----------------------------------------------------------------- planning
    async def _grow(self, run: TaskRecord) -> bool | Outcome:
        """Every step is done: a plan that ended with the intake step (no goal plan joined)
        goes on with the planner's step or the one step routed by the request's text; a plan
        that ended with the planner's step (a person wrote its output) takes that as the plan."""
        plan = run.plan
        assert plan is not None
        last = plan.steps[-1]
        if last.action == PLANNER_ACTION:
            return await self._adopt_written(run, last)
        if run.plan_source != "intake" or last.action != ANCHOR_ACTION:
            return False
        if self.planner is not None:
            run.plan, run.plan_source = (
                _joined(plan, Plan(steps=[_planner_step([])]), after=last.name),
                "planner",
            )
        else:
            main = PlanStep(name=MAIN_STEP, action="", after=[])
            run.plan, run.plan_source = _joined(plan, Plan(steps=[main]), after=last.name), "gateway"
            await self._accepted(run, run.goal)
        return True

    async def _plan(self, run: TaskRecord, step: PlanStep) -> None:
        """The planner's step: propose, check, audit, then the plan joins (or the task stops
        with a question or a handover)."""
        assert self.planner is not None
        request = await self._plan_request(run, step)
        try:
            proposal = await self.planner.propose(request)
        except Exception as exc:  # a planner that fails proposes nothing; a person decides
            proposal = PlanProposal(reason=f"the planner failed: {type(exc).__name__}: {exc}")
        await self._audit(
            run,
            AuditEventType.PLAN_PROPOSED,
            "proposed",
            {"planner": self.planner.name, **proposal.described()},
        )
        record = run.step_record(step.name) or StepRecord.begin(step.name)
        if record not in run.steps:
            run.steps.append(record)
        record.agent, record.attempts = f"planner:{self.planner.name}", record.attempts + 1
        if proposal.plan is not None:
            stopped = await self._take(run, step, proposal.plan, "planner")
            if stopped:
                return
            run.complete_step(step.name, {"plan": run.plan.summary() if run.plan else []}, agent=record.agent)
            return
        await self._refuse(
            run, step, [Problem("plan", proposal.reason or "the planner asks first")], proposal=proposal
        )

    async def _adopt_written(self, run: TaskRecord, step: PlanStep) -> bool | Outcome:
        """The planner's step has an output no plan joined from (a person provided it)."""
        output = run.outputs.get(step.name)
        written = output.get("plan", output) if isinstance(output, dict) else output
        record = run.step_record(step.name)
        if record is not None:
            record.status = "pending"
        branch = _Branch(run.task_id, step.name)
        token = _BRANCH.set(branch)
        try:
            stopped = await self._take(run, step, written, f"person:{record.agent if record else ''}")
        finally:
            _BRANCH.reset(token)
        if stopped:
            return await self._settle(run, [branch]) or False
        if record is not None:
            record.status = "completed"
        return True

    async def _take(self, run: TaskRecord, step: PlanStep, data: Any, source: str) -> bool:
        """Check a proposed plan and join it after ``step``; False when it joined, True when the
        task stops (refused: a question or a handover)."""
        try:
            proposed = Plan.parse(data, what="proposed plan")
        except InvalidInput as exc:
            problems = [
                Problem(f"proposal.{p.field}" if p.field else "proposal", p.reason) for p in exc.problems
            ]
            await self._refuse(run, step, problems)
            return True
        plan = run.plan
        assert plan is not None
        clash = [
            Problem("proposal.steps", f"{n!r} is a step already")
            for n in proposed.names()
            if n in plan.names()
        ]
        joined = _joined(plan, proposed, after=step.name) if not clash else plan
        problems = clash or [
            _in_proposal(p, len(plan.steps))  # its own step numbers, not the joined plan's
            for p in await self._problems(
                run, joined, run.goal, skip=tuple(s.name for s in plan.steps), prefix="proposal"
            )
        ]
        if problems:
            await self._refuse(run, step, problems)
            return True
        run.plan, run.plan_source = joined, source
        await self._accepted(run, run.goal)
        return False

    async def _refuse(
        self,
        run: TaskRecord,
        step: PlanStep,
        problems: list[Problem],
        *,
        proposal: PlanProposal | None = None,
    ) -> None:
        """A plan refused (or none proposed): audited with the reasons, then a clarification
        (the planner's question with its options) or a handover to a person — never a guess."""
        await self._audit(
            run,
            AuditEventType.PLAN_REFUSED,
            "refused",
            {"source": "planner", "problems": [str(p) for p in problems]},
        )
        record = run.step_record(step.name)
        if record is not None:
            record.status = "failed"
        question = proposal.question if proposal is not None else ""
        options = proposal.options if proposal is not None else []
        event = run.failure_event(
            FailureType.CONTEXT_AMBIGUITY,
            step=step.name,
            agent=f"planner:{self.planner.name}" if self.planner is not None else "",
            detail="no plan: " + "; ".join(str(p) for p in problems),
            context={
                "plan_refused": [str(p) for p in problems],
                **({"question": question, "options": options} if question else {}),
            },
        )
        await self._stop_for(run, event)

    async def _plan_request(self, run: TaskRecord, step: PlanStep) -> PlanRequest:
        # the planner is told only of the contracts this task may be routed to (its tenant's, shared)
        entries = [
            e for e in await self._catalog.all() if not e.stale and e.contract.routable_for(run.tenant)
        ]
        actions: dict[str, CatalogAction] = {}
        for entry in sorted(entries, key=lambda e: e.key):
            contract = entry.contract
            for action in contract.can_do:
                if action == ANCHOR_ACTION or action in contract.cannot_do:
                    continue
                known = actions.get(action)
                properties = contract.input_schema.get("properties")
                inputs = sorted(properties) if isinstance(properties, dict) else []
                actions[action] = CatalogAction(
                    action=action,
                    agents=[*(known.agents if known else []), contract.key],
                    description=(known.description if known else "") or contract.description,
                    required_inputs=sorted(
                        {*(known.required_inputs if known else []), *required_inputs(contract)}
                    ),
                    inputs=sorted({*(known.inputs if known else []), *inputs}),
                )
        scope = run.goal.intention_scope.actions if run.goal and run.goal.intention_scope else []
        plan = run.plan
        assert plan is not None
        clarification = (run.step_inputs.get(step.name) or {}).get("clarification")
        text, given, context = run.request.text, dict(run.request.input), dict(run.context)
        guard = self._guard
        if guard is not None and guard.personal_data:  # the model sees no personal data
            text = redact_text(text, guard.scanner, redacted, path="text")
            given, context = (
                redact_value(given, guard.scanner, redacted),
                redact_value(context, guard.scanner, redacted),
            )
        return PlanRequest(
            text=text,
            language=run.language,
            input=given,
            context=context,
            goal=run.goal,
            actions=[a for name, a in sorted(actions.items()) if not scope or name in scope],
            max_steps=max(1, self._max_steps - len(plan.steps)),
            done=[s.name for s in plan.steps if s.name != step.name],
            clarification=clarification if isinstance(clarification, dict) else None,
        )

    # ------------------------------------------------------------------ checks
    async def _adopt(self, run: TaskRecord, plan: Plan, source: str, goal: GoalAssertion) -> Outcome | None:
        """A goal's plan for a task that names no steps: checked, audited, adopted."""
        problems = await self._problems(run, plan, goal)
        if problems:
            await self._audit(run, AuditEventType.PLAN_REFUSED, "refused", _refusal(plan, problems))
            step = plan.steps[0]
            event = run.failure_event(
                FailureType.CONTEXT_AMBIGUITY,
                step=step.name,
                detail=f"the plan of {goal.id} cannot run: " + "; ".join(str(p) for p in problems),
                context={"plan_refused": [str(p) for p in problems]},
            )
            run.plan = plan  # a person deciding sees which plan it was
            branch = _Branch(run.task_id, step.name)
            token = _BRANCH.set(branch)
            try:
                await self._stop_for(run, event)
            finally:
                _BRANCH.reset(token)
            return await self._settle(run, [branch])
        run.plan, run.plan_source = plan, source
        await self._accepted(run, goal)
        return None

    async def _problems(
        self,
        run: TaskRecord,
        plan: Plan,
        goal: GoalAssertion | None,
        *,
        skip: tuple[str, ...] = (),
        prefix: str = "plan",
    ) -> list[Problem]:
        """Why ``plan`` cannot run on the live contracts now (its actions' candidates only)."""
        wanted = {s.action for s in plan.steps if s.action and not s.action.startswith("@")}
        wanted |= {s.supplied_by for s in plan.steps if s.supplied_by}
        contracts = {}
        for action in sorted(wanted):
            for entry in await self._catalog.candidates(action):
                if not entry.stale and entry.contract.routable_for(run.tenant):
                    contracts[entry.key] = entry.contract
        scope = goal.intention_scope.actions if goal is not None and goal.intention_scope is not None else []
        return check_plan(
            plan,
            contracts.values(),
            prefix=prefix,
            scope_actions=scope,
            stages={s.name: s.step for s in goal.stages} if goal is not None else None,
            max_steps=self._max_steps,
            skip=skip,
        )

    async def _accepted(self, run: TaskRecord, goal: GoalAssertion | None) -> None:
        plan = run.plan
        assert plan is not None
        await self._audit(
            run,
            AuditEventType.PLAN_ACCEPTED,
            "accepted",
            {
                "source": run.plan_source,
                "goal_id": goal.id if goal is not None else "",
                "steps": plan.summary(),
                "branches": plan.branches(),
            },
        )

    async def _live(self, action: str, *, tenant: str = "") -> bool:
        entries: list[CatalogEntry] = await self._catalog.candidates(action)
        return any(
            not e.stale
            and action in e.contract.can_do
            and action not in e.contract.cannot_do
            and e.contract.routable_for(tenant)
            for e in entries
        )

    async def _refused_outright(self, run: TaskRecord) -> bool:
        """Whether the router refuses the request's own action (read from its text): then it is
        refused before any agent runs, intake included."""
        constraints = await self._router.constraints_for(run.request.text, run.request.constraints)
        if not constraints.action:
            return False
        return (await self._router.decide(constraints, tenant=run.tenant)).refused


def _question(run: TaskRecord, step: PlanStep, missing: list[Missing]) -> str:
    """The question for the user, in the user's language."""
    if run.language == "zh":
        return f"为继续办理（{step.name}），请提供：{'、'.join(m.key for m in missing)}"
    return f"To go on with {step.name}, please give: {', '.join(m.key for m in missing)}"


_STEP_INDEX = re.compile(r"^proposal\.steps\[(\d+)\]")


def _in_proposal(problem: Problem, offset: int) -> Problem:
    """A problem of the joined plan named by the proposal's own step number."""
    found = _STEP_INDEX.match(problem.field)
    if found is None:
        return problem
    return Problem(
        f"proposal.steps[{int(found.group(1)) - offset}]{problem.field[found.end() :]}", problem.reason
    )


def _settled(run: TaskRecord) -> set[str]:
    return {s.name for s in run.steps if s.status in ("completed", "skipped")}


def _tried_supply(run: TaskRecord, step: PlanStep) -> bool:
    return run.step_record(f"{step.name}-supply") is not None


def _task_step(step: PlanStep) -> TaskStep:
    return trusted(
        TaskStep,
        {"name": step.name, "action": step.action, "tags": list(step.tags), "text": step.text, "input": {}},
    )


def _planner_step(after: list[str]) -> PlanStep:
    return PlanStep(name=PLANNER_STEP, action=PLANNER_ACTION, after=after)


def _joined(plan: Plan, more: Plan, *, after: str) -> Plan:
    """``plan`` followed by ``more``, whose first steps wait for ``after``."""
    steps = [s.model_copy() for s in plan.steps]
    for s in more.steps:
        steps.append(s.model_copy(update={"after": list(s.after or []) or [after]}))
    return Plan(steps=steps)


def _refusal(plan: Plan, problems: list[Problem]) -> dict[str, Any]:
    return {"steps": plan.summary(), "problems": [str(p) for p in problems]}
