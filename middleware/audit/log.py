"""The interface every audit log backend implements."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, runtime_checkable

from .record import AuditRecord, PlainRecord

__all__ = ["AuditLog"]


@runtime_checkable
class AuditLog(Protocol):
    """Append-only record of governed steps.

    ``append`` returns only once the record is durable (for disk backends: written
    and fsynced) and gives back the record's index (contiguous, from 1).

    ``append_batch`` is the same for several records handed over together (the records of
    one task between two durability barriers): they take consecutive indexes in the order
    given, become durable together, and one wait covers them all; it returns their indexes
    as a ``range``. Each record stays its own entry in the log (in the write-ahead log its
    own frame and Merkle leaf): batching changes how records are handed over, never what
    is recorded. Records may be given as ``AuditRecord`` or as plain data
    (``record.plain_record``, the JSON form of one).

    Order: records take their place in the order ``append`` / ``append_batch`` is
    *called*; an implementation stages them before its first suspension point. The
    pipeline relies on this: when a later record is durable, every earlier one is.
    """

    async def append(self, record: AuditRecord) -> int: ...

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range: ...

    def records(self) -> Iterator[tuple[int, AuditRecord]]: ...

    async def close(self) -> None: ...

    @property
    def location(self) -> str: ...
