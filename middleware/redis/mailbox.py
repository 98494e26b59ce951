"""The shared mailbox transport: one Redis stream and one consumer group per mailbox.

Layout (``P`` = prefix; every key of one mailbox carries the hash tag ``{mbox:<mailbox>}``, so
dead-lettering, named enqueues and deletes stay in one Redis Cluster slot: see :mod:`.keys`)::

    P{mbox:<mailbox>}:stream   stream of live entries, field ``d`` = the bytes; group ``agency``
    P{mbox:<mailbox>}:dlq      dead-letter stream: ``d``, ``reason``, ``entry``, ``deliveries``
    P{mbox:<mailbox>}:done     sorted set: processed message id -> forget-after (epoch seconds)
    P{mbox:<mailbox>}:key:<sha256 of a key>   the live entry of a named message (expires with it)

- ``enqueue`` is one Lua call that checks the bound (``XLEN``) and ``XADD`` s.
- ``receive`` is one Lua call: ``XAUTOCLAIM`` entries idle longer than the visibility
  timeout (their delivery count, from ``XPENDING``, has grown by one), then
  ``XREADGROUP >`` for the rest. Entries trimmed away while pending come back in
  ``XAUTOCLAIM``'s third element (Redis >= 7.0; nil entries on 6.2) and are
  reported in ``Batch.lost`` instead of crashing the consumer. When nothing is
  there and ``block`` is set, one plain ``XREADGROUP BLOCK`` follows.
- ``ack`` is one pipeline: ``XACK`` + ``XDEL`` (so ``XLEN`` counts live entries and
  the bound holds) + ``ZADD`` of the processed ids.
- A long wait (``Pull(wait_seconds=60)``) blocks in slices of ``BLOCK_SLICE_SECONDS``, so it
  never outlasts the client's socket timeout (5 s by default in redis-py >= 6).

Redis is transport, not the record of truth: stream ids never appear in the audit
log as sequence numbers (a failover can un-acknowledge entries).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any, ClassVar

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import ResourceExhausted
from ..messaging.clock import Clock, system_clock
from ..messaging.mailbox import Batch, DeadLetter, Delivery
from .errors import RedisErrorHook, redis_operation
from .keys import mailbox as mailbox_keys

__all__ = ["RedisMailbox"]

GROUP = "agency"
#: Longest single XREADGROUP BLOCK: well under any socket timeout a client is given.
BLOCK_SLICE_SECONDS = 2.0

_ENQUEUE = """
local n = redis.call('XLEN', KEYS[1])
if n + #ARGV - 1 > tonumber(ARGV[1]) then return false end
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = redis.call('XADD', KEYS[1], '*', 'd', ARGV[i]) end
return ids
"""

# KEYS: stream, key of the entry's name. ARGV: max len, data, seconds the name is kept.
# Returns the live entry's id when the name is still in the stream (nothing added), else the
# new entry's id; false when the stream is full.
_ENQUEUE_KEYED = """
local live = redis.call('GET', KEYS[2])
if live and #redis.call('XRANGE', KEYS[1], live, live) > 0 then return live end
if redis.call('XLEN', KEYS[1]) + 1 > tonumber(ARGV[1]) then return false end
local id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[2])
redis.call('SET', KEYS[2], id, 'EX', ARGV[3])
return id
"""

# ARGV: group, consumer, min idle ms, count. Returns {{id, data, deliveries}...}, {lost ids...}
_RECEIVE = """
local key, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local count = tonumber(ARGV[4])
local out, lost = {}, {}
local claimed = redis.call('XAUTOCLAIM', key, group, consumer, ARGV[3], '0-0', 'COUNT', count)
for _, e in ipairs(claimed[2]) do
  if type(e) ~= 'table' or type(e[2]) ~= 'table' then
    if type(e) == 'table' then lost[#lost + 1] = e[1] end
  else
    local p = redis.call('XPENDING', key, group, e[1], e[1], 1)
    local n = 1
    if p[1] then n = p[1][4] end
    out[#out + 1] = {e[1], e[2][2], n}
  end
end
if claimed[3] then
  for _, id in ipairs(claimed[3]) do lost[#lost + 1] = id end
end
local rest = count - #out
if rest > 0 then
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', rest, 'STREAMS', key, '>')
  if r then
    for _, e in ipairs(r[1][2]) do out[#out + 1] = {e[1], e[2][2], 1} end
  end
end
return {out, lost}
"""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisMailbox:
    """Redis Streams :class:`~middleware.messaging.mailbox.MailboxTransport`.

    Args:
        client: A ``redis.asyncio.Redis`` (bytes responses, i.e. ``decode_responses=False``).
        prefix: Namespace for every key (tests use a unique one each).
        clock: Epoch seconds; only the processed-id expiry uses it (visibility timeouts
            are Redis' own idle times).
        max_dead_letters: Approximate cap of each dead-letter stream.
        on_redis_error: Called with the operation (``"mailbox.receive"`` ...) whenever a
            Redis error escapes one (see :mod:`middleware.redis.errors`).
        owns_client: Close ``client`` in :meth:`close` (set by :meth:`from_url`).
    """

    #: Errors a caller may retry after (the Redis server is down or restarting).
    transient_errors: ClassVar[tuple[type[BaseException], ...]] = (RedisError, OSError)

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "agency:",
        clock: Clock = system_clock,
        max_dead_letters: int = 10_000,
        on_redis_error: RedisErrorHook | None = None,
        owns_client: bool = False,
    ) -> None:
        self._r = client
        self.on_redis_error = on_redis_error
        self._owns_client = owns_client
        self._prefix = prefix
        self._clock = clock
        self._max_dead = max_dead_letters
        self._enqueue = client.register_script(_ENQUEUE)
        self._enqueue_keyed = client.register_script(_ENQUEUE_KEYED)
        self._receive = client.register_script(_RECEIVE)
        self._groups: set[str] = set()
        pool_kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        socket_timeout = pool_kwargs.get("socket_timeout") or pool_kwargs.get("orig_socket_timeout")
        self._block_slice = (
            min(BLOCK_SLICE_SECONDS, float(socket_timeout) / 2) if socket_timeout else BLOCK_SLICE_SECONDS
        )
        self._touched: set[str] = set()  # mailboxes this instance used (for purge)

    @property
    def client(self) -> Redis:
        """The Redis client (other post-office state, e.g. rate-limit buckets, shares it)."""
        return self._r

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisMailbox:
        """Mailboxes on their own connection to ``url`` (closed by :meth:`close`)."""
        return cls(Redis.from_url(url), owns_client=True, **kwargs)

    def _key(self, mailbox: str) -> str:
        self._touched.add(mailbox)
        return mailbox_keys.stream(self._prefix, mailbox)

    async def _ensure_group(self, key: str, *, force: bool = False) -> None:
        if key in self._groups and not force:
            return
        try:
            await self._r.xgroup_create(key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(key)

    async def enqueue(
        self, mailbox: str, data: bytes, *, max_len: int, key: str = "", ttl: float = 0.0
    ) -> str:
        if not key:
            return (await self.enqueue_many(mailbox, [data], max_len=max_len))[0]
        return await self._enqueue_named(mailbox, data, max_len=max_len, key=key, ttl=ttl)

    @redis_operation("mailbox.enqueue")
    async def _enqueue_named(self, mailbox: str, data: bytes, *, max_len: int, key: str, ttl: float) -> str:
        stream = self._key(mailbox)
        await self._ensure_group(stream)
        name = mailbox_keys.named(self._prefix, mailbox, hashlib.sha256(key.encode()).hexdigest())
        entry = await self._enqueue_keyed(keys=[stream, name], args=[max_len, data, max(1, math.ceil(ttl))])
        if entry is None:
            raise ResourceExhausted(
                f"mailbox {mailbox!r} is full ({max_len} unacknowledged messages)",
                details={"mailbox": mailbox, "max_len": max_len, "retry_after_ms": 1000},
            )
        return _s(entry)

    @redis_operation("mailbox.enqueue")
    async def enqueue_many(self, mailbox: str, items: Sequence[bytes], *, max_len: int) -> list[str]:
        if not items:
            return []
        key = self._key(mailbox)
        await self._ensure_group(key)
        ids = await self._enqueue(keys=[key], args=[max_len, *items])
        if ids is None:
            raise ResourceExhausted(
                f"mailbox {mailbox!r} cannot take {len(items)} more messages (bound {max_len})",
                details={"mailbox": mailbox, "max_len": max_len, "retry_after_ms": 1000},
            )
        return [_s(i) for i in ids]

    @redis_operation("mailbox.receive")
    async def receive(
        self,
        mailbox: str,
        consumer: str,
        *,
        count: int,
        visibility_timeout: float,
        block: float = 0.0,
    ) -> Batch:
        key = self._key(mailbox)
        await self._ensure_group(key)
        idle_ms = max(int(visibility_timeout * 1000), 1)
        try:
            reply: Any = await self._receive(keys=[key], args=[GROUP, consumer, idle_ms, count])
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self._ensure_group(key, force=True)  # the stream was deleted under us
            reply = await self._receive(keys=[key], args=[GROUP, consumer, idle_ms, count])
        out, lost = reply
        deliveries = [Delivery(_s(i), bytes(d), int(n)) for i, d, n in out]
        remaining = block
        late = False
        while not deliveries and not lost and remaining > 0:
            # in slices shorter than the client's socket timeout (redis-py >= 6 defaults to 5 s):
            # a long wait must not end in a read timeout
            wait = min(remaining, self._block_slice)
            remaining -= wait
            try:
                resp: Any = await self._r.xreadgroup(
                    GROUP, consumer, {key: ">"}, count=count, block=max(int(wait * 1000), 1)
                )
            except RedisTimeoutError:
                # The slice's answer came after the socket timeout (a starved event loop, a slow
                # link): once per wait that is a late reply, not an outage. redis-py dropped the
                # connection; anything XREADGROUP handed out meanwhile stays pending for this
                # consumer and comes back through XAUTOCLAIM after the visibility timeout.
                if late:
                    raise
                late = True
                continue
            for _, entries in resp or []:
                for entry_id, fields in entries:
                    if fields:  # a nil entry cannot come from '>', but never trust it blindly
                        deliveries.append(Delivery(_s(entry_id), bytes(fields[b"d"]), 1))
        return Batch(deliveries, [_s(i) for i in lost])

    @redis_operation("mailbox.ack")
    async def ack(
        self,
        mailbox: str,
        entry_ids: Sequence[str],
        *,
        processed: Sequence[str] = (),
        processed_ttl: float = 0.0,
    ) -> int:
        key = self._key(mailbox)
        pipe = self._r.pipeline(transaction=False)
        if entry_ids:
            pipe.xack(key, GROUP, *entry_ids)
            pipe.xdel(key, *entry_ids)
        if processed:
            done = mailbox_keys.processed(self._prefix, mailbox)
            now = self._clock()
            pipe.zadd(done, dict.fromkeys(processed, now + processed_ttl))
            pipe.zremrangebyscore(done, "-inf", now)
        if not entry_ids and not processed:
            return 0
        results = await pipe.execute()
        return int(results[1]) if entry_ids else 0  # XDEL: live entries removed (read or browsed)

    @redis_operation("mailbox.release")
    async def release(self, mailbox: str, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        key = self._key(mailbox)
        pipe = self._r.pipeline(transaction=False)
        for d in deliveries:  # idle "forever": the next XAUTOCLAIM takes it, counting it back to d's
            pipe.xclaim(
                key,
                GROUP,
                "released",
                min_idle_time=0,
                message_ids=[d.entry_id],
                idle=10**12,
                retrycount=max(d.delivery_count - 1, 0),
                justid=True,
            )
        await pipe.execute()

    @redis_operation("mailbox.browse")
    async def browse(self, mailbox: str, *, after: str = "", count: int = 100) -> list[Delivery]:
        key = self._key(mailbox)
        rows: Any = await self._r.xrange(key, min=f"({after}" if after else "-", count=count)
        if not rows:
            return []
        counts: dict[str, int] = {}
        try:
            pending: Any = await self._r.xpending_range(
                key, GROUP, min=_s(rows[0][0]), max=_s(rows[-1][0]), count=len(rows)
            )
            counts = {_s(p["message_id"]): int(p["times_delivered"]) for p in pending}
        except ResponseError as exc:  # no group yet: nothing was ever handed out
            if "NOGROUP" not in str(exc):
                raise
        return [Delivery(_s(i), bytes(f[b"d"]), counts.get(_s(i), 0)) for i, f in rows if f and b"d" in f]

    @redis_operation("mailbox.seen")
    async def seen(self, mailbox: str, message_ids: Sequence[str]) -> set[str]:
        if not message_ids:
            return set()
        scores = await self._r.zmscore(mailbox_keys.processed(self._prefix, mailbox), list(message_ids))
        now = self._clock()
        return {m for m, score in zip(message_ids, scores, strict=True) if score is not None and score > now}

    @redis_operation("mailbox.dead_letter")
    async def dead_letter(self, mailbox: str, delivery: Delivery, reason: str) -> None:
        key = self._key(mailbox)
        pipe = self._r.pipeline(transaction=True)
        pipe.xadd(
            mailbox_keys.dead_letters(self._prefix, mailbox),
            {
                "d": delivery.data,
                "reason": reason,
                "entry": delivery.entry_id,
                "deliveries": delivery.delivery_count,
            },
            maxlen=self._max_dead,
            approximate=True,
        )
        pipe.xack(key, GROUP, delivery.entry_id)
        pipe.xdel(key, delivery.entry_id)
        await pipe.execute()

    @redis_operation("mailbox.dead_letters")
    async def dead_letters(self, mailbox: str, *, limit: int = 100) -> list[DeadLetter]:
        rows: Any = await self._r.xrange(mailbox_keys.dead_letters(self._prefix, mailbox), count=limit)
        return [
            DeadLetter(
                entry_id=_s(f[b"entry"]),
                data=bytes(f[b"d"]),
                reason=_s(f[b"reason"]),
                delivery_count=int(f[b"deliveries"]),
            )
            for _, f in rows
        ]

    @redis_operation("mailbox.size")
    async def size(self, mailbox: str) -> int:
        return int(await self._r.xlen(self._key(mailbox)))

    @redis_operation("mailbox.trim")
    async def trim(self, mailbox: str, max_len: int) -> int:
        return int(await self._r.xtrim(self._key(mailbox), maxlen=max(max_len, 0), approximate=False))

    @redis_operation("mailbox.delete")
    async def delete(self, mailbox: str) -> None:
        """Remove every key of ``mailbox`` (stream, dead letters, processed ids)."""
        key = self._key(mailbox)
        dead = mailbox_keys.dead_letters(self._prefix, mailbox)
        await self._r.delete(key, dead, mailbox_keys.processed(self._prefix, mailbox))
        self._groups.discard(key)

    async def purge(self) -> None:
        """Delete every key of every mailbox this instance has used (tests, benchmarks)."""
        for mailbox in list(self._touched):
            await self.delete(mailbox)
        self._touched.clear()

    async def close(self) -> None:
        """Close the Redis client if this instance opened it (:meth:`from_url`)."""
        if self._owns_client:
            await self._r.aclose()
