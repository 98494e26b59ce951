"""Build and run the gRPC server: every service, reflection and health."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from ..._proto.agency.v1 import (
    agency_pb2,
    agency_pb2_grpc,
    audit_pb2,
    audit_pb2_grpc,
    catalog_pb2,
    catalog_pb2_grpc,
    goals_pb2,
    goals_pb2_grpc,
)
from ...access import Principal, refusal_record
from ...caller_limits import CallerLimits
from ...errors import AgencyError, PermissionDenied
from ...grants import Grants
from ...messaging.post_office import PostOffice
from ...pipeline import Agency
from ...refusals import RefusalAggregator, source_of
from ..identity import Identities
from ..settings import TlsConfig
from .agency_servicer import AgencyServicer
from .audit_servicer import AuditServicer
from .auth import TokenAuthInterceptor
from .catalog_servicer import CatalogServicer
from .convert import MAX_MESSAGE_BYTES
from .decode import DecodeGuardInterceptor
from .goal_servicer import GoalServicer
from .message_servicer import add_message_service
from .tls import add_port

__all__ = ["LIVENESS_SERVICE", "MAX_MESSAGE_BYTES", "GrpcServer", "build_server"]

#: The health service name that says only "this process answers": SERVING from start until
#: shutdown, whatever the backends do. A liveness probe asks for it (a gateway waiting for Redis
#: must not be restarted: it reconnects on its own); readiness asks for ``""``, the whole verdict.
LIVENESS_SERVICE = "agency.v1.Liveness"

log = logging.getLogger("agency.grpc")


class GrpcServer:
    """A running (or ready to run) gRPC server bound to one address.

    Attributes:
        port: The port actually bound (useful with ``host:0``).
        health: The standard health servicer; ``set_serving(False)`` flips it (all but
            :data:`LIVENESS_SERVICE`, which only shutdown turns NOT_SERVING).
        refusals: Audits calls refused for their token (client or agent), per source and interval.
    """

    def __init__(
        self,
        server: grpc.aio.Server,
        port: int,
        health_servicer: health.aio.HealthServicer,
        services: Sequence[str],
        refusals: RefusalAggregator | None = None,
    ) -> None:
        self.server = server
        self.port = port
        self.health = health_servicer
        self.services = list(services)
        self.refusals = refusals

    async def start(self) -> None:
        await self.server.start()
        await self.health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        await self.set_serving(True)

    async def set_serving(self, serving: bool) -> None:
        """Report SERVING / NOT_SERVING for the server and every service."""
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self.services]:
            await self.health.set(name, status)

    async def stop(self, grace: float | None = 5.0) -> None:
        """Report NOT_SERVING, let in-flight calls finish for ``grace`` seconds, then stop."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        if self.refusals is not None:  # the counts of refusals not yet summed up
            try:
                await self.refusals.flush()
            except Exception:  # the rest of the shutdown must go on (the audit log may be down)
                log.exception("could not audit the last refused calls' counts")

    async def wait(self) -> None:
        await self.server.wait_for_termination()


def build_server(
    agency: Agency,
    address: str = "127.0.0.1:0",
    *,
    tls: TlsConfig | None = None,
    token_hashes: Identities | Mapping[str, Principal | str] | None = None,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    post_office: PostOffice | None = None,
    reuse_port: bool = False,
    grants: Grants | None = None,
    limits: CallerLimits | None = None,
) -> GrpcServer:
    """A gRPC server exposing ``agency`` on ``address`` (use port 0 for any free port).

    Args:
        tls: Serve TLS (mutual TLS when it requires client certificates); None = plaintext.
        token_hashes: Who each bearer token is: :class:`~middleware.server.identity.Identities`
            (the token file and an OIDC issuer) or ``{sha256_of_token: principal}`` (a bare
            client name gets the default role); set = every call but health and reflection
            needs a known bearer token, and the role its method asks for (see :mod:`.auth`);
            refusals are audited (calls refused for their token once per source and minute,
            with a count: see
            :mod:`middleware.refusals`).
        interceptors: Further server interceptors (e.g. tracing), outermost first.
        post_office: Backs ``MessageService`` (default: in-memory mailboxes, same audit log).
            Its calls refused for their agent token are audited through the same
            aggregation as the gateway's token check (its ``refusals`` is set to it).
        reuse_port: Let other processes listen on the same port (SO_REUSEPORT; the kernel
            splits connections between them). Off by default: a port another process
            holds is refused (``Unavailable``) instead of silently shared.
        grants: What each ``agent`` token may declare when it registers (see
            :mod:`middleware.grants`); with tokens on, an agent without a grant may declare
            nothing (default: no grants). Unused without tokens.
        limits: Per-caller limits on Watch and WatchTask streams and catalog writes (see
            :mod:`middleware.caller_limits`; default
            :class:`~middleware.caller_limits.CallerLimits`).

    Raises:
        Unavailable: the address cannot be bound (e.g. another process listens on it).
    """
    chain = list(interceptors)
    # one aggregation for every call refused for its token: the gateway's client tokens
    # and the post office's agent tokens (MessageService)
    refusals = RefusalAggregator(agency.audit.append, node=agency.config.node_id)
    office = post_office or PostOffice(audit=agency.audit)
    office.refusals = refusals

    async def audit_denial(error: PermissionDenied) -> None:
        await agency.audit.append(refusal_record(error, node=agency.config.node_id))

    if isinstance(token_hashes, Identities) and not token_hashes.required:
        token_hashes = None
    if token_hashes is not None:

        async def audit_unknown(peer: str, method: str, error: AgencyError) -> None:
            await refusals.refused(source_of(peer), method.lstrip("/").removeprefix("agency.v1."), error)

        chain.append(TokenAuthInterceptor(token_hashes, on_deny=audit_denial, on_unknown=audit_unknown))
    chain.append(DecodeGuardInterceptor(agency.record_rejection))  # innermost
    server = grpc.aio.server(
        interceptors=chain or None,
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", int(reuse_port)),  # grpc's default is 1: a taken port "works"
        ],
    )
    catalog = CatalogServicer(agency, grants=grants or {}, on_deny=audit_denial, limits=limits)
    catalog_pb2_grpc.add_CatalogServiceServicer_to_server(catalog, server)
    agency_pb2_grpc.add_AgencyServiceServicer_to_server(AgencyServicer(agency, limits=limits), server)
    audit_pb2_grpc.add_AuditServiceServicer_to_server(AuditServicer(agency), server)
    goals_pb2_grpc.add_GoalServiceServicer_to_server(GoalServicer(agency), server)
    services = [
        catalog_pb2.DESCRIPTOR.services_by_name["CatalogService"].full_name,
        agency_pb2.DESCRIPTOR.services_by_name["AgencyService"].full_name,
        audit_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
        goals_pb2.DESCRIPTOR.services_by_name["GoalService"].full_name,
    ]
    services.append(add_message_service(server, office))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*services, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )
    port = add_port(server, address, tls, reuse_port=reuse_port)
    return GrpcServer(server, port, health_servicer, services, refusals)
