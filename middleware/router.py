"""The context-aware router: constraints → candidates → filter → rank → explanation.

The router reads a request's constraints (extracted from its text by a pluggable
:class:`ConstraintExtractor`, plus any the client states explicitly), queries the
catalog, keeps only live capabilities whose contract satisfies every constraint
(never an action outside ``can_do``, never one in ``cannot_do``), ranks them by a
weighted score of SLO latency, observed success rate and current load, and returns a
:class:`RoutingDecision` that explains itself. When nothing fits, the decision is a
refusal with each candidate's reason, and no agent runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from ._model import Model
from .catalog import Catalog, CatalogEntry
from .contracts import normalise_label
from .routing_stats import MemoryRoutingStats, RoutingStats

__all__ = [
    "Candidate",
    "ConstraintExtractor",
    "Constraints",
    "Rejection",
    "Router",
    "RoutingDecision",
    "RoutingWeights",
    "RuleBasedExtractor",
]


class Constraints(Model):
    """What a request requires of the agent that handles it."""

    action: str = Field(default="", description="The action the agent must be able to do.")
    tags: list[str] = Field(default_factory=list, description="Tags the agent must carry.")
    max_latency_ms: int = Field(default=0, ge=0, description="0 = no latency requirement.")
    extras: dict[str, Any] = Field(default_factory=dict, description="Other extracted facts.")

    def merged(self, explicit: Mapping[str, Any]) -> Constraints:
        """These constraints overridden/extended by the ones a client stated."""
        data = self.model_dump()
        for key, value in explicit.items():
            if key == "tags":
                data["tags"] = sorted({*data["tags"], *(normalise_label(t) for t in value)})
            elif key in ("action", "max_latency_ms"):
                data[key] = normalise_label(value) if key == "action" else value
            else:
                data["extras"][key] = value
        return Constraints.parse(data, what="constraints")


@runtime_checkable
class ConstraintExtractor(Protocol):
    """Reads a request's text and returns the constraints it implies."""

    async def extract(self, text: str) -> Constraints: ...


#: Default vocabulary: action → phrases (English and Chinese) that imply it.
DEFAULT_ACTIONS: dict[str, list[str]] = {
    "warranty_claim": [
        "replacement",
        "replace",
        "warranty",
        "shattered",
        "broken screen",
        "换新",
        "保修",
        "屏幕碎",
    ],
    "stock_prediction": ["stock price", "predict the stock", "share price", "股价", "预测股票"],
    "compound_interest": ["compound interest", "复利"],
    "amortization_schedule": ["amortization", "mortgage schedule", "还款计划"],
    "order_lookup": ["my order", "order status", "查订单", "订单"],
}
DEFAULT_TAGS: dict[str, list[str]] = {
    "realtime": ["real-time", "realtime", "right now", "实时"],
    "human_review": ["human review", "人工复核", "人工审核"],
}


