"""The capability catalog: where every agent's contract is registered, found and watched.

``Catalog`` is the interface; ``MemoryCatalog`` (``memory_catalog.py``) is the embedded
default and ``RedisCatalog`` (``redis/catalog.py``) lets several gateway processes share
one catalog. Both behave the same (one test suite runs against both):

* **register / update**: the contract is validated first (every problem listed, nothing
  stored on failure); ``name@version`` is unique (``AlreadyExists`` unless ``replace``);
  several versions of one name can be live at once.
* **get / query / candidates**: ``query`` filters by name, action, tags, version range and
  SLO; ``candidates(action)`` is the router's indexed lookup (never a scan).
* **liveness**: with a lease, an entry whose last heartbeat is older than the lease is
  *stale*: still listed (``stale=True``), excluded from routing, and alive again after
  its next heartbeat. Time comes from an injected clock.
* **watch**: an async iterator of :class:`CatalogEvent` (registered, updated,
  deregistered, stale, alive). Use it as ``async with catalog.watch() as events:`` so the
  subscription is in place before anything else happens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import ConfigDict, Field, field_validator

from ._model import Model
from .contracts import CapabilityContract, normalise_label, normalise_tag_set
from .smf import utcnow
from .versions import Version, VersionRange, checked_range_text

__all__ = [
    "Catalog",
    "CatalogEntry",
    "CatalogEvent",
    "CatalogEventType",
    "CatalogQuery",
    "CatalogWatch",
    "Clock",
]

#: Returns the current time (UTC, timezone-aware). Injected so tests never sleep.
Clock = Callable[[], datetime]


class CatalogEntry(Model):
    """A registered contract plus its liveness. Immutable: catalogs hand out shared instances."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    contract: CapabilityContract
    registered_at: datetime = Field(default_factory=utcnow)
    last_heartbeat: datetime = Field(default_factory=utcnow)
    stale: bool = Field(default=False, description="Missed its lease: shown, but never routed to.")
    revision: int = Field(default=1, ge=1, description="Bumped by every update of this name@version.")

    @property
    def key(self) -> str:
        return self.contract.key


class CatalogQuery(Model):
    """Which contracts to find. Every given criterion must hold."""

    name: str = ""
    action: str = Field(default="", description="Must be in can_do.")
    tags: list[str] = Field(default_factory=list, description="All must be present.")
    version_range: str = Field(default="", description="e.g. '^2.0', '>=1.2 <3' (see versions.py).")
    max_slo_latency_ms: int = Field(default=0, ge=0, description="0 = any.")
    include_stale: bool = False

    @field_validator("name", "action")
    @classmethod
    def _label(cls, v: str) -> str:
        return normalise_label(v) if v else ""

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return normalise_tag_set(v)

    @field_validator("version_range")
    @classmethod
    def _range(cls, v: str) -> str:
        return checked_range_text(v)

    def matches(self, entry: CatalogEntry) -> bool:
        """Whether ``entry`` (with its ``stale`` flag already computed) is in the result."""
        c = entry.contract
        if self.name and c.name != self.name:
            return False
        if self.action and self.action not in c.can_do:
            return False
        if self.tags and not set(self.tags).issubset(c.tags):
            return False
        if self.max_slo_latency_ms and c.slo_latency_ms > self.max_slo_latency_ms:
            return False
        if self.version_range and not VersionRange.parse(self.version_range).contains(
            Version.parse(c.version)
        ):
            return False
        return self.include_stale or not entry.stale


class CatalogEventType(StrEnum):
    REGISTERED = "registered"
    UPDATED = "updated"
    DEREGISTERED = "deregistered"
    STALE = "stale"
    ALIVE = "alive"


class CatalogEvent(Model):
    """One change in the catalog, as a watcher sees it."""

    type: CatalogEventType
    key: str
    entry: CatalogEntry | None = Field(default=None, description="The entry after the change, if any.")
    at: datetime = Field(default_factory=utcnow)


@runtime_checkable
class CatalogWatch(Protocol):
    """A subscription to catalog changes: ``async with`` it, then ``async for`` over it."""

    async def __aenter__(self) -> CatalogWatch: ...

    async def __aexit__(self, *exc: object) -> None: ...

    def __aiter__(self) -> AsyncIterator[CatalogEvent]: ...

    async def __anext__(self) -> CatalogEvent: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Catalog(Protocol):
    """What every catalog backend offers (see the module docstring for the semantics)."""

    async def register(self, contract: CapabilityContract, *, replace: bool = False) -> CatalogEntry:
        """Validate and store ``contract``; counts as a heartbeat.

        Raises:
            InvalidInput: listing every problem of the contract; nothing is stored.
            AlreadyExists: ``name@version`` is registered and ``replace`` is false.
        """
        ...

    async def update(self, contract: CapabilityContract) -> CatalogEntry:
        """Replace the contract of an existing ``name@version``.

        Raises:
            NotFound: it is not registered.
        """
        ...

    async def get(self, key: str) -> CatalogEntry:
        """The entry for ``name@version`` (stale or not). Raises ``NotFound``."""
        ...

    async def query(self, query: CatalogQuery) -> list[CatalogEntry]:
        """Entries matching every criterion of ``query``, sorted by key."""
        ...

    async def candidates(self, action: str) -> list[CatalogEntry]:
        """Entries with ``action`` in ``can_do`` or in ``cannot_do`` (stale ones too), by key.

        This is the router's indexed lookup: its cost depends on how many agents mention
        the action, not on the size of the catalog.
        """
        ...

    async def deregister(self, key: str) -> None:
        """Remove ``name@version``. Raises ``NotFound``."""
        ...

    async def heartbeat(self, key: str) -> CatalogEntry:
        """Mark the entry alive now (a stale one comes back). Raises ``NotFound``."""
        ...

    async def sweep(self) -> list[CatalogEvent]:
        """Publish ``stale`` events for entries that passed their lease since the last sweep.

        Staleness is computed on every read anyway; the sweep only makes watchers hear
        about it. Watches sweep on their own while idle.
        """
        ...

    def watch(self) -> CatalogWatch:
        """Subscribe to changes (see :class:`CatalogWatch`)."""
        ...

    async def all(self) -> list[CatalogEntry]:
        """Every entry, sorted by key (a listing: this one does scan)."""
        ...

    async def close(self) -> None:
        """Release connections; the catalog is not used afterwards."""
        ...


def is_stale(last_heartbeat: datetime, now: datetime, lease_seconds: float | None) -> bool:
    """Whether a heartbeat at ``last_heartbeat`` is older than the lease at ``now``."""
    return lease_seconds is not None and (now - last_heartbeat).total_seconds() > lease_seconds
