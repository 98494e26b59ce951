"""The interface every audit log backend implements."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from .record import AuditRecord

__all__ = ["AuditLog"]


@runtime_checkable
class AuditLog(Protocol):
    """Append-only record of governed steps.

    ``append`` returns only once the record is durable (for disk backends: written
    and fsynced) and gives back the record's index (contiguous, from 1).

    Order: records take their place in the order ``append`` is *called*; an
    implementation stages the record before its first suspension point. The
    pipeline relies on this to hand several records over without awaiting each
    and then wait once: when a later record is durable, every earlier one is.
    """

    async def append(self, record: AuditRecord) -> int: ...

    def records(self) -> Iterator[tuple[int, AuditRecord]]: ...

    async def close(self) -> None: ...

    @property
    def location(self) -> str: ...
