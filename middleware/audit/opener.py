"""Open the audit log a gateway wrote under a directory, for reading tools.

``agency trace show`` and other offline readers go through :func:`open_audit_log`
so they do not depend on which backend wrote the directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import NotFound
from .file_audit_log import FileAuditLog
from .log import AuditLog

__all__ = ["open_audit_log"]


def open_audit_log(directory: str | os.PathLike[str]) -> AuditLog:
    """The audit log stored in ``directory`` (as written by ``agency serve``/``demo``).

    Raises:
        NotFound: ``directory`` does not exist.
        AuditCorrupted: the log's chain does not verify.
    """
    path = Path(directory)
    if not path.is_dir():
        raise NotFound(f"no audit log directory at {path}")
    return FileAuditLog(path)
