"""``agency trace show TRACE_ID``: the timeline of one task, from the audit log."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..audit.opener import open_audit_log
from ..timeline import build_timelines, find_trace, render_html, render_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "trace",
        help="look at what happened in one task",
        description="Read the audit log and show what happened in a task.",
    )
    cmds = p.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    show = cmds.add_parser(
        "show",
        help="print the timeline of one trace",
        description="Print the timeline of the task(s) of TRACE_ID from the audit log: the agents "
        "called, their inputs and outputs with SMF metadata, durations, every failure and its "
        "resolution, and the goal verification step by step.",
    )
    show.add_argument("trace_id", metavar="TRACE_ID", help="the trace id (or its first 8+ characters)")
    show.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the gateway's data directory (default: $AGENCY_DATA_DIR or ./agency-data)",
    )
    show.add_argument(
        "--audit-dir",
        type=Path,
        default=None,
        help="the audit log directory itself, if not DATA_DIR/audit (a definition file's audit.directory)",
    )
    show.add_argument("--html", type=Path, metavar="FILE", help="also write a self-contained HTML page")
    show.add_argument("--json", action="store_true", help="print the timeline(s) as JSON instead of text")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    from ..server.settings import ServerConfig

    directory = args.audit_dir or Path(ServerConfig.from_env(data_dir=args.data_dir).data_dir) / "audit"
    if not Path(directory).is_dir():
        from ..errors import NotFound

        raise NotFound(f"no audit log at {directory}: is --data-dir the gateway's data directory?")
    log = open_audit_log(directory)
    timelines = build_timelines(find_trace(log.records(), args.trace_id))
    if args.json:
        import dataclasses
        import json

        data = [dataclasses.asdict(t) for t in timelines]
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    else:
        for timeline in timelines:
            sys.stdout.write(render_text(timeline))
    if args.html:
        args.html.write_text(render_html(timelines), encoding="utf-8")
        (sys.stderr if args.json else sys.stdout).write(f"\nwrote {args.html}\n")
    return 0
