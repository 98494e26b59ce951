"""Small text helpers for CLI output: counted nouns and truncation with an ellipsis."""

from __future__ import annotations

__all__ = ["ELLIPSIS", "plural", "truncate"]

ELLIPSIS = "\u2026"


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 goal``, ``2 goals`` (``plural_form`` for irregular nouns: ``capabilities``)."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis (…)."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS
