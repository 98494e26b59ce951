"""Facts: the scalar values an answer states, at any depth, named by field, with their paths.

What the consistency detector (``DATA_INCONSISTENCY``) and the reliability score's
consistency part compare. A fact is a string, number or boolean reached through the
objects (and lists) of a value; it is named by its field — the last key on its path — so
the intake agent's ``{"context": {"accidental": true}}`` and the warranty agent's
``{"accidental": false}`` state the same fact, ``accidental``, at ``$.context.accidental``
and ``$.accidental``.

A name a value states twice with different values (an order's ``status`` and a
shipment's ``status`` in one answer) is ambiguous within that value and is not a fact
of it: two things share a name, and comparing either would be a guess. When the
occurrences agree, the shallowest (then the first) path is kept.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple

__all__ = ["Fact", "facts_of", "json_path_of", "replace_at", "same_value"]

#: Values nested deeper than this are not read (an answer is bounded by
#: ``limits.max_output_bytes``; this bounds the walk of a pathological one).
MAX_DEPTH = 32
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Key = str | int


class Fact(NamedTuple):
    """One fact a value states.

    Attributes:
        name: The field that names it (the last key of its path).
        value: The scalar stated.
        keys: Where it is, key by key (list indexes as ints).
    """

    name: str
    value: Any
    keys: tuple[Key, ...]

    @property
    def path(self) -> str:
        """Its JSON path (``$.context.accidental``, ``$.items[0].price``, ``$['order id']``)."""
        return json_path_of(self.keys)


def json_path_of(keys: Sequence[Key]) -> str:
    """The JSON path of ``keys`` (``$`` for none)."""
    parts = ["$"]
    for key in keys:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif _PLAIN_KEY.match(key):
            parts.append(f".{key}")
        else:
            parts.append("['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']")
    return "".join(parts)


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and value is not None


def facts_of(
    value: Any, *, only: Collection[str] | None = None, ignore: Collection[str] = ()
) -> dict[str, Fact]:
    """The facts ``value`` states, by name, in document order (a node's own fields before the
    fields of the objects nested in it).

    Args:
        value: Any JSON value (a scalar at the top is no fact: it has no name).
        only: Names to keep (None: every name).
        ignore: Names never kept.
    """
    found: dict[str, Fact] = {}
    if not isinstance(value, (dict, list)):
        return found
    if isinstance(value, dict) and not any(isinstance(v, (dict, list)) for v in value.values()):
        for key, child in value.items():  # a flat object, the common answer: no name twice
            name = str(key)
            if (
                isinstance(child, (str, int, float, bool))
                and name
                and name not in ignore
                and (only is None or name in only)
            ):
                found[name] = Fact(name, child, (name,))
        return found
    ambiguous: set[str] = set()
    stack: list[tuple[Any, tuple[Key, ...], str]] = [(value, (), "")]
    while stack:
        node, keys, owner = stack.pop()
        if len(keys) > MAX_DEPTH:
            continue
        nested: list[tuple[Any, tuple[Key, ...], str]] = []
        pairs = (
            ((str(k), k, v) for k, v in node.items())
            if isinstance(node, dict)
            else ((owner, i, v) for i, v in enumerate(node))
        )
        for name, key, child in pairs:
            if isinstance(child, (dict, list)):
                nested.append((child, (*keys, key if isinstance(key, int) else name), name))
                continue
            if (
                child is None
                or not isinstance(child, (str, int, float, bool))
                or not name
                or name in ambiguous
                or name in ignore
                or (only is not None and name not in only)
            ):
                continue
            held = found.get(name)
            if held is None:
                found[name] = Fact(name, child, (*keys, key if isinstance(key, int) else name))
            elif not same_value(held.value, child):
                ambiguous.add(name)
                del found[name]
        stack.extend(reversed(nested))  # the first nested object next (document order)
    return found


def same_value(a: Any, b: Any) -> bool:
    """Whether two stated values agree: booleans only with booleans, numbers by value, strings
    trimmed and case-folded."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().casefold() == b.strip().casefold()
    return bool(a == b)


def replace_at(value: Any, keys: Sequence[Key], new: Any) -> Any:
    """A copy of ``value`` with the value at ``keys`` replaced by ``new`` (a settled conflict).

    Raises:
        KeyError: ``keys`` does not lead to a value of ``value``.
    """
    if not keys:
        return new
    out = copy.deepcopy(value)
    node = out
    for key in keys[:-1]:
        node = node[key]
    last = keys[-1]
    if isinstance(node, dict):
        if last not in node:
            raise KeyError(last)
        node[last] = new
    else:
        node[int(last)] = new
    return out
