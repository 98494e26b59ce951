"""How big one task may get: steps, one agent's answer, the outcome.

:class:`TaskLimits` is the ``limits`` section of ``agency:`` in the definition file. Each
limit is enforced where the work it bounds would start, never by a response the
transport cannot send:

* ``max_steps_per_task``: a Submit with more steps is refused before anything runs
  (``INVALID_ARGUMENT`` naming ``steps``), and audited.
* ``max_output_bytes``: an agent answer whose JSON is larger is a typed failure of that
  attempt (``SCHEMA_VIOLATION``, ``direction: output``, ``limit: max_output_bytes``),
  resolved like any other (retry, backup, abort) and audited.
* ``max_outcome_bytes``: a task whose outcome would be larger ends ``failed`` with a
  reason naming the limit; the outputs are left out of that outcome. A gateway sends
  the outcome's JSON and its output (at most twice this size) in one response, so the
  default keeps that under the 4 MiB gRPC message size with room to spare.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, model_validator

from ._model import Model

__all__ = ["MiB", "TaskLimits", "json_size"]

MiB = 1024 * 1024

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=str)


def json_size(value: Any) -> int:
    """The size in UTF-8 bytes of ``value`` as JSON (what the audit log and clients get).

    Raises:
        ValueError: ``value`` holds what JSON cannot: ``NaN``/``Infinity``, or a string with
            a lone UTF-16 surrogate (no UTF-8 text holds one).
    """
    try:
        return len(_ENCODER.encode(value).encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone UTF-16 surrogate") from None


class TaskLimits(Model):
    """Size limits of one task (``agency.limits`` in the definition file)."""

    max_steps_per_task: int = Field(
        default=64, ge=1, le=10_000, description="Most steps one Submit may list."
    )
    max_output_bytes: int = Field(
        default=1 * MiB, ge=1024, le=64 * MiB, description="Largest JSON answer of one agent call."
    )
    max_outcome_bytes: int = Field(
        default=3 * MiB // 2,
        ge=4096,
        le=64 * MiB,
        description="Largest outcome JSON of a task (about half of what one gRPC response may carry).",
    )

    @model_validator(mode="after")
    def _answer_fits_outcome(self) -> TaskLimits:
        if self.max_output_bytes > self.max_outcome_bytes:
            raise ValueError(
                f"max_output_bytes ({self.max_output_bytes}) must not exceed max_outcome_bytes "
                f"({self.max_outcome_bytes}): one answer could not be returned"
            )
        return self
