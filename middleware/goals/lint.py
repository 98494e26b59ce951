"""``agency goal lint``: find what would make a goal untrustworthy before it goes live.

Errors (the goal would be refused, or cannot be checked by a machine):
``not-machine-checkable`` (a sentence such as "ensure the user is satisfied"),
``unknown-kind``, ``bad-regex``, ``invalid-step``, ``invalid-field``,
``duplicate-id``, ``unreadable``.

Warnings: ``timeout-beyond-sla`` (the goal waits longer than a targeted capability's
SLA), ``unknown-target`` (a target with no SLA given and none in the catalog),
``short-timeout-high-criticality`` (high criticality with a timeout under 60 s),
``manual-step`` (a person must confirm; the goal can only end pending until then),
``regex-backtracking`` (nested quantifiers such as ``(a+)+``: catastrophic backtracking).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..contracts import SEMVER_RE, CapabilityContract
from ..errors import InvalidInput, Problem
from ..findings import Finding
from ..plans import check_plan
from .model import GoalAssertion

__all__ = ["HIGH_CRITICALITY_MIN_TIMEOUT", "catalog_from", "goals_in", "lint_goal", "lint_goals"]

#: A high-criticality goal with a shorter timeout is flagged (seed section 5.3).
HIGH_CRITICALITY_MIN_TIMEOUT = 60

# A group holding a quantifier, itself quantified: (a+)+, (\w*x)* (a heuristic, not a proof).
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")
_STEP_FIELD = re.compile(r"^(?:stages\[\d+\]\.)?verification_steps\[\d+\]")


def _classify(field: str, reason: str) -> str:
    if not _STEP_FIELD.match(field):
        return "invalid-field"
    if "machine check" in reason or "cannot turn" in reason:
        return "not-machine-checkable"
    if "does not match any of the expected tags" in reason or "Unable to extract tag" in reason:
        return "unknown-kind"
    if "regex does not compile" in reason:
        return "bad-regex"
    return "invalid-step"


def _versionless(name: str) -> str:
    base, _, version = name.partition("@")
    return base if version and SEMVER_RE.match(version) else name


def _sla_of(
    name: str, given: float | None, catalog: Mapping[str, CapabilityContract] | None
) -> tuple[float | None, str]:
    """The SLA (seconds) of a target and where it comes from."""
    if given is not None:
        return given, "declared"
    if catalog:
        if name in catalog:
            return catalog[name].slo_latency_ms / 1000, f"catalog SLO of {catalog[name].key}"
        matches = [c for c in catalog.values() if c.name == _versionless(name)]
        if matches:
            slowest = max(matches, key=lambda c: c.slo_latency_ms)
            return slowest.slo_latency_ms / 1000, f"catalog SLO of {slowest.key}"
    return None, ""


def lint_goal(
    data: Any,
    *,
    file: str = "",
    item: str = "",
    catalog: Mapping[str, CapabilityContract] | None = None,
) -> list[Finding]:
    """Every finding for one goal (a mapping as written in a file, or a GoalAssertion).

    Args:
        data: The goal.
        file: The file it came from (for the findings' location).
        item: How to name the goal when it has no usable id (e.g. ``#2``).
        catalog: Contracts by ``name@version`` (and by name) for SLA checks.
    """
    raw = data.model_dump() if isinstance(data, GoalAssertion) else data
    goal_id = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else ""
    where = {"file": file, "item": goal_id or item}
    if not isinstance(raw, dict):
        return [
            Finding("error", "invalid-field", f"a goal must be a mapping, got {type(raw).__name__}", **where)
        ]
    findings: list[Finding] = []
    try:
        goal: GoalAssertion | None = GoalAssertion.parse(raw, what="goal assertion")
    except InvalidInput as exc:
        goal = None
        for p in exc.problems:
            findings.append(Finding("error", _classify(p.field, p.reason), p.reason, field=p.field, **where))
    findings.extend(_semantic(goal, raw, catalog, where))
    if not findings:
        findings.append(Finding("ok", "ok", "goal is valid and machine-checkable", **where))
    return findings


def _semantic(
    goal: GoalAssertion | None,
    raw: dict[str, Any],
    catalog: Mapping[str, CapabilityContract] | None,
    where: dict[str, str],
) -> list[Finding]:
    """Warnings; from the raw mapping when the goal did not validate, so they still show."""
    out: list[Finding] = []
    timeout = goal.timeout_seconds if goal else raw.get("timeout_seconds", 300)
    criticality = goal.criticality if goal else raw.get("criticality", "medium")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
        return out
    if criticality == "high" and timeout < HIGH_CRITICALITY_MIN_TIMEOUT:
        out.append(
            Finding(
                "warning",
                "short-timeout-high-criticality",
                f"high criticality with timeout_seconds={timeout:g} (recommended min: "
                f"{HIGH_CRITICALITY_MIN_TIMEOUT} s for high-criticality goals)",
                field="timeout_seconds",
                **where,
            )
        )
    targets: list[tuple[str, float | None]] = []
    if goal:
        targets = [(t.name, t.sla_seconds) for t in goal.target_capabilities]
    elif isinstance(raw.get("target_capabilities"), list):
        for t in raw["target_capabilities"]:
            if isinstance(t, str):
                targets.append((t, None))
            elif isinstance(t, dict) and isinstance(t.get("name"), str):
                sla = t.get("sla_seconds")
                targets.append(
                    (t["name"], sla if isinstance(sla, (int, float)) and not isinstance(sla, bool) else None)
                )
    for i, (name, given) in enumerate(targets):
        sla, source = _sla_of(name, given, catalog)
        field = f"target_capabilities[{i}]"
        if sla is None:
            out.append(
                Finding(
                    "warning",
                    "unknown-target",
                    f"target {name!r} has no sla_seconds and is not in the catalog; "
                    "its SLA cannot be checked",
                    field=field,
                    **where,
                )
            )
        elif timeout > sla:
            out.append(
                Finding(
                    "warning",
                    "timeout-beyond-sla",
                    f"timeout_seconds={timeout:g} is beyond the SLA of {name} ({sla:g} s, {source})",
                    field="timeout_seconds",
                    **where,
                )
            )
    if goal and goal.plan is not None and catalog:  # the plan against the given catalog
        contracts = {c.key: c for c in catalog.values()}.values()
        for p in check_plan(goal.plan, contracts, require_contracts=False):
            out.append(Finding("error", "plan-contract", p.reason, field=p.field, **where))
    if goal:
        for field, step in _all_steps(goal):
            if step.kind == "regex" and not step.literal and _NESTED_QUANTIFIER.search(step.pattern):
                out.append(
                    Finding(
                        "warning",
                        "regex-backtracking",
                        f"pattern {step.pattern!r} nests quantifiers: it runs in linear time here "
                        "(RE2), but a backtracking engine elsewhere (a copy of this check in another "
                        "tool) could take very long on a long output",
                        field=f"{field}.pattern",
                        **where,
                    )
                )
            if step.kind == "manual":
                out.append(
                    Finding(
                        "warning",
                        "manual-step",
                        f"needs a person: {step.description!r}; the goal ends pending until someone confirms",
                        field=field,
                        **where,
                    )
                )
    return out


def _all_steps(goal: GoalAssertion) -> Iterable[tuple[str, Any]]:
    for j, stage in enumerate(goal.stages):
        for i, step in enumerate(stage.verification_steps):
            yield f"stages[{j}].verification_steps[{i}]", step
    for i, step in enumerate(goal.verification_steps):
        yield f"verification_steps[{i}]", step


def goals_in(document: Any) -> list[Any] | None:
    """The goals a file holds: one goal, a list of goals, or ``{"goals": [...]}``."""
    if isinstance(document, list):
        return document
    if isinstance(document, dict):
        if isinstance(document.get("goals"), list) and "id" not in document:
            goals: list[Any] = document["goals"]
            return goals
        return [document]
    return None


def lint_goals(
    documents: Sequence[tuple[str, Any]], *, catalog: Mapping[str, CapabilityContract] | None = None
) -> list[Finding]:
    """Lint every goal of every ``(file, parsed document)``; ids must be unique across them."""
    findings: list[Finding] = []
    seen: dict[str, str] = {}
    for file, document in documents:
        goals = goals_in(document)
        if goals is None:
            findings.append(
                Finding(
                    "error", "invalid-field", "expected a goal, a list of goals or {goals: [...]}", file=file
                )
            )
            continue
        if not goals:
            findings.append(Finding("warning", "empty", "the file holds no goals", file=file))
        for index, goal in enumerate(goals):
            findings.extend(lint_goal(goal, file=file, item=f"#{index}", catalog=catalog))
            goal_id = goal.get("id") if isinstance(goal, dict) else None
            if isinstance(goal_id, str):
                if goal_id in seen:
                    findings.append(
                        Finding(
                            "error",
                            "duplicate-id",
                            f"goal id {goal_id} is also defined in {seen[goal_id]}",
                            file=file,
                            item=goal_id,
                            field="id",
                        )
                    )
                else:
                    seen[goal_id] = f"{file}#{index}"
    return findings


def catalog_from(document: Any) -> dict[str, CapabilityContract]:
    """Contracts from a catalog file, by key.

    The file holds a list of contracts, ``{"contracts": [...]}``, or is an agency
    definition file (``agents: [{contract: ...}]``).

    Raises:
        InvalidInput: the file does not hold valid contracts (every problem named).
    """
    items = document.get("contracts") if isinstance(document, dict) else document
    if isinstance(document, dict) and items is None and isinstance(document.get("agents"), list):
        items = [a.get("contract") if isinstance(a, dict) else a for a in document["agents"]]
    if not isinstance(items, list):
        raise InvalidInput.single("contracts", "a catalog file holds a list of contracts", what="catalog")
    out: dict[str, CapabilityContract] = {}
    for i, item in enumerate(items):
        try:
            contract = CapabilityContract.parse(item, what=f"contract #{i}")
        except InvalidInput as exc:
            raise InvalidInput(
                [Problem(f"contracts[{i}].{p.field}", p.reason) for p in exc.problems], what="catalog"
            ) from None
        out[contract.key] = contract
    return out
