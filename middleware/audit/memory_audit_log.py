"""An in-memory audit log, for tests and embedding where nothing must outlive the process."""

from __future__ import annotations

from collections.abc import Iterator

from .record import AuditRecord


class MemoryAuditLog:
    def __init__(self) -> None:
        self._records: list[AuditRecord] = []

    async def append(self, record: AuditRecord) -> int:
        self._records.append(record)
        return len(self._records)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return iter(list(enumerate(self._records, start=1)))

    async def close(self) -> None:
        return None

    @property
    def location(self) -> str:
        return "memory"
