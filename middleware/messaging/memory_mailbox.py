"""The embedded mailbox transport: everything in process memory, time from an injected clock.

Each mailbox keeps its live entries in enqueue order, a queue of never-delivered
ids, and a heap of visibility deadlines for delivered ones (stale heap items are
skipped lazily, so ``ack`` is O(1)). Nothing survives the process: use
:class:`~middleware.redis.mailbox.RedisMailbox` when it must.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ResourceExhausted
from .clock import Clock, system_clock
from .mailbox import Batch, DeadLetter, Delivery

__all__ = ["MemoryMailbox"]


@dataclass(slots=True)
class _Entry:
    data: bytes
    key: str = ""  # what the entry is (one live entry per key)
    deliveries: int = 0
    deadline: float = 0.0  # when an in-flight entry becomes visible again; 0 = never delivered


@dataclass(slots=True)
class _Box:
    entries: dict[str, _Entry] = field(default_factory=dict)
    ready: deque[str] = field(default_factory=deque)
    deadlines: list[tuple[float, int, str]] = field(default_factory=list)
    lost: list[tuple[float, str]] = field(default_factory=list)  # (visible again at, id)
    dead: list[DeadLetter] = field(default_factory=list)
    processed: dict[str, float] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # key -> the live entry's id
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


def _forget_key(box: _Box, entry_id: str, entry: _Entry) -> None:
    if entry.key and box.keys.get(entry.key) == entry_id:
        del box.keys[entry.key]


class MemoryMailbox:
    """In-memory :class:`~middleware.messaging.mailbox.MailboxTransport`.

    Args:
        clock: Seconds as a float; visibility timeouts and processed-id TTLs use it.
        max_dead_letters: Dead-letter entries kept per mailbox (oldest dropped first).
    """

    def __init__(self, *, clock: Clock = system_clock, max_dead_letters: int = 10_000) -> None:
        self._clock = clock
        self._boxes: dict[str, _Box] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self._max_dead = max_dead_letters

    def _box(self, mailbox: str) -> _Box:
        box = self._boxes.get(mailbox)
        if box is None:
            box = self._boxes[mailbox] = _Box()
        return box

    async def enqueue(
        self, mailbox: str, data: bytes, *, max_len: int, key: str = "", ttl: float = 0.0
    ) -> str:
        box = self._box(mailbox)
        live = box.keys.get(key) if key else None
        if live is not None and live in box.entries:  # the same message, still here: its count goes on
            return live
        if len(box.entries) >= max_len:
            raise ResourceExhausted(
                f"mailbox {mailbox!r} is full ({max_len} unacknowledged messages)",
                details={"mailbox": mailbox, "max_len": max_len, "retry_after_ms": 1000},
            )
        entry_id = str(next(self._ids))
        box.entries[entry_id] = _Entry(data, key)
        if key:
            box.keys[key] = entry_id
        box.ready.append(entry_id)
        box.arrived.set()
        return entry_id

    async def enqueue_many(self, mailbox: str, items: Sequence[bytes], *, max_len: int) -> list[str]:
        box = self._box(mailbox)
        if len(box.entries) + len(items) > max_len:
            raise ResourceExhausted(
                f"mailbox {mailbox!r} cannot take {len(items)} more messages (bound {max_len})",
                details={"mailbox": mailbox, "max_len": max_len, "retry_after_ms": 1000},
            )
        ids = [str(next(self._ids)) for _ in items]
        entries = box.entries
        for entry_id, data in zip(ids, items, strict=True):
            entries[entry_id] = _Entry(data)
        box.ready.extend(ids)
        box.arrived.set()
        return ids

    async def receive(
        self,
        mailbox: str,
        consumer: str,
        *,
        count: int,
        visibility_timeout: float,
        block: float = 0.0,
    ) -> Batch:
        box = self._box(mailbox)
        batch = self._take(box, count, visibility_timeout)
        if not batch.deliveries and not batch.lost and block > 0:
            box.arrived.clear()
            try:
                await asyncio.wait_for(box.arrived.wait(), block)
            except TimeoutError:
                return batch
            batch = self._take(box, count, visibility_timeout)
        return batch

    def _take(self, box: _Box, count: int, visibility_timeout: float) -> Batch:
        now = self._clock()
        out: list[Delivery] = []
        lost: list[str] = []
        if box.lost:
            lost = [entry_id for at, entry_id in box.lost if at <= now]
            box.lost = [(at, entry_id) for at, entry_id in box.lost if at > now]
        heap = box.deadlines
        # Stalled entries first (the consumer that had them is presumed dead).
        while heap and len(out) < count and heap[0][0] <= now:
            deadline, _, entry_id = heapq.heappop(heap)
            entry = box.entries.get(entry_id)
            if entry is None or entry.deadline != deadline:
                continue  # acknowledged, or re-delivered since: a stale heap item
            out.append(self._hand_out(box, entry_id, entry, now + visibility_timeout))
        ready = box.ready
        while ready and len(out) < count:
            entry_id = ready.popleft()
            entry = box.entries.get(entry_id)
            if entry is None:
                continue  # trimmed before anyone read it
            out.append(self._hand_out(box, entry_id, entry, now + visibility_timeout))
        return Batch(out, lost)

    def _hand_out(self, box: _Box, entry_id: str, entry: _Entry, deadline: float) -> Delivery:
        entry.deliveries += 1
        entry.deadline = deadline
        heapq.heappush(box.deadlines, (deadline, next(self._seq), entry_id))
        return Delivery(entry_id, entry.data, entry.deliveries)

    async def ack(
        self,
        mailbox: str,
        entry_ids: Sequence[str],
        *,
        processed: Sequence[str] = (),
        processed_ttl: float = 0.0,
    ) -> int:
        box = self._box(mailbox)
        entries = box.entries
        done = 0
        for entry_id in entry_ids:
            entry = entries.pop(entry_id, None)
            if entry is not None:  # handed out, or seen by browsing
                done += 1
                _forget_key(box, entry_id, entry)
        if processed:
            marks = box.processed
            expiry = self._clock() + processed_ttl
            for message_id in processed:
                marks[message_id] = expiry
            if len(marks) > 100_000:  # forget expired ids now and then
                now = self._clock()
                for key in [k for k, v in marks.items() if v <= now]:
                    del marks[key]
        return done

    async def release(self, mailbox: str, deliveries: Sequence[Delivery]) -> None:
        box = self._box(mailbox)
        for delivery in reversed(deliveries):
            entry = box.entries.get(delivery.entry_id)
            if entry is None or not entry.deliveries:
                continue
            entry.deliveries -= 1
            entry.deadline = 0.0  # its heap item is stale now
            box.ready.appendleft(delivery.entry_id)

    async def browse(self, mailbox: str, *, after: str = "", count: int = 100) -> list[Delivery]:
        start = int(after) if after.isdigit() else 0
        out = []
        for entry_id, entry in self._box(mailbox).entries.items():
            if int(entry_id) > start:
                out.append(Delivery(entry_id, entry.data, entry.deliveries))
                if len(out) >= count:
                    break
        return out

    async def seen(self, mailbox: str, message_ids: Sequence[str]) -> set[str]:
        marks = self._box(mailbox).processed
        if not marks:
            return set()
        now = self._clock()
        return {m for m in message_ids if marks.get(m, 0.0) > now}

    async def dead_letter(self, mailbox: str, delivery: Delivery, reason: str) -> None:
        box = self._box(mailbox)
        box.dead.append(DeadLetter(delivery.entry_id, delivery.data, reason, delivery.delivery_count))
        if len(box.dead) > self._max_dead:
            del box.dead[0]
        entry = box.entries.pop(delivery.entry_id, None)
        if entry is not None:
            _forget_key(box, delivery.entry_id, entry)

    async def dead_letters(self, mailbox: str, *, limit: int = 100) -> list[DeadLetter]:
        return list(self._box(mailbox).dead[:limit])

    async def size(self, mailbox: str) -> int:
        return len(self._box(mailbox).entries)

    async def trim(self, mailbox: str, max_len: int) -> int:
        box = self._box(mailbox)
        excess = len(box.entries) - max(max_len, 0)
        if excess <= 0:
            return 0
        for entry_id in list(itertools.islice(box.entries, excess)):
            entry = box.entries.pop(entry_id)
            _forget_key(box, entry_id, entry)
            if entry.deliveries:
                box.lost.append((entry.deadline, entry_id))
        return excess

    async def close(self) -> None:
        self._boxes.clear()
