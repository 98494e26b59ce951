"""The governance pipeline: the path of one task, from request to verified goal.

``Agency`` is the in-process API (async-first). ``submit`` runs a task through::

    validate ─► anchor goal ─► for each step: route ─► dispatch (input schema, deadline)
       ─► output schema + SMF metadata ─► (failure? handler → resolution → executor)
    ─► verify the goal on the final output ─► outcome

and appends every step to the audit log before moving on. It knows nothing about
gRPC: ``middleware.grpc_api`` adapts it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .agents import AgentCallable, AgentRegistry, AgentReply, AgentRequest, call_agent
from .audit import AuditLog, AuditRecord, MemoryAuditLog
from .audit.record import Actors, AuditEventType
from .catalog import Catalog, CatalogEntry
from .config import AgencyConfig
from .contracts import CapabilityContract
from .errors import AgencyError, ContractViolation, InvalidInput, NotFound, Unavailable
from .executor import Directive, ResolutionExecutor, StepCursor
from .failures import FailureEvent, FailureProcessor, FailureType, Resolution
from .goals import GoalAssertion, GoalStore, GoalVerdict, MemoryGoalStore, StagedVerifier, Verifier
from .memory_catalog import MemoryCatalog
from .router import Router, RoutingDecision
from .smf import Provenance, SMFMessage
from .tasks import Outcome, StepRecord, TaskRequest, TaskState, TaskStep, check_transition

__all__ = ["Agency"]

Sleeper = Callable[[float], Awaitable[None]]


class _Failed(Exception):
    """Internal: an attempt ended in a typed failure."""

    def __init__(self, ftype: FailureType, detail: str, **context: Any) -> None:
        super().__init__(detail)
        self.ftype, self.detail, self.context = ftype, detail, context


class _Run:
    """Everything about one task while it runs."""

    def __init__(self, request: TaskRequest, goal: GoalAssertion | None, trace_id: str) -> None:
        self.request = request
        self.goal = goal
        self.staged: StagedVerifier | None = None
        self.trace_id = trace_id
        self.state = TaskState.SUBMITTED
        self.steps: list[StepRecord] = []
        self.outputs: dict[str, Any] = {}
        self.failures: list[FailureEvent] = []
        self.resolutions: list[Resolution] = []
        self.routing: list[dict[str, Any]] = []
        self.last_index = 0
        self.last_source = Provenance(
            source=request.provenance.source, reliability_score=request.provenance.reliability_score
        )

    def snapshot(self) -> dict[str, Any]:
        """The state a human taking over needs: what is done, when, and the outputs."""
        return {
            "task_id": self.request.task_id,
            "text": self.request.text,
            "goal_id": self.goal.id if self.goal else "",
            "completed_steps": [
                {"name": s.name, "agent": s.agent, "at": s.started_at.isoformat(), "status": s.status}
                for s in self.steps
            ],
            "outputs": self.outputs,
        }


class Agency:
    """The governance core, in process.

    Args:
        catalog: Where contracts live (default: in memory).
        audit: Where every step is recorded (default: in memory; ``agency serve`` uses a file).
        router: Routes steps to agents (default: a :class:`Router` over ``catalog``).
        failures: Maps failure events to resolutions (default: the built-in handlers).
        config: Core knobs.
        sleep: How retries wait (injected so tests need no real sleeping).
        goals: Where registered goals live (default: in memory).
        verifier: The goal verification engine and its custom checks (default: no checks).
    """

    def __init__(
        self,
        *,
        catalog: Catalog | None = None,
        audit: AuditLog | None = None,
        router: Router | None = None,
        failures: FailureProcessor | None = None,
        config: AgencyConfig | None = None,
        sleep: Sleeper = asyncio.sleep,
        goals: GoalStore | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        self.config = config or AgencyConfig()
        self.catalog: Catalog = catalog or MemoryCatalog()
        self.audit: AuditLog = audit or MemoryAuditLog()
        self.router = router or Router(self.catalog)
        self.failures = failures or FailureProcessor(policy=self.config.failure_policy)
        self.agents = AgentRegistry()
        self.goals: GoalStore = goals if goals is not None else MemoryGoalStore()
        self.verifier = verifier if verifier is not None else Verifier()
        self._executor = ResolutionExecutor(sleep=sleep, max_backups=self.config.max_backups)

    # ----------------------------------------------------------------- registry
    async def register(
        self,
        contract: CapabilityContract | Mapping[str, Any],
        agent: AgentCallable | None = None,
        *,
        replace: bool = False,
    ) -> CatalogEntry:
        """Register a contract (validated) and, for in-process agents, its callable."""
        contract = CapabilityContract.parse(contract, what="capability contract")
        entry = await self.catalog.register(contract, replace=replace)
        if agent is not None:
            self.agents.add(contract.key, agent)
        await self._record(
            AuditEventType.CATALOG_CHANGE,
            outcome="registered",
            agent=contract.key,
            detail={"contract": contract.model_dump(mode="json")},
        )
        return entry

    async def deregister(self, key: str) -> None:
        await self.catalog.deregister(key)
        self.agents.remove(key)
        await self._record(AuditEventType.CATALOG_CHANGE, outcome="deregistered", agent=key)

    def register_goal(
        self, goal: GoalAssertion | Mapping[str, Any], *, replace: bool = False
    ) -> GoalAssertion:
        """Register a goal so tasks can reference it by id.

        Raises:
            InvalidInput: the goal does not validate, or names custom checks that are not
                registered on ``self.verifier.checks``; every problem is named.
            AlreadyExists: another goal with this id is registered and ``replace`` is false.
        """
        goal = GoalAssertion.parse(goal, what="goal assertion")
        self.verifier.require_checks(goal)
        return self.goals.put(goal, replace=replace)

    def get_goal(self, goal_id: str) -> GoalAssertion:
        """The registered goal ``goal_id``.

        Raises:
            NotFound: no such goal.
        """
        return self.goals.get(goal_id)

    async def record_rejection(self, error: InvalidInput, *, component: str = "gateway") -> None:
        """Audit input refused at a boundary (a transport calls this for what it refuses itself)."""
        await self._record(
            AuditEventType.MESSAGE_REJECTED,
            outcome="rejected",
            rule="smf_validation",
            detail={"what": error.what, "problems": [str(p) for p in error.problems]},
        )

    # ------------------------------------------------------------------ routing
    async def route(self, text: str, constraints: Mapping[str, Any] | None = None) -> RoutingDecision:
        """A dry run: what the router would decide for ``text``, with its reasons."""
        wanted = await self.router.constraints_for(text, constraints)
        return await self.router.decide(wanted)

    # ------------------------------------------------------------------- submit
    async def submit(self, request: TaskRequest | Mapping[str, Any] | str) -> Outcome:
        """Run one task through the governance pipeline and return its outcome.

        Raises:
            InvalidInput: the request (or its SMF envelope) does not validate; audited.
            NotFound: the request names a goal that is not registered.
        """
        try:
            req = TaskRequest.parse(request, what="task request")
        except InvalidInput as exc:
            await self.record_rejection(exc)
            raise
        goal = req.goal or (self.get_goal(req.goal_id) if req.goal_id else None)
        run = _Run(req, goal, req.trace_id or uuid.uuid4().hex)
        if goal is not None:
            run.staged = StagedVerifier(goal, self.verifier)
            try:
                run.staged.check_bindings([s.name for s in req.steps] or ["main"])
            except InvalidInput as exc:
                await self._record(
                    AuditEventType.MESSAGE_REJECTED,
                    outcome="rejected",
                    task_id=req.task_id,
                    detail={"problems": [str(p) for p in exc.problems]},
                )
                raise
        await self._audit(run, AuditEventType.TASK_SUBMITTED, "accepted", {"text": req.text})
        envelope = self._envelope(run, "gateway", req.text, sender=f"user:{req.user_id}")
        await self._audit(run, AuditEventType.MESSAGE_ACCEPTED, "accepted", {"message": _brief(envelope)})
        if goal:
            await self._audit(
                run, AuditEventType.GOAL_ANCHORED, "anchored", {"goal": goal.model_dump(mode="json")}
            )
        try:
            timeout = goal.timeout_seconds if goal else None
            async with asyncio.timeout(timeout):
                return await self._run(run)
        except TimeoutError:
            return await self._goal_timeout(run)

    async def _run(self, run: _Run) -> Outcome:
        steps = run.request.steps or [TaskStep(name="main")]
        for step in steps:
            stopped = await self._run_step(run, step)
            if stopped is not None:
                return stopped
        return await self._verify(run)

    async def _run_step(self, run: _Run, step: TaskStep) -> Outcome | None:
        await self._transition(run, TaskState.ROUTING)
        explicit = dict(run.request.constraints)
        if step.action:
            explicit["action"] = step.action
        if step.tags:
            explicit["tags"] = list(step.tags)
        constraints = await self.router.constraints_for(step.text or run.request.text, explicit)
        decision = await self.router.decide(constraints)
        run.routing.append({"step": step.name, **decision.model_dump(mode="json")})
        if decision.refused:
            await self._audit(
                run, AuditEventType.ROUTING_REFUSED, "refused", {"step": step.name, **_decision(decision)}
            )
            event = self._event(
                run, FailureType.CAPABILITY_MISMATCH, step.name, "", 1, [], decision.explanation
            )
            resolution = await self._resolve(run, event)
            return await self._finish(run, TaskState.REJECTED, reason=resolution.reason)
        await self._audit(
            run,
            AuditEventType.ROUTING_DECISION,
            "chosen",
            {"step": step.name, **_decision(decision)},
            agent=decision.chosen,
        )
        cursor = StepCursor(agent=decision.chosen, fallbacks=list(decision.fallbacks))
        record = StepRecord(name=step.name)
        run.steps.append(record)
        while True:
            await self._transition(run, TaskState.DISPATCHED)
            record.agent, record.attempts = cursor.agent, record.attempts + 1
            try:
                output, confidence = await self._attempt(run, step, cursor)
            except _Failed as failed:
                event = self._event(
                    run,
                    failed.ftype,
                    step.name,
                    cursor.agent,
                    cursor.attempt,
                    cursor.fallbacks,
                    failed.detail,
                    failed.context,
                )
                resolution = await self._resolve(run, event)
                directive = await self._executor.apply(resolution, event, cursor, run.snapshot())
                if directive is Directive.RETRY:
                    await self._transition(run, TaskState.RETRYING)
                    continue
                if directive is Directive.SWITCH:
                    await self._transition(run, TaskState.ROUTING)
                    continue
                record.status = "failed"
                assert cursor.stop_state is not None
                return await self._finish(
                    run, cursor.stop_state, reason=cursor.stop_reason, pending=cursor.pending
                )
            record.output, record.confidence_score, record.status = output, confidence, "completed"
            run.outputs[step.name] = output
            return await self._verify_stage(run, step.name, output)

    async def _verify_stage(self, run: _Run, step: str, output: Any) -> Outcome | None:
        """Verify the goal stage bound to ``step`` (if any) as soon as the step returned."""
        if run.staged is None or run.goal is None or run.goal.stage_for(step) is None:
            return None
        await self._transition(run, TaskState.VERIFYING)
        verdict = await run.staged.after_step(step, output)
        assert verdict is not None
        await self._audit(
            run,
            AuditEventType.VERIFICATION,
            verdict.status,
            {"stage": verdict.stage, "step": step, **verdict.model_dump(mode="json")},
        )
        if verdict.passed:
            return None
        return await self._goal_unmet(run, verdict, step, output)

    async def _attempt(self, run: _Run, step: TaskStep, cursor: StepCursor) -> tuple[Any, float]:
        """One call of one agent; every way it can go wrong becomes a :class:`_Failed`."""
        key = cursor.agent
        try:
            entry = await self.catalog.get(key)
            agent = self.agents.get(key)
        except NotFound as exc:
            raise _Failed(FailureType.TOOL_UNAVAILABLE, str(exc)) from None
        contract = entry.contract
        payload = {**run.request.input, **run.outputs, **step.input}
        try:
            contract.check_input(payload)
        except ContractViolation as exc:
            raise _Failed(FailureType.SCHEMA_VIOLATION, str(exc), direction="input") from None
        message = self._envelope(run, key, payload)
        request = AgentRequest(
            message=message,
            contract=contract,
            task_id=run.request.task_id,
            step=step.name,
            attempt=cursor.attempt,
        )
        deadline = contract.slo_latency_ms * self.config.deadline_factor / 1000
        await self._audit(
            run,
            AuditEventType.DISPATCH,
            "dispatched",
            {
                "step": step.name,
                "attempt": cursor.attempt,
                "deadline_ms": round(deadline * 1000, 3),
                "message": _brief(message),
            },
            agent=key,
        )
        started = time.perf_counter()
        await self.router.stats.started(key)
        success = False
        try:
            try:
                raw = await asyncio.wait_for(call_agent(agent, request), timeout=deadline)
            except TimeoutError:
                raise _Failed(
                    FailureType.TOOL_TIMEOUT,
                    f"{key} gave no answer within {deadline * 1000:.0f} ms (its SLO)",
                ) from None
            except (ConnectionError, Unavailable) as exc:
                raise _Failed(FailureType.TOOL_UNAVAILABLE, f"{key} unavailable: {exc}") from None
            except AgencyError as exc:
                raise _Failed(FailureType.TOOL_ERROR, f"{key} failed: {exc}") from None
            except Exception as exc:  # an agent's own bug is a typed failure, not a crash
                raise _Failed(FailureType.TOOL_ERROR, f"{key} raised {type(exc).__name__}: {exc}") from None
            reply = raw if isinstance(raw, AgentReply) else AgentReply(output=raw)
            try:
                contract.check_output(reply.output)
                result = self._envelope(run, "gateway", reply.output, sender=key, reply=reply)
            except InvalidInput as exc:
                raise _Failed(FailureType.SCHEMA_VIOLATION, str(exc), direction="output") from None
            success = True
        finally:
            await self.router.stats.finished(key, success=success)
        elapsed = (time.perf_counter() - started) * 1000
        run.steps[-1].duration_ms = round(elapsed, 3)
        run.last_source = result.metadata.provenance
        await self._audit(
            run,
            AuditEventType.AGENT_RESULT,
            "success",
            {"step": step.name, "duration_ms": round(elapsed, 3), "message": _brief(result)},
            agent=key,
        )
        return reply.output, result.metadata.confidence_score

    async def _verify(self, run: _Run) -> Outcome:
        await self._transition(run, TaskState.VERIFYING)
        final = run.outputs[run.steps[-1].name] if run.steps else None
        if run.goal is None:
            return await self._finish(run, TaskState.COMPLETED, output=final)
        assert run.staged is not None
        verdict = await run.staged.final(final)
        await self._audit(
            run,
            AuditEventType.VERIFICATION,
            verdict.status,
            {"stage": "", **verdict.model_dump(mode="json")},
        )
        if verdict.passed:
            return await self._finish(run, TaskState.COMPLETED, output=final, verdict=verdict)
        return await self._goal_unmet(run, verdict, run.steps[-1].name if run.steps else "", final)

    async def _goal_unmet(self, run: _Run, verdict: GoalVerdict, step: str, output: Any) -> Outcome:
        """A failed (or manually pending) verification becomes a GOAL_UNMET failure event."""
        assert run.goal is not None
        where = f"stage {verdict.stage} of goal {run.goal.id}" if verdict.stage else f"goal {run.goal.id}"
        if verdict.failed_steps:
            failed = "; ".join(f"{s.step}: {s.reason}" for s in verdict.failed_steps)
            detail = f"{where} not met: {failed}"
        else:
            detail = f"{where} awaits manual checks: " + "; ".join(s.step for s in verdict.manual_steps)
        context: dict[str, Any] = {
            "criticality": run.goal.criticality,
            "stage": verdict.stage,
            "failed_steps": [s.step for s in verdict.failed_steps],
        }
        if verdict.manual_steps:
            context["manual_pending"] = [s.step for s in verdict.manual_steps]
        event = self._event(run, FailureType.GOAL_UNMET, step, "", 1, [], detail, context)
        resolution = await self._resolve(run, event)
        cursor = StepCursor(agent="", fallbacks=[])
        await self._executor.apply(resolution, event, cursor, run.snapshot())
        return await self._finish(
            run,
            cursor.stop_state or TaskState.FAILED,
            output=output,
            verdict=verdict,
            reason=cursor.stop_reason,
            pending=cursor.pending,
        )

    async def _goal_timeout(self, run: _Run) -> Outcome:
        assert run.goal is not None
        event = self._event(
            run,
            FailureType.GOAL_TIMEOUT,
            run.steps[-1].name if run.steps else "",
            "",
            1,
            [],
            f"goal {run.goal.id} not reached within {run.goal.timeout_seconds} s",
        )
        resolution = await self._resolve(run, event)
        cursor = StepCursor(agent="", fallbacks=[])
        await self._executor.apply(resolution, event, cursor, run.snapshot())
        return await self._finish(
            run, cursor.stop_state or TaskState.FAILED, reason=cursor.stop_reason, pending=cursor.pending
        )

    # ------------------------------------------------------------------ helpers
    def _event(
        self,
        run: _Run,
        ftype: FailureType,
        step: str,
        agent: str,
        attempt: int,
        fallbacks: list[str],
        detail: str,
        context: dict[str, Any] | None = None,
    ) -> FailureEvent:
        return FailureEvent(
            type=ftype,
            task_id=run.request.task_id,
            trace_id=run.trace_id,
            step=step,
            agent=agent,
            attempt=attempt,
            fallbacks=list(fallbacks),
            detail=detail,
            context=context or {},
        )

    async def _resolve(self, run: _Run, event: FailureEvent) -> Resolution:
        run.failures.append(event)
        await self._audit(
            run,
            AuditEventType.FAILURE,
            event.type.value,
            event.model_dump(mode="json"),
            agent=event.agent,
            rule=event.type.value,
        )
        resolution = self.failures.process(event)
        run.resolutions.append(resolution)
        await self._audit(
            run,
            AuditEventType.RESOLUTION,
            resolution.kind.value,
            resolution.model_dump(mode="json"),
            agent=event.agent,
            rule=f"handler:{event.type.value}",
        )
        return resolution

    async def _transition(self, run: _Run, new: TaskState) -> None:
        if run.state is new:
            return
        check_transition(run.state, new)
        old, run.state = run.state, new
        await self._audit(
            run, AuditEventType.STATE_TRANSITION, new.value, {"from": old.value, "to": new.value}
        )

    async def _finish(
        self,
        run: _Run,
        state: TaskState,
        *,
        output: Any = None,
        verdict: GoalVerdict | None = None,
        reason: str = "",
        pending: dict[str, Any] | None = None,
    ) -> Outcome:
        if state is TaskState.REJECTED and run.state is not TaskState.ROUTING:
            await self._transition(run, TaskState.ROUTING)
        await self._transition(run, state)
        if pending and pending.get("kind") == "human_handover":
            await self._audit(run, AuditEventType.HUMAN_HANDOVER, "escalated", pending)
        await self._audit(
            run,
            AuditEventType.TASK_COMPLETED,
            state.value,
            {"reason": reason, "goal_passed": verdict.passed if verdict else None},
        )
        return Outcome(
            task_id=run.request.task_id,
            trace_id=run.trace_id,
            state=state,
            output=output if state is not TaskState.FAILED or verdict is not None else None,
            goal_id=run.goal.id if run.goal else "",
            goal_verdict=verdict,
            failed_stage=run.staged.failed_stage if run.staged else "",
            stage_verdicts=run.staged.verdicts if run.staged else [],
            steps=run.steps,
            failures=run.failures,
            resolutions=run.resolutions,
            routing=run.routing,
            reason=reason,
            pending=pending or {},
            audit_index=run.last_index,
        )

    def _envelope(
        self,
        run: _Run,
        receiver: str,
        content: Any,
        *,
        sender: str = "gateway",
        reply: AgentReply | None = None,
    ) -> SMFMessage:
        """The SMF message for one hop, validated (an invalid one raises InvalidInput)."""
        provenance = run.last_source
        confidence = run.request.confidence_score
        ttl = run.request.freshness_ttl
        if reply is not None:
            provenance = reply.provenance or Provenance(
                source=sender, reliability_score=provenance.reliability_score
            )
            confidence = reply.confidence_score
            ttl = reply.freshness_ttl if reply.freshness_ttl is not None else ttl
        return SMFMessage.parse(
            {
                "sender": sender,
                "receiver": receiver,
                "content": content,
                "trace_id": run.trace_id,
                "metadata": {
                    "provenance": provenance.model_dump(),
                    "freshness_ttl": ttl,
                    "confidence_score": confidence,
                    "intention_trace": [run.goal.id] if run.goal else [],
                },
            },
            what="SMF message",
        )

    async def _audit(
        self,
        run: _Run,
        event_type: AuditEventType,
        outcome: str,
        detail: dict[str, Any],
        *,
        agent: str = "",
        rule: str = "",
    ) -> None:
        run.last_index = await self._record(
            event_type,
            outcome=outcome,
            detail=detail,
            agent=agent,
            rule=rule,
            task_id=run.request.task_id,
            trace_id=run.trace_id,
            goal_id=run.goal.id if run.goal else "",
            user=run.request.user_id,
            session=run.request.session_id,
        )

    async def _record(
        self,
        event_type: AuditEventType,
        *,
        outcome: str,
        detail: dict[str, Any] | None = None,
        agent: str = "",
        rule: str = "",
        task_id: str = "",
        trace_id: str = "",
        goal_id: str = "",
        user: str = "",
        session: str = "",
    ) -> int:
        return await self.audit.append(
            AuditRecord(
                event_type=event_type.value,
                node=self.config.node_id,
                component="gateway",
                actors=Actors(user=user, agent=agent, session=session),
                task_id=task_id,
                trace_id=trace_id,
                goal_id=goal_id,
                rule=rule,
                outcome=outcome,
                detail=detail or {},
            )
        )

    async def close(self) -> None:
        await self.audit.close()


def _brief(message: SMFMessage) -> dict[str, Any]:
    return message.model_dump(mode="json")


def _decision(decision: RoutingDecision) -> dict[str, Any]:
    return {
        "chosen": decision.chosen,
        "fallbacks": decision.fallbacks,
        "explanation": decision.explanation,
        "constraints": decision.constraints.model_dump(mode="json"),
        "candidates": [c.model_dump() for c in decision.candidates[:10]],
        "rejected": [r.model_dump() for r in decision.rejected[:20]],
    }
