"""The audit record: every governed step, durable before it is acknowledged.

``AuditRecord`` is what one governed step writes (NIST AU-3 content); ``AuditLog``
is the interface every backend implements; ``FileAuditLog`` is the embedded default
(an append-only, hash-chained, checksummed JSON Lines file); ``MemoryAuditLog``
keeps records in memory for tests and embedding.
"""

from .file_audit_log import FileAuditLog
from .log import AuditLog
from .memory_audit_log import MemoryAuditLog
from .record import AUDIT_SCHEMA_VERSION, Actors, AuditEventType, AuditRecord

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "Actors",
    "AuditEventType",
    "AuditLog",
    "AuditRecord",
    "FileAuditLog",
    "MemoryAuditLog",
]
