"""Dispatch: one call of one agent, and every way it can go wrong as a typed failure.

:class:`Dispatcher` checks the agent's circuit, validates the input against the
contract, wraps it in an SMF envelope, calls the agent under the deadline derived
from its SLO, validates the output, and runs the detectors on the answer. Whatever
goes wrong leaves as :class:`AttemptFailed` carrying the failure type; the pipeline
turns it into a failure event.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._model import trusted
from .agents import AgentRegistry, AgentReply, AgentRequest, call_agent
from .audit.record import AuditEventType
from .catalog import Catalog
from .circuit_breaker import CircuitBreaker
from .contracts import CapabilityContract
from .detectors import AgentResult, Detectors, SourcedOutput
from .drift import Answer, DriftFinding, IntentJudge, RuleBasedIntentJudge, judge_all, out_of_scope
from .errors import (
    AgencyError,
    AgentFailure,
    ContractViolation,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    Unavailable,
)
from .executor import StepCursor
from .failures import FailureType
from .goals import GoalAssertion, GoalStore
from .guards.content_guard import GUARD_RECORD, ContentGuard
from .guards.policy import PolicyGate
from .intake import ANCHOR_ACTION, Intake
from .limits import json_size
from .metering import Metering
from .plan_inputs import step_payload
from .reliability import ReliabilityParts, ReliabilityScorer, Testimony, WeightedReliabilityScorer
from .router import Router, RoutingDecision
from .routing_stats import RoutingStats
from .smf import DEFAULT_TIME_CRITICAL_DOMAINS, Provenance, SMFMessage, SMFMetadata, new_id, utcnow
from .task_progress import TaskProgress, activate, deactivate
from .tasks import TaskRecord, TaskStep
from .trace_context import current_traceparent

__all__ = ["AttemptFailed", "AttemptResult", "Dispatcher", "brief", "decision_detail", "envelope"]

Audit = Callable[..., Awaitable[None]]


class AttemptFailed(Exception):
    """Internal: an attempt ended in a typed failure."""

    def __init__(
        self, ftype: FailureType, detail: str, held: dict[str, Any] | None = None, **context: Any
    ) -> None:
        super().__init__(detail)
        self.ftype, self.detail, self.context, self.held = ftype, detail, context, held or {}


@dataclass(frozen=True)
class AttemptResult:
    """The answer of one successful attempt (:meth:`Dispatcher.attempt`).

    Attributes:
        output: The agent's output (contract-checked).
        confidence: The agent's confidence score, if it gave one.
        provenance: Where the answer came from, with its reliability score.
        fresh_until: When a time-critical answer expires (None: it does not).
    """

    output: Any
    confidence: float | None
    provenance: Provenance
    fresh_until: datetime | None


class Dispatcher:
    """Calls agents for the pipeline (see the module docstring)."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        agents: AgentRegistry,
        router: Router,
        breaker: CircuitBreaker,
        detectors: Detectors,
        deadline_factor: float,
        audit: Audit,
        clock: Callable[[], datetime] = utcnow,
        scorer: ReliabilityScorer | None = None,
        time_critical_domains: frozenset[str] = DEFAULT_TIME_CRITICAL_DOMAINS,
        intent_judges: list[IntentJudge] | None = None,
        max_output_bytes: int | None = None,
        guard: ContentGuard | None = None,
        policy: PolicyGate | None = None,
        goals: GoalStore | None = None,
        metering: Metering | None = None,
        progress: Callable[[TaskRecord, str, str], TaskProgress] | None = None,
    ) -> None:
        self._guard = guard
        self._policy = policy
        self._goals = goals
        self._metering = metering
        self._progress = progress
        self._judges: list[IntentJudge] = (
            list(intent_judges) if intent_judges is not None else [RuleBasedIntentJudge()]
        )
        self._clock = clock
        self._scorer: ReliabilityScorer = scorer or WeightedReliabilityScorer()
        self._time_critical_domains = frozenset(d.lower() for d in time_critical_domains)
        self._max_output_bytes = max_output_bytes
        self._catalog = catalog
        self._agents = agents
        self._router = router
        self._stats: RoutingStats = router.stats
        self._breaker = breaker
        self._detectors = detectors
        self._deadline_factor = deadline_factor
        self._audit = audit

    def _in_process(self, contract: CapabilityContract, agent: Any) -> bool:
        """Whether a call of ``agent`` stays in this process: a callable attached here, for a
        contract that names no endpoint, that does not forward the message elsewhere itself
        (such as an MCP tool over stdio, marked ``leaves_process``)."""
        return (
            not contract.endpoint
            and contract.key in self._agents
            and not getattr(agent, "leaves_process", False)
        )

    async def route(self, run: TaskRecord, step: TaskStep) -> RoutingDecision:
        """Route ``step``, skipping agents whose circuit is open; when only those fit, pick the
        best of them anyway so the dispatch turns into TOOL_UNAVAILABLE (and its resolution)."""
        explicit = dict(run.request.constraints)
        if step.action:
            explicit["action"] = step.action
        if step.tags:
            explicit["tags"] = list(step.tags)
        constraints = await self._router.constraints_for(step.text or run.request.text, explicit)
        open_circuits = self._breaker.open_agents()
        tenant = run.tenant
        decision = await self._router.decide(constraints, exclude=open_circuits, tenant=tenant)
        if self._policy is not None:  # agents a policy forbids are left out
            decision = await self._policy.route(
                run,
                step,
                decision,
                contract_of=self._contract_of,
                redecide=lambda denied: self._router.decide(
                    constraints, exclude=[*open_circuits, *denied], tenant=tenant
                ),
                audit=self._audit,
            )
        if decision.refused and open_circuits:
            unfiltered = await self._router.decide(constraints, tenant=tenant)
            if not unfiltered.refused:
                unfiltered.fallbacks = []
                decision = unfiltered
        return await self._within_scope(run, step, decision)

    async def _within_scope(
        self, run: TaskRecord, step: TaskStep, decision: RoutingDecision
    ) -> RoutingDecision:
        """``decision`` without the agents outside the goal's intention scope (rejected with
        constraint ``intention_scope``): what is out of scope is never dispatched, nor used as a
        backup. When none is left the decision is refused: :meth:`scope_drift` says why."""
        goal = run.goal
        if goal is None or goal.intention_scope is None or decision.refused:
            return decision
        refused: dict[str, tuple[str, str]] = {}
        for key in (decision.chosen, *decision.fallbacks):
            found = await self._out_of_scope(goal, step, decision.constraints.action, key)
            if found is not None:
                refused[key] = ("intention_scope", found.reason)
        return self._router.restrict(decision, refused)

    async def _out_of_scope(
        self, goal: GoalAssertion, step: TaskStep, action: str, key: str
    ) -> DriftFinding | None:
        try:
            contract = (await self._catalog.get(key)).contract
        except NotFound:
            return None  # gone: the dispatch finds out (TOOL_UNAVAILABLE)
        return out_of_scope(
            goal, action=action, agent=key, tags=contract.tags, can_do=contract.can_do, step=step.name
        )

    async def scope_drift(
        self, run: TaskRecord, step: TaskStep, decision: RoutingDecision
    ) -> DriftFinding | None:
        """Why a refused ``decision`` was refused for the goal's intention scope (every agent that
        fit the contracts is outside it), or None when it was refused for anything else."""
        if run.goal is None or not decision.refused:
            return None
        for rejection in decision.rejected:
            if rejection.constraint == "intention_scope":
                found = await self._out_of_scope(run.goal, step, decision.constraints.action, rejection.agent)
                if found is not None:
                    return found
        return None

    async def _contract_of(self, key: str) -> CapabilityContract:
        return (await self._catalog.get(key)).contract

    async def attempt(
        self, run: TaskRecord, step: TaskStep, cursor: StepCursor, extra: dict[str, Any]
    ) -> AttemptResult:
        """One call of one agent; every way it can go wrong becomes a :class:`AttemptFailed`."""
        key = cursor.agent
        try:
            entry = await self._catalog.get(key)
            agent = self._agents.resolve(entry.contract)
        except (NotFound, FailedPrecondition) as exc:  # gone, or remote with no way to call it
            raise AttemptFailed(FailureType.TOOL_UNAVAILABLE, str(exc)) from None
        contract = entry.contract
        if not contract.routable_for(run.tenant):  # never another tenant's agent, however named
            raise AttemptFailed(FailureType.TOOL_UNAVAILABLE, f"no agent {key} for this task's tenant")
        _check_inputs_fresh(run, step, self._clock())
        payload = step_payload(run, step, extra)  # a plan step: its mapped input (plan_inputs.py)
        try:
            contract.check_input(payload)
        except ContractViolation as exc:
            raise AttemptFailed(FailureType.SCHEMA_VIOLATION, str(exc), direction="input") from None
        text = step.text or run.request.text
        classes: set[str] = set()
        if self._guard is not None:  # injection in the user's parts; personal data the agent may not get
            screened = await self._guard.screen_request(run, step, contract, payload, text, extra)
            classes = screened.redactions.seen
            if (stop := screened.detection) is not None:
                raise AttemptFailed(stop.type, stop.detail, **stop.context)
            payload, text = screened.payload, screened.text
            if screened.redactions:
                mode = self._guard.config.personal_data.mode
                detail = {"step": step.name, "mode": mode, **screened.redactions.as_detail()}
                await self._audit(run, GUARD_RECORD, mode, detail, agent=key)
        if self._policy is not None:  # policies as code, with the data classes of the input
            denied = await self._policy.dispatch(run, step, contract, data_classes=classes, audit=self._audit)
            if denied is not None:
                raise AttemptFailed(denied.type, denied.detail, **denied.context)
        message = envelope(run, key, payload, now=self._clock())
        deadline = contract.slo_latency_ms * self._deadline_factor / 1000
        request = _agent_request(run, step, cursor, message, contract, deadline, text)
        await self._audit(
            run,
            AuditEventType.DISPATCH,
            "dispatched",
            {
                "step": step.name,
                "attempt": cursor.attempt,
                "deadline_ms": round(deadline * 1000, 3),
                "message": brief(message),
            },
            agent=key,
            barrier=not (contract.side_effect_free and self._in_process(contract, agent)),
        )
        if not self._breaker.allow(key):  # just before the call: a half-open probe is always settled
            raise AttemptFailed(
                FailureType.TOOL_UNAVAILABLE, f"{key} unavailable: its circuit breaker is open"
            )
        started = time.perf_counter()
        await self._stats.started(key)
        success = reached = False
        # an agent whose contract asks for it reports progress to the task's event stream
        progress = (
            self._progress(run, step.name, key)
            if contract.stream_progress and self._progress is not None
            else None
        )
        try:
            try:
                async with asyncio.timeout(deadline):  # in this task: wait_for would start another
                    raw = await _call(agent, request, progress)
            except TimeoutError:
                raise AttemptFailed(
                    FailureType.TOOL_TIMEOUT,
                    f"{key} gave no answer within {deadline * 1000:.0f} ms (its SLO)",
                ) from None
            except (ConnectionError, Unavailable) as exc:
                raise AttemptFailed(FailureType.TOOL_UNAVAILABLE, f"{key} unavailable: {exc}") from None
            except AgentFailure as exc:  # the agent reports a typed failure itself
                reached = True
                raise AttemptFailed(
                    FailureType.of(exc.failure_type), f"{key}: {exc}", **exc.context
                ) from None
            except AgencyError as exc:
                reached = True
                raise AttemptFailed(FailureType.TOOL_ERROR, f"{key} failed: {exc}") from None
            except Exception as exc:  # an agent's own bug is a typed failure, not a crash
                reached = True
                raise AttemptFailed(
                    FailureType.TOOL_ERROR, f"{key} raised {type(exc).__name__}: {exc}"
                ) from None
            reached = True
            reply = raw if isinstance(raw, AgentReply) else AgentReply(output=raw)
            if self._metering is not None and reply.usage:  # spent, whatever becomes of the answer
                await self._metering.record(
                    run, step=step.name, agent=key, usage=reply.usage, audit=self._audit
                )
            if self._guard is not None:  # the task's tokens back into values, if the contract allows
                restored, count = self._guard.restore(run, contract, reply.output)
                if count:
                    reply = reply.model_copy(update={"output": restored})
            domain, critical = self._time_critical(run, contract.tags, contract.time_critical, key)
            anchors = ANCHOR_ACTION in contract.can_do
            try:
                size = json_size(reply.output)
            except ValueError as exc:  # NaN, Infinity, a lone surrogate: the log could not hold it
                raise AttemptFailed(
                    FailureType.SCHEMA_VIOLATION,
                    f"{key} answered what JSON cannot hold: {exc}",
                    direction="output",
                ) from None
            limit = self._max_output_bytes
            if limit is not None and size > limit:
                raise AttemptFailed(
                    FailureType.SCHEMA_VIOLATION,
                    f"{key} answered {size} bytes of JSON, more than limits.max_output_bytes ({limit})",
                    direction="output",
                    limit="max_output_bytes",
                )
            try:
                contract.check_output(reply.output)
                if critical and reply.freshness_ttl is None:
                    raise InvalidInput.single(
                        "metadata.freshness_ttl",
                        f"required: {critical} is time-critical",
                        what=f"answer of {key}",
                    )
                intake = Intake.parse(reply.output, what=f"intake of {key}") if anchors else None
                if intake is not None and intake.goal_id and run.goal is None:
                    self._check_goal(key, intake.goal_id)
                if (
                    intake is not None
                    and intake.goal_id
                    and reply.intention_trace is None
                    and run.goal is None
                ):
                    # the answer serves the goal it anchors (a goal the client anchored stays)
                    reply = reply.model_copy(update={"intention_trace": [intake.goal_id]})
                sources = _sources(run)  # what the task knows: the same for the score and the detectors
                reliability = self._reliability(run, key, reply, sources)
                result = envelope(
                    run,
                    "gateway",
                    reply.output,
                    sender=key,
                    reply=reply,
                    provenance=Provenance(source=reliability.source, reliability_score=reliability.score),
                    domain=domain,
                    now=self._clock(),
                )
                if intake is not None:
                    _take_intake(run, intake)
            except InvalidInput as exc:
                raise AttemptFailed(FailureType.SCHEMA_VIOLATION, str(exc), direction="output") from None
            success = True
        finally:
            if progress is not None:  # every progress event of the call is stored before the task goes on
                await progress.close()
            await self._stats.finished(key, success=success)
            await self._circuit(run, key, reached)
        elapsed = (time.perf_counter() - started) * 1000
        record = run.step_record(step.name)  # not the last record: plan branches run at once
        if record is not None:
            record.duration_ms = round(elapsed, 3)
        inspected = AgentResult(
            run.task_id,
            step.name,
            key,
            reply.output,
            result,
            sources if intake is None else _sources(run),  # an intake's context joined them
            facts=contract.facts,
            goal_id=run.goal.id if run.goal is not None else "",
        )
        found = await self._guard.inspect(inspected) if self._guard is not None else None
        if found is None:
            found = await self._detectors.inspect(inspected)
        if found is not None:
            held = (
                {
                    "step": step.name,
                    "agent": key,
                    "output": reply.output,
                    "confidence": reply.confidence_score,
                    "provenance": result.metadata.provenance.model_dump(),
                }
                if found.hold_output
                else None
            )
            raise AttemptFailed(found.type, found.detail, held, **found.context)
        if run.goal is not None and run.goal.intention_scope is not None and self._judges:
            await self._judge_intent(run, step, contract, key, reply, result)
        run.last_source = result.metadata.provenance
        await self._audit(
            run,
            AuditEventType.AGENT_RESULT,
            "success",
            {
                "step": step.name,
                "duration_ms": round(elapsed, 3),
                "message": brief(result),
                "reliability": reliability.model_dump(mode="json"),
            },
            agent=key,
        )
        meta = result.metadata
        return AttemptResult(
            output=reply.output,
            confidence=meta.confidence_score,
            provenance=meta.provenance,
            fresh_until=result.expires_at(),
        )

    async def _judge_intent(
        self,
        run: TaskRecord,
        step: TaskStep,
        contract: CapabilityContract,
        key: str,
        reply: AgentReply,
        result: SMFMessage,
    ) -> None:
        """INTENT_DRIFT when the answer is outside the goal's intention scope (``middleware.drift``)."""
        assert run.goal is not None
        routed: dict[str, Any] = next(
            (r.get("constraints", {}) for r in reversed(run.routing) if r.get("step") == step.name), {}
        )
        answer = Answer(
            goal=run.goal,
            step=step.name,
            action=step.action or str(routed.get("action") or ""),
            agent=key,
            agent_tags=contract.tags,
            agent_actions=contract.can_do,
            output=reply.output,
            text=step.text or run.request.text,
        )
        drift = await judge_all(self._judges, answer)
        if drift is None:
            return
        held = {
            "step": step.name,
            "agent": key,
            "output": reply.output,
            "confidence": reply.confidence_score,
            "provenance": result.metadata.provenance.model_dump(),
        }
        raise AttemptFailed(
            FailureType.INTENT_DRIFT,
            drift.reason,
            held,
            judge=drift.judge,
            evidence=drift.evidence,
            goal_id=run.goal.id,
            intention_trace=result.metadata.intention_trace,
        )

    def _check_goal(self, key: str, goal_id: str) -> None:
        """An intake agent may only anchor a registered goal (its mistake: SCHEMA_VIOLATION)."""
        if self._goals is None:
            return
        try:
            self._goals.get(goal_id)
        except NotFound:
            raise InvalidInput.single(
                "goal_id",
                f"{key} anchored {goal_id}, which is not a registered goal",
                what=f"intake of {key}",
            ) from None

    def _time_critical(
        self, run: TaskRecord, tags: list[str], contract_critical: bool, key: str
    ) -> tuple[str, str]:
        """The answer's domain (a contract tag that is a time-critical domain) and, when the
        answer must carry a freshness TTL, what made it time-critical ('' when nothing did)."""
        domain = next((t for t in tags if t.lower() in self._time_critical_domains), "")
        if contract_critical:
            return domain, f"contract {key}"
        if run.goal is not None and run.goal.time_critical:
            return domain, f"goal {run.goal.id}"
        return domain, f"the domain {domain!r}" if domain else ""

    def _reliability(
        self, run: TaskRecord, key: str, reply: AgentReply, sources: list[SourcedOutput]
    ) -> ReliabilityParts:
        """The computed reliability of ``reply`` (the agent's own score kept as ``claimed``),
        against ``sources`` (:func:`_sources` of ``run``)."""
        now = self._clock()
        age = (now - reply.created_at).total_seconds() if reply.created_at is not None else 0.0
        ttl = reply.freshness_ttl if reply.freshness_ttl is not None else run.request.freshness_ttl
        known = [Testimony(source=s.provenance.source, output=s.output) for s in sources]
        return self._scorer.score(
            reply.provenance.source if reply.provenance is not None else key,
            output=reply.output,
            age_seconds=age,
            freshness_ttl=ttl,
            known=known,
            claimed=reply.provenance.reliability_score if reply.provenance is not None else None,
        )

    async def _circuit(self, run: TaskRecord, agent: str, reached: bool) -> None:
        old = self._breaker.state(agent)
        changed = self._breaker.record_success(agent) if reached else self._breaker.record_failure(agent)
        if changed is not None:
            await self._audit(
                run,
                AuditEventType.CIRCUIT_CHANGE,
                changed.value,
                {"from": old.value, "to": changed.value, "open_seconds": self._breaker.config.open_seconds},
                agent=agent,
            )


