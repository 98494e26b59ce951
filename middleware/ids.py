"""How the CLI and the services match an id someone typed: the full id, or a unique prefix.

One rule everywhere (``agency trace show``, ``agency audit export --trace``, the
AuditService's ``trace_id`` filter): case-insensitive; the whole id always matches, and a
prefix of at least :data:`MIN_PREFIX` characters matches the ids it starts (shorter
prefixes would match too many). Callers that need one id refuse a prefix matching several.
"""

from __future__ import annotations

__all__ = ["MIN_PREFIX", "id_matches", "normalise_id"]

MIN_PREFIX = 8


def normalise_id(wanted: str) -> str:
    """``wanted`` as typed, stripped and in lower case."""
    return wanted.strip().lower()


def id_matches(candidate: str, wanted: str) -> bool:
    """Whether ``candidate`` is the id ``wanted`` names: equal, or ``wanted`` is a long enough prefix."""
    if not candidate:
        return False
    c, w = candidate.lower(), normalise_id(wanted)
    return c == w or (len(w) >= MIN_PREFIX and c.startswith(w))
