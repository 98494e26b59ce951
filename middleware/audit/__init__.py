"""The audit record: every governed step, durable before it is acknowledged.

``AuditRecord`` is what one governed step writes (NIST AU-3 content); ``AuditLog``
is the interface every backend implements; ``WalAuditLog`` is the default on disk
(segmented write-ahead log, group commit, RFC 6962 Merkle tree, signed checkpoints;
see docs/audit-log.md); ``FileAuditLog`` is the simpler single-file log of the
foundation; ``MemoryAuditLog`` keeps records in memory for tests and embedding.
``verify``/``export`` read logs offline.
"""

from .file_audit_log import FileAuditLog
from .log import AuditLog
from .memory_audit_log import MemoryAuditLog
from .record import AUDIT_SCHEMA_VERSION, Actors, AuditEventType, AuditRecord
from .wal import FsyncPolicy, WalAuditLog, WalOptions

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