async def _call(agent: Any, request: AgentRequest, progress: TaskProgress | None) -> Any:
    """Call ``agent``; with ``progress``, it is the current one during the call (see
    :func:`middleware.task_progress.emit_progress`) and takes nothing once the call returned."""
    if progress is None:
        return await call_agent(agent, request)
    token = activate(progress)
    try:
        return await call_agent(agent, request)
    finally:
        deactivate(token)
        progress.stop()


def _agent_request(
    run: TaskRecord,
    step: TaskStep,
    cursor: StepCursor,
    message: SMFMessage,
    contract: CapabilityContract,
    deadline: float,
    text: str,
) -> AgentRequest:
    """What the agent gets: the gateway's own validated parts, put together without validating
    them again (a contract's SLO is positive, so the deadline is too)."""
    key = idempotency_key(run.request.task_id, step.name, message.content) if contract.idempotency else ""
    if not deadline > 0:  # a configuration that makes no deadline: the validated form says why
        return AgentRequest(
            message=message,
            contract=contract,
            task_id=run.request.task_id,
            step=step.name,
            attempt=cursor.attempt,
            text=text,
            deadline_ms=deadline * 1000,
            idempotency_key=key,
        )
    return trusted(
        AgentRequest,
        {
            "message": message,
            "contract": contract,
            "task_id": run.request.task_id,
            "step": step.name,
            "attempt": cursor.attempt,
            "text": text,
            "deadline_ms": deadline * 1000,
            "traceparent": current_traceparent(),
            "idempotency_key": key,
        },
    )


