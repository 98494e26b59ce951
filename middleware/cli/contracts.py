"""``agency contracts review``: contracts flagged for review by the failure-rate monitor.

The gateway flags an agent's contract when one failure type exceeds 15 % of the
agent's tasks over the monitor's sliding window, and writes a ``contract.review``
audit record (``flagged``, later ``cleared``). This command reads those records
from the audit log under ``--data-dir`` (read only; safe while the server runs)
and lists the contracts flagged now, with their figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..errors import NotFound

__all__ = ["flagged_contracts", "register"]

EVENT = "contract.review"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("contracts", help="capability contracts: review flags")
    csub = p.add_subparsers(dest="contracts_command", metavar="SUBCOMMAND", required=True)
    review = csub.add_parser(
        "review",
        help="list contracts flagged for review (one failure type > 15%% of an agent's tasks)",
        description="List the contracts the failure-rate monitor flagged for review, with the "
        "failure type, its rate, failures/tasks in the window, and when it was flagged. Reads the "
        "audit log under --data-dir (read only).",
    )
    review.add_argument("--data-dir", type=Path, default=Path("agency-data"), help="default ./agency-data")
    review.add_argument("--all", action="store_true", help="also list flags that have since cleared")
    review.add_argument("--json", action="store_true", help="print JSON instead of a table")
    review.set_defaults(handler=_review)


def _review(args: argparse.Namespace) -> int:
    return print_review(args.data_dir, include_cleared=args.all, as_json=args.json, out=sys.stdout)


def print_review(data_dir: Path, *, include_cleared: bool = False, as_json: bool = False, out: TextIO) -> int:
    if not (Path(data_dir) / "audit").is_dir():
        raise NotFound(
            f"no audit log at {Path(data_dir) / 'audit'}: is --data-dir the gateway's data directory?"
        )
    flags = flagged_contracts(data_dir, include_cleared=include_cleared)
    if as_json:
        out.write(json.dumps(flags, indent=2, ensure_ascii=False) + "\n")
        return 0
    if not flags:
        out.write("No contract is flagged for review.\n")
        return 0
    header = f"{'AGENT':<32} {'FAILURE TYPE':<20} {'RATE':>7} {'FAILED/TASKS':>13}  {'WINDOW':>7}  FLAGGED AT"
    out.write(header + "\n")
    for f in flags:
        state = " (cleared)" if f.get("cleared") else ""
        out.write(
            f"{f['agent']:<32} {f['failure_type']:<20} {f['rate']:>7.1%} "
            f"{str(f['failures']) + '/' + str(f['tasks']):>13}  {_hours(f['window_seconds']):>7}  "
            f"{f['flagged_at']}{state}\n"
        )
    return 0


def flagged_contracts(data_dir: Path, *, include_cleared: bool = False) -> list[dict[str, Any]]:
    """The latest review flag per (agent, failure type) in the audit log, worst first."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for record in _records(Path(data_dir)):
        if record.get("event_type") != EVENT:
            continue
        detail = dict(record.get("detail") or {})
        latest[(detail.get("agent", ""), detail.get("failure_type", ""))] = detail
    flags = [f for f in latest.values() if include_cleared or not f.get("cleared")]
    return sorted(flags, key=lambda f: (-float(f.get("rate", 0)), f.get("agent", "")))


def _records(data_dir: Path) -> Iterator[dict[str, Any]]:
    """Audit records as dicts from ``data_dir/audit`` (read only): the write-ahead log's
    segments when there are any, else the JSON Lines files of the single-file log."""
    directory = data_dir / "audit"
    try:  # the segmented write-ahead log and its read-only reader, when this build has them
        wal = importlib.import_module("middleware.audit.wal_reader")
    except ImportError:
        wal = None
    if wal is not None and wal.is_wal_directory(directory):
        for _, record in wal.WalLogReader(directory).records():
            yield record.model_dump(mode="json")
        return
    for path in sorted(directory.glob("*.jsonl")):
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn last line while the server writes
                record = entry.get("record", entry) if isinstance(entry, dict) else None
                if isinstance(record, dict):
                    yield record


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds:g}s"
