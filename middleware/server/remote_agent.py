"""An agent that lives in another process: a client of a worker's ``AgentWorker.Invoke``.

The gateway uses a :class:`RemoteAgent` for every contract registered with an
``endpoint`` and no in-process callable (see ``AgentRegistry.resolve``). Each call
carries the attempt's deadline as the gRPC deadline. What comes back maps onto the
same failure types as an in-process agent::

    worker answered                      -> AgentReply (output, confidence, provenance)
    worker reported a typed failure      -> AgentFailure(type, detail)   (as the worker typed it)
    UNAVAILABLE, RESOURCE_EXHAUSTED,     -> Unavailable                  -> TOOL_UNAVAILABLE
      UNIMPLEMENTED, NOT_FOUND (the worker
      does not serve this contract)
    DEADLINE_EXCEEDED                    -> TimeoutError                 -> TOOL_TIMEOUT
    any other status                     -> AgentFailure(TOOL_ERROR)

The request's W3C ``traceparent`` (and the task's ``tracestate``) travel as the call's
gRPC metadata, so the worker continues the task's trace (see ``middleware.server.tracing``).

With ``tls`` (the definition's ``workers.tls``) the call goes over TLS, and with a client
certificate over mutual TLS. A failed handshake is TOOL_UNAVAILABLE like any unreachable
worker, its detail naming the likely TLS cause and the ``workers.tls`` field to set.

With an ``identity`` (``workers.tls.verify_agent_identity``, the default with TLS) the worker
is bound to its agent: its certificate must be issued for that name (the channel's
``grpc.ssl_target_name_override``), whatever address the contract registered. A worker
presenting another name -- another agent's certificate -- fails the handshake: the attempt
is TOOL_UNAVAILABLE, its detail saying which agent the certificate was not issued for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc

from .._proto.agency.v1 import worker_pb2, worker_pb2_grpc
from ..agents import AgentReply, AgentRequest
from ..contracts import CapabilityContract
from ..errors import AgentFailure, InvalidInput, Unavailable
from ..failures import FailureType
from .grpc_api.channel import open_channel
from .grpc_api.convert import smf_to_pb
from .grpc_api.tls import TlsSettingNames, tls_hint
from .settings import ClientTlsConfig, WorkersTlsConfig
from .tracing import trace_metadata

__all__ = ["RemoteAgent"]

#: Where the gateway's TLS to its workers is set, for error details.
WORKERS_TLS_FIELDS = TlsSettingNames(
    ca="workers.tls.ca", cert="workers.tls.cert and .key", server_name="workers.tls.server_name"
)

_UNAVAILABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.NOT_FOUND,
}


class RemoteAgent:
    """Calls the agent served by an ``agency worker`` at ``endpoint`` (``host:port``).

    Args:
        endpoint: The worker's address, as registered in its contract.
        tls: Call over TLS (verify the worker with ``ca``; present ``cert``/``key`` to a
            worker requiring mutual TLS). None = plaintext.
        channel: A channel to use instead of opening one (it is then not closed here).
        token: The gateway's bearer token for its workers (``workers.token_file``), sent
            on every call: workers started with ``--gateway-token-file`` require it.
        identity: With ``tls``: the name the worker's certificate must be issued for (its
            agent's); ``""`` = the address's host (or ``tls.server_name``).
        agent: The agent served there, for error details.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        tls: ClientTlsConfig | None = None,
        channel: grpc.aio.Channel | None = None,
        token: str | None = None,
        identity: str = "",
        agent: str = "",
    ) -> None:
        if not endpoint:
            raise ValueError("a remote agent needs an endpoint (host:port)")
        self.endpoint = endpoint
        self.tls = tls
        self.identity = identity if tls is not None else ""
        self.agent = agent
        self._token = token
        self._channel = channel
        self._owns_channel = channel is None
        self._stub: worker_pb2_grpc.AgentWorkerStub | None = None

    @classmethod
    def factory(
        cls, *, tls: ClientTlsConfig | None = None, token: str | None = None
    ) -> Callable[[CapabilityContract], RemoteAgent]:
        """What ``AgentRegistry.remote_factory`` takes: a remote agent per contract, all with
        ``tls`` and the gateway's ``token``; with :class:`~middleware.server.settings.WorkersTlsConfig`
        each bound to its agent's identity (``verify_agent_identity``)."""

        def build(contract: CapabilityContract) -> RemoteAgent:
            identity = tls.identity(contract.name) if isinstance(tls, WorkersTlsConfig) else ""
            return cls(contract.endpoint, tls=tls, token=token, identity=identity, agent=contract.name)

        return build

    def _worker(self) -> worker_pb2_grpc.AgentWorkerStub:
        if self._stub is None:
            if self._channel is None:  # opened lazily: a channel belongs to the running loop
                tls = self.tls
                if tls is not None and self.identity:  # the certificate must name the agent
                    tls = ClientTlsConfig(ca=tls.ca, cert=tls.cert, key=tls.key, server_name=self.identity)
                self._channel = open_channel(self.endpoint, tls=tls)
            self._stub = worker_pb2_grpc.AgentWorkerStub(self._channel)  # type: ignore[no-untyped-call]
        return self._stub

    def _metadata(self, traceparent: str) -> tuple[tuple[str, str], ...]:
        metadata = tuple(trace_metadata(traceparent))
        if self._token:
            metadata += (("authorization", f"Bearer {self._token}"),)
        return metadata

    async def __call__(self, request: AgentRequest) -> AgentReply:
        """One attempt on the remote agent, within ``request.deadline_ms``."""
        key = request.contract.key
        deadline_ms = request.deadline_ms or float(request.contract.slo_latency_ms)
        try:
            response = await self._worker().Invoke(
                worker_pb2.InvokeRequest(
                    message=smf_to_pb(request.message),
                    contract_key=key,
                    task_id=request.task_id,
                    step=request.step,
                    attempt=request.attempt,
                    text=request.text,
                    deadline_ms=deadline_ms,
                    idempotency_key=request.idempotency_key,
                ),
                timeout=deadline_ms / 1000,
                metadata=self._metadata(request.traceparent),
            )
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc, key) from None
        which = response.WhichOneof("outcome")
        if which == "failure":
            failure = response.failure
            context = _json_object(failure.context_json)
            raise AgentFailure(failure.type, f"remote {self.endpoint}: {failure.detail}", context=context)
        if which != "result":
            raise AgentFailure(
                FailureType.TOOL_ERROR, f"remote {self.endpoint} sent an empty answer for {key}"
            )
        result = response.result
        try:
            output = json.loads(result.output_json)
        except ValueError as exc:
            raise AgentFailure(
                FailureType.SCHEMA_VIOLATION,
                f"remote {self.endpoint} sent output that is not JSON: {exc}",
                context={"direction": "output"},
            ) from None
        try:
            return self._reply(result, output)
        except InvalidInput as exc:
            raise AgentFailure(
                FailureType.SCHEMA_VIOLATION,
                f"remote {self.endpoint}: {exc}",
                context={"direction": "output"},
            ) from None

    def _reply(self, result: worker_pb2.InvokeResult, output: Any) -> AgentReply:
        provenance = None
        if result.HasField("provenance"):
            provenance = {
                "source": result.provenance.source,
                "reliability_score": result.provenance.reliability_score,
            }
        return AgentReply.parse(
            {
                "output": output,
                "confidence_score": result.confidence_score,
                "provenance": provenance,
                "freshness_ttl": result.freshness_ttl if result.HasField("freshness_ttl") else None,
                "created_at": result.created_at or None,
                "intention_trace": (
                    list(result.intention_trace.goal_ids) if result.HasField("intention_trace") else None
                ),
                "usage": [
                    {"model": u.model, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens}
                    for u in result.usage
                ],
            },
            what="reply",
        )

    def _error(self, exc: grpc.aio.AioRpcError, key: str) -> Exception:
        code, detail = exc.code(), exc.details() or ""
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return TimeoutError(f"{key} at {self.endpoint}: deadline exceeded")
        if code in _UNAVAILABLE:
            hint = (
                tls_hint(detail, self.tls, WORKERS_TLS_FIELDS) if code is grpc.StatusCode.UNAVAILABLE else ""
            )
            if self.identity and "hostname verification" in detail.lower():
                hint = (
                    f"TLS: the worker's certificate is not issued for agent {self.agent or self.identity!r} "
                    f"(expected the name {self.identity!r}): a worker cannot answer for another agent "
                    "(workers.tls.verify_agent_identity; another name: workers.tls.identities)"
                )
            return Unavailable(
                f"worker {self.endpoint} for {key}: {code.name}: {detail}" + (f" -- {hint}" if hint else "")
            )
        return AgentFailure(
            FailureType.TOOL_ERROR,
            f"worker {self.endpoint} for {key} answered {code.name}: {detail}",
            context={"grpc_status": code.name},
        )

    async def aclose(self) -> None:
        """Close the channel this agent opened."""
        if self._channel is not None and self._owns_channel:
            await self._channel.close()
        self._channel, self._stub = None, None

    def __repr__(self) -> str:
        return f"RemoteAgent({self.endpoint!r}{', tls' if self.tls else ''})"


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
