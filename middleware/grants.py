"""What an agent identity may declare in the catalog: granted by an admin, checked on every write.

A token with the ``agent`` role writes only contracts named after itself
(:func:`middleware.access.authorize`). What such a contract *declares* matters as much:
the router sends a client's task, with its text and input, to whoever declares the
action, and the gateway opens connections to whatever ``endpoint`` a contract names.
So an agent's registration (Register, Update over gRPC) must stay within its
:class:`AgentGrant`, written by an admin in the definition file::

    grants:
      warranty_agent:
        actions: [warranty_claim, warranty_check]   # may appear in can_do
        tags: [realtime]                             # may appear in tags
        endpoints: ["10.0.0.7:50061", "workers.internal"]  # host:port, or a host (any port)

* An agent with no grant may declare nothing: its registration is PERMISSION_DENIED.
* ``can_do`` must be a subset of ``actions`` and ``tags`` of ``tags``; ``cannot_do`` and
  the descriptive fields are free.
* ``endpoint`` (a remote worker) must be one of ``endpoints``, or on one of its hosts;
  with no ``endpoints`` the contract may name none.

Admins are not limited (they write the definition). Each refusal names the agent, the
contract and every field outside the grant, and is audited by the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, field_validator

from ._model import Model
from .access import Permission, Principal, Role, same_name
from .contracts import CapabilityContract, normalise_label, normalise_tag_set
from .errors import PermissionDenied

__all__ = ["AgentGrant", "Grants", "check_grant"]


class AgentGrant(Model):
    """What one agent identity may declare."""

    actions: list[str] = Field(default_factory=list, description="Actions it may list in can_do.")
    tags: list[str] = Field(default_factory=list, description="Tags it may carry.")
    endpoints: list[str] = Field(
        default_factory=list,
        description="Endpoints it may name: 'host:port' exactly, or 'host' (any port). Empty: none.",
    )

    @field_validator("actions")
    @classmethod
    def _actions(cls, v: list[str]) -> list[str]:
        return sorted({normalise_label(a) for a in v})

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return normalise_tag_set(v)

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, v: list[str]) -> list[str]:
        out = []
        for e in v:
            e = e.strip().lower()
            if not e or "/" in e or " " in e:
                raise ValueError(f"{e!r} is not a host or host:port")
            out.append(e)
        return out

    def allows_endpoint(self, endpoint: str) -> bool:
        """Whether ``endpoint`` (``host:port``) is granted."""
        endpoint = endpoint.strip().lower()
        host = endpoint.rpartition(":")[0] if ":" in endpoint else endpoint
        return any(endpoint == e or host == e for e in self.endpoints)


#: ``agent name (as on its token line) -> grant``.
Grants = Mapping[str, AgentGrant]


def check_grant(
    principal: Principal | None, contract: CapabilityContract, grants: Grants, *, operation: str
) -> None:
    """Refuse a registration by an ``agent`` that declares more than its grant.

    No principal (tokens off) and admins are not checked.

    Raises:
        PermissionDenied: naming the agent, the contract and every field outside the grant.
    """
    if principal is None or principal.role is Role.ADMIN:
        return
    name = principal.name.strip().lower()
    grant = next((g for n, g in grants.items() if same_name(n, name)), None)
    outside: list[str] = []
    if grant is None:
        outside.append(f"no grant for agent {name!r} (an admin grants one in the definition's 'grants')")
    else:
        if extra := sorted(set(contract.can_do) - set(grant.actions)):
            outside.append(f"can_do {', '.join(extra)} not granted")
        if extra := sorted(set(contract.tags) - set(grant.tags)):
            outside.append(f"tags {', '.join(extra)} not granted")
        if contract.endpoint and not grant.allows_endpoint(contract.endpoint):
            outside.append(f"endpoint {contract.endpoint} not granted")
    if not outside:
        return
    raise PermissionDenied(
        f"client {principal.name!r} (role {principal.role.value}) may not {operation} {contract.key}: "
        + "; ".join(outside),
        details={
            "client": principal.name,
            "role": principal.role.value,
            "operation": operation,
            "permission": Permission.CATALOG_WRITE.value,
            "target": contract.key,
            "outside_grant": outside,
        },
    )
