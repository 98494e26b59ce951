"""Bounds on the JSON Schemas that agents and clients register, checked before they are used.

A contract's ``input_schema``/``output_schema`` comes from outside (an agent's
registration, a goal's ``json_schema`` step). Before such a schema is checked against the
meta-schema, compiled or used, :func:`check_schema_bounds` refuses it when

* it is larger than :attr:`SchemaLimits.max_bytes` (its JSON text, or an estimate of it
  for a schema given as an object) or has more than :attr:`SchemaLimits.max_nodes`
  objects, arrays and values, or nests deeper than :attr:`SchemaLimits.max_depth`: a
  1.1 MB schema cost two seconds of the gateway's time on every registration;
* a ``pattern`` or a ``patternProperties`` key is not a pattern RE2 accepts
  (:mod:`middleware.safe_regex`): patterns are then matched in linear time everywhere.

Each refusal names the field (e.g. ``input_schema.properties.code.pattern``). The limits
are process-wide (:func:`set_schema_limits`; ``agency serve`` reads them from the
environment with :func:`middleware.server.settings.schema_limits_from_env`, see
docs/operations.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ._model import Model
from .errors import InvalidInput, Problem
from .safe_regex import linear_error

__all__ = ["SchemaLimits", "check_schema_bounds", "check_schema_text", "schema_limits", "set_schema_limits"]


class SchemaLimits(Model):
    """How large a registered JSON Schema may be."""

    max_bytes: int = Field(default=128 * 1024, ge=1, description="Largest schema, as JSON text (bytes).")
    max_nodes: int = Field(default=5_000, ge=1, description="Most objects, arrays and values in one schema.")
    max_depth: int = Field(default=64, ge=1, description="Deepest nesting of objects and arrays.")


_limits = SchemaLimits()


def schema_limits() -> SchemaLimits:
    """The limits in force."""
    return _limits


def set_schema_limits(limits: SchemaLimits) -> None:
    """Replace the limits in force (process-wide)."""
    global _limits
    _limits = limits


def check_schema_text(text: str, *, field: str) -> None:
    """Refuse schema JSON text larger than :attr:`SchemaLimits.max_bytes` before parsing it.

    Raises:
        InvalidInput: naming ``field``.
    """
    limit = _limits.max_bytes
    if len(text) > limit or len(text.encode()) > limit:
        raise InvalidInput.single(
            field,
            f"schema is {len(text.encode())} bytes, more than the {limit} allowed (AGENCY_MAX_SCHEMA_BYTES)",
            what="schema",
        )


def check_schema_bounds(schema: Any, *, field: str) -> None:
    """Refuse ``schema`` when it is too large or uses a pattern RE2 does not accept.

    Raises:
        InvalidInput: naming ``field`` (and within it the node at fault for a pattern).
    """
    limits = _limits
    problems: list[Problem] = []
    nodes = 0
    size = 0
    # iterative: a deep schema must not overflow the stack before it is refused
    stack: list[tuple[Any, str, int]] = [(schema, field, 0)]
    while stack:
        node, where, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            why = f"schema has more than {limits.max_nodes} nodes (AGENCY_MAX_SCHEMA_NODES)"
            raise InvalidInput.single(field, why, what="schema")
        if depth > limits.max_depth:
            why = f"schema nests deeper than {limits.max_depth} levels (AGENCY_MAX_SCHEMA_DEPTH)"
            raise InvalidInput.single(field, why, what="schema")
        if isinstance(node, dict):
            for key, value in node.items():
                key = str(key)
                size += len(key) + 4
                child = f"{where}.{key}"
                if key == "pattern" and isinstance(value, str):
                    bad = linear_error(value)
                    if bad is not None:
                        problems.append(Problem(child, bad))
                elif key == "patternProperties" and isinstance(value, dict):
                    for pattern in value:
                        bad = linear_error(str(pattern))
                        if bad is not None:
                            problems.append(Problem(f"{child}.{pattern}", bad))
                stack.append((value, child, depth + 1))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                stack.append((value, f"{where}[{i}]", depth + 1))
                size += 1
        else:
            size += len(node) + 2 if isinstance(node, str) else 8
        if size > limits.max_bytes:
            raise InvalidInput.single(
                field,
                f"schema is larger than the {limits.max_bytes} bytes allowed (AGENCY_MAX_SCHEMA_BYTES)",
                what="schema",
            )
    if problems:
        raise InvalidInput(problems, what="schema")
