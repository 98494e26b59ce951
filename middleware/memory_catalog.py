"""In-memory capability catalog (the embedded default), indexed by action and tag."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from .catalog import CatalogEntry, CatalogQuery
from .contracts import CapabilityContract, normalise_label
from .errors import AlreadyExists, NotFound
from .smf import utcnow

__all__ = ["MemoryCatalog"]


class MemoryCatalog:
    """Contracts in a dict, with an action index so a query does not scan everything."""

    def __init__(self) -> None:
        self._entries: dict[str, CatalogEntry] = {}
        self._by_action: dict[str, set[str]] = defaultdict(set)
        self._lock = asyncio.Lock()

    async def register(self, contract: CapabilityContract, *, replace: bool = False) -> CatalogEntry:
        contract = CapabilityContract.parse(contract, what="capability contract")
        async with self._lock:
            if contract.key in self._entries and not replace:
                raise AlreadyExists(f"capability {contract.key} is already registered")
            if contract.key in self._entries:
                self._unindex(self._entries[contract.key].contract)
            entry = CatalogEntry(contract=contract)
            self._entries[contract.key] = entry
            for action in contract.can_do:
                self._by_action[action].add(contract.key)
            return entry

    async def get(self, key: str) -> CatalogEntry:
        try:
            return self._entries[key]
        except KeyError:
            raise NotFound(f"no capability {key!r} in the catalog") from None

    async def query(self, query: CatalogQuery) -> list[CatalogEntry]:
        if query.action:
            keys: set[str] | list[str] = self._by_action.get(normalise_label(query.action), set())
        else:
            keys = list(self._entries)
        tags = {normalise_label(t) for t in query.tags}
        out = []
        for key in sorted(keys):
            entry = self._entries[key]
            c = entry.contract
            if query.name and c.name != query.name:
                continue
            if tags and not tags.issubset(c.tags):
                continue
            if query.max_slo_latency_ms and c.slo_latency_ms > query.max_slo_latency_ms:
                continue
            if entry.stale and not query.include_stale:
                continue
            out.append(entry)
        return out

    async def all(self) -> list[CatalogEntry]:
        return [self._entries[k] for k in sorted(self._entries)]

    async def deregister(self, key: str) -> None:
        async with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                raise NotFound(f"no capability {key!r} in the catalog")
            self._unindex(entry.contract)

    async def heartbeat(self, key: str) -> CatalogEntry:
        entry = await self.get(key)
        entry.last_heartbeat = utcnow()
        entry.stale = False
        return entry

    def _unindex(self, contract: CapabilityContract) -> None:
        for action in contract.can_do:
            self._by_action[action].discard(contract.key)
