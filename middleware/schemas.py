"""Compiled JSON Schemas: a fast yes/no check, and ``jsonschema`` to explain a "no".

Contract schemas are checked on every dispatch and every return, so the check must be
cheap. A :class:`CompiledSchema` compiles the schema once with ``fastjsonschema``
(generated Python code, ~50x faster than the ``jsonschema`` interpreter) for the
common case where the data is valid; only when the fast check says "invalid" does it
run the ``jsonschema`` validator to list every violation with its path. ``jsonschema``
stays the authority: a failure the fast path reports but ``jsonschema`` does not is
not a failure.

Schemas that use keywords ``fastjsonschema`` treats differently (draft 2019-09 /
2020-12 keywords, ``$ref`` with siblings, remote references, ``dependencies``) are
checked by ``jsonschema`` alone, so results never depend on which path ran. Formats
are checked with ``jsonschema``'s own format checker on both paths.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import fastjsonschema
import jsonschema
from jsonschema.protocols import Validator

from .errors import ContractViolation, Problem

__all__ = ["CompiledSchema", "compile_schema"]

# Keywords whose meaning differs between fastjsonschema (drafts 4-7) and jsonschema's
# default dialect (2020-12), or which fastjsonschema does not implement.
_SLOW_KEYWORDS = frozenset(
    {
        "prefixItems",
        "unevaluatedProperties",
        "unevaluatedItems",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "minContains",
        "maxContains",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "$vocabulary",
    }
)
_FAST_DIALECTS = {
    "http://json-schema.org/draft-04/schema#": "draft-04",
    "http://json-schema.org/draft-06/schema#": "draft-06",
    "http://json-schema.org/draft-07/schema#": "draft-07",
}


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
        self._fast: Callable[[Any], Any] | None = _compile_fast(schema, cls)

    def is_valid(self, data: Any) -> bool:
        """Whether ``data`` matches the schema (fast path when the data is valid)."""
        if self._fast is not None:
            try:
                self._fast(data)
                return True
            except fastjsonschema.JsonSchemaValueException:
                pass
            except Exception:  # e.g. data of a type the generated code did not expect
                pass
        return not any(True for _ in self._slow.iter_errors(data))

    def problems(self, data: Any) -> list[Problem]:
        """Every violation in ``data``, each named by its JSON path (empty when valid)."""
        errors = sorted(self._slow.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
        return [Problem(e.json_path.replace("$", "", 1).lstrip(".") or "(root)", e.message) for e in errors]

    def check(self, data: Any, *, what: str) -> None:
        """Raise :class:`ContractViolation` naming every violation unless ``data`` is valid."""
        if self._fast is not None:
            try:
                self._fast(data)
                return
            except Exception:  # confirmed (and explained) by jsonschema below
                pass
        problems = self.problems(data)
        if problems:
            raise ContractViolation(problems, what=what)


def _compile_fast(schema: dict[str, Any], cls: type[Validator]) -> Callable[[Any], Any] | None:
    """The fastjsonschema validator, or ``None`` when only jsonschema can be trusted."""
    dialect = schema.get("$schema")
    if dialect is not None and dialect not in _FAST_DIALECTS:
        return None
    formats: set[str] = set()
    if not _fast_safe(schema, formats):
        return None
    checker = cls.FORMAT_CHECKER
    custom = {
        name: (lambda value, _n=name: checker.conforms(value, _n))
        for name in formats
        if name in checker.checkers
    }
    try:
        return fastjsonschema.compile(schema, formats=custom, use_formats=True)  # type: ignore[no-any-return]
    except Exception:  # a schema fastjsonschema cannot compile is still checked, slowly
        return None


def _fast_safe(node: Any, formats: set[str]) -> bool:
    if isinstance(node, list):
        return all(_fast_safe(item, formats) for item in node)
    if not isinstance(node, dict):
        return True
    for key, value in node.items():
        if key in _SLOW_KEYWORDS:
            return False
        if key == "$ref" and (len(node) > 1 or not isinstance(value, str) or not value.startswith("#")):
            return False
        if key == "format" and isinstance(value, str):
            formats.add(value)
        if key == "items" and isinstance(value, list):
            return False  # tuple form: draft-7 meaning differs from 2020-12
        if not _fast_safe(value, formats):
            return False
    return True


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
