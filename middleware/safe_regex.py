"""Regular expressions from outside (clients, agents, goal authors) run in linear time.

A backtracking engine (Python's ``re``) takes exponential time on patterns such as
``(.|.)*\\x00``; one such pattern from a client wedged the gateway's event loop. Every
pattern that does not come from the operator's own code is compiled here with RE2
(``google-re2``), whose matching time is linear in the text, whatever the pattern.

RE2 has no backreferences (``\\1``) and no lookaround (``(?=``, ``(?!``, ``(?<=``,
``(?<!``): a pattern using them is refused where it is registered, with an error
naming its field, rather than accepted and run with a backtracking engine.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import re2

from .errors import InvalidInput

__all__ = ["LinearPattern", "compile_linear", "linear_error"]

#: Memory RE2 may use for one compiled pattern (its automata); larger patterns are refused.
MAX_PATTERN_MEMORY = 8 << 20


class LinearPattern(Protocol):
    """What a compiled RE2 pattern offers (the subset used here)."""

    pattern: str

    def search(self, text: str) -> Any: ...


def _options(ignore_case: bool) -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is raised (and named) here, not printed by RE2
    options.max_mem = MAX_PATTERN_MEMORY
    options.case_sensitive = not ignore_case
    return options


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str, ignore_case: bool) -> LinearPattern:
    rx: LinearPattern = re2.compile(pattern, _options(ignore_case))
    return rx


def linear_error(pattern: str) -> str | None:
    """Why ``pattern`` cannot run in linear time (RE2 refuses it), or None when it can."""
    try:
        _compiled(pattern, False)
    except re2.error as exc:
        why = exc.args[0] if exc.args else str(exc)
        text = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        return (
            f"not a pattern the linear-time engine (RE2) accepts: {text} "
            "(backreferences and lookaround are not supported)"
        )
    except (TypeError, ValueError, OverflowError) as exc:
        return f"not a valid pattern: {exc}"
    return None


def compile_linear(
    pattern: str, *, field: str, ignore_case: bool = False, what: str = "pattern"
) -> LinearPattern:
    """``pattern`` compiled with RE2 (matching in linear time), cached.

    Raises:
        InvalidInput: naming ``field`` when RE2 does not accept the pattern.
    """
    why = linear_error(pattern)
    if why is not None:
        raise InvalidInput.single(field, why, what=what)
    return _compiled(pattern, ignore_case)