class RuleBasedExtractor:
    """Keyword vocabularies → constraints. Configurable; the first matching action wins
    by longest phrase, so "predict the stock price" beats a generic word."""

    def __init__(
        self,
        actions: Mapping[str, Sequence[str]] | None = None,
        tags: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._actions = _compile_vocab(actions if actions is not None else DEFAULT_ACTIONS)
        self._tags = _compile_vocab(tags if tags is not None else DEFAULT_TAGS)

    async def extract(self, text: str) -> Constraints:
        best: tuple[int, str] | None = None
        for action, pattern in self._actions:
            for m in pattern.finditer(text):
                length = len(m.group(0))
                if best is None or length > best[0]:
                    best = (length, action)
        tags = sorted({tag for tag, pattern in self._tags if pattern.search(text)})
        return Constraints(action=best[1] if best else "", tags=tags)


def _compile_vocab(vocab: Mapping[str, Sequence[str]]) -> list[tuple[str, re.Pattern[str]]]:
    out = []
    for label, phrases in vocab.items():
        alts = sorted((re.escape(p) for p in phrases), key=len, reverse=True)
        # \b only around ASCII words; CJK phrases have no word boundaries.
        parts = [rf"\b{a}\b" if a.isascii() else a for a in alts]
        out.append((normalise_label(label), re.compile("|".join(parts), re.IGNORECASE)))
    return out


class RoutingWeights(Model):
    """Weights of the ranking score (each term is normalised to 0..1, higher is better)."""

    slo: float = Field(default=0.4, ge=0)
    success: float = Field(default=0.4, ge=0)
    load: float = Field(default=0.2, ge=0)


class Candidate(Model):
    agent: str
    score: float
    slo_latency_ms: int
    success_rate: float
    load: float


class Rejection(Model):
    agent: str
    reason: str
    constraint: str


class RoutingDecision(Model):
    """The router's answer, with its reasons."""

    constraints: Constraints
    chosen: str = ""
    fallbacks: list[str] = Field(default_factory=list)
    candidates: list[Candidate] = Field(default_factory=list, description="Best first.")
    rejected: list[Rejection] = Field(default_factory=list)
    explanation: str = ""

    @property
    def refused(self) -> bool:
        return not self.chosen


class Router:
    """Routes requests to agents through the catalog (see module docstring)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        extractor: ConstraintExtractor | None = None,
        stats: RoutingStats | None = None,
        weights: RoutingWeights | None = None,
    ) -> None:
        self.catalog = catalog
        self.extractor = extractor or RuleBasedExtractor()
        self.stats = stats or MemoryRoutingStats()
        self.weights = weights or RoutingWeights()

    async def constraints_for(self, text: str, explicit: Mapping[str, Any] | None = None) -> Constraints:
        extracted = await self.extractor.extract(text) if text else Constraints()
        return extracted.merged(explicit or {})

    async def decide(self, constraints: Constraints, *, exclude: Sequence[str] = ()) -> RoutingDecision:
        """Filter and rank the catalog for ``constraints``; never raises on 'no fit'."""
        entries = await self.catalog.all()
        rejected: list[Rejection] = []
        fitting: list[CatalogEntry] = []
        for entry in entries:
            reason = self._reject_reason(entry, constraints, exclude)
            if reason is None:
                fitting.append(entry)
            else:
                rejected.append(Rejection(agent=entry.key, constraint=reason[0], reason=reason[1]))
        rejected.sort(key=lambda r: r.constraint != "cannot_do")  # explicit refusals first
        candidates = await self._rank(fitting)
        decision = RoutingDecision(constraints=constraints, candidates=candidates, rejected=rejected)
        if candidates:
            decision.chosen = candidates[0].agent
            decision.fallbacks = [c.agent for c in candidates[1:]]
        decision.explanation = _explain(decision)
        return decision

    def _reject_reason(
        self, entry: CatalogEntry, c: Constraints, exclude: Sequence[str]
    ) -> tuple[str, str] | None:
        contract = entry.contract
        if c.action and c.action in contract.cannot_do:
            return "cannot_do", f"contract says it cannot do {c.action}"
        if c.action and c.action not in contract.can_do:
            return "can_do", f"{c.action} is not in can_do"
        if entry.key in exclude:
            return "exclude", "excluded for this attempt"
        if entry.stale:
            return "liveness", "missed its heartbeats (stale)"
        missing = sorted(set(c.tags) - set(contract.tags))
        if missing:
            return "tags", f"lacks tag(s) {', '.join(missing)}"
        if c.max_latency_ms and contract.slo_latency_ms > c.max_latency_ms:
            return "max_latency_ms", f"SLO {contract.slo_latency_ms} ms exceeds {c.max_latency_ms} ms"
        return None

    async def _rank(self, entries: list[CatalogEntry]) -> list[Candidate]:
        if not entries:
            return []
        worst_slo = max(e.contract.slo_latency_ms for e in entries)
        w = self.weights
        total = (w.slo + w.success + w.load) or 1.0
        out = []
        for entry in entries:
            snap = await self.stats.snapshot(entry.key)
            slo_term = 1.0 - (entry.contract.slo_latency_ms / worst_slo) * 0.5 if worst_slo else 1.0
            load_term = 1.0 / (1.0 + snap.in_flight)
            score = (w.slo * slo_term + w.success * snap.success_rate + w.load * load_term) / total
            out.append(
                Candidate(
                    agent=entry.key,
                    score=round(score, 6),
                    slo_latency_ms=entry.contract.slo_latency_ms,
                    success_rate=round(snap.success_rate, 4),
                    load=float(snap.in_flight),
                )
            )
        out.sort(key=lambda c: (-c.score, c.slo_latency_ms, c.agent))
        return out


def _rejections(d: RoutingDecision, limit: int = 5) -> str:
    """The telling rejections in full; agents that simply do not offer the action as a count."""
    telling = [r for r in d.rejected if r.constraint != "can_do"]
    others = len(d.rejected) - len(telling)
    parts = [f"{r.agent}: {r.reason}" for r in telling[:limit]]
    if len(telling) > limit:
        parts.append(f"{len(telling) - limit} more rejected")
    if others:
        parts.append(f"{others} other(s) do not offer {d.constraints.action}")
    return "; ".join(parts)


def _explain(d: RoutingDecision) -> str:
    want = []
    if d.constraints.action:
        want.append(f"action={d.constraints.action}")
    if d.constraints.tags:
        want.append(f"tags={','.join(d.constraints.tags)}")
    if d.constraints.max_latency_ms:
        want.append(f"max_latency_ms={d.constraints.max_latency_ms}")
    needs = " ".join(want) or "no constraints"
    if d.refused:
        return f"refused ({needs}): {_rejections(d) or 'no capability is registered for it'}"
    best = d.candidates[0]
    text = (
        f"chose {best.agent} for {needs}: score {best.score:.3f} (SLO {best.slo_latency_ms} ms, "
        f"success {best.success_rate:.0%}, load {best.load:g})"
    )
    if d.fallbacks:
        text += f"; fallbacks {', '.join(d.fallbacks)}"
    if d.rejected:
        text += "; " + _rejections(d)
    return text
