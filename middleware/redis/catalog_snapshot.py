"""Catalog snapshot: the Redis catalog's entries held in one gateway, so routing reads
(``candidates``, ``get``) cost no round trip in the steady state.

How it stays fresh:

- it subscribes to the catalog's events channel (``P{catalog}:events``: every register, update,
  deregister, alive, stale and expiry is published there, inside the writing transaction) and
  re-reads the catalog when it hears any event (a burst of events is one re-read);
- it re-reads the catalog every ``refresh_seconds`` anyway, which bounds how long a lost event
  (pub/sub is at-most-once), a lost subscription or a write that did not publish stays unseen,
  and keeps the heartbeats it holds at most ``refresh_seconds`` old.

**Staleness bound.** A change is seen by routing within the pub/sub latency (usually well under
a millisecond) and at most ``refresh_seconds`` after it (default 1 s) while Redis answers.
Liveness is unchanged: an entry is stale (excluded from routing) once its last heartbeat is older
than the lease, computed at read time from the heartbeat the snapshot holds, so a dead agent
leaves routing within its lease exactly as before. A live agent's heartbeat may be seen up to
a re-read late, so an entry the snapshot holds as stale is never trusted: the catalog then reads
Redis itself (one round trip, only while some candidate looks stale: a dead agent's entry costs
that until it expires), and a live agent is never refused for the snapshot's lag.

**When it is not used.** Until its first re-read after subscribing, and whenever its last
successful re-read is older than ``3 × refresh_seconds`` (Redis unreachable, a stuck loop), the
snapshot is not *ready* and :class:`~middleware.redis.catalog.RedisCatalog` reads Redis directly
(which answers UNAVAILABLE during an outage, as before): routing never runs on a snapshot older
than that.

A re-read is one round trip (the heartbeats and the entries known last time in one pipeline);
entries new since cost a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..background import LoopErrors
from ..catalog import CatalogEntry
from ..contracts import normalise_label

if TYPE_CHECKING:
    from .catalog import RedisCatalog

log = logging.getLogger("agency.catalog")

__all__ = ["CatalogSnapshot"]


class CatalogSnapshot:
    """Every catalog entry with its heartbeat, re-read on each catalog event and periodically.

    Args:
        catalog: The Redis catalog it mirrors (its client, prefix, lease and decoding).
        refresh_seconds: The longest time between two re-reads (the staleness bound).
        monotonic: Monotonic seconds, for the readiness bound (injected in tests).
    """

    def __init__(
        self,
        catalog: RedisCatalog,
        *,
        refresh_seconds: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._catalog = catalog
        self.refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        # key -> (stored JSON, heartbeat score in epoch ms or None)
        self._entries: dict[str, tuple[bytes, Any]] = {}
        # normalised action -> sorted keys whose can_do or cannot_do names it (as the index sets)
        self._by_action: dict[str, list[str]] = {}
        self._refreshed_at: float | None = None
        self._subscribed = False
        self._task: asyncio.Task[None] | None = None
        self._pubsub: Any = None
        self._errors = LoopErrors("catalog-snapshot", logger=log, cap=1.0)
        #: Completed re-reads (tests wait for the next one instead of sleeping).
        self.refreshes = 0
        self._changed = asyncio.Event()
        # bumped by this gateway's own writes: a re-read that overlapped one is not used
        self._generation = 0
        self._closing = False

    # ------------------------------------------------------------------ reads
    @property
    def ready(self) -> bool:
        """True while subscribed and re-read within ``3 × refresh_seconds``."""
        return (
            self._subscribed
            and self._refreshed_at is not None
            and self._monotonic() - self._refreshed_at <= 3 * self.refresh_seconds
        )

    def candidates(self, action: str, now: datetime) -> list[CatalogEntry]:
        """Entries whose ``can_do`` or ``cannot_do`` names ``action``, sorted by key."""
        keys = self._by_action.get(normalise_label(action), [])
        return [self._catalog._view(k, *self._entries[k], now) for k in keys]

    def get(self, key: str, now: datetime) -> CatalogEntry | None:
        """The entry, or None when the snapshot does not hold it."""
        held = self._entries.get(key)
        return self._catalog._view(key, *held, now) if held is not None else None

    # ------------------------------------------------- this gateway's writes
    def put(self, written: Sequence[tuple[str, str, float]]) -> None:
        """This gateway registered or updated these (key, stored JSON, heartbeat score):
        routing here sees them at once."""
        self._generation += 1
        for key, raw, score in written:
            self._entries[key] = (_bytes(raw), score)
        self._by_action = _index(self._catalog, self._entries)

    def discard(self, key: str) -> None:
        """This gateway deregistered ``key``: routing here stops at once."""
        self._generation += 1
        if self._entries.pop(key, None) is not None:
            self._by_action = _index(self._catalog, self._entries)

    def beat(self, key: str, score: float) -> None:
        """This gateway renewed ``key``'s heartbeat (re-reads keep the newer of two heartbeats)."""
        held = self._entries.get(key)
        if held is not None and (held[1] is None or held[1] < score):
            self._entries[key] = (held[0], score)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start following the catalog (idempotent; needs a running event loop; not after
        :meth:`aclose`)."""
        if not self._closing and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run(), name="catalog-snapshot")

    async def aclose(self) -> None:
        """Stop following; reads go to Redis again."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drop()

    async def wait_refreshed(self, after: int) -> None:
        """Wait until more than ``after`` re-reads have completed (for tests)."""
        while self.refreshes <= after:
            self._changed.clear()
            await self._changed.wait()

    async def drop_subscription(self) -> None:
        """Close the subscription's connection as a network fault would (for tests): events are
        missed until it subscribes again; the periodic re-read still runs."""
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.connection.disconnect()

    # ------------------------------------------------------------------- loop
    async def _run(self) -> None:
        me = asyncio.current_task()
        while not self._closing:
            try:
                await self._follow()
            except Exception as exc:  # a background loop outlives any failure: logged, retried
                if self._closing or (me is not None and me.cancelling()):
                    return  # a cancellation the client turned into an error (it does, mid-read)
                # (not counted as a Redis error: routing then reads Redis itself, and that is counted)
                await self._drop()
                await asyncio.sleep(self._errors.failed(exc))

    async def _follow(self) -> None:
        if self._pubsub is None:
            self._pubsub = self._catalog.redis.pubsub()
            await self._pubsub.subscribe(self._catalog.channel)
            self._subscribed = True
        await self.refresh()  # after subscribing: nothing published since is missed
        self._errors.succeeded()
        message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=self.refresh_seconds)
        if message is None:
            return  # the periodic re-read
        while message is not None:  # a burst of events: one re-read
            message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0)

    async def _drop(self) -> None:
        self._subscribed = False
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def refresh(self) -> None:
        """Re-read every entry and heartbeat (one round trip; two when entries are new)."""
        catalog = self._catalog
        generation = self._generation
        known = list(self._entries)
        pipe = catalog.redis.pipeline(transaction=False)
        pipe.execute_command("ZRANGE", catalog._hb, 0, -1, "WITHSCORES")
        if known:
            pipe.execute_command("MGET", *[catalog._entry_key(k) for k in known])
        replies = await pipe.execute()
        scores = {_text(k): float(s) for k, s in _pairs(replies[0])}
        raws: dict[str, Any] = dict(zip(known, replies[1], strict=True)) if known else {}
        new = [k for k in scores if k not in raws]
        if new:
            pipe = catalog.redis.pipeline(transaction=False)
            pipe.execute_command("MGET", *[catalog._entry_key(k) for k in new])
            (got,) = await pipe.execute()
            raws.update(zip(new, got, strict=True))
        if generation != self._generation:
            return  # this gateway wrote meanwhile (and the write's event brings another re-read)
        held = self._entries
        entries = {
            k: (_bytes(raws[k]), _newer(score, held.get(k)))
            for k, score in scores.items()
            if raws.get(k) is not None
        }
        if {k: v[0] for k, v in entries.items()} != {k: v[0] for k, v in self._entries.items()}:
            self._by_action = _index(catalog, entries)
        self._entries = entries
        self._refreshed_at = self._monotonic()
        self.refreshes += 1
        self._changed.set()


def _index(catalog: RedisCatalog, entries: dict[str, tuple[bytes, Any]]) -> dict[str, list[str]]:
    by_action: dict[str, list[str]] = {}
    for key in sorted(entries):
        contract = catalog._decode(key, entries[key][0]).contract
        for action in {normalise_label(a) for a in (*contract.can_do, *contract.cannot_do)}:
            by_action.setdefault(action, []).append(key)
    return by_action


def _newer(score: float, held: tuple[bytes, Any] | None) -> float:
    """Heartbeats only move forward: keep one this gateway renewed after the re-read began."""
    return max(score, held[1]) if held is not None and held[1] is not None else score


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """ZRANGE WITHSCORES as (member, score) pairs, whichever shape the client answered."""
    if reply and isinstance(reply[0], (list, tuple)):
        return [(m, s) for m, s in reply]
    return list(zip(reply[::2], reply[1::2], strict=True))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
