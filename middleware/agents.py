"""Agents as the pipeline sees them: a callable behind a contract.

An agent is anything that takes one :class:`AgentRequest` and returns its output,
sync or async. It may return a plain value (a dict, a string) or an
:class:`AgentReply` when it wants to state its own confidence and provenance. The
request carries the SMF message, the contract the agent was chosen under (so its
prompt can say what it may and may not do), and the task's ids.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, TypeAlias, runtime_checkable

from pydantic import ConfigDict, Field

from ._model import Model
from .contracts import CapabilityContract
from .errors import FailedPrecondition, NotFound
from .smf import Provenance, SMFMessage
from .trace_context import current_traceparent
from .usage import Usage

__all__ = [
    "Agent",
    "AgentCallable",
    "AgentRegistry",
    "AgentReply",
    "AgentRequest",
    "call_agent",
]


class AgentRequest(Model):
    """Everything an agent gets for one call (one object, so fields can be added later)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    message: SMFMessage
    contract: CapabilityContract
    task_id: str
    step: str
    attempt: int = 1
    text: str = Field(
        default="", description="The instruction for this step (the step's text, else the task's)."
    )
    deadline_ms: float | None = Field(
        default=None, gt=0, description="Time budget of this call (from the contract's SLO); None = none."
    )
    traceparent: str = Field(
        default_factory=current_traceparent,
        description="W3C trace context of the task (empty without tracing); remote workers continue it.",
    )
    idempotency_key: str = Field(
        default="",
        max_length=128,
        description="For a contract declaring idempotency 'key': the same for every call of this step "
        "with the same input (a re-dispatch after its gateway died included); act once per key.",
    )

    @property
    def input(self) -> Any:
        return self.message.content


#: Longest freshness TTL an agent may give (ten years, in seconds); infinity is no date.
MAX_FRESHNESS_TTL = 10 * 365 * 86400.0


class AgentReply(Model):
    """An output with the agent's own SMF metadata."""

    output: Any
    confidence_score: float = Field(default=1.0, ge=0, le=1)
    provenance: Provenance | None = None
    freshness_ttl: float | None = Field(
        default=None,
        ge=0,
        le=MAX_FRESHNESS_TTL,
        allow_inf_nan=False,
        description="Seconds the output stays fresh (at most ten years: an expiry must be a date).",
    )
    created_at: datetime | None = Field(
        default=None, description="When the content was produced (for freshness); None = now."
    )
    intention_trace: list[str] | None = Field(
        default=None, description="Goal ids the answer serves; None = the task's goal."
    )
    usage: list[Usage] = Field(
        default_factory=list,
        max_length=256,
        description="Tokens the models the agent called spent, one entry per model (priced and "
        "summed by the gateway, bounded by budgets: middleware.usage).",
    )


AgentCallable: TypeAlias = Callable[[AgentRequest], "Any | Awaitable[Any]"]


@runtime_checkable
class Agent(Protocol):
    """What users implement: ``agent(request) -> output`` (sync or async)."""

    def __call__(self, request: AgentRequest) -> Any: ...


async def call_agent(agent: AgentCallable, request: AgentRequest) -> Any:
    """Call a sync or async agent; sync agents run in a worker thread so they cannot
    block the event loop (and so a deadline can still fire)."""
    if inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(type(agent).__call__):
        return await agent(request)
    import asyncio

    result = await asyncio.to_thread(agent, request)
    if inspect.isawaitable(result):
        return await result
    return result


RemoteFactory: TypeAlias = Callable[[CapabilityContract], AgentCallable]


