"""Per-client bearer tokens and roles, checked by a grpc.aio server interceptor.

Clients send ``authorization: Bearer <token>``. The server knows only the SHA-256
of each token (``{hash: principal}``, see :func:`middleware.server.settings.read_token_hashes`),
so a leaked configuration does not leak credentials. A call without a known token
ends with UNAUTHENTICATED through the usual status mapping (trailing metadata
``agency-reason: UNAUTHENTICATED``). Health checks and reflection stay open so
probes and tooling work without a token.

A known token then needs the :class:`~middleware.access.Permission` that
:data:`PERMISSIONS` gives its method (the roles are in :mod:`middleware.access`):
catalog writes are checked against the contract name in the request, so an ``agent``
writes only its own contracts. A refused call ends with PERMISSION_DENIED naming the
client and the target, and is audited (``on_deny``). A method missing from the table
needs ``admin``: a new RPC is closed until someone decides who may call it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from ...access import Permission, Principal, acting_as, authorize
from ...errors import AgencyError, PermissionDenied, Unauthenticated, Unavailable
from ...tenancy import split_key
from ..identity import Identities
from .decode import is_malformed
from .status import rpc, rpc_stream

__all__ = ["OPEN_SERVICES", "PERMISSIONS", "Rule", "TokenAuthInterceptor"]

#: Services reachable without a token (probes, tooling).
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")

#: Awaited with each refusal before the call ends (the gateway audits it).
Deny = Callable[[PermissionDenied], Awaitable[None]]
#: Awaited with (peer, method, error) for each call refused for its token (the gateway
#: audits them aggregated per source: :class:`middleware.refusals.RefusalAggregator`).
Unknown = Callable[[str, str, AgencyError], Awaitable[None]]


def _contract(request: Any) -> tuple[str, str]:
    contract = request.contract
    return contract.name, f"{contract.name}@{contract.version}"


def _key(request: Any) -> tuple[str, str]:
    key: str = request.key
    return split_key(key)[1], key  # [tenant/]name@version: names have no '@' nor '/'


@dataclass(frozen=True)
class Rule:
    """What a method needs; ``target`` reads ``(capability name, target)`` from its request."""

    permission: Permission
    target: Callable[[Any], tuple[str, str]] | None = None


_CALL = Rule(Permission.CALL)
_AUDIT = Rule(Permission.AUDIT_READ)  # the audit log holds every client's requests

#: Every method the gateway serves, and what it needs beyond a known token.
PERMISSIONS: dict[str, Rule] = {
    "/agency.v1.CatalogService/Register": Rule(Permission.CATALOG_WRITE, _contract),
    "/agency.v1.CatalogService/Update": Rule(Permission.CATALOG_WRITE, _contract),
    "/agency.v1.CatalogService/Deregister": Rule(Permission.CATALOG_WRITE, _key),
    "/agency.v1.CatalogService/Heartbeat": Rule(Permission.CATALOG_WRITE, _key),
    "/agency.v1.CatalogService/Get": _CALL,
    "/agency.v1.CatalogService/Query": _CALL,
    "/agency.v1.CatalogService/Watch": _CALL,
    "/agency.v1.GoalService/RegisterGoal": Rule(Permission.GOAL_WRITE),
    "/agency.v1.GoalService/GetGoal": _CALL,
    "/agency.v1.AgencyService/Submit": _CALL,
    "/agency.v1.AgencyService/Route": _CALL,
    "/agency.v1.AgencyService/Resume": _CALL,
    "/agency.v1.AgencyService/GetTask": _CALL,
    "/agency.v1.AgencyService/Cancel": _CALL,  # the task's owner or an admin (checked by the core)
    "/agency.v1.AgencyService/WatchTask": _CALL,  # the task's owner or an admin (checked in the core)
    "/agency.v1.AgencyService/ListTasks": _CALL,  # one's own tasks; an admin everyone's (the core)
    "/agency.v1.AuditService/Export": _AUDIT,
    "/agency.v1.AuditService/LatestCheckpoint": _AUDIT,
    "/agency.v1.AuditService/InclusionProof": _AUDIT,
    "/agency.v1.AuditService/ConsistencyProof": _AUDIT,
    # the post office authenticates the agents of MessageService itself (agent tokens, flows, ACLs)
    "/agency.v1.MessageService/Send": _CALL,
    "/agency.v1.MessageService/Pull": _CALL,
    "/agency.v1.MessageService/Ack": _CALL,
    "/agency.v1.MessageService/Subscribe": _CALL,
    "/agency.v1.MessageService/Register": _CALL,  # the post office applies messaging.registration.mode
    "/agency.v1.MessageService/Deregister": _CALL,  # the agent itself, or an admin (checked there)
    "/agency.v1.MessageService/ApproveAgent": Rule(Permission.ADMIN),
    "/agency.v1.MessageService/FindAgents": _CALL,
    "/agency.v1.MessageService/Report": _CALL,
    "/agency.v1.MessageService/ListQuarantine": Rule(Permission.ADMIN),
    "/agency.v1.MessageService/ReleaseQuarantined": Rule(Permission.ADMIN),
    "/agency.v1.MessageService/DeleteQuarantined": Rule(Permission.ADMIN),
}
_UNLISTED = Rule(Permission.ADMIN)


class _Refuse:
    """Handlers that fail the call with ``error`` through ``@rpc`` (auditing a refusal first)."""

    def __init__(
        self, error: AgencyError, on_deny: Deny | None, on_unknown: Unknown | None = None, method: str = ""
    ) -> None:
        self.error = error
        self.on_deny = on_deny
        self.on_unknown = on_unknown
        self.method = method

    async def _raise(self, context: grpc.aio.ServicerContext) -> None:
        if isinstance(self.error, PermissionDenied) and self.on_deny is not None:
            await self.on_deny(self.error)
        if isinstance(self.error, Unauthenticated | Unavailable) and self.on_unknown is not None:
            await self.on_unknown(context.peer() or "", self.method, self.error)
        raise self.error

    @rpc
    async def unary(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self._raise(context)

    @rpc_stream
    async def stream(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await self._raise(context)
        yield  # pragma: no cover - makes this an async generator


class TokenAuthInterceptor(grpc.aio.ServerInterceptor):
    """Require a known bearer token on every call except :data:`OPEN_SERVICES`, and the
    role :data:`PERMISSIONS` asks for.

    Args:
        token_hashes: Who each token is: :class:`~middleware.server.identity.Identities` (the
            token file and an OIDC issuer), or ``{sha256_hex_of_token: principal}`` (a bare
            client name gets :data:`~middleware.access.DEFAULT_ROLE`).
        on_deny: Awaited with each PERMISSION_DENIED refusal before the call ends (audit).
        on_unknown: Awaited with each UNAUTHENTICATED refusal (peer, method, error).
    """

    def __init__(
        self,
        token_hashes: Identities | Mapping[str, Principal | str],
        on_deny: Deny | None = None,
        on_unknown: Unknown | None = None,
    ) -> None:
        self._identities = token_hashes if isinstance(token_hashes, Identities) else Identities(token_hashes)
        self._on_deny = on_deny
        self._on_unknown = on_unknown

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method or ""
        if method.startswith(OPEN_SERVICES):
            return await continuation(handler_call_details)
        principal, refusal = await self._authenticate(handler_call_details.invocation_metadata or ())
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        if principal is None:
            assert refusal is not None
            return _refusing(handler, _Refuse(refusal, None, self._on_unknown, method))
        rule = PERMISSIONS.get(method, _UNLISTED)
        operation = method.lstrip("/").removeprefix("agency.v1.")
        if rule.target is None:
            try:
                authorize(principal, rule.permission, operation=operation)
            except PermissionDenied as exc:
                return _refusing(handler, _Refuse(exc, self._on_deny))
            return _as(principal, handler)
        return self._checking(handler, principal, rule, operation)

    async def _authenticate(self, metadata: Any) -> tuple[Principal | None, AgencyError | None]:
        try:
            return await self._identities.authenticate(_bearer(metadata)), None
        except (Unauthenticated, Unavailable) as exc:  # Unavailable: the issuer's keys cannot be had
            return None, exc

    def _checking(
        self, handler: grpc.RpcMethodHandler, principal: Principal, rule: Rule, operation: str
    ) -> grpc.RpcMethodHandler:
        """``handler`` behind a check of the target its request names (unary methods)."""
        assert handler.unary_unary is not None  # the methods with a target are unary
        check = _Check(handler.unary_unary, principal, rule, operation, self._on_deny)
        return grpc.unary_unary_rpc_method_handler(
            check.call,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class _Check:
    """One call's authorization against the target in its request, then the servicer."""

    def __init__(
        self,
        inner: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
        principal: Principal,
        rule: Rule,
        operation: str,
        on_deny: Deny | None,
    ) -> None:
        self.inner, self.principal, self.rule = inner, principal, rule
        self.operation, self.on_deny = operation, on_deny

    @rpc
    async def call(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        # A request that did not decode is refused further in (INVALID_ARGUMENT): nothing to check
        if not is_malformed(request):
            assert self.rule.target is not None
            capability, target = self.rule.target(request)
            try:
                authorize(
                    self.principal,
                    self.rule.permission,
                    operation=self.operation,
                    capability=capability,
                    target=target,
                )
            except PermissionDenied as exc:
                if self.on_deny is not None:
                    await self.on_deny(exc)
                raise
        with acting_as(self.principal):  # the change is recorded under the client's name
            return await self.inner(request, context)


def _as(principal: Principal, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` run with ``principal`` as the current caller (``access.current_principal``)."""
    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with acting_as(principal):
                return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        stream = handler.unary_stream

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with acting_as(principal):
                async for response in stream(request, context):
                    yield response

        return grpc.unary_stream_rpc_method_handler(
            streaming,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata:
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _refusing(handler: grpc.RpcMethodHandler, refuse: _Refuse) -> grpc.RpcMethodHandler:
    if handler.unary_unary or handler.stream_unary:
        make = grpc.unary_unary_rpc_method_handler
        if handler.stream_unary:
            make = grpc.stream_unary_rpc_method_handler
        return make(
            refuse.unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    make_stream = grpc.unary_stream_rpc_method_handler
    if handler.stream_stream:
        make_stream = grpc.stream_stream_rpc_method_handler
    return make_stream(
        refuse.stream,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
