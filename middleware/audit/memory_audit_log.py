"""An in-memory audit log, for tests and embedding where nothing must outlive the process."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .record import AuditRecord, PlainRecord, record_view


class MemoryAuditLog:
    """Keeps every record in a list (plain records are validated when read, not when appended)."""

    def __init__(self) -> None:
        self._records: list[AuditRecord | PlainRecord] = []

    async def append(self, record: AuditRecord) -> int:
        self._records.append(record)
        return len(self._records)

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        first = len(self._records) + 1
        self._records.extend(records)
        return range(first, len(self._records) + 1)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        out: list[tuple[int, AuditRecord]] = []
        for i, record in enumerate(self._records):
            view = record_view(record)
            self._records[i] = view
            out.append((i + 1, view))
        return iter(out)

    async def close(self) -> None:
        return None

    @property
    def location(self) -> str:
        return "memory"
