"""Detectors: typed failures found in an agent's *successful* answer.

After an agent answers and its output passes the contract's schema, the pipeline
hands the result to :class:`Detectors`, which runs, in this order:

1. **POLICY_VIOLATION** – deny-listed terms, forbidden patterns, and an optional
   pluggable :class:`PolicyClassifier`. A violating output is blocked: it is not
   stored, not audited in clear (only its SHA-256), and never reaches the user or
   the next agent.
2. **INTENT_DRIFT** – the result's intention trace is deeper than 5, has a cycle, or does
   not start at the task's goal (seed 003 §5.3: a trace must lead back to the user's goal).
3. **STALE_DATA** – the result is older than its ``freshness_ttl``.
4. **DATA_INCONSISTENCY** – the output states a fact (a scalar field at any depth,
   :mod:`middleware.facts`) that the request, the task's context or an earlier step
   stated with another value; the conflict names the field and its path in each
   source, and carries every value with its provenance.
5. **CONTEXT_AMBIGUITY** – the output hedges ("可能", "大概", "probably", "maybe" …,
   configurable) *and* the confidence is below 0.7.

The first finding wins. Users add detectors of their own (anything with an async
``inspect(result) -> Detection | None``) after the built-ins.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import Field, field_validator

from ._model import Model
from .facts import Fact, facts_of, same_value
from .failures import FailureType
from .goals import text_of
from .smf import Provenance, SMFMessage, utcnow

__all__ = [
    "DEFAULT_HEDGING_WORDS",
    "AgentResult",
    "Detection",
    "Detector",
    "DetectorConfig",
    "Detectors",
    "PolicyClassifier",
    "PolicyFinding",
    "PolicyRules",
    "SourcedOutput",
]

DEFAULT_HEDGING_WORDS = [
    "可能",
    "大概",
    "也许",
    "或许",
    "好像",
    "不确定",
    "probably",
    "maybe",
    "perhaps",
    "possibly",
    "might",
    "not sure",
    "i think",
    "i guess",
]


class PolicyRules(Model):
    """Policy rules on outputs."""

    deny_terms: list[str] = Field(
        default_factory=list, description="Terms that must never appear (case-insensitive)."
    )
    deny_patterns: list[str] = Field(default_factory=list, description="Regexes that must never match.")

    @field_validator("deny_patterns")
    @classmethod
    def _compile(cls, v: list[str]) -> list[str]:
        for i, pattern in enumerate(v):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"[{i}] regex does not compile: {exc}") from None
        return v


class DetectorConfig(Model):
    """What the built-in detectors look for."""

    hedging_words: list[str] = Field(default_factory=lambda: list(DEFAULT_HEDGING_WORDS))
    ambiguity_confidence: float = Field(
        default=0.7, ge=0, le=1, description="Hedging below this confidence is ambiguous."
    )
    policy: PolicyRules = Field(default_factory=PolicyRules)
    fact_keys: list[str] | None = Field(
        default=None,
        description="Fields compared across sources; None = every scalar field, at any depth (a "
        "contract's own ``facts`` narrow its answers further).",
    )
    ignore_fact_keys: list[str] = Field(default_factory=list, description="Fields never compared.")
    check_freshness: bool = True
    check_intent: bool = True
    check_consistency: bool = True


class PolicyFinding(Model):
    """A classifier's verdict that an output breaks a rule."""

    rule: str = Field(min_length=1)
    reason: str = ""


@runtime_checkable
class PolicyClassifier(Protocol):
    """Pluggable policy check (e.g. a moderation model): text in, a finding or None out."""

    def __call__(self, text: str) -> PolicyFinding | Awaitable[PolicyFinding | None] | None: ...


@dataclass(frozen=True)
class SourcedOutput:
    """An earlier output (or the request's input) and where it came from."""

    step: str
    agent: str
    output: Any
    provenance: Provenance


@dataclass(frozen=True)
class AgentResult:
    """What a detector inspects: one agent's answer, in context."""

    task_id: str
    step: str
    agent: str
    output: Any
    message: SMFMessage
    earlier: Sequence[SourcedOutput] = field(default_factory=tuple)
    facts: Sequence[str] = field(default_factory=tuple)
    """The fields the agent's contract declares as facts (empty: every field)."""
    goal_id: str = ""
    """The task's goal (empty: none): the root every answer's intention trace must start at."""


