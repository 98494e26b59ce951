"""The Cedar policy engine (``cedarpy``, the ``cedar`` extra).

Requests become Cedar requests over these entity types (no namespace):

=========================  ================================================================
``Caller::"<name>"``       the client (attributes ``roles``: Set<String>, ``tenant``, ``user``)
``Person::"<name>"``       a person approving in the console (``roles``)
``Action::"route"``        also ``"dispatch"``, ``"approve"``, ``"export"``
``Agent::"<name@ver>"``    ``name``, ``version``, ``tags``, ``can_do``, ``data_classes``, ``remote``
``AuditLog::"audit"``      the resource of an export
=========================  ================================================================

and the request's context (``text``, ``step``, ``step_action``, ``goal``, ``task``,
``data_classes``). A policy's id is its ``@id("...")`` annotation (else Cedar's ``policyN``).

**Fail closed.** Cedar skips a policy that cannot be evaluated (an attribute the request does
not carry, a type error) and decides without it; here such a request is **denied**, naming the
policy that failed and the error, so a mistake in a ``forbid`` never lets a request through.

Cedar denies what no policy permits. Policies written as exceptions (``forbid`` only) need
``default: allow``, which adds ``@id("default") permit(principal, action, resource);`` —
a ``forbid`` always wins over it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from ..errors import InvalidInput
from .policy import PolicyDecision, PolicyRequest, PolicySubject

__all__ = ["CedarPolicyEngine"]

_ERRORED = re.compile(r"policy `([^`]+)`")
_DEFAULT_PERMIT = '\n@id("default")\npermit(principal, action, resource);\n'


class CedarPolicyEngine:
    """Cedar policies, parsed once.

    Args:
        policies: Cedar policy text.
        default: ``deny`` (Cedar's own rule) or ``allow`` (permit what no policy forbids).
        source: Where the text came from, for error messages.

    Raises:
        InvalidInput: the policies do not parse (naming ``source``).
    """

    def __init__(
        self, policies: str, *, default: Literal["allow", "deny"] = "deny", source: str = "policies"
    ) -> None:
        import cedarpy

        self._cedar = cedarpy
        text = policies + (_DEFAULT_PERMIT if default == "allow" else "")
        try:
            self._policies = cedarpy.PolicySet.from_str(text)
        except ValueError as exc:
            raise InvalidInput.single(source, f"not valid Cedar: {exc}", what="policies") from None
        self.default = default
        self._text = text
        self._ids: dict[str, str] | None = None

    @classmethod
    def from_file(cls, path: str | Path, *, default: Literal["allow", "deny"] = "deny") -> CedarPolicyEngine:
        return cls(Path(path).read_text(encoding="utf-8"), default=default, source=str(path))

    def decide(self, request: PolicyRequest) -> PolicyDecision:
        entities = [_entity(request.principal), _entity(request.resource)]
        result = self._cedar.is_authorized(
            {
                "principal": {"type": request.principal.type, "id": request.principal.id},
                "action": {"type": "Action", "id": request.action},
                "resource": {"type": request.resource.type, "id": request.resource.id},
                "context": request.context,
            },
            self._policies,
            entities,
        )
        diagnostics = result.diagnostics
        names = diagnostics.id_annotations_by_reason
        errors = [str(e) for e in diagnostics.errors]
        if errors:  # Cedar skips a policy it cannot evaluate: a broken forbid must not let a request by
            failed = [m.group(1) for e in errors if (m := _ERRORED.search(e))]
            annotated = self._annotations()
            return PolicyDecision(
                allowed=False, policies=[annotated.get(p, p) for p in failed] or ["error"], errors=errors
            )
        return PolicyDecision(
            allowed=result.allowed, policies=[names.get(p) or p for p in diagnostics.reasons], errors=errors
        )

    def _annotations(self) -> dict[str, str]:
        """Cedar's policy ids → their ``@id`` annotations (for the errors, which name the former)."""
        if self._ids is None:
            policies = self._cedar.policies_to_pst(self._text).static_policies
            self._ids = {pid: p.annotations["id"] for pid, p in policies.items() if p.annotations.get("id")}
        return self._ids


def _entity(subject: PolicySubject) -> dict[str, Any]:
    return {"uid": {"type": subject.type, "id": subject.id}, "attrs": subject.attrs, "parents": []}
