"""The capability catalog: where every agent's contract is registered and found.

``Catalog`` is the interface; ``MemoryCatalog`` (``memory_catalog.py``) is the
embedded default. Contracts are validated before they are stored, and ``name@version``
is unique.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import Field

from ._model import Model
from .contracts import CapabilityContract
from .smf import utcnow

__all__ = ["Catalog", "CatalogEntry", "CatalogQuery"]


class CatalogEntry(Model):
    """A registered contract plus its liveness."""

    contract: CapabilityContract
    registered_at: datetime = Field(default_factory=utcnow)
    last_heartbeat: datetime = Field(default_factory=utcnow)
    stale: bool = False

    @property
    def key(self) -> str:
        return self.contract.key


class CatalogQuery(Model):
    """Which contracts to find. Every given criterion must hold."""

    name: str = ""
    action: str = Field(default="", description="Must be in can_do.")
    tags: list[str] = Field(default_factory=list, description="All must be present.")
    max_slo_latency_ms: int = Field(default=0, ge=0, description="0 = any.")
    include_stale: bool = False


@runtime_checkable
class Catalog(Protocol):
    async def register(self, contract: CapabilityContract, *, replace: bool = False) -> CatalogEntry: ...

    async def get(self, key: str) -> CatalogEntry: ...

    async def query(self, query: CatalogQuery) -> list[CatalogEntry]: ...

    async def deregister(self, key: str) -> None: ...

    async def heartbeat(self, key: str) -> CatalogEntry: ...

    async def all(self) -> list[CatalogEntry]: ...