class Detection(Model):
    """A failure found in a result."""

    type: FailureType
    detail: str
    context: dict[str, Any] = Field(default_factory=dict)
    hold_output: bool = Field(default=False, description="Keep the output aside so a resume may accept it.")


@runtime_checkable
class Detector(Protocol):
    async def inspect(self, result: AgentResult) -> Detection | None: ...


def _phrase_pattern(phrases: Sequence[str]) -> re.Pattern[str] | None:
    if not phrases:
        return None
    alts = sorted((re.escape(p.strip()) for p in phrases if p.strip()), key=len, reverse=True)
    parts = [rf"\b{a}\b" if a.isascii() else a for a in alts]
    return re.compile("|".join(parts), re.IGNORECASE) if parts else None


class Detectors:
    """The built-in detectors, then ``extra`` ones, in order; the first finding wins.

    Args:
        config: Hedging words, thresholds, policy rules, compared facts.
        classifier: Optional pluggable policy classifier.
        extra: More detectors, run after the built-ins.
        clock: Current time (for freshness; injected in tests).
    """

    def __init__(
        self,
        config: DetectorConfig | None = None,
        *,
        classifier: PolicyClassifier | None = None,
        extra: Sequence[Detector] = (),
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.config = config or DetectorConfig()
        self._classifier = classifier
        self._extra = list(extra)
        self._clock = clock
        self._hedges = _phrase_pattern(self.config.hedging_words)
        self._deny = _phrase_pattern(self.config.policy.deny_terms)
        self._patterns = [re.compile(p) for p in self.config.policy.deny_patterns]

    async def inspect(self, result: AgentResult) -> Detection | None:
        text = text_of(result.output)
        found = await self._policy(result, text)
        if found is not None:
            return found
        for check in (self._intent, self._stale, self._consistency):
            found = check(result)
            if found is not None:
                return found
        found = self._ambiguity(result, text)
        if found is not None:
            return found
        for detector in self._extra:
            found = await detector.inspect(result)
            if found is not None:
                return found
        return None

    async def _policy(self, result: AgentResult, text: str) -> Detection | None:
        finding: PolicyFinding | None = None
        if self._deny is not None and (m := self._deny.search(text)):
            finding = PolicyFinding(rule=f"deny_terms:{m.group(0).lower()}", reason="deny-listed term")
        if finding is None:
            for pattern in self._patterns:
                if pattern.search(text):
                    finding = PolicyFinding(
                        rule=f"deny_patterns:{pattern.pattern}", reason="forbidden pattern"
                    )
                    break
        if finding is None and self._classifier is not None:
            verdict = self._classifier(text)
            finding = await verdict if inspect.isawaitable(verdict) else verdict
        if finding is None:
            return None
        digest = hashlib.sha256(text.encode()).hexdigest()
        return Detection(
            type=FailureType.POLICY_VIOLATION,
            detail=f"output of {result.agent} breaks policy rule {finding.rule}"
            + (f" ({finding.reason})" if finding.reason else ""),
            context={"rule": finding.rule, "output_sha256": digest},
        )

    def _intent(self, result: AgentResult) -> Detection | None:
        if not self.config.check_intent:
            return None
        trace = result.message.metadata.intention_trace
        why = result.message.intention_drift()
        if why is not None:
            return Detection(
                type=FailureType.INTENT_DRIFT,
                detail=f"{result.agent}: {why}",
                context={"intention_trace": trace},
            )
        if result.goal_id and trace[0] != result.goal_id:
            return Detection(
                type=FailureType.INTENT_DRIFT,
                detail=f"{result.agent}: its intention trace starts at {trace[0]}, not at the task's goal "
                f"{result.goal_id}",
                context={"intention_trace": trace, "expected_root": result.goal_id},
                hold_output=True,
            )
        return None

    def _stale(self, result: AgentResult) -> Detection | None:
        if not self.config.check_freshness:
            return None
        now = self._clock()
        if not result.message.is_stale(now):
            return None
        age = (now - result.message.created_at).total_seconds()
        ttl = result.message.metadata.freshness_ttl or 0.0  # stale implies a TTL
        return Detection(
            type=FailureType.STALE_DATA,
            detail=f"result of {result.agent} is {age:.0f} s old, older than its freshness TTL of {ttl:g} s",
            context={"age_s": round(age, 3), "freshness_ttl": ttl},
        )

    def _consistency(self, result: AgentResult) -> Detection | None:
        if not self.config.check_consistency or not isinstance(result.output, (dict, list)):
            return None
        only = set(self.config.fact_keys) if self.config.fact_keys is not None else None
        if result.facts:
            only = set(result.facts) if only is None else only & set(result.facts)
        ignore = set(self.config.ignore_fact_keys)
        mine = facts_of(result.output, only=only, ignore=ignore)
        if not mine:
            return None
        known = [(e, facts_of(e.output, only=set(mine), ignore=ignore)) for e in result.earlier]
        for name, fact in mine.items():
            values: list[dict[str, Any]] = []
            for earlier, theirs in known:
                held = theirs.get(name)
                if held is None or same_value(held.value, fact.value):
                    continue
                if any(same_value(v["value"], held.value) for v in values):
                    continue  # one option per value: its first source
                values.append(_sourced(held, earlier.provenance, earlier.step, earlier.agent))
            if not values:
                continue
            source = result.message.metadata.provenance
            values.append(_sourced(fact, source, result.step, result.agent))
            said = ", ".join(
                f"{v['source']} says {_show(v['value'])} at {v['path']} ({_where(v)})" for v in values[:-1]
            )
            return Detection(
                type=FailureType.DATA_INCONSISTENCY,
                detail=f"{name} ({fact.path} of {result.agent}): {said}; "
                f"{source.source} says {_show(fact.value)}",
                context={
                    "conflict": {"fact": name, "path": fact.path, "keys": list(fact.keys), "values": values}
                },
                hold_output=True,
            )
        return None

    def _ambiguity(self, result: AgentResult, text: str) -> Detection | None:
        confidence = result.message.metadata.confidence_score
        if self._hedges is None or confidence is None or confidence >= self.config.ambiguity_confidence:
            return None
        m = self._hedges.search(text)
        if m is None:
            return None
        question, options = _clarification(result, text, confidence)
        return Detection(
            type=FailureType.CONTEXT_AMBIGUITY,
            detail=f"{result.agent} hedges (“{m.group(0)}”) with confidence {confidence:.2f} "
            f"< {self.config.ambiguity_confidence:g}",
            context={"hedge": m.group(0), "confidence": confidence, "question": question, "options": options},
            hold_output=True,
        )


def _clarification(result: AgentResult, text: str, confidence: float) -> tuple[str, list[dict[str, Any]]]:
    """A question with options: the agent's own candidates when it offers some, else accept/retry."""
    output = result.output if isinstance(result.output, dict) else {}
    offered = output.get("options") or output.get("candidates")
    if isinstance(offered, list) and len(offered) >= 2:
        options = [
            {
                "id": f"option_{i}",
                "label": str(o.get("label", o) if isinstance(o, dict) else o),
                "value": o,
            }
            for i, o in enumerate(offered, start=1)
        ]
        question = str(output.get("question") or "Which of these do you mean?")
        return question, options
    snippet = text if len(text) <= 160 else text[:157] + "..."
    return (
        f"The answer is uncertain (confidence {confidence:.2f}): “{snippet}”. Is this what you meant?",
        [
            {"id": "accept", "label": "Yes, use this answer"},
            {"id": "retry", "label": "No, ask again with my clarification"},
        ],
    )


def _sourced(fact: Fact, provenance: Provenance, step: str, agent: str) -> dict[str, Any]:
    return {
        "value": fact.value,
        "path": fact.path,
        "source": provenance.source,
        "reliability_score": provenance.reliability_score,
        "step": step,
        "agent": agent,
    }


def _where(value: dict[str, Any]) -> str:
    """Which part of the task a value came from: the request, the context, or a step."""
    step = value["step"]
    return step if step in ("request", "context") else f"step {step}"


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
