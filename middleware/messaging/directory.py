"""The agent directory: agents that registered themselves (``MessageService.Register``).

Agents of the definition file are enrolled by every replica at start-up; agents that register
through the RPC are kept here so that every replica knows them (``RedisDirectory`` under the
storage key prefix) and a restart does not forget them::

    {prefix}agents            hash: name -> the record (JSON)
    {prefix}agents:tokens     hash: token SHA-256 -> name
    {prefix}agents:seen       hash: name -> last seen (epoch seconds)

Only the token's SHA-256 is stored; the token is returned once, by ``Register``.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import Field
from redis.asyncio import Redis

from .._model import Model
from ..redis.errors import RedisErrorHook, redis_operation

__all__ = ["AgentRecord", "Directory", "MemoryDirectory", "RedisDirectory", "RegistrationMode"]

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


@runtime_checkable
class Directory(Protocol):
    """Where registered agents live."""

    async def add(self, record: AgentRecord) -> bool:
        """Store a new agent; False when the name is taken."""
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

    async def add(self, record: AgentRecord) -> bool:
        if record.name in self._agents:
            return False
        self._agents[record.name] = record
        self._tokens[record.token_sha256] = record.name
        return True

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
        return record

    async def all(self) -> list[AgentRecord]:
        return sorted(self._agents.values(), key=lambda r: r.name)

    async def touch(self, name: str, at: float) -> None:
        self._seen[name] = at

    async def last_seen(self, names: list[str]) -> dict[str, float]:
        return {n: self._seen[n] for n in names if n in self._seen}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# KEYS: agents, tokens. ARGV: name, token hash, record JSON. 1 = added, 0 = name taken.
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
return 1
"""


class RedisDirectory:
    """The directory in Redis: every replica under the same prefix shares it.

    Args:
        client: A ``redis.asyncio.Redis``.
        prefix: The storage key prefix.
        on_redis_error: Called with ``"directory.<op>"`` when a Redis error escapes.
    """

    def __init__(
        self, client: Redis, *, prefix: str = "agency:", on_redis_error: RedisErrorHook | None = None
    ):
        self._r = client
        self.on_redis_error = on_redis_error
        self._agents = f"{prefix}agents"
        self._tokens = f"{prefix}agents:tokens"
        self._seen = f"{prefix}agents:seen"
        self._add = client.register_script(_ADD)

    @redis_operation("directory.add")
    async def add(self, record: AgentRecord) -> bool:
        added = await self._add(
            keys=[self._agents, self._tokens],
            args=[record.name, record.token_sha256, record.model_dump_json()],
        )
        return bool(int(added))

    @redis_operation("directory.put")
    async def put(self, record: AgentRecord) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(self._agents, record.name, record.model_dump_json())
        pipe.hset(self._tokens, record.token_sha256, record.name)
        await pipe.execute()

    @redis_operation("directory.get")
    async def get(self, name: str) -> AgentRecord | None:
        raw = await self._r.hget(self._agents, name)
        return AgentRecord.model_validate_json(raw) if raw else None

    @redis_operation("directory.by_token")
    async def by_token(self, token_sha256: str) -> AgentRecord | None:
        name = await self._r.hget(self._tokens, token_sha256)
        if not name:
            return None
        record = await self.get(_s(name))
        return record if record is not None and record.token_sha256 == token_sha256 else None

    @redis_operation("directory.remove")
    async def remove(self, name: str) -> AgentRecord | None:
        record = await self.get(name)
        if record is None:
            return None
        pipe = self._r.pipeline(transaction=True)
        pipe.hdel(self._agents, name)
        pipe.hdel(self._tokens, record.token_sha256)
        pipe.hdel(self._seen, name)
        await pipe.execute()
        return record

    @redis_operation("directory.all")
    async def all(self) -> list[AgentRecord]:
        raw = await self._r.hgetall(self._agents)
        return sorted((AgentRecord.model_validate_json(v) for v in raw.values()), key=lambda r: r.name)

    @redis_operation("directory.touch")
    async def touch(self, name: str, at: float) -> None:
        await self._r.hset(self._seen, name, repr(at))

    @redis_operation("directory.last_seen")
    async def last_seen(self, names: list[str]) -> dict[str, float]:
        if not names:
            return {}
        values = await self._r.hmget(self._seen, names)
        return {n: float(_s(v)) for n, v in zip(names, values, strict=True) if v is not None}
