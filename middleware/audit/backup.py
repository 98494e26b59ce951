"""Backing up audit logs: every node's segments, never the keys that sign them.

``backup(source, dest)`` copies each node log under ``source`` into ``dest/<node>/`` while
the gateways keep writing: the verifier key and retention's files first, then the segments
in log order. A sealed segment already in the copy (same name and size) is not copied again;
one compressed while the copy ran is taken compressed. Left out: the signing keys (they live
beside the audit directory or in a secret store, never under it: a backup that holds them lets
whoever reads it rewrite history), the writer's ``LOCK``, temporary files, and the published
``checkpoint`` file (the log holds every checkpoint; a file copied after the segments could
claim records the copy lacks). The copy of a segment being written may end inside a batch:
that batch was not yet acknowledged when the copy was taken, and verification notes it as a
torn tail, which the gateway cuts when it opens the restored log.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ._files import fsync_dir
from .compression import COMPRESSED_SUFFIX, stored
from .segment import PRUNED_LEAVES, PRUNED_META, list_segments
from .verify import VKEY_FILE, find_node_dirs

__all__ = ["BackupSummary", "backup"]


@dataclass
class BackupSummary:
    """What one backup run copied.

    Attributes:
        nodes: The node logs copied.
        copied: Files copied (or copied again: the segment being written).
        skipped: Sealed segments the copy already had.
    """

    nodes: list[str] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    skipped: int = 0


def backup(source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> BackupSummary:
    """Copy every node log under ``source`` to ``dest/<node>/`` (incremental, durable).

    Raises:
        NotFound: ``source`` does not exist.
        InvalidInput: ``source`` is not a directory.
    """
    summary = BackupSummary()
    target_root = Path(dest)
    for node_dir in find_node_dirs(source):
        target = target_root / node_dir.name
        target.mkdir(parents=True, exist_ok=True)
        summary.nodes.append(node_dir.name)
        for name in (VKEY_FILE, PRUNED_LEAVES, PRUNED_META):  # leaves before the size that counts them
            if (node_dir / name).exists():
                _copy(node_dir / name, target / name, summary)
        segments = list_segments(node_dir)
        for i, (_, path) in enumerate(segments):
            last = i == len(segments) - 1
            try:
                _copy_segment(path, target, summary, last=last)
            except FileNotFoundError:  # compressed (or pruned) while we copied: take what is there now
                now = stored(path)
                if now.exists():
                    _copy_segment(now, target, summary, last=last)
        fsync_dir(target)
    return summary


def _copy_segment(path: Path, target: Path, summary: BackupSummary, *, last: bool) -> None:
    out = target / path.name
    sealed = path.name.endswith(COMPRESSED_SUFFIX) or not last
    if sealed and out.exists() and out.stat().st_size == path.stat().st_size:
        summary.skipped += 1
        return
    _copy(path, out, summary)
    if path.name.endswith(COMPRESSED_SUFFIX):  # the plain copy of an earlier run is superseded
        (target / path.name[: -len(COMPRESSED_SUFFIX)]).unlink(missing_ok=True)


def _copy(src: Path, dst: Path, summary: BackupSummary) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, dst)
    summary.copied.append(f"{dst.parent.name}/{dst.name}")
