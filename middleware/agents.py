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
from .errors import NotFound
from .smf import Provenance, SMFMessage

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

    @property
    def input(self) -> Any:
        return self.message.content


class AgentReply(Model):
    """An output with the agent's own SMF metadata."""

    output: Any
    confidence_score: float = Field(default=1.0, ge=0, le=1)
    provenance: Provenance | None = None
    freshness_ttl: float | None = Field(default=None, ge=0)
    created_at: datetime | None = Field(
        default=None, description="When the content was produced (for freshness); None = now."
    )
    intention_trace: list[str] | None = Field(
        default=None, description="Goal ids the answer serves; None = the task's goal."
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


class AgentRegistry:
    """Maps a contract key (``name@version``) to the callable that implements it."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentCallable] = {}

    def add(self, key: str, agent: AgentCallable) -> None:
        if not callable(agent):
            raise TypeError(f"agent for {key} is not callable")
        self._agents[key] = agent

    def remove(self, key: str) -> None:
        self._agents.pop(key, None)

    def get(self, key: str) -> AgentCallable:
        try:
            return self._agents[key]
        except KeyError:
            raise NotFound(f"no agent implementation is attached to {key}") from None

    def keys(self) -> list[str]:
        """The contract keys with an in-process implementation attached."""
        return list(self._agents)

    def __contains__(self, key: object) -> bool:
        return key in self._agents
