"""The agent directory: agents that registered themselves (``MessageService.Register``).

Agents of the definition file are enrolled by every replica at start-up; agents that register
through the RPC are kept here so that every replica knows them (``RedisDirectory`` under the
storage key prefix) and a restart does not forget them::

    {prefix}{directory}:agents        hash: name -> the record (JSON)
    {prefix}{directory}:tokens        hash: token SHA-256 -> name
    {prefix}{directory}:seen          hash: name -> last seen (epoch seconds)
    {prefix}{directory}:names         hash: look-alike key (middleware.names) -> name
    {prefix}{directory}:by:<client>   set: the names a gateway client registered (its quota)

(one hash tag, so one Redis Cluster slot: :mod:`middleware.redis.keys`)

Only the token's SHA-256 is stored; the token is returned once, by ``Register``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from .._lazy import lazy_exports
from .._model import Model

__all__ = ["AgentRecord", "Directory", "MemoryDirectory", "RegistrationMode", "Taken"]

#: ``closed``: only the definition file enrolls agents; ``open``: any caller may register;
#: ``admin``: only a caller with the gateway's admin role; ``approval``: anyone, but the agent
#: stays ``pending`` (its token refused) until an admin approves it.
RegistrationMode = Literal["closed", "open", "admin", "approval"]


class AgentRecord(Model):
    """A registered agent as the directory keeps it (no token, only its hash)."""

    name: str
    description: str = Field(default="", max_length=2000, description="What it can do (searched).")
    public_key: str
    token_sha256: str
    publishes: list[str] = Field(default_factory=list, description="Topics it declared it publishes to.")
    subscribes: list[str] = Field(
        default_factory=list, description="Topics it subscribed to at registration."
    )
    status: Literal["active", "pending"] = "active"
    registered_at: float
    registered_by: str = Field(default="", description="The gateway client that registered it, if known.")
    name_keys: list[str] = Field(
        default_factory=list, description="Its look-alike keys (middleware.names): one agent per key."
    )
    tenant: str = Field(
        default="", description="Its tenant (the registering client's): it reaches only that tenant's agents."
    )


@dataclass(frozen=True)
class Taken:
    """Why :meth:`Directory.add` did not add an agent."""

    why: Literal["name", "look_alike", "quota"]
    other: str = ""  #: the registered agent whose name it looks like


@runtime_checkable
class Directory(Protocol):
    """Where registered agents live."""

    async def add(self, record: AgentRecord, *, max_per_client: int = 0) -> Taken | None:
        """Store a new agent, atomically: refused (:class:`Taken`) when its name is taken, when
        one of its ``name_keys`` is another agent's (a look-alike), or when its ``registered_by``
        client already registered ``max_per_client`` agents (0: no quota)."""
        ...

    async def put(self, record: AgentRecord) -> None:
        """Replace an agent's record (same name and token)."""
        ...

    async def get(self, name: str) -> AgentRecord | None: ...

    async def by_token(self, token_sha256: str) -> AgentRecord | None: ...

    async def remove(self, name: str) -> AgentRecord | None:
        """Delete an agent (its token stops working); the removed record, if any."""
        ...

    async def all(self) -> list[AgentRecord]: ...

    async def touch(self, name: str, at: float) -> None:
        """Record that ``name`` was seen at ``at``."""
        ...

    async def last_seen(self, names: list[str]) -> dict[str, float]: ...


class MemoryDirectory:
    """The directory of one process."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentRecord] = {}
        self._tokens: dict[str, str] = {}
        self._seen: dict[str, float] = {}
        self._keys: dict[str, str] = {}
        self._by: dict[str, set[str]] = {}

    async def add(self, record: AgentRecord, *, max_per_client: int = 0) -> Taken | None:
        if record.name in self._agents:
            return Taken("name")
        for key in record.name_keys:
            if key in self._keys:
                return Taken("look_alike", self._keys[key])
        client = record.registered_by
        if max_per_client and client and len(self._by.get(client, ())) >= max_per_client:
            return Taken("quota")
        self._agents[record.name] = record
        self._tokens[record.token_sha256] = record.name
        for key in record.name_keys:
            self._keys[key] = record.name
        if client:
            self._by.setdefault(client, set()).add(record.name)
        return None

    async def put(self, record: AgentRecord) -> None:
        self._agents[record.name] = record
        self._tokens[record.token_sha256] = record.name

    async def get(self, name: str) -> AgentRecord | None:
        return self._agents.get(name)

    async def by_token(self, token_sha256: str) -> AgentRecord | None:
        name = self._tokens.get(token_sha256)
        return self._agents.get(name) if name else None

    async def remove(self, name: str) -> AgentRecord | None:
        record = self._agents.pop(name, None)
        if record is not None:
            self._tokens.pop(record.token_sha256, None)
            self._seen.pop(name, None)
            for key in record.name_keys:
                if self._keys.get(key) == name:
                    del self._keys[key]
            self._by.get(record.registered_by, set()).discard(name)
        return record

    async def all(self) -> list[AgentRecord]:
        return sorted(self._agents.values(), key=lambda r: r.name)

    async def touch(self, name: str, at: float) -> None:
        self._seen[name] = at

    async def last_seen(self, names: list[str]) -> dict[str, float]:
        return {n: self._seen[n] for n in names if n in self._seen}


# The Redis implementation lives in the Redis layer; its name stays importable here
# (imported on first use, so importing this module does not import redis).
__getattr__, __dir__ = lazy_exports(
    __name__, {"RedisDirectory": "middleware.redis.agent_directory"}, [*__all__, "RedisDirectory"]
)
