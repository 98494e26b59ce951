"""Small durable-file helpers shared by the audit log modules."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write", "fsync_dir"]


def fsync_dir(path: Path) -> None:
    """fsync a directory, so renames and unlinks in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (tmp, fsync, rename, fsync dir)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
