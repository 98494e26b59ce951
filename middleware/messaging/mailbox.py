"""The mailbox transport: the interface both backends (memory, Redis Streams) implement.

A transport moves opaque bytes between named mailboxes with at-least-once
delivery. It knows nothing about agents, signatures or topics: the post office
(:mod:`middleware.messaging.post_office`) puts policy on top. What a transport must
guarantee:

- ``enqueue`` refuses (``ResourceExhausted``) when the mailbox already holds
  ``max_len`` live entries (delivered-but-unacknowledged entries count).
- ``receive`` hands an entry to one consumer at a time. An entry not acknowledged
  within ``visibility_timeout`` seconds is handed out again (to any consumer) and
  its ``delivery_count`` grows by one.
- ``ack`` removes entries for good; ``dead_letter`` moves one to the mailbox's
  dead-letter list with a reason.
- An entry that was delivered and then removed from under the consumer (a
  retention ``trim``) is reported once in ``Batch.lost``, never raised.
- ``ack`` can remember the processed message ids per mailbox (``seen``), so a
  redelivered or duplicated message is recognised and skipped (dedupe).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["Batch", "DeadLetter", "Delivery", "MailboxTransport"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One entry handed to a consumer.

    Attributes:
        entry_id: The transport's id of the entry (what ``ack`` takes).
        data: The bytes that were enqueued.
        delivery_count: How many times the entry has been handed out, this time included.
    """

    entry_id: str
    data: bytes
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Batch:
    """What one ``receive`` call returns.

    Attributes:
        deliveries: Entries to process, oldest first.
        lost: Ids of entries that were delivered earlier, never acknowledged, and have
            since been trimmed away; the transport has forgotten them.
    """

    deliveries: list[Delivery] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An entry moved to a dead-letter list, with why."""

    entry_id: str
    data: bytes
    reason: str
    delivery_count: int


@runtime_checkable
class MailboxTransport(Protocol):
    """At-least-once delivery of opaque entries between named mailboxes."""

    async def enqueue(
        self, mailbox: str, data: bytes, *, max_len: int, key: str = "", ttl: float = 0.0
    ) -> str:
        """Append ``data``; return the entry id.

        ``key`` names what the entry is (the post office: sender and message id): while an
        entry with the same key is live in ``mailbox`` -- waiting, or handed out and not yet
        acknowledged -- nothing is added and that entry's id is returned, so its delivery count
        goes on (a sender's retry cannot reset it and keep a poison message away from the
        dead-letter list). ``ttl`` bounds how long the key is remembered (the message's life).

        Raises:
            ResourceExhausted: The mailbox already holds ``max_len`` live entries.
        """
        ...

    async def enqueue_many(self, mailbox: str, items: Sequence[bytes], *, max_len: int) -> list[str]:
        """Append several entries at once (all or none); return their ids in order.

        Raises:
            ResourceExhausted: They would not all fit under ``max_len``.
        """
        ...

    async def receive(
        self,
        mailbox: str,
        consumer: str,
        *,
        count: int,
        visibility_timeout: float,
        block: float = 0.0,
    ) -> Batch:
        """Up to ``count`` entries: first stalled ones (unacknowledged for longer than
        ``visibility_timeout`` seconds), then new ones. Waits up to ``block`` seconds
        for something to arrive when there is nothing."""
        ...

    async def ack(
        self,
        mailbox: str,
        entry_ids: Sequence[str],
        *,
        processed: Sequence[str] = (),
        processed_ttl: float = 0.0,
    ) -> int:
        """Acknowledge (and forget) entries; returns how many were still pending.

        ``processed`` message ids are remembered for ``processed_ttl`` seconds in the
        same step, so a copy delivered again later is recognised by :meth:`seen`.
        """
        ...

    async def release(self, mailbox: str, deliveries: Sequence[Delivery]) -> None:
        """Give entries handed out by :meth:`receive` back at once, as if never handed out
        this time (their delivery count is what it was before): a filtered pull that took
        entries it does not want."""
        ...

    async def browse(self, mailbox: str, *, after: str = "", count: int = 100) -> list[Delivery]:
        """Up to ``count`` live entries after entry ``after`` (oldest first), read-only: nothing
        is handed out. ``delivery_count`` is how often each was handed out (0: unread)."""
        ...

    async def seen(self, mailbox: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` were acknowledged as processed (and not yet forgotten)."""
        ...

    async def dead_letter(self, mailbox: str, delivery: Delivery, reason: str) -> None:
        """Move a delivered entry to the mailbox's dead-letter list and acknowledge it."""
        ...

    async def dead_letters(self, mailbox: str, *, limit: int = 100) -> list[DeadLetter]:
        """The dead-letter list of ``mailbox``, oldest first."""
        ...

    async def size(self, mailbox: str) -> int:
        """Live entries (not yet acknowledged) in ``mailbox``."""
        ...

    async def trim(self, mailbox: str, max_len: int) -> int:
        """Retention: drop the oldest entries beyond ``max_len``, pending or not.

        Returns how many entries were dropped. A dropped entry that had been
        delivered and not acknowledged shows up once in :attr:`Batch.lost` of a later
        ``receive``, after its visibility timeout has run out.
        """
        ...

    async def close(self) -> None: ...