def idempotency_key(task_id: str, step: str, payload: Any) -> str:
    """The idempotency key of a call of ``step``: a hash of the task, the step and the input,
    so every call of the step with the same input has the same key (a retry, a re-dispatch
    after its gateway died) and a call with another input (a clarification) another one."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{task_id}\x00{step}\x00{canonical}".encode()).hexdigest()
    return digest[:32]


def _take_intake(run: TaskRecord, intake: Intake) -> None:
    """An intake agent's answer: its context joins the task's; the goal it names is anchored
    by the pipeline once the step is done."""
    run.intent = intake.intent
    run.language = intake.language or run.language
    run.context.update(intake.context)
    run.anchor_goal = intake.goal_id


def _check_inputs_fresh(run: TaskRecord, step: TaskStep, now: datetime) -> None:
    """An earlier step's output past its freshness TTL must not feed this step (e.g. after
    a task waited hours for a human): STALE_DATA naming the step to redo."""
    for s in run.steps:
        if s.name != step.name and s.status == "completed" and s.fresh_until and s.fresh_until < now:
            age = (now - s.fresh_until).total_seconds()
            raise AttemptFailed(
                FailureType.STALE_DATA,
                f"input from step {s.name} ({s.agent}) went stale {age:.0f} s ago (its freshness TTL)",
                stale_step=s.name,
            )


def _sources(run: TaskRecord) -> list[SourcedOutput]:
    """Everything the task knows, with provenance: the request's input, the earlier steps'
    outputs (oldest first), then its context (what an intake agent extracted, or the session
    carried over from earlier tasks: ``Provenance.source`` ``context``)."""
    out = [SourcedOutput("request", f"user:{run.request.user_id}", run.request.input, run.request.provenance)]
    for s in run.steps:
        if s.status == "completed" and s.provenance is not None:
            out.append(SourcedOutput(s.name, s.agent, run.outputs.get(s.name), s.provenance))
    if run.context:
        told = run.request.provenance.reliability_score
        out.append(
            SourcedOutput("context", "", run.context, Provenance(source="context", reliability_score=told))
        )
    return out


def envelope(
    run: TaskRecord,
    receiver: str,
    content: Any,
    *,
    sender: str = "gateway",
    reply: AgentReply | None = None,
    provenance: Provenance | None = None,
    domain: str = "",
    now: datetime | None = None,
) -> SMFMessage:
    """The SMF message for one hop, validated (an invalid one raises InvalidInput).

    ``now`` is the message's time unless the agent's reply states its own (default: the
    wall clock; the dispatcher passes its injected clock, against which freshness is checked).

    A gateway message carries the latest source's provenance; an answer carries
    ``provenance`` (its computed reliability). The intention trace is the anchored goal's
    id, or the task's id for a task without a goal (the trace is never empty).
    """
    confidence: float | None = run.request.confidence_score
    ttl: float | None = run.request.freshness_ttl
    trace = [run.goal.id] if run.goal else [run.request.task_id]
    created = now or utcnow()
    extra: dict[str, Any] = {"created_at": created}
    if (
        reply is None
        and provenance is None
        and _gateway_message_valid(sender, receiver, content, run, trace, domain)
    ):
        # the gateway's own message of validated parts: built as validation would build it
        return trusted(
            SMFMessage,
            {
                "message_id": new_id("msg"),
                "sender": sender,
                "receiver": receiver,
                "content": content,
                "metadata": trusted(
                    SMFMetadata,
                    {
                        "provenance": run.last_source,
                        "intention_trace": trace,
                        "freshness_ttl": ttl,
                        "confidence_score": confidence,
                        "domain": domain,
                    },
                ),
                "trace_id": run.trace_id,
                "created_at": created,
            },
        )
    if reply is not None:
        provenance = provenance or reply.provenance or Provenance(source=sender, reliability_score=0.5)
        confidence = reply.confidence_score
        ttl = reply.freshness_ttl if reply.freshness_ttl is not None else ttl
        trace = reply.intention_trace if reply.intention_trace is not None else trace
        if reply.created_at is not None:
            extra["created_at"] = reply.created_at
    return SMFMessage.parse(
        {
            **extra,
            "sender": sender,
            "receiver": receiver,
            "content": content,
            "trace_id": run.trace_id,
            "metadata": {
                "provenance": provenance or run.last_source,  # validated: taken as is
                "freshness_ttl": ttl,
                "confidence_score": confidence,
                "intention_trace": trace,
                "domain": domain,
            },
        },
        what="SMF message",
    )


def _gateway_message_valid(
    sender: str, receiver: str, content: Any, run: TaskRecord, trace: list[str], domain: str
) -> bool:
    """Whether validating the gateway's own message would pass: its parts come from the
    validated request, the task record and the catalog, so only these bounds can fail (a
    message that would not pass is validated, and refused with the reason)."""
    source = run.last_source
    ttl, confidence = run.request.freshness_ttl, run.request.confidence_score
    return (
        0 < len(sender) <= 256
        and 0 < len(receiver) <= 256
        and content is not None
        and 0 < len(run.trace_id) <= 64
        and 0 < len(trace) <= 64
        and all(goal_id.strip() for goal_id in trace)
        and isinstance(source, Provenance)
        and ttl >= 0
        and 0 <= confidence <= 1
        and len(domain) <= 64
    )


def brief(message: SMFMessage) -> dict[str, Any]:
    """A message as it goes into the audit log."""
    return message.model_dump(mode="json")


def decision_detail(decision: RoutingDecision, dumped: dict[str, Any] | None = None) -> dict[str, Any]:
    """A routing decision as it goes into the audit log (``dumped``: the decision's
    ``model_dump(mode="json")`` when the caller has it already)."""
    if dumped is None:
        dumped = decision.model_dump(mode="json")
    return {
        "chosen": dumped["chosen"],
        "fallbacks": dumped["fallbacks"],
        "explanation": dumped["explanation"],
        "constraints": dumped["constraints"],
        "candidates": dumped["candidates"][:10],
        "rejected": dumped["rejected"][:20],
    }
