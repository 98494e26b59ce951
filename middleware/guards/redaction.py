"""Redaction and tokenisation of personal data in JSON values.

:func:`redact_value` walks a JSON value (objects, arrays, strings) and replaces every find of
a :class:`~middleware.guards.pii.PiiScanner` whose data class is not allowed, by what a
``replace(data_class, found_text)`` function returns. Two replacements are built in:

* :func:`redacted` — ``[redacted:phone]``: irreversible;
* :class:`Tokenizer` — ``[phone:3f9a2c1b5d7e]``: a keyed hash (HMAC-SHA-256 of the task id, the
  class and the value, under the gateway's token key), the same token for the same value
  within one task, unlinkable across tasks and unguessable without the key. A token in an
  agent's reply is turned back into the value (:meth:`Tokenizer.restore`) from the values the
  task itself holds: nothing maps tokens to values outside the task.

Object keys are field names and are never changed. What was replaced is reported as a
:class:`Redactions` (how many of each class, at which JSON paths), never the values.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from .pii import PiiScanner

__all__ = ["Redactions", "Tokenizer", "redact_text", "redact_value", "redacted"]

Replace = Callable[[str, str], str]

#: How many paths one report lists (a value with thousands of finds is one record).
MAX_PATHS = 50


@dataclass
class Redactions:
    """What a redaction replaced: a count per data class and the JSON paths (never the values)."""

    counts: dict[str, int] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # every class found, allowed ones included

    def __bool__(self) -> bool:
        return bool(self.counts)

    def add(self, data_class: str, path: str) -> None:
        self.counts[data_class] = self.counts.get(data_class, 0) + 1
        if len(self.paths) < MAX_PATHS and path not in self.paths:
            self.paths.append(path)

    def merge(self, other: Redactions) -> None:
        for name, n in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        self.seen |= other.seen
        for path in other.paths:
            if len(self.paths) < MAX_PATHS and path not in self.paths:
                self.paths.append(path)

    def as_detail(self) -> dict[str, Any]:
        return {"classes": dict(sorted(self.counts.items())), "paths": list(self.paths)}


def redacted(data_class: str, _value: str) -> str:
    """The irreversible replacement: ``[redacted:<class>]``."""
    return f"[redacted:{data_class}]"


def redact_text(
    text: str,
    scanner: PiiScanner,
    replace: Replace,
    *,
    allowed: Collection[str] = (),
    found: Redactions | None = None,
    path: str = "$",
) -> str:
    """``text`` with every find of a class not in ``allowed`` replaced."""
    matches = scanner.scan(text)
    if found is not None:
        found.seen.update(m.data_class for m in matches)
    matches = [m for m in matches if m.data_class not in allowed]
    if not matches:
        return text
    parts: list[str] = []
    at = 0
    for m in matches:
        parts.append(text[at : m.start])
        parts.append(replace(m.data_class, text[m.start : m.end]))
        at = m.end
        if found is not None:
            found.add(m.data_class, path)
    parts.append(text[at:])
    return "".join(parts)


def redact_value(
    value: Any,
    scanner: PiiScanner,
    replace: Replace,
    *,
    allowed: Collection[str] = (),
    found: Redactions | None = None,
    path: str = "$",
    skip_keys: Collection[str] = (),
) -> Any:
    """``value`` (JSON) with personal data replaced in every string; a new value where
    anything changed, the same object where nothing did (so nothing shared is mutated)."""
    if isinstance(value, str):
        return redact_text(value, scanner, replace, allowed=allowed, found=found, path=path)
    if isinstance(value, dict):
        out: dict[str, Any] | None = None
        for key, item in value.items():
            if key in skip_keys:
                continue
            new = redact_value(
                item,
                scanner,
                replace,
                allowed=allowed,
                found=found,
                path=f"{path}.{key}",
                skip_keys=skip_keys,
            )
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if isinstance(value, list):
        changed = False
        items = []
        for i, item in enumerate(value):
            new = redact_value(
                item,
                scanner,
                replace,
                allowed=allowed,
                found=found,
                path=f"{path}[{i}]",
                skip_keys=skip_keys,
            )
            changed = changed or new is not item
            items.append(new)
        return items if changed else value
    return value


_TOKEN = re.compile(r"\[([a-z][a-z0-9_]{0,40}):([0-9a-f]{12})\]")


class Tokenizer:
    """Reversible, task-scoped tokens for personal data (see the module docstring).

    Args:
        key: The token key (32 random bytes; one per gateway unless configured: then a task
            resumed on another replica restores the tokens its first replica made).
        scope: What makes tokens unlinkable across uses: the task id.
    """

    def __init__(self, key: bytes, scope: str) -> None:
        self._key = key
        self._scope = scope.encode()

    def token(self, data_class: str, value: str) -> str:
        digest = hmac.new(
            self._key, b"\0".join((self._scope, data_class.encode(), value.encode())), hashlib.sha256
        )
        return f"[{data_class}:{digest.hexdigest()[:12]}]"

    def __call__(self, data_class: str, value: str) -> str:
        return self.token(data_class, value)

    @staticmethod
    def holds_tokens(value: Any) -> bool:
        """Whether a JSON value holds anything that looks like a token (cheap test first)."""
        if isinstance(value, str):
            return "[" in value and _TOKEN.search(value) is not None
        if isinstance(value, dict):
            return any(Tokenizer.holds_tokens(v) for v in value.values())
        if isinstance(value, list):
            return any(Tokenizer.holds_tokens(v) for v in value)
        return False

    def vault(self, sources: Iterable[Any], scanner: PiiScanner) -> dict[str, str]:
        """Token → value for every find in ``sources`` (the task's own data)."""
        out: dict[str, str] = {}

        def collect(data_class: str, found: str) -> str:
            out[self.token(data_class, found)] = found
            return found

        for source in sources:
            redact_value(source, scanner, collect)
        return out

    def restore(self, value: Any, vault: dict[str, str]) -> tuple[Any, int]:
        """``value`` with the tokens of ``vault`` turned back into their values, and how many."""
        count = 0

        def back(m: re.Match[str]) -> str:
            nonlocal count
            original = vault.get(m.group(0))
            if original is None:
                return m.group(0)
            count += 1
            return original

        def walk(v: Any) -> Any:
            if isinstance(v, str):
                return _TOKEN.sub(back, v) if "[" in v else v
            if isinstance(v, dict):
                return {k: walk(item) for k, item in v.items()}
            if isinstance(v, list):
                return [walk(item) for item in v]
            return v

        restored = walk(value)
        return restored, count