class AgentRegistry:
    """Maps a contract key (``name@version``) to the callable that implements it.

    A contract registered without an in-process callable but with an ``endpoint``
    (a remote worker, see ``agency worker``) resolves to ``remote_factory(contract)``. The core
    knows no transport, so there is no default: the server injects one
    (``Agency(agents=AgentRegistry(remote_factory=RemoteAgent.factory(tls=..., token=...)))``,
    :class:`middleware.server.remote_agent.RemoteAgent` calling the worker's ``AgentWorker.Invoke``
    over gRPC, with the definition's ``workers`` TLS and token), and so can an embedded agency that
    calls remote workers. Without one, a remote contract is refused with
    :class:`~middleware.errors.FailedPrecondition` naming the agent. Remote agents are cached per
    key and endpoint and closed by :meth:`aclose`.
    """

    def __init__(self, *, remote_factory: RemoteFactory | None = None) -> None:
        self._agents: dict[str, AgentCallable] = {}
        self._remote_factory = remote_factory
        self._remotes: dict[str, tuple[str, AgentCallable]] = {}
        self._retired: list[AgentCallable] = []

    @property
    def remote_factory(self) -> RemoteFactory | None:
        """Builds the callable of a contract served elsewhere (by its endpoint); None = a
        contract without an in-process callable cannot be called."""
        return self._remote_factory

    @remote_factory.setter
    def remote_factory(self, factory: RemoteFactory | None) -> None:
        # remotes already built keep the old settings: retire them, they are rebuilt on next use
        self._retired.extend(agent for _, agent in self._remotes.values())
        self._remotes.clear()
        self._remote_factory = factory

    def check_remote(self, contract: CapabilityContract) -> None:
        """Refuse ``contract`` if it is served elsewhere and this registry cannot call it.

        Raises:
            FailedPrecondition: ``contract`` has an ``endpoint``, no in-process callable, and
                the registry has no remote factory.
        """
        if contract.endpoint and contract.key not in self._agents and self._remote_factory is None:
            raise FailedPrecondition(
                f"agent {contract.key} is served remotely at {contract.endpoint}, but this agency has "
                "no remote factory to call it: build it with "
                "Agency(agents=AgentRegistry(remote_factory=...)), e.g. "
                "middleware.server.remote_agent.RemoteAgent.factory() (agency serve does), or attach "
                "an in-process callable"
            )

    def add(self, key: str, agent: AgentCallable) -> None:
        if not callable(agent):
            raise TypeError(f"agent for {key} is not callable")
        self._agents[key] = agent

    def remove(self, key: str) -> None:
        self._agents.pop(key, None)
        remote = self._remotes.pop(key, None)
        if remote is not None:
            self._retired.append(remote[1])

    def get(self, key: str) -> AgentCallable:
        try:
            return self._agents[key]
        except KeyError:
            raise NotFound(f"no agent implementation is attached to {key}") from None

    def resolve(self, contract: CapabilityContract) -> AgentCallable:
        """The callable for ``contract``: in process if attached, else remote via its endpoint.

        Raises:
            NotFound: neither an in-process callable nor an endpoint.
            FailedPrecondition: an endpoint, but no remote factory (:meth:`check_remote`).
        """
        key = contract.key
        if key in self._agents:
            return self._agents[key]
        if not contract.endpoint:
            return self.get(key)
        self.check_remote(contract)
        assert self._remote_factory is not None  # checked just above
        cached = self._remotes.get(key)
        if cached is not None and cached[0] == contract.endpoint:
            return cached[1]
        if cached is not None:  # re-registered at a new address
            self._retired.append(cached[1])
        agent = self._remote_factory(contract)
        self._remotes[key] = (contract.endpoint, agent)
        return agent

    async def aclose(self) -> None:
        """Close the remote agents this registry created (their gRPC channels), and every attached
        agent that has an ``aclose`` (an A2A agent's HTTP client, an MCP tool's session)."""
        agents = [a for _, a in self._remotes.values()] + self._retired + list(self._agents.values())
        self._remotes.clear()
        self._retired = []
        closed: set[int] = set()
        for agent in agents:
            close = getattr(agent, "aclose", None)
            if close is not None and id(agent) not in closed:
                closed.add(id(agent))
                await close()

    def keys(self) -> list[str]:
        """The contract keys with an in-process implementation attached."""
        return list(self._agents)

    def __contains__(self, key: object) -> bool:
        return key in self._agents
