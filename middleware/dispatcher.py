"""Dispatch: one call of one agent, and every way it can go wrong as a typed failure.

:class:`Dispatcher` checks the agent's circuit, validates the input against the
contract, wraps it in an SMF envelope, calls the agent under the deadline derived
from its SLO, validates the output, and runs the detectors on the answer. Whatever
goes wrong leaves as :class:`AttemptFailed` carrying the failure type; the pipeline
turns it into a failure event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from .agents import AgentRegistry, AgentReply, AgentRequest, call_agent
from .audit.record import AuditEventType
from .catalog import Catalog
from .circuit_breaker import CircuitBreaker
from .detectors import AgentResult, Detectors, SourcedOutput
from .errors import AgencyError, AgentFailure, ContractViolation, InvalidInput, NotFound, Unavailable
from .executor import StepCursor
from .failures import FailureType
from .limits import json_size
from .router import Router, RoutingDecision
from .routing_stats import RoutingStats
from .smf import Provenance, SMFMessage, utcnow
from .tasks import TaskRecord, TaskStep

__all__ = ["AttemptFailed", "Dispatcher", "brief", "decision_detail", "envelope"]

Audit = Callable[..., Awaitable[None]]


class AttemptFailed(Exception):
    """Internal: an attempt ended in a typed failure."""

    def __init__(
        self, ftype: FailureType, detail: str, held: dict[str, Any] | None = None, **context: Any
    ) -> None:
        super().__init__(detail)
        self.ftype, self.detail, self.context, self.held = ftype, detail, context, held or {}


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
        max_output_bytes: int | None = None,
    ) -> None:
        self._clock = clock
        self._max_output_bytes = max_output_bytes
        self._catalog = catalog
        self._agents = agents
        self._router = router
        self._stats: RoutingStats = router.stats
        self._breaker = breaker
        self._detectors = detectors
        self._deadline_factor = deadline_factor
        self._audit = audit

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
        decision = await self._router.decide(constraints, exclude=open_circuits)
        if decision.refused and open_circuits:
            unfiltered = await self._router.decide(constraints)
            if not unfiltered.refused:
                unfiltered.fallbacks = []
                return unfiltered
        return decision

    async def attempt(
        self, run: TaskRecord, step: TaskStep, cursor: StepCursor, extra: dict[str, Any]
    ) -> tuple[Any, float, Provenance, datetime]:
        """One call of one agent; every way it can go wrong becomes a :class:`AttemptFailed`."""
        key = cursor.agent
        try:
            entry = await self._catalog.get(key)
            agent = self._agents.resolve(entry.contract)
        except NotFound as exc:
            raise AttemptFailed(FailureType.TOOL_UNAVAILABLE, str(exc)) from None
        contract = entry.contract
        _check_inputs_fresh(run, step, self._clock())
        payload = {**run.request.input, **run.outputs, **step.input, **extra}
        try:
            contract.check_input(payload)
        except ContractViolation as exc:
            raise AttemptFailed(FailureType.SCHEMA_VIOLATION, str(exc), direction="input") from None
        message = envelope(run, key, payload)
        deadline = contract.slo_latency_ms * self._deadline_factor / 1000
        request = AgentRequest(
            message=message,
            contract=contract,
            task_id=run.request.task_id,
            step=step.name,
            attempt=cursor.attempt,
            text=step.text or run.request.text,
            deadline_ms=deadline * 1000,
        )
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
        )
        if not self._breaker.allow(key):  # just before the call: a half-open probe is always settled
            raise AttemptFailed(
                FailureType.TOOL_UNAVAILABLE, f"{key} unavailable: its circuit breaker is open"
            )
        started = time.perf_counter()
        await self._stats.started(key)
        success = reached = False
        try:
            try:
                async with asyncio.timeout(deadline):  # in this task: wait_for would start another
                    raw = await call_agent(agent, request)
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
                result = envelope(run, "gateway", reply.output, sender=key, reply=reply)
            except InvalidInput as exc:
                raise AttemptFailed(FailureType.SCHEMA_VIOLATION, str(exc), direction="output") from None
            success = True
        finally:
            await self._stats.finished(key, success=success)
            await self._circuit(run, key, reached)
        elapsed = (time.perf_counter() - started) * 1000
        run.steps[-1].duration_ms = round(elapsed, 3)
        found = await self._detectors.inspect(
            AgentResult(run.task_id, step.name, key, reply.output, result, _sources(run))
        )
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
        run.last_source = result.metadata.provenance
        await self._audit(
            run,
            AuditEventType.AGENT_RESULT,
            "success",
            {"step": step.name, "duration_ms": round(elapsed, 3), "message": brief(result)},
            agent=key,
        )
        meta = result.metadata
        return reply.output, meta.confidence_score, meta.provenance, result.expires_at()

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
    """What earlier outputs (and the request's input) said, with provenance, oldest first."""
    out = [SourcedOutput("request", f"user:{run.request.user_id}", run.request.input, run.request.provenance)]
    for s in run.steps:
        if s.status == "completed" and s.provenance is not None:
            out.append(SourcedOutput(s.name, s.agent, run.outputs.get(s.name), s.provenance))
    return out


def envelope(
    run: TaskRecord,
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
    trace = [run.goal.id] if run.goal else []
    extra: dict[str, Any] = {}
    if reply is not None:
        provenance = reply.provenance or Provenance(
            source=sender, reliability_score=provenance.reliability_score
        )
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
                "provenance": provenance,  # a validated Provenance: taken as is, not dumped and re-read
                "freshness_ttl": ttl,
                "confidence_score": confidence,
                "intention_trace": trace,
            },
        },
        what="SMF message",
    )


def brief(message: SMFMessage) -> dict[str, Any]:
    """A message as it goes into the audit log."""
    return message.model_dump(mode="json")


def decision_detail(decision: RoutingDecision) -> dict[str, Any]:
    """A routing decision as it goes into the audit log."""
    return {
        "chosen": decision.chosen,
        "fallbacks": decision.fallbacks,
        "explanation": decision.explanation,
        "constraints": decision.constraints.model_dump(mode="json"),
        "candidates": [c.model_dump() for c in decision.candidates[:10]],
        "rejected": [r.model_dump() for r in decision.rejected[:20]],
    }
