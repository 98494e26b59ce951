"""One AgentRequest as the gateway would send it to a worker (for the trace-context tests)."""

from __future__ import annotations

from typing import Any

from middleware import AgentRequest, CapabilityContract
from middleware.smf import SMFMessage

ECHO = CapabilityContract(name="echo", can_do=["echo"], slo_latency_ms=5000)


def agent_request(contract: CapabilityContract = ECHO, **kw: Any) -> AgentRequest:
    """A request for ``contract``; ``traceparent`` defaults to the current span's, as in the gateway."""
    message = SMFMessage.parse(
        {
            "sender": "gateway",
            "receiver": contract.key,
            "content": {"q": 1},
            "metadata": {
                "provenance": {"source": "user", "reliability_score": 1},
                "freshness_ttl": 60,
                "confidence_score": 1,
                "intention_trace": ["GOAL_TEST_001"],
            },
        }
    )
    return AgentRequest(message=message, contract=contract, task_id="task_1", step="main", **kw)
