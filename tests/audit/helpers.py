"""Shared helpers for the audit tests: build logs, take crash images, inspect segments."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from middleware.audit.checkpoint import Signer
from middleware.audit.record import Actors, AuditRecord
from middleware.audit.segment import SegmentName
from middleware.audit.wal import WalAuditLog, WalOptions

SIGNER = Signer("audit-test")


def record(i: int, **kw: object) -> AuditRecord:
    """A small record whose detail names its position."""
    fields: dict[str, object] = {
        "event_type": "agent.step",
        "node": "n1",
        "trace_id": f"trace-{i % 3}",
        "goal_id": f"goal-{i % 2}",
        "actors": Actors(user="u1", agent=f"agent-{i % 4}", session="s1"),
        "outcome": "success",
        "detail": {"i": i},
    }
    fields.update(kw)
    return AuditRecord(**fields)  # type: ignore[arg-type]


def open_log(root: Path, node: str = "n1", **opts: object) -> WalAuditLog:
    """A log with the test key; sealed segments stay plain unless asked (the tamper tests edit
    their bytes; test_compression covers compressed ones)."""
    opts.setdefault("compress_sealed", False)
    return WalAuditLog(root, node, signer=SIGNER, options=WalOptions(**opts))  # type: ignore[arg-type]


async def append_batch(log: WalAuditLog, start: int, count: int) -> list[int]:
    """Append ``count`` records concurrently (one group-commit batch)."""
    return list(await asyncio.gather(*(log.append(record(start + k)) for k in range(count))))


def segments(node_dir: Path) -> list[Path]:
    return sorted(p for p in node_dir.iterdir() if SegmentName.parse(p.name))


def crash_image(node_dir: Path, dest_root: Path) -> Path:
    """Copy a live node directory as a crash would leave it (no close, no seal)."""
    dest = dest_root / node_dir.name
    dest.mkdir(parents=True)
    for path in sorted(node_dir.rglob("*")):
        if path.name == "LOCK" or path.is_dir():
            continue
        target = dest / path.relative_to(node_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(path, target)
        except FileNotFoundError:
            # the live writer renamed a just-created segment's temp file while we copied:
            # a crash at this instant would not have it either
            continue
    return dest
