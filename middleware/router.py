"""The context-aware router: constraints → candidates → filter → rank → explanation.

The router reads a request's constraints (extracted from its text by a pluggable
:class:`~middleware.constraints.ConstraintExtractor`, plus any the client states
explicitly), asks the catalog for the candidates of the action (an index lookup, never a
scan), keeps only live capabilities whose contract satisfies every constraint (never an
action outside ``can_do``, never one in ``cannot_do``), ranks them by a weighted score of
SLO latency, observed success rate and current load, and returns a
:class:`RoutingDecision` that explains itself. When nothing fits, the decision is a
refusal with each candidate's reason, and no agent runs.

Score (each term in 0..1, higher is better; see :class:`RoutingWeights`)::

    slo_term     = slo_reference_ms / (slo_reference_ms + slo_latency_ms)
    success_term = observed success rate over the last dispatches (1.0 with no history)
    load_term    = 1 / (1 + in_flight / load_reference)
    score        = (w_slo·slo_term + w_success·success_term + w_load·load_term)
                   / (w_slo + w_success + w_load)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, Field

from ._model import Model
from .catalog import Catalog, CatalogEntry
from .constraints import ConstraintExtractor, Constraints, RuleBasedExtractor
from .errors import NotFound
from .routing_stats import MemoryRoutingStats, RoutingStats
from .versions import Version, VersionRange

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


class RoutingWeights(Model):
    """Weights of the ranking score (see the module docstring for the formula)."""

    slo: float = Field(default=0.4, ge=0, description="Weight of the SLO latency term.")
    success: float = Field(default=0.4, ge=0, description="Weight of the observed success rate.")
    load: float = Field(default=0.2, ge=0, description="Weight of the current load term.")
    slo_reference_ms: float = Field(
        default=1000.0, gt=0, description="An SLO of this many ms scores 0.5 on the SLO term."
    )
    load_reference: float = Field(
        default=1.0, gt=0, description="This many calls in flight score 0.5 on the load term."
    )


class Candidate(Model):
    """A capability that satisfies every constraint, with its score and what it is made of."""

    agent: str
    score: float
    slo_latency_ms: int
    success_rate: float
    load: float
    samples: int = 0


class Rejection(Model):
    """Why one considered capability was not a candidate."""

    agent: str
    constraint: str = Field(description="The first constraint it failed (cannot_do first).")
    reason: str = Field(description="Every failed constraint, explained.")


class RoutingDecision(Model):
    """The router's answer, with its reasons.

    Made by the router (validated when built) and amended only by core code checked by mypy
    (its explanation, a policy's note, the fallbacks of a decision taken anyway): assignments
    are not validated again.
    """

    model_config = ConfigDict(validate_assignment=False)

    constraints: Constraints
    chosen: str = ""
    fallbacks: list[str] = Field(default_factory=list, description="Next best, in order.")
    candidates: list[Candidate] = Field(default_factory=list, description="Best first.")
    rejected: list[Rejection] = Field(default_factory=list, description="cannot_do first; bounded.")
    rejected_omitted: int = Field(default=0, description="Rejections beyond the reported ones.")
    considered: int = Field(default=0, description="Capabilities that mention the action.")
    explanation: str = ""

    @property
    def refused(self) -> bool:
        return not self.chosen


Check = Callable[[CatalogEntry, Constraints], "str | None"]


def _cannot_do(e: CatalogEntry, c: Constraints) -> str | None:
    return f"contract says it cannot do {c.action}" if c.action in e.contract.cannot_do else None


def _can_do(e: CatalogEntry, c: Constraints) -> str | None:
    if c.action in e.contract.can_do or c.action in e.contract.cannot_do:  # cannot_do says it all
        return None
    return f"{c.action} is not in can_do"


def _liveness(e: CatalogEntry, c: Constraints) -> str | None:
    return "missed its heartbeats (stale)" if e.stale else None


def _name(e: CatalogEntry, c: Constraints) -> str | None:
    return None if not c.name or e.contract.name == c.name else f"is not {c.name}"


def _version(e: CatalogEntry, c: Constraints) -> str | None:
    if not c.version_range:
        return None
    if VersionRange.parse(c.version_range).contains(Version.parse(e.contract.version)):
        return None
    return f"version {e.contract.version} is outside {c.version_range}"


def _tags(e: CatalogEntry, c: Constraints) -> str | None:
    missing = [t for t in c.tags if t not in e.contract.tags]
    return f"lacks tag(s) {', '.join(missing)}" if missing else None


def _latency(e: CatalogEntry, c: Constraints) -> str | None:
    slo = e.contract.slo_latency_ms
    if c.max_latency_ms and slo > c.max_latency_ms:
        return f"SLO {slo} ms exceeds {c.max_latency_ms} ms"
    return None


def _region(e: CatalogEntry, c: Constraints) -> str | None:
    regions = e.contract.regions
    if not c.region or not regions or c.region in regions:
        return None
    return f"serves {', '.join(regions)}, not {c.region}"


def _residency(e: CatalogEntry, c: Constraints) -> str | None:
    if not c.data_residency:
        return None
    where = e.contract.data_residency
    if not where:
        return f"declares no data residency (data must stay in {c.data_residency})"
    outside = [r for r in where if r != c.data_residency]
    return f"keeps data in {', '.join(outside)} (must stay in {c.data_residency})" if outside else None


def _freshness(e: CatalogEntry, c: Constraints) -> str | None:
    if c.freshness_tolerance_ms is None:
        return None
    delay = e.contract.max_data_delay_ms
    if delay is None:
        return f"declares no max_data_delay_ms (tolerance {c.freshness_tolerance_ms} ms)"
    if delay > c.freshness_tolerance_ms:
        return f"data delay up to {delay} ms exceeds the tolerated {c.freshness_tolerance_ms} ms"
    return None


def _listed(field: str, noun: str) -> Check:
    def check(e: CatalogEntry, c: Constraints) -> str | None:
        wanted = getattr(c, field)
        offered: list[str] = getattr(e.contract, noun)
        if not wanted or not offered or wanted in offered:
            return None
        return f"offers {noun} {', '.join(offered)}, not {wanted}"

    return check


def _review(e: CatalogEntry, c: Constraints) -> str | None:
    if c.needs_human_review and not e.contract.human_review:
        return "its results get no human review"
    return None


#: Every filtering rule, in the order a rejection reports them (name = constraint field).
#: The first three always apply; the others only when their constraint is set.
CHECKS: list[tuple[str, Check]] = [
    ("cannot_do", _cannot_do),
    ("can_do", _can_do),
    ("liveness", _liveness),
    ("name", _name),
    ("version_range", _version),
    ("tags", _tags),
    ("max_latency_ms", _latency),
    ("region", _region),
    ("data_residency", _residency),
    ("freshness_tolerance_ms", _freshness),
    ("time_window", _listed("time_window", "time_windows")),
    ("metric", _listed("metric", "metrics")),
    ("granularity", _listed("granularity", "granularities")),
    ("needs_human_review", _review),
]


def _failures(entry: CatalogEntry, c: Constraints, checks: list[tuple[str, Check]]) -> list[tuple[str, str]]:
    return [(name, why) for name, check in checks if (why := check(entry, c)) is not None]


def _active_checks(c: Constraints) -> list[tuple[str, Check]]:
    """The optional rules that can fail for ``c`` (an unset constraint never rejects anyone);
    the first three of :data:`CHECKS` are checked apart, for every candidate."""
    active: list[tuple[str, Check]] = []
    for name, check in CHECKS[3:]:
        value = getattr(c, name)
        if value is not None and value != "" and value != [] and value is not False and value != 0:
            active.append((name, check))
    return active


class Router:
    """Routes requests to agents through the catalog (see module docstring).

    Args:
        catalog: Where the candidates come from.
        extractor: Reads constraints from text (default: :class:`RuleBasedExtractor`).
        stats: Live success rates and load (default: in memory; the pipeline feeds it).
        weights: The ranking weights.
        max_rejections: How many rejections a decision reports (the rest are counted).
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        extractor: ConstraintExtractor | None = None,
        stats: RoutingStats | None = None,
        weights: RoutingWeights | None = None,
        max_rejections: int = 50,
    ) -> None:
        self.catalog = catalog
        self.extractor = extractor or RuleBasedExtractor()
        self.stats = stats or MemoryRoutingStats()
        self.weights = weights or RoutingWeights()
        self.max_rejections = max_rejections

    async def constraints_for(self, text: str, explicit: Mapping[str, Any] | None = None) -> Constraints:
        """The constraints of ``text`` (via the extractor), overridden by ``explicit`` ones.

        When ``explicit`` states the action, the explicit constraints are the whole of them
        and the text is not read: a client (or a step) that names the action has said what it
        requires, and the extractor (rules, or a model call) only guesses it. Without a stated
        action, the extracted constraints are overridden by the explicit ones (tags united).
        """
        if explicit and explicit.get("action"):
            return Constraints.stated(explicit)
        extracted = await self.extractor.extract(text) if text else Constraints()
        return extracted.merged(explicit or {})

    async def decide(
        self, constraints: Constraints, *, exclude: Sequence[str] = (), tenant: str = ""
    ) -> RoutingDecision:
        """Filter and rank the candidates for ``constraints``; never raises on 'no fit'.

        Args:
            constraints: What the agent must satisfy; without an action nothing can be
                checked against ``can_do``, so the request is refused.
            exclude: Keys (``name@version``) not to choose this time.
            tenant: The task's tenant: only its own contracts and those shared with it are
                considered; another tenant's are not even named among the rejections.
        """
        if not constraints.action:
            decision = RoutingDecision(
                constraints=constraints,
                rejected=[
                    Rejection(
                        agent="",
                        constraint="action",
                        reason="no action could be read from the request; state one explicitly",
                    )
                ],
            )
            decision.explanation = _explain(decision)
            return decision
        entries = [
            e for e in await self.catalog.candidates(constraints.action) if e.contract.routable_for(tenant)
        ]
        checks = _active_checks(constraints)
        rejected: list[dict[str, str]] = []
        fitting: list[CatalogEntry] = []
        action = constraints.action
        for entry in entries:
            contract = entry.contract
            if action in contract.can_do and action not in contract.cannot_do and not entry.stale:
                failed = _failures(entry, constraints, checks)  # common case: the optional rules only
            else:
                failed = _failures(entry, constraints, CHECKS[:3]) + _failures(entry, constraints, checks)
            if exclude and entry.key in exclude:
                failed.append(("exclude", "excluded for this attempt"))
            if failed:
                reason = "; ".join(why for _, why in failed) if len(failed) > 1 else failed[0][1]
                rejected.append({"agent": entry.key, "constraint": failed[0][0], "reason": reason})
            else:
                fitting.append(entry)
        rejected.sort(key=lambda r: r["constraint"] != "cannot_do")  # explicit refusals first (stable)
        candidates = await self._rank(fitting)
        # one validation of plain dicts (in pydantic-core) beats a model per candidate
        decision = RoutingDecision.model_validate(
            {
                "constraints": constraints,
                "chosen": candidates[0]["agent"] if candidates else "",
                "fallbacks": [c["agent"] for c in candidates[1:]],
                "candidates": candidates,
                "rejected": rejected[: self.max_rejections],
                "rejected_omitted": max(0, len(rejected) - self.max_rejections),
                "considered": len(entries),
            }
        )
        decision.explanation = _explain(decision)
        return decision

    def restrict(self, decision: RoutingDecision, refused: Mapping[str, tuple[str, str]]) -> RoutingDecision:
        """``decision`` without the agents in ``refused`` (key -> (constraint, reason)), each listed
        among the rejections, explained again; refused when no candidate is left.

        For what the catalog cannot say about an agent but the task can (a goal's intention
        scope): the pipeline applies it after :meth:`decide`, before anything is dispatched.
        """
        if not refused:
            return decision
        order = [k for k in (decision.chosen, *decision.fallbacks) if k and k not in refused]
        extra = [Rejection(agent=k, constraint=c, reason=why) for k, (c, why) in refused.items()]
        restricted = decision.model_copy(
            update={
                "chosen": order[0] if order else "",
                "fallbacks": order[1:],
                "candidates": [c for c in decision.candidates if c.agent not in refused],
                "rejected": (extra + decision.rejected)[: self.max_rejections],
                "rejected_omitted": decision.rejected_omitted
                + max(0, len(extra) + len(decision.rejected) - self.max_rejections),
            }
        )
        restricted.explanation = _explain(restricted)
        return restricted

    async def why_not(self, key: str, constraints: Constraints) -> str:
        """Why ``key`` (``name@version``) cannot take a request with ``constraints``; ``""`` if it can.

        Unlike :meth:`decide`, which only considers the agents that mention the action,
        this checks one named agent against every rule (e.g. to explain a human's choice).
        """
        try:
            entry = await self.catalog.get(key)
        except NotFound:
            return "not registered"
        checks = (
            CHECKS[:3] + _active_checks(constraints) if constraints.action else _active_checks(constraints)
        )
        return "; ".join(why for _, why in _failures(entry, constraints, checks))

    async def _rank(self, entries: list[CatalogEntry]) -> list[dict[str, Any]]:
        if not entries:
            return []
        w = self.weights
        total = (w.slo + w.success + w.load) or 1.0
        stats = await self.stats.snapshots([e.key for e in entries])
        out: list[dict[str, Any]] = []
        for entry in entries:
            snap = stats[entry.key]
            slo = entry.contract.slo_latency_ms
            slo_term = w.slo_reference_ms / (w.slo_reference_ms + slo)
            load_term = 1.0 / (1.0 + snap.in_flight / w.load_reference)
            score = (w.slo * slo_term + w.success * snap.success_rate + w.load * load_term) / total
            out.append(
                {
                    "agent": entry.key,
                    "score": round(score, 6),
                    "slo_latency_ms": slo,
                    "success_rate": round(snap.success_rate, 4),
                    "load": float(snap.in_flight),
                    "samples": snap.samples,
                }
            )
        out.sort(key=lambda c: (-c["score"], c["slo_latency_ms"], c["agent"]))
        return out


def _rejections(d: RoutingDecision, limit: int = 5) -> str:
    """The telling rejections in full; agents that simply do not offer the action as a count."""
    telling = [r for r in d.rejected if r.constraint != "can_do"]
    others = len(d.rejected) - len(telling)
    parts = [f"{r.agent}: {r.reason}" if r.agent else r.reason for r in telling[:limit]]
    more = len(telling) - limit + d.rejected_omitted
    if more > 0:
        parts.append(f"{more} more rejected")
    if others:
        parts.append(f"{others} other(s) do not offer {d.constraints.action}")
    return "; ".join(parts)


def _explain(d: RoutingDecision) -> str:
    needs = d.constraints.described()
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
