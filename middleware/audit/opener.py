"""Open the audit log a gateway wrote under a directory, for reading tools.

``agency trace show`` and other offline readers go through :func:`open_audit_log`
so they do not depend on which backend wrote the directory: write-ahead log
segments (``WalAuditLog``, the default of ``agency serve`` and ``agency demo``;
every node's log under the directory, verified and merged in time order) or the
single JSON Lines file of ``FileAuditLog``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import NotFound
from .file_audit_log import FileAuditLog
from .log import AuditLog
from .wal_reader import WalLogReader, is_wal_directory

__all__ = ["open_audit_log"]


def open_audit_log(directory: str | os.PathLike[str]) -> AuditLog:
    """A read view of the audit log stored in ``directory``.

    Raises:
        NotFound: ``directory`` does not exist or holds no audit log.
        AuditCorrupted: the log does not verify (raised when its records are read).
    """
    path = Path(directory)
    if not path.is_dir():
        raise NotFound(f"no audit log directory at {path}")
    if is_wal_directory(path):
        return WalLogReader(path)
    if (path / FileAuditLog.FILENAME).is_file():
        return FileAuditLog(path)
    raise NotFound(f"no audit log (WAL segments or {FileAuditLog.FILENAME}) in {path}")
