"""Personal data kept out of the audit log in clear: an ``AuditLog`` wrapper.

:class:`PersonalDataAuditLog` replaces every personal-data find in a record's ``detail``
before the record reaches the log it wraps, so neither the log nor any export (jsonl bundle,
jsonl-flat, csv, cef, ocsf) holds the value in clear:

* without a subject key store, by ``[redacted:<class>]``;
* with one (``middleware.audit.shredding``), by the value sealed under the key of the record's
  subject (its user, else its session): ``[sealed:<class>:<base64>]``. An export shows the value
  only to a reader whose role may see personal data and who holds the key; once the subject's
  key is erased, it shows ``[erased]``. The leaf hash covers the sealed form, so erasure
  changes no byte of the log: ``verify``, proofs and checkpoints stay valid.

The record's own dict gets the new ``detail`` (a new object: the detail dicts the pipeline
passes may be live task state and are never mutated), so wrappers around this one (tracing)
see the guarded record too. The gateway's own identifiers are not scanned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..audit.log import AuditLog
from ..audit.record import AuditRecord, PlainRecord
from .pii import PiiScanner
from .redaction import Replace, redact_value, redacted

__all__ = ["IDENTIFIER_KEYS", "PersonalDataAuditLog"]

#: Keys whose values are the gateway's own identifiers and hashes: never personal data.
IDENTIFIER_KEYS = frozenset(
    {
        "event_id",
        "message_id",
        "task_id",
        "trace_id",
        "goal_id",
        "intention_trace",
        "output_sha256",
        "created_at",
        "expires_at",
        "at",
    }
)

#: For a record (its subject), how a find is replaced in it.
ReplacerFor = Callable[[PlainRecord], Replace]


def _redact_all(_record: PlainRecord) -> Replace:
    return redacted


class PersonalDataAuditLog:
    """Wraps an :class:`AuditLog`; personal data in records is replaced before it is logged.

    Args:
        inner: The log written to.
        scanner: What counts as personal data.
        replacer: For a record, how its finds are replaced (default: ``[redacted:<class>]``;
            ``middleware.audit.shredding.SubjectSealer.replacer`` seals them).
    """

    def __init__(self, inner: AuditLog, scanner: PiiScanner, *, replacer: ReplacerFor | None = None) -> None:
        self.inner = inner
        self.scanner = scanner
        self.replacer = replacer or _redact_all
        observer = getattr(inner, "on_task_record", None)
        if observer is not None:
            self.on_task_record = observer

    @property
    def location(self) -> str:
        return self.inner.location

    def guard(self, record: PlainRecord) -> PlainRecord:
        """``record`` with its detail's personal data replaced (the same dict, a new detail)."""
        detail = record.get("detail")
        if detail:
            new = redact_value(detail, self.scanner, self.replacer(record), skip_keys=IDENTIFIER_KEYS)
            if new is not detail:
                record["detail"] = new
        return record

    def _guarded(self, record: AuditRecord | PlainRecord) -> AuditRecord | PlainRecord:
        if isinstance(record, AuditRecord):
            plain = {"actors": record.actors.model_dump(), "detail": record.detail}
            self.guard(plain)
            if plain["detail"] is not record.detail:
                record.detail = plain["detail"]
            return record
        return self.guard(record)

    async def append(self, record: AuditRecord) -> int:
        guarded = self._guarded(record)
        assert isinstance(guarded, AuditRecord)
        return await self.inner.append(guarded)

    async def append_batch(self, records: Sequence[AuditRecord | PlainRecord]) -> range:
        return await self.inner.append_batch([self._guarded(r) for r in records])

    def records(self) -> Iterator[tuple[int, AuditRecord]]:
        return self.inner.records()

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # checkpoints, proofs, retention ...: whatever else the wrapped log offers
        return getattr(self.inner, name)
