"""Compiled JSON Schemas: a fast yes/no check, and ``jsonschema`` to explain a "no".

Contract schemas are checked on every dispatch and every return, so the check must be
cheap. A :class:`CompiledSchema` compiles the schema once with ``jsonschema-rs`` (a
native validator, two orders of magnitude faster than the ``jsonschema`` interpreter)
for the common case where the data is valid; only when the fast check says "invalid"
does it run the ``jsonschema`` validator to list every violation with its path.
``jsonschema`` stays the authority: a failure the fast path reports but ``jsonschema``
does not is not a failure.

Both sides use the same dialect (the schema's ``$schema``, default 2020-12) and the
same format checks (``jsonschema``'s format checker is handed to the native validator),
remote references are never fetched, and a schema or a value the native validator
cannot handle is checked by ``jsonschema`` alone, so results never depend on which
path ran. The one difference left: ``pattern`` follows ECMA-262 on the fast path and
RE2 in ``jsonschema``; where they disagree on a match the data goes to ``jsonschema``,
which decides.

Patterns never backtrack: the native validator uses its linear-time regex engine
(``RegexOptions``), and ``jsonschema``'s ``pattern``/``patternProperties`` searches
(which call ``re.search``) are routed to RE2 (:mod:`middleware.safe_regex`) by
:func:`_linear_patterns_in_jsonschema`. Registered schemas only hold patterns RE2
accepts (:mod:`middleware.schema_guard`); a pattern RE2 refuses (possible only in a
schema that did not come through registration, e.g. built in Python by the operator)
still runs on ``re``.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import jsonschema
import jsonschema._keywords
import jsonschema._legacy_keywords
import jsonschema._utils
import jsonschema_rs
from jsonschema.protocols import Validator

from .errors import ContractViolation, Problem
from .safe_regex import compile_linear, linear_error


def _search(pattern: str, text: str) -> Any:
    """``re.search`` for jsonschema's keywords, in linear time when RE2 takes the pattern."""
    if linear_error(pattern) is None:
        return compile_linear(pattern, field="pattern").search(text)
    return re.search(pattern, text)


def _linear_patterns_in_jsonschema() -> None:
    """Make ``jsonschema``'s pattern keywords search with RE2 (they look up ``re.search``
    in their own modules; nothing else of ``re`` is used there)."""
    shim = SimpleNamespace(search=_search)
    for module in (jsonschema._keywords, jsonschema._legacy_keywords, jsonschema._utils):
        module.re = shim


_linear_patterns_in_jsonschema()

__all__ = ["CompiledSchema", "compile_schema"]


class CompiledSchema:
    """One JSON Schema, compiled once and reused for every check.

    Args:
        schema: The JSON Schema (must already be a valid schema). Treated as immutable.
    """

    __slots__ = ("_fast", "_slow", "schema")

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        cls = jsonschema.validators.validator_for(schema)
        self._slow: Validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self._fast: Callable[[Any], bool] | None = _compile_fast(schema, cls)

    def is_valid(self, data: Any) -> bool:
        """Whether ``data`` matches the schema (fast path when the data is valid)."""
        if self._fast is not None:
            try:
                if self._fast(data):
                    return True
            except Exception:  # a value the native validator cannot take: ask jsonschema
                pass
        return not any(True for _ in self._slow.iter_errors(data))

    def problems(self, data: Any) -> list[Problem]:
        """Every violation in ``data``, each named by its JSON path (empty when valid)."""
        errors = sorted(self._slow.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        return [Problem(e.json_path.replace("$", "", 1).lstrip(".") or "(root)", e.message) for e in errors]

    def check(self, data: Any, *, what: str | Callable[[], str]) -> None:
        """Raise :class:`ContractViolation` naming every violation unless ``data`` is valid.

        Args:
            data: The JSON value to check.
            what: What the data is, for the error ("output of orders@1.0.0"); a callable is
                only called when the check fails (keeps the valid path allocation-free).
        """
        if self._fast is not None:
            try:
                if self._fast(data):
                    return
            except Exception:  # confirmed (and explained) by jsonschema below
                pass
        problems = self.problems(data)
        if problems:
            raise ContractViolation(problems, what=what if isinstance(what, str) else what())


def _formats_in(node: Any, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "format" and isinstance(value, str):
                out.add(value)
            _formats_in(value, out)
    elif isinstance(node, list):
        for item in node:
            _formats_in(item, out)
    return out


def _compile_fast(schema: dict[str, Any], cls: type[Validator]) -> Callable[[Any], bool] | None:
    """The native validator's ``is_valid``, or ``None`` when only jsonschema can be trusted."""
    checker = cls.FORMAT_CHECKER
    formats = {
        name: (lambda value, _n=name: checker.conforms(value, _n))
        for name in _formats_in(schema, set())
        if name in checker.checkers
    }
    try:
        validator = jsonschema_rs.validator_for(
            schema,
            formats=formats,
            validate_formats=True,
            ignore_unknown_formats=True,
            offline=True,
            pattern_options=jsonschema_rs.RegexOptions(),  # linear time, never backtracking
        )
    except Exception:  # a schema the native validator cannot compile is still checked, slowly
        return None
    is_valid: Callable[[Any], bool] = validator.is_valid
    return is_valid


class _Cache:
    """A bounded LRU of compiled schemas keyed by canonical JSON."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._items: OrderedDict[str, CompiledSchema] = OrderedDict()

    def get(self, schema: dict[str, Any]) -> CompiledSchema:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
        found = self._items.get(key)
        if found is None:
            found = CompiledSchema(schema)
            self._items[key] = found
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(key)
        return found


_cache = _Cache()


def compile_schema(schema: dict[str, Any]) -> CompiledSchema:
    """A :class:`CompiledSchema` for ``schema``, shared between equal schemas.

    Compiling costs milliseconds, so callers that check often should keep the result
    (contracts keep theirs on the contract object).
    """
    return _cache.get(schema)
