"""``agency goal lint FILE...``: check goal assertions before they go live."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..contracts import CapabilityContract
from ..findings import Finding, load_documents, render_json, render_text
from ._text import add_json_option


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("goal", help="goal assertion tooling", description="Goal assertion tooling.")
    goal_sub = p.add_subparsers(dest="goal_command", metavar="SUBCOMMAND", required=True)
    lint = goal_sub.add_parser(
        "lint",
        help="lint goal assertions (YAML or JSON)",
        description="Lint goal assertions: steps a machine cannot check ('ensure the user is satisfied'), "
        "unknown step kinds, regexes that do not compile, timeouts beyond the SLA of the targeted "
        "capabilities, high-criticality goals with a timeout under 60 s. Each file holds one goal, a "
        "list of goals, or {goals: [...]}. Exit code 1 when there are errors (or warnings with "
        "--strict), 2 when the command itself cannot run.",
    )
    lint.add_argument("files", nargs="+", metavar="FILE", help="goal files (.yaml, .yml or .json)")
    lint.add_argument(
        "--catalog",
        metavar="FILE",
        help="contracts (a list, {contracts: [...]}, or an agency definition file) "
        "giving the SLO of target_capabilities",
    )
    add_json_option(lint)
    lint.add_argument("--strict", action="store_true", help="warnings fail the lint too")
    lint.set_defaults(handler=_lint)


def _lint(args: argparse.Namespace) -> int:
    return run_lint(
        args.files, catalog_file=args.catalog, output_format=args.format, strict=args.strict, out=sys.stdout
    )


def run_lint(
    files: list[str],
    *,
    catalog_file: str | None = None,
    output_format: str = "text",
    strict: bool = False,
    out: Any = None,
) -> int:
    """Lint ``files`` and print the findings; return the exit code (0 ok, 1 findings fail)."""
    from ..goals.lint import catalog_from, goals_in, lint_goals

    out = out or sys.stdout
    catalog: dict[str, CapabilityContract] | None = None
    if catalog_file:
        try:
            catalog = catalog_from(load_documents(catalog_file))
        except (OSError, ValueError) as exc:
            print(f"agency: error: cannot read catalog {catalog_file}: {exc}", file=sys.stderr)
            return 2
    documents: list[tuple[str, Any]] = []
    findings: list[Finding] = []
    for path in files:
        try:
            documents.append((path, load_documents(path)))
        except (OSError, ValueError) as exc:
            findings.append(Finding("error", "unreadable", f"cannot read: {exc}", file=path))
    findings.extend(lint_goals(documents, catalog=catalog))
    goals = sum(len(goals_in(document) or []) for _, document in documents)
    if output_format == "json":
        out.write(render_json(findings, files=len(files), goals=goals))
    else:
        out.write(render_text(findings))
    failing = {"error", "warning"} if strict else {"error"}
    return 1 if any(f.severity in failing for f in findings) else 0
