"""The embedded default audit log: one append-only, hash-chained JSON Lines file.

Each line is ``{"index", "prev", "hash", "crc", "record"}`` where ``hash`` is
SHA-256 over the previous hash and the record's canonical bytes, and ``crc`` is
CRC-32 of the line's record bytes. Appends are serialised by one lock, written and
fsynced in a worker thread before ``append`` returns. Opening re-verifies the chain
and refuses a broken one; a torn last line (no newline) is cut and kept aside.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from ..errors import AuditCorrupted
from .record import AuditRecord, PlainRecord, canonical_json

GENESIS = "0" * 64


class FileAuditLog:
    """Append-only, hash-chained, checksummed audit file under ``directory``."""

    FILENAME = "audit.jsonl"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._path = self._dir / self.FILENAME
        self._lock = asyncio.Lock()
        self._index, self._last_hash = self._recover()
        self._fh: BinaryIO | None = None  # opened on first append, held until close

    @property
    def location(self) -> str:
        return str(self._path)

    def _recover(self) -> tuple[int, str]:
        if not self._path.exists():
            return 0, GENESIS
        data = self._path.read_bytes()
        good_end = data.rfind(b"\n") + 1
        if good_end < len(data):  # torn tail: keep it aside, cut it
            (self._dir / (self.FILENAME + ".broken")).write_bytes(data[good_end:])
            with open(self._path, "r+b") as fh:
                fh.truncate(good_end)
                os.fsync(fh.fileno())
        last: tuple[int, str] = (0, GENESIS)
        for index, chain, _ in self._scan(data[:good_end]):
            last = (index, chain)
        return last

    def _scan(self, data: bytes) -> Iterator[tuple[int, str, AuditRecord]]:
        prev = GENESIS
        for lineno, line in enumerate(data.splitlines(), start=1):
            try:
                entry = json.loads(line)
                body = canonical_json(entry["record"])
                ok = (
                    entry["index"] == lineno
                    and entry["prev"] == prev
                    and entry["crc"] == zlib.crc32(body)
                    and entry["hash"] == _chain(prev, body)
                )
            except (ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                raise AuditCorrupted("audit chain broken", where=f"{self._path}:{lineno}")
            prev = entry["hash"]
            yield lineno, prev, AuditRecord.model_validate(entry["record"])

    async def append(self, record: AuditRecord) -> int:
        return (await self.append_batch([record]))[0]

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        """Append ``records`` as consecutive lines with one write and one fsync."""
        async with self._lock:
            index, last = self._index, self._last_hash
            lines: list[bytes] = []
            for record in records:
                plain = record.model_dump(mode="json") if isinstance(record, AuditRecord) else record
                body = canonical_json(plain)  # the form _scan re-derives
                index += 1
                digest = _chain(last, body)
                lines.append(
                    b'{"crc":%d,"hash":"%s","index":%d,"prev":"%s","record":'
                    % (zlib.crc32(body), digest.encode(), index, last.encode())
                    + body
                    + b"}\n"
                )
                last = digest
            first = self._index + 1
            if lines:
                await asyncio.to_thread(self._write, b"".join(lines))
            self._index, self._last_hash = index, last
            return range(first, index + 1)

    def _write(self, line: bytes) -> None:
        if self._fh is None:
            self._fh = open(self._path, "ab")  # noqa: SIM115 - held for the log's lifetime
        self._fh.write(line)
        self._fh.flush()
        os.fdatasync(self._fh.fileno())

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        for index, _, record in self._scan(self._path.read_bytes()):
            yield index, record

    async def close(self) -> None:
        async with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def _chain(prev: str, body: bytes) -> str:
    return hashlib.sha256(prev.encode() + body).hexdigest()
