"""A small, fast JSON path subset: ``$``, ``.name``, ``['name']``, ``[index]``, ``[*]``, ``..name``.

Enough for verification steps (``$.warranty.eligible``, ``$.items[*].sku``,
``$['order id']``, ``$..purchase_date`` for a field at any depth) without a general
JSONPath engine on the hot path.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = ["JsonPath", "JsonPathError"]

_TOKEN = re.compile(
    r"""\.\.(?P<deep>[A-Za-z_\u00a0-\uffff][\w\u00a0-\uffff-]*)
      |\.(?P<name>[A-Za-z_\u00a0-\uffff][\w\u00a0-\uffff-]*)
      |\[(?P<index>-?\d+)\]
      |\[(?P<star>\*)\]|\.(?P<dotstar>\*)
      |\[\s*(?P<q>['"])(?P<quoted>(?:\\.|(?!(?P=q)).)*)(?P=q)\s*\]""",
    re.VERBOSE,
)

_WILD = object()


class _Deep:
    """``..name``: every value under key ``name`` at any depth (document order)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def collect(self, value: Any, out: list[Any]) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                if key == self.name:
                    out.append(child)
                self.collect(child, out)
        elif isinstance(value, list):
            for child in value:
                self.collect(child, out)


class JsonPathError(ValueError):
    """A JSON path that does not parse."""


class JsonPath:
    """A compiled path; :meth:`find` returns every value it reaches (possibly none)."""

    __slots__ = ("_parts", "_single", "text")

    def __init__(self, text: str, parts: tuple[Any, ...]) -> None:
        self.text = text
        self._parts = parts
        # Without wildcards a path reaches at most one value: walk it without lists.
        self._single = all(part is not _WILD and not isinstance(part, _Deep) for part in parts)

    @property
    def is_single(self) -> bool:
        """Whether the path reaches at most one value (no wildcard)."""
        return self._single

    @staticmethod
    def compile(text: str) -> JsonPath:
        return _compile(text)

    def find(self, document: Any) -> list[Any]:
        """Every value the path reaches in ``document``, in document order (maybe none)."""
        if self._single:
            value = document
            for part in self._parts:
                if isinstance(part, int):
                    if isinstance(value, list) and -len(value) <= part < len(value):
                        value = value[part]
                    else:
                        return []
                elif isinstance(value, dict) and part in value:
                    value = value[part]
                else:
                    return []
            return [value]
        current = [document]
        for part in self._parts:
            nxt: list[Any] = []
            for value in current:
                if isinstance(part, _Deep):
                    part.collect(value, nxt)
                elif part is _WILD:
                    if isinstance(value, dict):
                        nxt.extend(value.values())
                    elif isinstance(value, list):
                        nxt.extend(value)
                elif isinstance(part, int):
                    if isinstance(value, list) and -len(value) <= part < len(value):
                        nxt.append(value[part])
                elif isinstance(value, dict) and part in value:
                    nxt.append(value[part])
            current = nxt
            if not current:
                break
        return current


@lru_cache(maxsize=2048)
def _compile(text: str) -> JsonPath:
    s = text.strip()
    if not s.startswith("$"):
        raise JsonPathError(f"JSON path {text!r} must start with '$'")
    pos = 1
    parts: list[Any] = []
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise JsonPathError(f"JSON path {text!r} is invalid at position {pos}: {s[pos : pos + 10]!r}")
        if m.group("deep") is not None:
            parts.append(_Deep(m.group("deep")))
        elif m.group("name") is not None:
            parts.append(m.group("name"))
        elif m.group("index") is not None:
            parts.append(int(m.group("index")))
        elif m.group("star") or m.group("dotstar"):
            parts.append(_WILD)
        else:
            parts.append(re.sub(r"\\(.)", r"\1", m.group("quoted")))
        pos = m.end()
    return JsonPath(text, tuple(parts))
