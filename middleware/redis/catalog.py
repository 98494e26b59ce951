"""Capability catalog in Redis: several gateway processes share it and see each other's changes.

Key layout (``P`` = the prefix, default ``agency:catalog:``; every key carries the hash tag
``{catalog}``, so the whole catalog is in one Redis Cluster slot: see :mod:`.keys`)::

    P{catalog}:entry:<name@version>   string  the entry as JSON (contract, registered_at, revision);
                                              expires expire_after_seconds after the last heartbeat
    P{catalog}:hb                     zset    name@version → last heartbeat (epoch ms)
    P{catalog}:stale                  set     entries already announced as stale
    P{catalog}:idx:can:<action>       set     keys with the action in can_do
    P{catalog}:idx:cannot:<action>    set     keys with the action in cannot_do
    P{catalog}:idx:tag:<tag>          set     keys carrying the tag
    P{catalog}:idx:name:<name>        set     keys of that name (all versions)
    P{catalog}:events                 pub/sub catalog events as JSON (registered, updated, ...)

Writes are transactions (WATCH/MULTI), so a bad or conflicting registration leaves
nothing behind and concurrent writers never half-overwrite each other; events are
published inside the transaction, so a watcher only hears about committed changes.
Index sets expire with the entries that fill them, and members whose entry expired are
dropped when a lookup meets them, so nothing leaks.

Routing reads (``candidates``, ``get``) cost no round trip in the steady state: they are served
from a :class:`~.catalog_snapshot.CatalogSnapshot` of every entry, re-read on each catalog event
and at least every ``snapshot_seconds`` (the staleness bound, default 1 s; see that module).
This gateway's own writes are in its snapshot at once. Without a ready snapshot (just started,
Redis unreachable) ``candidates`` reads Redis: one pipeline reads the action's index sets and,
beside them, the entries and heartbeats of the members the last lookup of that action met;
members new since cost a second round trip.

Pub/sub is at-most-once: a watcher that was disconnected should re-read (``query``)
before watching again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, WatchError

from ..background import LoopErrors
from ..catalog import CatalogEntry, CatalogEvent, CatalogEventType, CatalogQuery, Clock, is_stale
from ..contracts import CapabilityContract, normalise_label
from ..errors import AlreadyExists, BackendUnavailable, InvalidInput, NotFound
from ..smf import utcnow
from . import keys as key_names
from .catalog_snapshot import CatalogSnapshot
from .errors import RedisErrorHook, backend_unavailable, count_redis_error, redis_operation

log = logging.getLogger("agency.catalog")

__all__ = ["RedisCatalog"]


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _time(ms: float) -> datetime:
    return datetime.fromtimestamp(float(ms) / 1000, UTC)


class RedisCatalog:
    """The catalog in Redis (see the module docstring for the key layout).

    Args:
        redis: An asyncio Redis client (``decode_responses`` may be either).
        prefix: Namespace of every key; gateways sharing a catalog use the same one.
        lease_seconds: Heartbeats older than this make an entry stale (excluded from routing).
        expire_after_seconds: An entry with no heartbeat for this long is deleted
            (default: 10 leases). Must be at least the lease.
        clock: The time source for heartbeats and staleness (injected in tests).
        sweep_interval: How often an idle watch sweeps for stale entries (default: lease/4).
        on_redis_error: Called with the operation (``"catalog.register"`` ...) whenever a
            Redis error escapes one (see :mod:`middleware.redis.errors`).
        snapshot_seconds: Routing reads come from a snapshot in this process re-read at least
            this often (a background task, from the first read until :meth:`close`;
            :meth:`gateway_snapshot_seconds` is what ``agency serve`` uses: 1 s, at most a tenth
            of the lease); None (the default) reads Redis every time and starts nothing.
    """

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = "agency:catalog:",
        lease_seconds: float = 30.0,
        expire_after_seconds: float | None = None,
        clock: Clock = utcnow,
        sweep_interval: float | None = None,
        on_redis_error: RedisErrorHook | None = None,
        snapshot_seconds: float | None = None,
    ) -> None:
        if lease_seconds <= 0:
            raise InvalidInput.single("lease_seconds", "must be positive")
        expire = expire_after_seconds if expire_after_seconds is not None else 10 * lease_seconds
        if expire < lease_seconds:
            raise InvalidInput.single("expire_after_seconds", "must be at least lease_seconds")
        self.redis = redis
        self.on_redis_error = on_redis_error
        self.prefix = prefix
        self.lease_seconds = lease_seconds
        self.expire_after_seconds = expire
        self.clock = clock
        self.sweep_interval = sweep_interval or lease_seconds / 4
        self._ttl_ms = int(expire * 1000)
        self._hb = key_names.catalog.heartbeats(prefix)
        self._stale = key_names.catalog.stale(prefix)
        self.channel = key_names.catalog.events(prefix)
        # the members each action's lookup met last time: read with the index in one round trip
        self._hints: dict[str, list[str]] = {}
        # parsed entries by key, reused while the stored JSON is byte-identical
        self._parsed: dict[str, tuple[bytes, CatalogEntry]] = {}
        if snapshot_seconds is not None and snapshot_seconds <= 0:
            raise InvalidInput.single("snapshot_seconds", "must be positive (or None for no snapshot)")
        self.snapshot = (
            CatalogSnapshot(self, refresh_seconds=snapshot_seconds) if snapshot_seconds is not None else None
        )

    @staticmethod
    def gateway_snapshot_seconds(lease_seconds: float) -> float:
        """A gateway's snapshot period: 1 s, at most a tenth of the lease (agents heartbeat
        several times inside it, so a live one is never seen stale)."""
        return min(1.0, lease_seconds / 10)

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisCatalog:
        """A catalog on a new client for ``url`` (e.g. ``redis://127.0.0.1:6379/0``)."""
        from .connection import redis_client

        return cls(redis_client(url), **kwargs)

    # ------------------------------------------------------------------ writes
    @redis_operation("catalog.register")
    async def register(self, contract: CapabilityContract, *, replace: bool = False) -> CatalogEntry:
        contract = CapabilityContract.parse(contract, what="capability contract")
        return await self._write(contract, replace=replace, must_exist=False)

    @redis_operation("catalog.update")
    async def update(self, contract: CapabilityContract) -> CatalogEntry:
        contract = CapabilityContract.parse(contract, what="capability contract")
        return await self._write(contract, replace=True, must_exist=True)

    async def _write(self, contract: CapabilityContract, *, replace: bool, must_exist: bool) -> CatalogEntry:
        key = contract.key
        ekey = self._entry_key(key)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(ekey)
                    raw = await pipe.get(ekey)
                    if raw is not None and not replace:
                        raise AlreadyExists(f"capability {key} is already registered (use replace/update)")
                    if raw is None and must_exist:
                        raise NotFound(f"no capability {key!r} in the catalog to update")
                    old = self._decode(key, raw) if raw is not None else None
                    now = self.clock()
                    entry = CatalogEntry(
                        contract=contract,
                        registered_at=old.registered_at if old else now,
                        last_heartbeat=now,
                        revision=old.revision + 1 if old else 1,
                    )
                    kind = CatalogEventType.UPDATED if old else CatalogEventType.REGISTERED
                    event = CatalogEvent(type=kind, key=key, entry=entry, at=now)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if old is not None:
                        for ikey in self._index_keys(old.contract):
                            pipe.srem(ikey, key)
                    for ikey in self._index_keys(contract):
                        pipe.sadd(ikey, key)
                        pipe.pexpire(ikey, self._ttl_ms)
                    pipe.zadd(self._hb, {key: _ms(now)})
                    pipe.srem(self._stale, key)
                    encoded = self._encode(entry)
                    pipe.set(ekey, encoded, px=self._ttl_ms)
                    _publish(pipe, self.channel, event.model_dump_json())
                    await pipe.execute()
                    if self.snapshot is not None:
                        self.snapshot.put([(key, encoded, _ms(now))])
                    return entry
                except WatchError:
                    continue  # someone else wrote this key meanwhile: read again

    @redis_operation("catalog.register_many")
    async def register_many(self, contracts: list[CapabilityContract], *, replace: bool = False) -> int:
        """Bulk import (pipelined, not one transaction): every contract is validated and,
        unless ``replace``, checked absent before anything is written. Returns the count.

        Raises:
            InvalidInput: listing the problems of every bad contract (prefixed by index).
            AlreadyExists: some keys exist and ``replace`` is false (none is written).
        """
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
            existing = await self.redis.exists(*[self._entry_key(c.key) for c in parsed]) if parsed else 0
            if existing:
                raise AlreadyExists(f"{existing} of these capabilities are already registered")
        now = self.clock()
        for start in range(0, len(parsed), 1000):
            pipe = self.redis.pipeline(transaction=False)
            touched: set[str] = set()
            written = []
            for contract in parsed[start : start + 1000]:
                entry = CatalogEntry(contract=contract, registered_at=now, last_heartbeat=now)
                encoded = self._encode(entry)
                written.append((contract.key, encoded, _ms(now)))
                pipe.set(self._entry_key(contract.key), encoded, px=self._ttl_ms)
                for ikey in self._index_keys(contract):
                    pipe.sadd(ikey, contract.key)
                    touched.add(ikey)
                pipe.zadd(self._hb, {contract.key: _ms(now)})
                event = CatalogEvent(type=CatalogEventType.REGISTERED, key=contract.key, entry=entry, at=now)
                _publish(pipe, self.channel, event.model_dump_json())
            for ikey in touched:
                pipe.pexpire(ikey, self._ttl_ms)
            await pipe.execute()
            if self.snapshot is not None:
                self.snapshot.put(written)
        return len(parsed)

    @redis_operation("catalog.deregister")
    async def deregister(self, key: str) -> None:
        ekey = self._entry_key(key)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(ekey)
                    raw = await pipe.get(ekey)
                    if raw is None:
                        raise NotFound(f"no capability {key!r} in the catalog")
                    old = self._decode(key, raw)
                    event = CatalogEvent(type=CatalogEventType.DEREGISTERED, key=key, at=self.clock())
                    pipe.multi()  # type: ignore[no-untyped-call]
                    pipe.delete(ekey)
                    for ikey in self._index_keys(old.contract):
                        pipe.srem(ikey, key)
                    pipe.zrem(self._hb, key)
                    pipe.srem(self._stale, key)
                    _publish(pipe, self.channel, event.model_dump_json())
                    await pipe.execute()
                    self._parsed.pop(key, None)
                    if self.snapshot is not None:
                        self.snapshot.discard(key)
                    return
                except WatchError:
                    continue

    @redis_operation("catalog.heartbeat")
    async def heartbeat(self, key: str) -> CatalogEntry:
        ekey = self._entry_key(key)
        now = self.clock()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.pexpire(ekey, self._ttl_ms)
            pipe.zadd(self._hb, {key: _ms(now)}, xx=True)
            pipe.srem(self._stale, key)
            pipe.get(ekey)
            exists, _, was_stale, raw = await pipe.execute()
        if not exists or raw is None:
            await self.redis.zrem(self._hb, key)
            raise NotFound(f"no capability {key!r} in the catalog")
        entry = self._view(key, raw, _ms(now), now)
        if self.snapshot is not None:
            self.snapshot.beat(key, _ms(now))
        # the index sets live as long as the entries in them (they were given their TTL once, at
        # registration: every entry fell out of routing ten leases after it registered)
        async with self.redis.pipeline(transaction=False) as indexes:
            for ikey in self._index_keys(entry.contract):
                indexes.pexpire(ikey, self._ttl_ms, gt=True)
            await indexes.execute()
        if was_stale:
            event = CatalogEvent(type=CatalogEventType.ALIVE, key=key, entry=entry, at=now)
            await self.redis.publish(self.channel, event.model_dump_json())
        return entry

    @redis_operation("catalog.sweep")
    async def sweep(self) -> list[CatalogEvent]:
        now = self.clock()
        now_ms = _ms(now)
        expired_before = now_ms - int(self.expire_after_seconds * 1000)
        stale_before = now_ms - int(self.lease_seconds * 1000)
        events: list[CatalogEvent] = []
        # entries whose TTL ran out: forget their heartbeat; one gateway wins each ZREM
        expired: list[Any] = await self.redis.zrangebyscore(self._hb, "-inf", f"({expired_before}")
        gone = [_text(k) for k in expired]
        if gone:
            pipe = self.redis.pipeline(transaction=False)
            for key in gone:
                pipe.zrem(self._hb, key)
                pipe.srem(self._stale, key)
            removed = (await pipe.execute())[::2]
            for key, won in zip(gone, removed, strict=True):
                if won:
                    events.append(CatalogEvent(type=CatalogEventType.DEREGISTERED, key=key, at=now))
                    self._parsed.pop(key, None)
                    if self.snapshot is not None:
                        self.snapshot.discard(key)
        stale: list[Any] = await self.redis.zrangebyscore(
            self._hb, f"{expired_before}", f"({stale_before}", withscores=True
        )
        if stale:
            pipe = self.redis.pipeline(transaction=False)
            for key, _ in stale:
                pipe.sadd(self._stale, key)
                pipe.get(self._entry_key(_text(key)))
            results = await pipe.execute()
            for (key, score), newly, raw in zip(stale, results[::2], results[1::2], strict=True):
                if newly and raw is not None:
                    entry = self._view(_text(key), raw, score, now)
                    events.append(
                        CatalogEvent(type=CatalogEventType.STALE, key=entry.key, entry=entry, at=now)
                    )
        if events:
            pipe = self.redis.pipeline(transaction=False)
            for event in events:
                _publish(pipe, self.channel, event.model_dump_json())
            await pipe.execute()
        return events

    # ------------------------------------------------------------------- reads
    @redis_operation("catalog.get")
    async def get(self, key: str) -> CatalogEntry:
        if self.snapshot is not None:
            self.snapshot.start()
            held = self.snapshot.get(key, self.clock()) if self.snapshot.ready else None
            if held is not None and not held.stale:  # stale by the snapshot's: Redis has the last word
                return held
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self._entry_key(key))
        pipe.zscore(self._hb, key)
        raw, score = await pipe.execute()
        if raw is None:
            raise NotFound(f"no capability {key!r} in the catalog")
        return self._view(key, raw, score, self.clock())

    @redis_operation("catalog.candidates")
    async def candidates(self, action: str) -> list[CatalogEntry]:
        action = normalise_label(action)
        if self.snapshot is not None:
            self.snapshot.start()
            if self.snapshot.ready:
                held_entries = self.snapshot.candidates(action, self.clock())
                # an entry stale by the snapshot's heartbeat (up to a re-read behind) is judged on
                # Redis's own: a live agent is never refused for the snapshot's lag
                if not any(e.stale for e in held_entries):
                    return held_entries
        index_sets = [self._idx("can", action), self._idx("cannot", action)]
        # One round trip in the steady state: the index and, beside it, the entries and heartbeats
        # of the members this action had last time; a second one only for members new since.
        # (No script: a script may only touch keys it is given, and the entries' names are only
        # known from the index.) Commands, not pipeline methods: see _publish.
        hint = self._hints.get(action, [])
        pipe = self.redis.pipeline(transaction=False)
        pipe.execute_command("SUNION", *index_sets)
        if hint:
            pipe.execute_command("MGET", *[self._entry_key(k) for k in hint])
            pipe.zmscore(self._hb, hint)
        replies = await pipe.execute()
        members = sorted(_text(k) for k in replies[0])
        read: dict[str, tuple[Any, Any]] = (
            dict(zip(hint, zip(*replies[1:], strict=True), strict=True)) if hint else {}
        )
        new = [k for k in members if k not in read]
        if new:
            pipe = self.redis.pipeline(transaction=False)
            pipe.execute_command("MGET", *[self._entry_key(k) for k in new])
            pipe.zmscore(self._hb, new)
            raws, scores = await pipe.execute()
            read.update(zip(new, zip(raws, scores, strict=True), strict=True))
        if members != hint:
            if len(self._hints) > 10_000:
                self._hints.clear()
            self._hints[action] = members
        now = self.clock()
        out, dangling = [], []
        for key in members:
            raw, score = read[key]
            if raw is None:
                dangling.append(key)
            else:
                out.append(self._view(key, raw, score, now))
        if dangling:  # their entries expired: drop them from the index
            await self._forget(dangling, index_sets)
        out.sort(key=lambda e: e.key)
        return out

    @redis_operation("catalog.query")
    async def query(self, query: CatalogQuery) -> list[CatalogEntry]:
        query = CatalogQuery.parse(query, what="catalog query")
        sets = []
        if query.name:
            sets.append(self._idx("name", query.name))
        if query.action:
            sets.append(self._idx("can", query.action))
        sets += [self._idx("tag", t) for t in query.tags]
        if sets:
            members: list[Any] = list(await self.redis.sinter(sets))
        else:
            members = await self.redis.zrange(self._hb, 0, -1)
        keys = sorted(_text(k) for k in members)
        entries = await self._load(keys, sets)
        return [e for e in entries if query.matches(e)]

    async def all(self) -> list[CatalogEntry]:
        return await self.query(CatalogQuery(include_stale=True))

    def watch(self) -> _RedisWatch:
        return _RedisWatch(self)

    async def close(self) -> None:
        if self.snapshot is not None:
            await self.snapshot.aclose()
        await self.redis.aclose()

    @redis_operation("catalog.clear")
    async def clear(self) -> int:
        """Delete every key under the prefix (tests, benchmarks). Returns how many."""
        count = 0
        async for batch in _scan_batches(self.redis, self.prefix + "*"):
            count += await key_names.delete(self.redis, batch)
        self._parsed.clear()
        return count

    # ----------------------------------------------------------------- helpers
    async def _load(self, keys: list[str], index_sets: list[str]) -> list[CatalogEntry]:
        if not keys:
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.execute_command("MGET", *[self._entry_key(k) for k in keys])  # see _publish
        pipe.zmscore(self._hb, keys)
        raws, scores = await pipe.execute()
        now = self.clock()
        out, dangling = [], []
        for key, raw, score in zip(keys, raws, scores, strict=True):
            if raw is None:
                dangling.append(key)
            else:
                out.append(self._view(key, raw, score, now))
        if dangling:
            await self._forget(dangling, index_sets)
        return out

    async def _forget(self, keys: list[str], index_sets: list[str]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for ikey in index_sets:
            pipe.srem(ikey, *keys)
        await pipe.execute()

    def _view(self, key: str, raw: bytes | str, score: Any, now: datetime) -> CatalogEntry:
        entry = self._decode(key, raw)
        beat = _time(score) if score is not None else entry.last_heartbeat
        stale = is_stale(beat, now, self.lease_seconds)
        if beat == entry.last_heartbeat and stale is entry.stale:
            return entry
        view = entry.model_copy(update={"last_heartbeat": beat, "stale": stale})
        cached = self._parsed.get(key)
        if cached is not None and cached[1] is entry:  # reuse this view until something changes
            self._parsed[key] = (cached[0], view)
        return view

    def _decode(self, key: str, raw: bytes | str) -> CatalogEntry:
        data = raw.encode() if isinstance(raw, str) else raw
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == data:
            return cached[1]
        # Stored entries were validated when registered. Their shape is validated again
        # (another process, or a person with redis-cli, may have written them), but not the
        # JSON Schema meta-check, which costs more than everything else together.
        entry = CatalogEntry.model_validate_json(data, context={"schemas_checked": True})
        if len(self._parsed) > 200_000:
            self._parsed.clear()
        self._parsed[key] = (data, entry)
        return entry

    def _encode(self, entry: CatalogEntry) -> str:
        return json.dumps(
            {
                "contract": entry.contract.model_dump(mode="json"),
                "registered_at": entry.registered_at.isoformat(),
                "last_heartbeat": entry.last_heartbeat.isoformat(),
                "revision": entry.revision,
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def _entry_key(self, key: str) -> str:
        return key_names.catalog.entry(self.prefix, key)

    def _idx(self, kind: str, label: str) -> str:
        return key_names.catalog.index(self.prefix, kind, label)

    def _index_keys(self, c: CapabilityContract) -> list[str]:
        return [
            *(self._idx("can", a) for a in c.can_do),
            *(self._idx("cannot", a) for a in c.cannot_do),
            *(self._idx("tag", t) for t in c.tags),
            self._idx("name", c.name),
        ]


def _publish(pipe: Any, channel: str, message: str) -> None:
    """PUBLISH in a pipeline, as the command itself: redis-py's cluster pipeline refuses its
    ``publish()`` and ``mget()`` methods, but routes the command by its channel's (key's) slot,
    which is the catalog's (the channel carries the ``{catalog}`` tag)."""
    pipe.execute_command("PUBLISH", channel, message)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def _scan_batches(redis: Redis, pattern: str) -> Any:
    batch: list[Any] = []
    async for key in key_names.scan(redis, pattern):
        batch.append(key)
        if len(batch) >= 1000:
            yield batch
            batch = []
    if batch:
        yield batch


class _RedisWatch:
    """A pub/sub subscription; subscribed on ``__aenter__`` (or on the first read).

    It outlives Redis outages: a Redis error while waiting drops the subscription, is
    counted (``catalog.watch``) and logged once per outage, and the watch subscribes again
    with a backoff until Redis is back (events published meanwhile are not replayed; the
    sweeps that follow report the entries that went stale).
    """

    def __init__(self, catalog: RedisCatalog) -> None:
        self._catalog = catalog
        self._pubsub: Any = None
        self._closed = False
        self._errors = LoopErrors("catalog-watch", logger=log, cap=1.0)

    async def _subscribe(self) -> None:
        if self._pubsub is None:
            self._pubsub = self._catalog.redis.pubsub()
            await self._pubsub.subscribe(self._catalog.channel)

    async def __aenter__(self) -> _RedisWatch:
        try:
            await self._subscribe()
        except RedisError as exc:
            count_redis_error(self.on_redis_error, "catalog.watch", exc)
            raise backend_unavailable("catalog.watch", exc) from exc
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> _RedisWatch:
        return self

    @property
    def on_redis_error(self) -> RedisErrorHook | None:
        return self._catalog.on_redis_error

    async def __anext__(self) -> CatalogEvent:
        while not self._closed:
            try:
                event = await self._next()
            except (RedisError, BackendUnavailable) as exc:
                count_redis_error(self.on_redis_error, "catalog.watch", exc)
                await self._drop()
                await asyncio.sleep(self._errors.failed(exc))
                continue
            self._errors.succeeded()
            if event is not None:
                return event
        raise StopAsyncIteration

    async def _next(self) -> CatalogEvent | None:
        """The next event, or None after an idle round (a sweep)."""
        await self._subscribe()
        message = await self._pubsub.get_message(
            ignore_subscribe_messages=True, timeout=self._catalog.sweep_interval
        )
        if message is None:
            await self._catalog.sweep()  # idle: let stale entries be heard about
            return None
        if message.get("type") != "message":
            return None
        return CatalogEvent.model_validate_json(message["data"])

    async def _drop(self) -> None:
        """Forget a subscription whose connection failed (subscribed again on the next read)."""
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._pubsub is not None:
            pubsub, self._pubsub = self._pubsub, None
            await pubsub.aclose()
