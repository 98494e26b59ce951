"""Tenants: one gateway, several teams, each seeing only its own agents, tasks and records.

A tenant is a name (``acme``) carried by the caller (``Principal.tenant``: the token file's
fourth column, or the OIDC ``tenant`` claim), by each contract (``CapabilityContract.tenant``),
task, session, escalation, person and audit record (``actors.tenant``). The rules, in one place:

* **Seeing** (:func:`sees`): a record of tenant ``T`` is visible to a caller of tenant ``T``.
  A caller without a tenant sees the records without one; an ``admin`` or ``auditor`` without
  a tenant is *global* and sees every tenant's. An auditor with a tenant reads only that
  tenant's part of the audit log.
* **Routing** (:func:`routable`): a task of tenant ``T`` is routed to the contracts of ``T``
  and to those shared with it explicitly (``shared_with: [T]`` or ``["*"]``), never to another
  tenant's; the same agent name may exist in several tenants (the catalog key is
  ``T/name@version``).

Without tenants (no token line, claim, contract or person names one) everything has the empty
tenant and every rule above reduces to what the gateway did before.
"""

from __future__ import annotations

import re

from .access import Principal, Role

__all__ = ["TENANT_PATTERN", "check_tenant", "global_reader", "routable", "sees", "split_key", "tenant_of"]

#: A tenant's name: lower-case letters, digits, ``_`` and ``-`` (never ``/`` or ``@``: keys use them).
TENANT_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def check_tenant(value: str) -> str:
    """``value`` as a tenant name (empty: none).

    Raises:
        ValueError: not a tenant name.
    """
    value = value.strip()
    if value and not TENANT_PATTERN.match(value):
        raise ValueError(f"{value!r} is not a tenant name (a-z first, then a-z 0-9 _ -, at most 63)")
    return value


def tenant_of(principal: Principal | None) -> str:
    """The tenant a caller acts for (empty: none, or tokens off)."""
    return principal.tenant if principal is not None else ""


def global_reader(principal: Principal | None) -> bool:
    """An admin or auditor without a tenant (or no caller at all: tokens off) sees every tenant."""
    return principal is None or (not principal.tenant and principal.role in (Role.ADMIN, Role.AUDITOR))


def sees(principal: Principal | None, tenant: str) -> bool:
    """Whether ``principal`` may see a record of ``tenant``."""
    return global_reader(principal) or tenant_of(principal) == tenant


def routable(contract_tenant: str, shared_with: list[str], task_tenant: str) -> bool:
    """Whether a task of ``task_tenant`` may be routed to a contract of ``contract_tenant``."""
    return contract_tenant == task_tenant or "*" in shared_with or task_tenant in shared_with


def split_key(key: str) -> tuple[str, str, str]:
    """``(tenant, name, version)`` of a catalog key ``[tenant/]name@version``."""
    scoped, _, version = key.partition("@")
    tenant, _, name = scoped.rpartition("/")
    return tenant, name, version
