"""``agency smf validate FILE...``: validate SMF messages offline."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from ..findings import Finding, load_documents, render_json, render_text


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("smf", help="Semantic Message Format tooling", description="SMF tooling.")
    smf_sub = p.add_subparsers(dest="smf_command", metavar="SUBCOMMAND", required=True)
    v = smf_sub.add_parser(
        "validate",
        help="validate SMF messages (JSON or YAML)",
        description="Validate SMF messages: the envelope's schema, freshness (stale messages, TTLs below "
        "the recommended minimum for real-time data), intent drift, and that the intention trace holds "
        "the goals you expect. One line per finding (✅ ⚠️ ❌). Each file holds one message, a list, or "
        "{messages: [...]}. Exit code 1 when there are errors (or warnings with --strict), 2 when the "
        "command itself cannot run.",
    )
    v.add_argument("files", nargs="+", metavar="FILE", help="message files (.json, .yaml or .yml)")
    v.add_argument(
        "--expect-goal",
        action="append",
        default=[],
        metavar="GOAL_ID",
        help="a goal id the intention_trace must contain (repeatable)",
    )
    v.add_argument(
        "--min-ttl",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="recommended minimum freshness_ttl for real-time data (default 60; 0 disables)",
    )
    v.add_argument("--now", metavar="TIME", help="judge freshness at this RFC 3339 time (default: now)")
    v.add_argument("--allow-stale", action="store_true", help="report stale messages as warnings")
    v.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        default="text",
        help="print JSON instead of text",
    )
    # the old spelling, kept hidden for one release
    v.add_argument("--format", choices=["text", "json"], default="text", help=argparse.SUPPRESS)
    v.add_argument("--strict", action="store_true", help="warnings fail the validation too")
    v.set_defaults(handler=_validate)


def _validate(args: argparse.Namespace) -> int:
    now = None
    if args.now:
        try:
            now = datetime.fromisoformat(args.now.replace("Z", "+00:00"))
        except ValueError:
            print(f"agency: error: --now {args.now!r} is not an RFC 3339 time", file=sys.stderr)
            return 2
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
    if args.min_ttl < 0:
        print("agency: error: --min-ttl must be >= 0", file=sys.stderr)
        return 2
    return run_validate(
        args.files,
        expect_goals=args.expect_goal,
        min_ttl=args.min_ttl,
        now=now,
        allow_stale=args.allow_stale,
        output_format=args.format,
        strict=args.strict,
        out=sys.stdout,
    )


def run_validate(
    files: list[str],
    *,
    expect_goals: list[str] | None = None,
    min_ttl: float = 60.0,
    now: datetime | None = None,
    allow_stale: bool = False,
    output_format: str = "text",
    strict: bool = False,
    out: Any = None,
) -> int:
    """Validate every message in ``files`` and print the findings; return the exit code."""
    from ..smf_check import check_smf_message, messages_in

    out = out or sys.stdout
    findings: list[Finding] = []
    count = 0
    for path in files:
        try:
            document = load_documents(path)
        except (OSError, ValueError) as exc:
            findings.append(Finding("error", "unreadable", f"cannot read: {exc}", file=path))
            continue
        messages = messages_in(document)
        several = len(messages) > 1
        for index, message in enumerate(messages):
            count += 1
            findings.extend(
                check_smf_message(
                    message,
                    file=path,
                    item=f"#{index}" if several else "",
                    expect_goals=expect_goals or [],
                    min_ttl=min_ttl,
                    now=now,
                    allow_stale=allow_stale,
                )
            )
    if output_format == "json":
        out.write(render_json(findings, files=len(files), messages=count))
    else:
        # like the seed's smf-validate: a single message needs no location on each line
        out.write(render_text(findings, with_location=len(files) > 1 or count > 1))
    failing = {"error", "warning"} if strict else {"error"}
    return 1 if any(f.severity in failing for f in findings) else 0
