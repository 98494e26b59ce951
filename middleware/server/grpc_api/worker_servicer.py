"""``agency.v1.AgentWorker``: serve in-process agents to a gateway over gRPC.

``Invoke`` runs one attempt of one agent within the call's deadline (the gRPC
deadline, or the request's ``deadline_ms`` if shorter). An agent that fails does not
fail the RPC: the failure comes back typed in ``InvokeResponse.failure`` (the same
types the gateway's pipeline would give it in process), so the gateway's failure
machinery handles it. Transport problems (an unknown contract key, a malformed
message) are status codes, mapped in ``status.py``.

The caller's W3C ``traceparent`` (gRPC metadata) reaches the agent in
``AgentRequest.traceparent``: unchanged without tracing; with a :class:`Tracing`, the
call runs in an agent span that is a child of it, and the agent gets that span's
``traceparent`` (the same trace), so whatever the agent traces nests under it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import grpc

from ..._proto.agency.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from ...agents import AgentCallable, AgentReply, AgentRequest, call_agent
from ...contracts import CapabilityContract
from ...errors import AgentFailure, ContractViolation, NotFound, Unavailable
from ...failures import FailureType
from ..tracing import TRACE_HEADERS, Tracing, current_traceparent
from .message_servicer import smf_from_pb  # the one SMF <-> protobuf conversion (issue 7)
from .status import rpc

__all__ = ["AgentWorkerServicer", "invoke_failure"]


def invoke_failure(exc: BaseException) -> worker_pb2.AgentFailure:
    """The typed failure for an exception raised by an agent (as the pipeline would type it).

    The detail does not name the agent: the gateway prefixes the contract key.
    """
    context: dict[str, Any] = {}
    if isinstance(exc, AgentFailure):
        ftype, detail, context = exc.failure_type, str(exc), exc.context
    elif isinstance(exc, TimeoutError):
        ftype, detail = FailureType.TOOL_TIMEOUT.value, "gave no answer within its deadline"
    elif isinstance(exc, ConnectionError | Unavailable):
        ftype, detail = FailureType.TOOL_UNAVAILABLE.value, f"unavailable: {exc}"
    else:
        ftype, detail = FailureType.TOOL_ERROR.value, f"raised {type(exc).__name__}: {exc}"
    return worker_pb2.AgentFailure(
        type=ftype, detail=detail, context_json=json.dumps(context, ensure_ascii=False, default=str)
    )


class AgentWorkerServicer(worker_pb2_grpc.AgentWorkerServicer):
    """Serves the agents of one worker process, by contract key.

    Args:
        agents: ``contract key -> (contract, agent callable)``.
        tracing: Continue the caller's trace with an agent span per call (None = no spans;
            the ``traceparent`` is still handed to the agent).
    """

    def __init__(
        self,
        agents: Mapping[str, tuple[CapabilityContract, AgentCallable]],
        *,
        tracing: Tracing | None = None,
    ) -> None:
        self._agents = dict(agents)
        self._tracing = tracing

    @rpc
    async def Invoke(
        self, request: worker_pb2.InvokeRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.InvokeResponse:
        hosted = self._agents.get(request.contract_key)
        if hosted is None:  # a tenant's gateway key (tenant/name@version) of the contract served here
            hosted = self._agents.get(request.contract_key.rpartition("/")[2])
        if hosted is None:
            served = ", ".join(sorted(self._agents)) or "nothing"
            raise NotFound(f"this worker does not serve {request.contract_key!r} (it serves {served})")
        contract, agent = hosted
        message = smf_from_pb(request.message)
        trace = {k: v for k, v in context.invocation_metadata() or () if k in TRACE_HEADERS}
        agent_request = AgentRequest(
            message=message,
            contract=contract,
            task_id=request.task_id or message.message_id,
            step=request.step or "main",
            attempt=max(1, request.attempt),
            text=request.text,
            deadline_ms=request.deadline_ms if request.deadline_ms > 0 else None,
            traceparent=trace.get("traceparent", ""),
            idempotency_key=request.idempotency_key,
        )
        budget = _budget(context.time_remaining(), request.deadline_ms)
        if self._tracing is None:
            return await _invoke(contract, agent, agent_request, budget)
        with self._tracing.agent_span(agent_request, tracestate=trace.get("tracestate", "")) as span:
            inner = agent_request.model_copy(update={"traceparent": current_traceparent()})
            response = await _invoke(contract, agent, inner, budget)
            if response.WhichOneof("outcome") == "failure":
                self._tracing.set_error(span, f"{response.failure.type}: {response.failure.detail}")
            return response


async def _invoke(
    contract: CapabilityContract, agent: AgentCallable, agent_request: AgentRequest, budget: float | None
) -> worker_pb2.InvokeResponse:
    """One call of ``agent``: its answer as an ``InvokeResult``, or its failure, typed."""
    message = agent_request.message
    try:
        contract.check_input(message.content)
        async with asyncio.timeout(budget):
            raw = await call_agent(agent, agent_request)
    except ContractViolation as exc:
        failure = AgentFailure(FailureType.SCHEMA_VIOLATION, str(exc), context={"direction": "input"})
        return worker_pb2.InvokeResponse(failure=invoke_failure(failure))
    except Exception as exc:  # an agent's failure is data for the gateway, not a crash
        return worker_pb2.InvokeResponse(failure=invoke_failure(exc))
    reply = raw if isinstance(raw, AgentReply) else AgentReply(output=raw)
    try:
        output_json = json.dumps(reply.output, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        failure = AgentFailure(
            FailureType.SCHEMA_VIOLATION,
            f"returned an output that is not JSON: {exc}",
            context={"direction": "output"},
        )
        return worker_pb2.InvokeResponse(failure=invoke_failure(failure))
    result = worker_pb2.InvokeResult(output_json=output_json, confidence_score=reply.confidence_score)
    if reply.provenance is not None:
        result.provenance.CopyFrom(
            common_pb2.Provenance(
                source=reply.provenance.source, reliability_score=reply.provenance.reliability_score
            )
        )
    if reply.freshness_ttl is not None:
        result.freshness_ttl = reply.freshness_ttl
    if reply.created_at is not None:
        result.created_at = reply.created_at.isoformat()
    if reply.intention_trace is not None:
        result.intention_trace.CopyFrom(worker_pb2.IntentionTrace(goal_ids=reply.intention_trace))
    result.usage.extend(
        worker_pb2.ModelUsage(model=u.model, input_tokens=u.input_tokens, output_tokens=u.output_tokens)
        for u in reply.usage
    )
    return worker_pb2.InvokeResponse(result=result)


def _budget(remaining: float | None, deadline_ms: float) -> float | None:
    budgets = [b for b in (remaining, deadline_ms / 1000 if deadline_ms > 0 else None) if b is not None]
    return min(budgets) if budgets else None
