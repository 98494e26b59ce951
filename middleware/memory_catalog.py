"""In-memory capability catalog (the embedded default), indexed by action, tag and name."""

from __future__ import annotations

import asyncio
import gc
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from .catalog import CatalogEntry, CatalogEvent, CatalogEventType, CatalogQuery, Clock, is_stale
from .contracts import CapabilityContract, normalise_label
from .errors import AlreadyExists, InvalidInput, NotFound
from .smf import utcnow

__all__ = ["MemoryCatalog"]

_EMPTY: frozenset[str] = frozenset()


class MemoryCatalog:
    """Contracts in a dict, with indexes so neither routing nor a query scans everything.

    Args:
        lease_seconds: An entry whose last heartbeat is older than this is stale
            (excluded from routing until it heartbeats). ``None`` (the default for the
            embedded, in-process setup) = entries never go stale.
        clock: The time source (injected in tests).
        sweep_interval: How often an idle watch checks for newly stale entries, in
            seconds (default: a quarter of the lease).
    """

    def __init__(
        self,
        *,
        lease_seconds: float | None = None,
        clock: Clock = utcnow,
        sweep_interval: float | None = None,
    ) -> None:
        if lease_seconds is not None and lease_seconds <= 0:
            raise InvalidInput.single("lease_seconds", "must be positive (or None for no lease)")
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.sweep_interval = sweep_interval or (lease_seconds / 4 if lease_seconds else None)
        self._entries: dict[str, CatalogEntry] = {}
        self._by_action: dict[str, set[str]] = defaultdict(set)
        self._by_refusal: dict[str, set[str]] = defaultdict(set)
        self._by_tag: dict[str, set[str]] = defaultdict(set)
        self._by_name: dict[str, set[str]] = defaultdict(set)
        # keys in order of last heartbeat (oldest first): a sweep stops at the first live one
        self._beats: OrderedDict[str, None] = OrderedDict()
        self._marked_stale: set[str] = set()
        self._subscribers: set[asyncio.Queue[CatalogEvent | _Closed]] = set()
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ writes
    async def register(self, contract: CapabilityContract, *, replace: bool = False) -> CatalogEntry:
        contract = CapabilityContract.parse(contract, what="capability contract")
        async with self._lock:
            old = self._entries.get(contract.key)
            if old is not None and not replace:
                raise AlreadyExists(f"capability {contract.key} is already registered (use replace/update)")
            return self._store(contract, old)

    async def register_many(
        self, contracts: Sequence[CapabilityContract | Mapping[str, Any]], *, replace: bool = False
    ) -> int:
        """Bulk import (as ``RedisCatalog.register_many``): every contract is validated and,
        unless ``replace``, checked absent before any is stored; then each is stored as
        ``register`` stores it (same entries, same events). Returns the count.

        The time is linear in the number of contracts: the cyclic garbage collector is paused
        while they are built and indexed (every object a load allocates survives it, so each
        full collection on the way would scan all of them again: 11 passes at 100,000 entries).

        Raises:
            InvalidInput: listing the problems of every bad contract (prefixed by index).
            AlreadyExists: some keys exist and ``replace`` is false (none is stored).
        """
        async with self._lock:
            with _collector_paused():  # nothing awaited inside: other tasks never run paused
                parsed: list[CapabilityContract] = []
                problems = []
                for i, raw in enumerate(contracts):
                    try:
                        parsed.append(CapabilityContract.parse(raw, what="capability contract"))
                    except InvalidInput as exc:
                        problems += [type(p)(f"[{i}].{p.field}", p.reason) for p in exc.problems]
                if problems:
                    raise InvalidInput(problems, what="capability contracts")
                if not replace:
                    existing = sum(1 for c in parsed if c.key in self._entries)
                    if existing:
                        raise AlreadyExists(f"{existing} of these capabilities are already registered")
                for contract in parsed:
                    self._store(contract, self._entries.get(contract.key))
        return len(parsed)

    async def update(self, contract: CapabilityContract) -> CatalogEntry:
        contract = CapabilityContract.parse(contract, what="capability contract")
        async with self._lock:
            old = self._entries.get(contract.key)
            if old is None:
                raise NotFound(f"no capability {contract.key!r} in the catalog to update")
            return self._store(contract, old)

    def _store(self, contract: CapabilityContract, old: CatalogEntry | None) -> CatalogEntry:
        now = self.clock()
        if old is not None:
            self._unindex(old.contract)
        entry = CatalogEntry(
            contract=contract,
            registered_at=old.registered_at if old else now,
            last_heartbeat=now,
            revision=old.revision + 1 if old else 1,
        )
        key = contract.key
        self._entries[key] = entry
        self._index(contract)
        self._beat(key)
        kind = CatalogEventType.UPDATED if old else CatalogEventType.REGISTERED
        self._publish(CatalogEvent(type=kind, key=key, entry=entry, at=now))
        return entry

    async def deregister(self, key: str) -> None:
        async with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                raise NotFound(f"no capability {key!r} in the catalog")
            self._unindex(entry.contract)
            self._beats.pop(key, None)
            self._marked_stale.discard(key)
            self._publish(CatalogEvent(type=CatalogEventType.DEREGISTERED, key=key, at=self.clock()))

    async def heartbeat(self, key: str) -> CatalogEntry:
        entry = self._entries.get(key)
        if entry is None:
            raise NotFound(f"no capability {key!r} in the catalog")
        now = self.clock()
        entry = entry.model_copy(update={"last_heartbeat": now, "stale": False})
        self._entries[key] = entry
        self._beat(key)
        fresh = entry
        if key in self._marked_stale:
            self._marked_stale.discard(key)
            self._publish(CatalogEvent(type=CatalogEventType.ALIVE, key=key, entry=fresh, at=now))
        return fresh

    async def sweep(self) -> list[CatalogEvent]:
        if self.lease_seconds is None:
            return []
        now = self.clock()
        events = []
        for key in self._beats:  # oldest heartbeat first
            entry = self._entries[key]
            if not is_stale(entry.last_heartbeat, now, self.lease_seconds):
                break
            if key not in self._marked_stale:
                self._marked_stale.add(key)
                events.append(
                    CatalogEvent(type=CatalogEventType.STALE, key=key, entry=self._view(entry, now), at=now)
                )
        for event in events:
            self._publish(event)
        return events

    # ------------------------------------------------------------------- reads
    async def get(self, key: str) -> CatalogEntry:
        try:
            return self._view(self._entries[key], self.clock())
        except KeyError:
            raise NotFound(f"no capability {key!r} in the catalog") from None

    async def query(self, query: CatalogQuery) -> list[CatalogEntry]:
        query = CatalogQuery.parse(query, what="catalog query")
        keys = self._narrowest(query)
        now = self.clock()
        views = (self._view(self._entries[k], now) for k in sorted(keys))
        return [v for v in views if query.matches(v)]

    async def candidates(self, action: str) -> list[CatalogEntry]:
        action = normalise_label(action)
        keys = self._by_action.get(action, _EMPTY) | self._by_refusal.get(action, _EMPTY)
        if self.lease_seconds is None:  # nothing can be stale: hand out the frozen entries
            return [self._entries[k] for k in sorted(keys)]
        now = self.clock()
        return [self._view(self._entries[k], now) for k in sorted(keys)]

    async def all(self) -> list[CatalogEntry]:
        now = self.clock()
        return [self._view(self._entries[k], now) for k in sorted(self._entries)]

    def watch(self) -> _MemoryWatch:
        return _MemoryWatch(self)

    async def close(self) -> None:
        for queue in list(self._subscribers):
            queue.put_nowait(_CLOSED)
        self._subscribers.clear()

    # ----------------------------------------------------------------- helpers
    def _view(self, entry: CatalogEntry, now: datetime) -> CatalogEntry:
        # entries are frozen, so the stored one can be handed out as long as its flag is right
        stale = is_stale(entry.last_heartbeat, now, self.lease_seconds)
        return entry if stale is entry.stale else entry.model_copy(update={"stale": stale})

    def _narrowest(self, q: CatalogQuery) -> Iterable[str]:
        sets = []
        if q.name:
            sets.append(self._by_name.get(q.name, set()))
        if q.action:
            sets.append(self._by_action.get(q.action, set()))
        sets.extend(self._by_tag.get(t, set()) for t in q.tags)
        if not sets:
            return self._entries.keys()
        return min(sets, key=len)

    def _beat(self, key: str) -> None:
        self._beats[key] = None
        self._beats.move_to_end(key)

    def _index(self, c: CapabilityContract) -> None:
        for action in c.can_do:
            self._by_action[action].add(c.key)
        for action in c.cannot_do:
            self._by_refusal[action].add(c.key)
        for tag in c.tags:
            self._by_tag[tag].add(c.key)
        self._by_name[c.name].add(c.key)

    def _unindex(self, c: CapabilityContract) -> None:
        for index, labels in (
            (self._by_action, c.can_do),
            (self._by_refusal, c.cannot_do),
            (self._by_tag, c.tags),
            (self._by_name, [c.name]),
        ):
            for label in labels:
                keys = index.get(label)
                if keys is not None:
                    keys.discard(c.key)
                    if not keys:
                        del index[label]

    def _publish(self, event: CatalogEvent) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a bulk load (reference counting still frees)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Closed:
    pass


_CLOSED = _Closed()


class _MemoryWatch:
    """Subscribed from creation on, so nothing between ``watch()`` and the first read is lost."""

    def __init__(self, catalog: MemoryCatalog) -> None:
        self._catalog = catalog
        self._queue: asyncio.Queue[CatalogEvent | _Closed] = asyncio.Queue()
        catalog._subscribers.add(self._queue)
        self._closed = False

    async def __aenter__(self) -> _MemoryWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> _MemoryWatch:
        return self

    async def __anext__(self) -> CatalogEvent:
        while not self._closed:
            try:
                item = await asyncio.wait_for(self._queue.get(), timeout=self._catalog.sweep_interval)
            except TimeoutError:
                await self._catalog.sweep()  # idle: let stale entries be heard about
                continue
            if isinstance(item, _Closed):
                break
            return item
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._closed = True
        self._catalog._subscribers.discard(self._queue)
