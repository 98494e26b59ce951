"""Who may do what: the roles of authenticated clients and the one authorization check.

A gateway started with a token file knows each caller as a :class:`Principal`: the client
name and the :class:`Role` on its token's line. Roles, least privilege first:

* ``client``: every call except writing the catalog, registering goals and reading the
  audit log (submit, route, resume and read its own tasks, catalog reads and watch, goal
  reads, messaging, whose agents the post office authenticates on its own).
* ``agent``: as ``client``, plus catalog writes (register, update, heartbeat, deregister)
  of the contracts whose ``name`` is the client's name, every version of it, declaring
  only what an admin granted it (:mod:`middleware.grants`). An agent cannot take over
  another agent's name, not even with ``replace``.
* ``auditor``: reads the audit log (AuditService: export, inclusion and consistency
  proofs, checkpoints) and nothing else but the calls every client may make. Clients and
  agents may not read the audit log: it holds every client's requests.
* ``admin``: everything (operators, ``agency catalog``, deployment tooling).

A line without a role gets :data:`DEFAULT_ROLE` (``agent``): see docs/operations.md for
why. Transports map each operation to a :class:`Permission` and call :func:`authorize`;
a refusal is a :class:`~middleware.errors.PermissionDenied` naming the client, its role
and the target, and :func:`refusal_record` is what the gateway audits for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from enum import StrEnum

from pydantic import Field

from ._model import Model
from .audit.record import Actors, AuditEventType, AuditRecord
from .errors import PermissionDenied

__all__ = [
    "DEFAULT_ROLE",
    "HumanRole",
    "Permission",
    "Principal",
    "Role",
    "acting_as",
    "authorize",
    "authorize_task",
    "current_caller",
    "current_principal",
    "refusal_record",
    "same_name",
]


class Role(StrEnum):
    """Every role a token line may name (the one list of roles)."""

    CLIENT = "client"
    AGENT = "agent"
    AUDITOR = "auditor"
    ADMIN = "admin"


class HumanRole(StrEnum):
    """Roles of people (``humans.people`` in the definition; the operator console).

    ``operator`` answers clarifications and handovers; ``approver`` decides approval gates;
    ``compliance_officer`` receives POLICY_VIOLATION escalations (without the quarantined
    content); ``quarantine_reviewer`` may also see what was quarantined; ``moderator``
    releases or deletes messages the post office's moderation held on the quarantine board
    (it sees their content only when it also holds ``quarantine_reviewer``); ``auditor``
    reads the audit pages only.
    """

    OPERATOR = "operator"
    APPROVER = "approver"
    COMPLIANCE_OFFICER = "compliance_officer"
    QUARANTINE_REVIEWER = "quarantine_reviewer"
    MODERATOR = "moderator"
    AUDITOR = "auditor"


#: The role of a token file line that names none (``CLIENT_NAME SHA256_HEX``).
DEFAULT_ROLE = Role.AGENT


class Permission(StrEnum):
    """What an operation needs beyond a known token."""

    CALL = "call"
    """Any authenticated client."""
    CATALOG_WRITE = "catalog_write"
    """An agent for its own capability name, or an admin."""
    GOAL_WRITE = "goal_write"
    """An admin."""
    AUDIT_READ = "audit_read"
    """An auditor or an admin."""
    ADMIN = "admin"
    """An admin (operations no rule names: refused to everyone else)."""


class Principal(Model):
    """An authenticated caller."""

    name: str = Field(min_length=1, description="The client name on its token's line.")
    role: Role = Field(default=DEFAULT_ROLE, description="What it may do.")
    role_given: bool = Field(
        default=True, description="False when its line named no role and the default applied."
    )
    tenant: str = Field(
        default="",
        description="The tenant the caller acts for (empty: none, as without tenants configured).",
    )
    via: str = Field(default="token", description="How it was authenticated: token (the file) or oidc.")

    def owns(self, capability: str) -> bool:
        """Whether ``capability`` (a contract name) is this agent's own name (:func:`same_name`)."""
        return same_name(self.name, capability)


def same_name(a: str, b: str) -> bool:
    """The one rule for client names, for catalog ownership and task ownership alike:
    equal once stripped and case-folded (``Bob`` and ``bob`` are one client; a token file
    naming both is refused). Empty names are no one's."""
    return bool(a.strip()) and a.strip().casefold() == b.strip().casefold()


#: The authenticated client of the call being served (set by the transport for every call,
#: read by the servicers that record or check who acts): None without tokens.
_caller: ContextVar[Principal | None] = ContextVar("agency_caller", default=None)


