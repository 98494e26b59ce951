"""A read-only view of the write-ahead logs under a directory, for offline tools.

``agency trace show`` and similar readers get every node's records, verified, merged in
time order, without taking the writer's lock or needing the signing key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import AuditError
from .export import iter_records
from .record import AuditRecord, PlainRecord, parse_record

__all__ = ["WalLogReader", "is_wal_directory"]


def is_wal_directory(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds WAL segments (itself or one level down, per node)."""
    p = Path(directory)
    if not p.is_dir():
        return False
    return any(p.glob("*.wal*")) or any(p.glob("*/*.wal*"))


class WalLogReader:
    """The ``AuditLog`` read side over WAL directories; ``append`` is refused.

    Args:
        directory: A node log directory or an audit directory of node logs.
        key: A pinned verifier key (default: each log's stored key).
    """

    def __init__(self, directory: str | os.PathLike[str], *, key: str | None = None) -> None:
        self._dir = Path(directory)
        self._key = key

    @property
    def location(self) -> str:
        return str(self._dir)

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        """Every record of every node, verified first, merged in time order (index is per node).

        Raises:
            AuditCorrupted: a log does not verify.
        """
        _, merged = iter_records(self._dir, key=self._key)
        for rec in merged:
            yield rec.index, parse_record(rec.raw, where=f"{rec.node}: record {rec.index}")

    async def append(self, record: AuditRecord) -> int:
        raise AuditError("this is a read-only view of the audit log")

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        raise AuditError("this is a read-only view of the audit log")

    async def close(self) -> None:
        return None
