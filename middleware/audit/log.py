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
    """

    async def append(self, record: AuditRecord) -> int: ...

    def records(self) -> Iterator[tuple[int, AuditRecord]]: ...

    async def close(self) -> None: ...

    @property
    def location(self) -> str: ...
