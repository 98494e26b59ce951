"""``agency smf validate FILE...`` (also ``smf-validate --file FILE``): validate SMF messages offline.

``smf-validate`` is the name the seed's section 5.3 uses; it is installed as its own
console script and takes the same options, with the files given by ``--file``.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from ..findings import Finding, load_documents, render_json, render_text
from ._text import add_json_option


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
    v.add_argument("files", nargs="*", metavar="FILE", help="message files (.json, .yaml or .yml)")
    _options(v)
    v.set_defaults(handler=_validate)


def _options(v: argparse.ArgumentParser) -> None:
    v.add_argument(
        "--file",
        dest="file_options",
        action="append",
        default=[],
        metavar="FILE",
        help="a message file (repeatable; the same as a positional FILE)",
    )
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
    add_json_option(v)
    v.add_argument("--strict", action="store_true", help="warnings fail the validation too")
    v.add_argument(
        "--time-critical-domain",
        action="append",
        default=None,
        metavar="DOMAIN",
        help="a domain whose messages (metadata.domain) must carry a freshness_ttl "
        "(repeatable; default: finance and logistics)",
    )
    v.add_argument(
        "--time-critical",
        action="store_true",
        help="every message is time-critical: each must carry a freshness_ttl",
    )


def smf_validate_main(argv: list[str] | None = None) -> int:
    """The ``smf-validate`` console script: ``smf-validate --file msg.json``."""
    p = argparse.ArgumentParser(
        prog="smf-validate",
        description="Validate SMF messages offline (the same checks as 'agency smf validate').",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="message files (.json, .yaml or .yml)")
    _options(p)
    return _validate(p.parse_args(argv))


def main() -> None:
    """Entry point of the ``smf-validate`` script."""
    raise SystemExit(smf_validate_main())


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
    files = [*args.files, *args.file_options]
    if not files:
        print("agency: error: no message file given (FILE or --file FILE)", file=sys.stderr)
        return 2
    domains = args.time_critical_domain
    return run_validate(
        files,
        time_critical_domains=None if domains is None else {d.lower() for d in domains},
        time_critical=args.time_critical,
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
    time_critical_domains: set[str] | None = None,
    time_critical: bool = False,
) -> int:
    """Validate every message in ``files`` and print the findings; return the exit code."""
    from ..smf import DEFAULT_TIME_CRITICAL_DOMAINS
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
                    time_critical_domains=DEFAULT_TIME_CRITICAL_DOMAINS
                    if time_critical_domains is None
                    else time_critical_domains,
                    time_critical=time_critical,
                )
            )
    if output_format == "json":
        out.write(render_json(findings, files=len(files), messages=count))
    else:
        # like the seed's smf-validate: a single message needs no location on each line
        out.write(render_text(findings, with_location=len(files) > 1 or count > 1))
    failing = {"error", "warning"} if strict else {"error"}
    return 1 if any(f.severity in failing for f in findings) else 0
