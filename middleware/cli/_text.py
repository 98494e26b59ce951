"""Small text helpers for CLI output: counted nouns, truncation with an ellipsis, and the
one ``--json`` option of commands that print a report."""

from __future__ import annotations

import argparse

__all__ = ["ELLIPSIS", "add_json_option", "plural", "truncate"]

ELLIPSIS = "\u2026"


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 goal``, ``2 goals`` (``plural_form`` for irregular nouns: ``capabilities``)."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis (…)."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json`` (``args.format == "json"``), and the old ``--format text|json`` spelling,
    hidden, kept for one release."""
    parser.add_argument(
        "--json",
        dest="format",
        action="store_const",
        const="json",
        default="text",
        help="print JSON instead of text",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help=argparse.SUPPRESS)