def current_principal() -> Principal | None:
    """The authenticated client of the call being served, or None (auth off)."""
    return _caller.get()


def current_caller() -> str:
    """The client name of the call being served, or ``""`` (auth off)."""
    p = _caller.get()
    return p.name if p is not None else ""


@contextmanager
def acting_as(principal: Principal) -> Iterator[None]:
    """Within the block, ``current_principal()`` is ``principal``."""
    token = _caller.set(principal)
    try:
        yield
    finally:
        # a stream closed from another context: nothing is left to restore there
        with suppress(ValueError):
            _caller.reset(token)


def authorize_task(
    principal: Principal | None, owner: str, *, operation: str, task_id: str, tenant: str = ""
) -> None:
    """Let the client that submitted a task (or an admin) read or resume it; refuse others.

    No principal (auth off) or no owner (submitted without tokens) allows everyone of the
    task's ``tenant``. A caller of another tenant is refused whatever its role, unless it is
    a global admin (an admin without a tenant: :mod:`middleware.tenancy`).

    Raises:
        PermissionDenied: naming the client, its role, the operation and the task.
    """
    if (
        principal is not None
        and principal.tenant != tenant
        and not (principal.role is Role.ADMIN and not principal.tenant)
    ):
        raise PermissionDenied(
            f"client {principal.name!r} (role {principal.role.value}) may not {operation} {task_id}: "
            "a task is seen only within its own tenant",
            details={
                "client": principal.name,
                "role": principal.role.value,
                "operation": operation,
                "permission": "tenant",
                "target": task_id,
            },
        )
    if principal is None or not owner or principal.role is Role.ADMIN or same_name(principal.name, owner):
        return
    raise PermissionDenied(
        f"client {principal.name!r} (role {principal.role.value}) may not {operation} {task_id}: "
        "a task is read and resumed by the client that submitted it, or an admin",
        details={
            "client": principal.name,
            "role": principal.role.value,
            "operation": operation,
            "permission": "task_owner",
            "target": task_id,
        },
    )


def authorize(
    principal: Principal,
    permission: Permission,
    *,
    operation: str,
    capability: str = "",
    target: str = "",
) -> None:
    """Allow ``operation`` to ``principal``, or refuse it.

    Args:
        permission: What the operation needs.
        operation: What is attempted (e.g. ``CatalogService/Register``), for the message.
        capability: For :attr:`Permission.CATALOG_WRITE`: the contract name written.
        target: What the operation touches (a contract key, a goal id), for the message.

    Raises:
        PermissionDenied: naming the client, its role, the operation and the target;
            ``details`` holds them as fields (``client``, ``role``, ``operation``,
            ``permission``, ``target``).
    """
    role = principal.role
    if role is Role.ADMIN or permission is Permission.CALL:
        return
    if permission is Permission.CATALOG_WRITE and role is Role.AGENT and principal.owns(capability):
        return
    if permission is Permission.AUDIT_READ and role is Role.AUDITOR:
        return
    what = f" {target}" if target else ""
    if permission is Permission.CATALOG_WRITE and role is Role.AGENT:
        why = f"an agent writes only contracts named {principal.name.strip().lower()!r}"
    elif permission is Permission.CATALOG_WRITE:
        why = "catalog writes need the agent role (its own contracts) or admin"
    elif permission is Permission.AUDIT_READ:
        why = "reading the audit log needs the auditor or admin role"
    else:
        why = "this needs the admin role"
    raise PermissionDenied(
        f"client {principal.name!r} (role {role.value}) may not {operation}{what}: {why}",
        details={
            "client": principal.name,
            "role": role.value,
            "operation": operation,
            "permission": permission.value,
            "target": target,
        },
    )


def refusal_record(error: PermissionDenied, *, node: str) -> AuditRecord:
    """The audit record of a refused operation: ``catalog.change`` for a catalog write,
    ``message.rejected`` otherwise; outcome ``refused``, rule ``PERMISSION_DENIED``."""
    details = error.details
    catalog = details.get("permission") == Permission.CATALOG_WRITE.value
    return AuditRecord(
        event_type=(AuditEventType.CATALOG_CHANGE if catalog else AuditEventType.MESSAGE_REJECTED).value,
        node=node,
        component="gateway",
        actors=Actors(agent=str(details.get("target", "")) if catalog else ""),
        rule=error.reason,
        outcome="refused",
        detail={**details, "why": error.message},
    )
