"""Reliability: the ``provenance.reliability_score`` of an answer, computed, not claimed.

The seed (section 3.4) says the score is "not a subjective score" but a weighted
combination of three parts:

* **authority** of the source, from a table in the definition file
  (``reliability.authority``: ``{"sec_filing": 0.95, "blog:*": 0.4}``; keys are exact
  source names or shell patterns; unknown sources get ``default_authority``);
* **recency**: how much of the data's freshness TTL is left, ``1 - age / ttl`` (0 once
  stale; 1 for data without a TTL, which does not age);
* **consistency**: the share of the facts the answer states (scalar fields at any depth,
  :mod:`middleware.facts`) that agree with what the task already holds for the same field
  (the request's input, earlier steps' outputs, the task's context); 1 when nothing overlaps.

``score = (w_a * authority + w_r * recency + w_c * consistency) / (w_a + w_r + w_c)``.

The score an agent writes itself (its ``provenance.reliability_score``) is kept beside
the computed one as ``claimed``, never instead of it, and an agent that names no source
is scored as itself: it does not inherit the previous source's score.

The scorer is pluggable (:class:`ReliabilityScorer`); :class:`WeightedReliabilityScorer`
is the default.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, field_validator

from ._model import Model
from .facts import facts_of, same_value

__all__ = [
    "ReliabilityConfig",
    "ReliabilityParts",
    "ReliabilityScorer",
    "ReliabilityWeights",
    "Testimony",
    "WeightedReliabilityScorer",
]


class ReliabilityWeights(Model):
    """How much each part counts (any non-negative numbers; normalised by their sum)."""

    authority: float = Field(default=0.5, ge=0, le=100)
    recency: float = Field(default=0.25, ge=0, le=100)
    consistency: float = Field(default=0.25, ge=0, le=100)


class ReliabilityConfig(Model):
    """The ``reliability`` section of a definition file."""

    authority: dict[str, float] = Field(
        default_factory=dict,
        description="Source name (or shell pattern such as 'blog:*') -> authority 0..1.",
    )
    default_authority: float = Field(
        default=0.5, ge=0, le=1, description="Authority of a source the table does not list."
    )
    weights: ReliabilityWeights = Field(default_factory=ReliabilityWeights)

    @field_validator("authority")
    @classmethod
    def _range(cls, v: dict[str, float]) -> dict[str, float]:
        for source, value in v.items():
            if not source.strip():
                raise ValueError("a source name is empty")
            if not 0 <= value <= 1:
                raise ValueError(f"{source}: authority {value} is outside 0..1")
        return v


class ReliabilityParts(Model):
    """A computed reliability score and how it was reached (goes into the audit record)."""

    source: str
    score: float = Field(ge=0, le=1)
    authority: float = Field(ge=0, le=1)
    recency: float = Field(ge=0, le=1)
    consistency: float = Field(ge=0, le=1)
    claimed: float | None = Field(default=None, description="The score the agent wrote itself, if any.")
    checked_facts: int = Field(default=0, ge=0, description="Facts compared for consistency.")
    disagreeing: list[str] = Field(
        default_factory=list, description="Fields that disagree (their paths: accidental, order.status)."
    )


class Testimony(Model):
    """What the task already holds: one earlier output (or the request's input)."""

    source: str
    output: Any = None


@runtime_checkable
class ReliabilityScorer(Protocol):
    """Computes an answer's reliability; plug in your own (e.g. one that asks a registry)."""

    def score(
        self,
        source: str,
        *,
        output: Any,
        age_seconds: float,
        freshness_ttl: float | None,
        known: Sequence[Testimony],
        claimed: float | None = None,
    ) -> ReliabilityParts:
        """The score of ``output`` from ``source``, ``age_seconds`` old, given what is ``known``."""
        ...


class WeightedReliabilityScorer:
    """The default scorer: the weighted combination described in the module docstring.

    Args:
        config: Authority table, default authority and weights (default: all defaults).
    """

    def __init__(self, config: ReliabilityConfig | None = None) -> None:
        self.config = config or ReliabilityConfig()
        self._patterns = [(k, v) for k, v in self.config.authority.items() if any(c in k for c in "*?[")]

    def authority(self, source: str) -> float:
        """The authority of ``source``: exact entry, else the first matching pattern, else default."""
        table = self.config.authority
        if source in table:
            return table[source]
        for pattern, value in self._patterns:
            if fnmatch.fnmatchcase(source, pattern):
                return value
        return self.config.default_authority

    def score(
        self,
        source: str,
        *,
        output: Any,
        age_seconds: float,
        freshness_ttl: float | None,
        known: Sequence[Testimony],
        claimed: float | None = None,
    ) -> ReliabilityParts:
        authority = self.authority(source)
        if freshness_ttl is None:
            recency = 1.0
        elif freshness_ttl <= 0:
            recency = 0.0
        else:
            recency = min(1.0, max(0.0, 1.0 - max(age_seconds, 0.0) / freshness_ttl))
        facts = facts_of(output)
        held_facts = [facts_of(t.output, only=set(facts)) for t in known]
        checked = 0
        disagreeing: list[str] = []
        for name, fact in facts.items():
            held = [f[name].value for f in held_facts if name in f]
            if not held:
                continue
            checked += 1
            if not all(same_value(fact.value, h) for h in held):
                disagreeing.append(fact.path.removeprefix("$."))
        consistency = 1.0 if checked == 0 else (checked - len(disagreeing)) / checked
        w = self.config.weights
        total = w.authority + w.recency + w.consistency
        score = (
            (w.authority * authority + w.recency * recency + w.consistency * consistency) / total
            if total > 0
            else authority
        )
        return ReliabilityParts(
            source=source,
            score=round(min(1.0, max(0.0, score)), 4),
            authority=round(authority, 4),
            recency=round(recency, 4),
            consistency=round(consistency, 4),
            claimed=claimed,
            checked_facts=checked,
            disagreeing=disagreeing,
        )
