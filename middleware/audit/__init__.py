"""The audit record: every governed step, durable before it is acknowledged.

``AuditRecord`` is what one governed step writes (NIST AU-3 content); ``AuditLog``
is the interface every backend implements; ``WalAuditLog`` is the default on disk
(segmented write-ahead log, group commit, RFC 6962 Merkle tree, signed checkpoints;
see docs/audit-log.md); ``FileAuditLog`` is the simpler single-file log of the
foundation; ``MemoryAuditLog`` keeps records in memory for tests and embedding.
``verify``/``export`` read logs offline.

The names below are imported on first use (PEP 562), so importing one submodule
(``middleware.audit.segment`` in a verification worker, say) does not import them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .file_audit_log import FileAuditLog
    from .log import AuditLog
    from .memory_audit_log import MemoryAuditLog
    from .record import AUDIT_SCHEMA_VERSION, Actors, AuditEventType, AuditRecord
    from .wal import FsyncPolicy, WalAuditLog, WalOptions

_EXPORTS: dict[str, str] = {
    "AUDIT_SCHEMA_VERSION": ".record",
    "Actors": ".record",
    "AuditEventType": ".record",
    "AuditLog": ".log",
    "AuditRecord": ".record",
    "FileAuditLog": ".file_audit_log",
    "FsyncPolicy": ".wal",
    "MemoryAuditLog": ".memory_audit_log",
    "WalAuditLog": ".wal",
    "WalOptions": ".wal",
}

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "Actors",
    "AuditEventType",
    "AuditLog",
    "AuditRecord",
    "FileAuditLog",
    "FsyncPolicy",
    "MemoryAuditLog",
    "WalAuditLog",
    "WalOptions",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
