"""The worker runtime: serve one agent over gRPC and keep it in a gateway's catalog.

A :class:`Worker` (what ``agency worker`` runs):

1. serves the agent as ``agency.v1.AgentWorker`` (plus health and reflection) on
   ``address`` (port 0 = any free port);
2. registers the agent's contract in the gateway's catalog
   (``CatalogService.Register``, replacing an earlier registration of the same
   ``name@version``) with ``endpoint`` set to the address the gateway should call;
3. heartbeats every ``heartbeat_interval`` seconds (``CatalogService.Heartbeat``);
   if the gateway no longer knows the contract (it restarted with an in-memory
   catalog), registers it again;
4. on :meth:`Worker.stop` (SIGTERM/SIGINT under :meth:`Worker.run`): deregisters
   first, so the gateway stops routing here, then lets in-flight calls finish for
   ``grace`` seconds and stops.

One worker serves one contract key; two workers registering the same
``name@version`` replace each other's endpoint (give replicas distinct versions or
put them behind one address).

Several gateways sharing one catalog (a fleet on Redis): give the worker all their
addresses. It registers and heartbeats through one of them at a time, and when that one
cannot be reached (killed, restarting) the next call goes to the next address
(:class:`~middleware.server.grpc_api.failover.FailoverChannel`): its lease is renewed
through any live gateway, so its agent stays routable from every other one. One address
that is a DNS name resolving to several gateways is failed over by gRPC itself.

Security, both ways (see the operations guide, "Remote workers"): the worker calls
the gateway over plaintext, TLS or mutual TLS (``gateway_tls``) with this agent's own
bearer token (``token``; the gateway's token file names the agent), and serves the
gateway's ``Invoke`` calls over plaintext, TLS or mutual TLS (``tls``; with a client
CA, only a gateway presenting a client certificate signed by it gets through).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc, worker_pb2, worker_pb2_grpc
from ..agents import AgentCallable
from ..background import LoopErrors
from ..contracts import CapabilityContract
from ..errors import InvalidInput, PermissionDenied, Unauthenticated, Unavailable
from .grpc_api.convert import contract_to_pb
from .grpc_api.decode import DecodeGuardInterceptor
from .grpc_api.failover import gateway_channel, split_addresses
from .grpc_api.gateway_token import GatewayTokenInterceptor
from .grpc_api.server import MAX_MESSAGE_BYTES
from .grpc_api.tls import TlsSettingNames, add_port, tls_hint
from .grpc_api.worker_servicer import AgentWorkerServicer
from .settings import ClientTlsConfig, TlsConfig
from .tracing import Tracing

__all__ = ["Worker"]

log = logging.getLogger("agency.worker")

_SERVICE = worker_pb2.DESCRIPTOR.services_by_name["AgentWorker"].full_name

#: How ``agency worker`` names the settings of its TLS to the gateway, in error messages.
GATEWAY_TLS_FLAGS = TlsSettingNames(
    ca="--gateway-ca", cert="--gateway-cert and --gateway-key", server_name="--gateway-server-name"
)


class Worker:
    """Serves ``agent`` under ``contract`` and keeps it registered at ``gateway``.

    Args:
        agent: The agent callable (e.g. a :class:`~middleware.langchain.LangChainAgent`).
        contract: Its contract; default ``agent.contract`` (wrapped agents carry theirs).
        gateway: ``host:port`` of the gateway's gRPC server, or several (a sequence, or
            comma-separated): the gateways of one fleet, sharing one catalog.
        address: ``host:port`` to listen on (port 0 = any free port).
        advertise: The ``host:port`` the gateway should call (default: ``address``'s
            host with the bound port; set it when the worker is behind NAT or in a pod).
        heartbeat_interval: Seconds between heartbeats.
        connect_timeout: How long to wait for the gateway at start-up.
        grace: Seconds in-flight calls get to finish on stop.
        on_heartbeat: Called with the heartbeat count after each acknowledged heartbeat.
        tracing: Continue each caller's trace with an agent span (``agency worker
            --tracing``); without it the caller's ``traceparent`` still reaches the agent.
        gateway_tls: Call the gateway over TLS: the CA that signs its certificate, and for
            a gateway requiring mutual TLS this worker's client certificate and key.
            None = plaintext.
        token: This agent's bearer token, sent on every call to the gateway (for a gateway
            started with a token file; its line there names this agent).
        tls: Serve ``AgentWorker`` over TLS; with ``client_ca`` and ``require_client_cert``
            only to callers (the gateway) presenting a certificate signed by ``client_ca``.
            None = plaintext.
        gateway_token: Take ``AgentWorker`` calls only with this bearer token (the
            gateway's ``workers.token_file``); others are UNAUTHENTICATED. None = anyone
            who reaches the port (or who passes mutual TLS).
    """

    def __init__(
        self,
        agent: AgentCallable,
        contract: CapabilityContract | Mapping[str, Any] | None = None,
        *,
        gateway: str | Sequence[str],
        address: str = "127.0.0.1:0",
        advertise: str | None = None,
        heartbeat_interval: float = 5.0,
        connect_timeout: float = 10.0,
        grace: float = 5.0,
        on_heartbeat: Callable[[int], object] | None = None,
        tracing: Tracing | None = None,
        gateway_tls: ClientTlsConfig | None = None,
        token: str | None = None,
        tls: TlsConfig | None = None,
        gateway_token: str | None = None,
    ) -> None:
        if contract is None:
            contract = getattr(agent, "contract", None)
        if contract is None:
            raise InvalidInput.single(
                "contract", "the agent carries no .contract; pass one (agency worker --contract FILE)"
            )
        if not callable(agent):
            raise InvalidInput.single("agent", f"{type(agent).__name__} is not callable")
        if heartbeat_interval <= 0:
            raise InvalidInput.single("heartbeat_interval", "must be > 0 seconds")
        self.agent = agent
        self.contract = CapabilityContract.parse(contract, what="capability contract")
        self.gateways = split_addresses(gateway, field="gateway")
        self.gateway = ",".join(self.gateways)
        self.address = address
        self.advertise = advertise
        self.heartbeat_interval = heartbeat_interval
        self.connect_timeout = connect_timeout
        self.grace = grace
        self.registered: CapabilityContract | None = None
        self.heartbeats = 0
        self._beat_errors = LoopErrors("worker heartbeat", logger=log, subject=f"heartbeat of {self.key}")
        self.on_heartbeat = on_heartbeat
        self.tracing = tracing
        self.gateway_tls = gateway_tls
        self.tls = tls
        self._token = token
        self._gateway_token = gateway_token
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._channel: grpc.aio.Channel | None = None
        self._catalog: catalog_pb2_grpc.CatalogServiceStub | None = None
        self._beating: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def key(self) -> str:
        return self.contract.key

    @property
    def scheme(self) -> str:
        """How the worker serves: ``plaintext``, ``TLS`` or ``mTLS``."""
        return "plaintext" if self.tls is None else self.tls.scheme

    @property
    def endpoint(self) -> str:
        """The address registered in the catalog (known once started)."""
        if self.advertise:
            return self.advertise
        host = self.address.rsplit(":", 1)[0]
        if host in ("0.0.0.0", "[::]", ""):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def start(self) -> None:
        """Serve the agent, then register it at the gateway and start heartbeating.

        Raises:
            Unavailable: cannot listen on ``address`` or reach the gateway in time.
            InvalidInput: the gateway refused the contract (every problem named).
            Unauthenticated: the gateway wants a token and this one is missing or unknown.
            PermissionDenied: the token may not write this contract (its line names another
                agent, or has the client role).
        """
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self._gateway_token is not None:  # only the gateway may call (issue 14)
            interceptors.append(GatewayTokenInterceptor(self._gateway_token))
        interceptors.append(DecodeGuardInterceptor())  # undecodable requests: INVALID_ARGUMENT
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),  # a port another process holds is refused, not shared
            ],
        )
        servicer = AgentWorkerServicer({self.key: (self.contract, self.agent)}, tracing=self.tracing)
        worker_pb2_grpc.add_AgentWorkerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            [_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            server,
        )
        self.port = add_port(server, self.address, self.tls)
        self._server = server
        await server.start()
        for name in ("", _SERVICE):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._channel = gateway_channel(self.gateways, tls=self.gateway_tls, token=self._token)
        self._catalog = catalog_pb2_grpc.CatalogServiceStub(self._channel)  # type: ignore[no-untyped-call]
        try:
            await self._register(wait=True)
        except BaseException:
            await self._shutdown()
            raise
        self._beating = asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat {self.key}")
        log.info(
            "worker %s serving on %s (%s), registered at %s (%s)",
            self.key,
            self.endpoint,
            self.scheme,
            self.gateway,
            "plaintext" if self.gateway_tls is None else "TLS",
        )

    async def stop(self) -> None:
        """Deregister from the gateway, drain in-flight calls, stop serving."""
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
            self._beating = None
        if self.registered is not None and self._catalog is not None:
            try:
                await self._catalog.Deregister(catalog_pb2.DeregisterRequest(key=self.key), timeout=5)
                log.info("worker %s deregistered from %s", self.key, self._current_gateway())
            except grpc.aio.AioRpcError as exc:
                if exc.code() is not grpc.StatusCode.NOT_FOUND:
                    log.warning("could not deregister %s from %s: %s", self.key, self.gateway, exc.details())
            self.registered = None
        await self._shutdown()

    async def run(self, stop: asyncio.Event | None = None, *, ready: asyncio.Event | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT (or ``stop`` is set), then stop cleanly.

        ``ready`` is set once the worker serves and is registered.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        await self.start()
        if ready is not None:
            ready.set()
        installed = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not in the main thread
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
        try:
            await stop.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ----------------------------------------------------------------- helpers
    def _current_gateway(self) -> str:
        """The gateway calls go to now (with several, the one that last answered)."""
        return str(getattr(self._channel, "address", self.gateway))

    async def _register(self, *, wait: bool = False) -> None:
        """Register the contract; with ``wait``, keep trying for ``connect_timeout`` seconds
        while the gateway is unreachable (it may be starting), but not past a TLS refusal."""
        assert self._catalog is not None
        contract = CapabilityContract.parse(
            {**self.contract.model_dump(), "endpoint": self.endpoint}, what="capability contract"
        )
        request = catalog_pb2.RegisterRequest(contract=contract_to_pb(contract), replace=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        while True:
            try:
                entry = await self._catalog.Register(request, timeout=max(deadline - loop.time(), 0.01))
                if entry.contract.tenant and not contract.tenant:  # the gateway put it in the token's tenant
                    contract = contract.model_copy(update={"tenant": entry.contract.tenant})
                    self.contract = self.contract.model_copy(update={"tenant": entry.contract.tenant})
                break
            except grpc.aio.AioRpcError as exc:
                # unreachable (perhaps starting): try again; a TLS refusal will not change
                unreachable = exc.code() is grpc.StatusCode.UNAVAILABLE
                tls_refused = "handshake" in (exc.details() or "").lower()
                if wait and unreachable and not tls_refused and await self._reconnected(deadline):
                    continue
                raise self._refusal(exc) from None
        self.registered = contract

    async def _reconnected(self, deadline: float) -> bool:
        """Wait (until ``deadline``) for the channel to try the gateway again; False at the deadline.

        The channel reconnects with gRPC's backoff; an RPC made while it is CONNECTING waits
        for the outcome, so each state change is worth one more attempt.
        """
        assert self._channel is not None
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        state = self._channel.get_state(try_to_connect=True)
        if state is grpc.ChannelConnectivity.READY:  # connected: the gateway itself said UNAVAILABLE
            return False
        try:
            await asyncio.wait_for(self._channel.wait_for_state_change(state), remaining)
        except TimeoutError:
            return False
        return True

    def _refusal(self, exc: grpc.aio.AioRpcError) -> Exception:
        code, detail = exc.code(), exc.details() or ""
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidInput.single("contract", f"the gateway refused it: {detail}")
        if code is grpc.StatusCode.UNAUTHENTICATED:
            return Unauthenticated(
                f"gateway {self.gateway} refused {self.key}: {detail} (give this agent's token: "
                "--token-file FILE or AGENCY_WORKER_TOKEN)"
            )
        if code is grpc.StatusCode.PERMISSION_DENIED:
            return PermissionDenied(
                f"gateway {self.gateway} refused {self.key}: {detail} (the token's line in the gateway's "
                f"token file must be named {self.contract.name!r}, role agent)"
            )
        hint = (
            tls_hint(detail, self.gateway_tls, GATEWAY_TLS_FLAGS)
            if code is grpc.StatusCode.UNAVAILABLE
            else ""
        )
        return Unavailable(
            f"cannot register {self.key} at gateway {self.gateway}: {code.name}: {detail}"
            + (f" -- {hint}" if hint else "")
        )

    async def _heartbeat_loop(self) -> None:
        assert self._catalog is not None
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self._catalog.Heartbeat(
                    catalog_pb2.HeartbeatRequest(key=self.key), timeout=self.heartbeat_interval
                )
                self.heartbeats += 1
                self._beat_errors.succeeded()
                if self.on_heartbeat is not None:
                    self.on_heartbeat(self.heartbeats)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.NOT_FOUND:  # the gateway forgot us (restart)
                    log.warning("gateway %s lost %s; registering again", self.gateway, self.key)
                    try:
                        await self._register()
                        self._beat_errors.succeeded()
                    except (Unavailable, InvalidInput, Unauthenticated, PermissionDenied) as err:
                        # the next beat tries again (logged once until it works)
                        self._beat_errors.failed(err)
                else:  # the gateway down or refusing (its Redis down): logged once per outage
                    self._beat_errors.failed(
                        Unavailable(f"gateway {self.gateway}: {exc.code().name}: {exc.details() or ''}")
                    )

    async def _shutdown(self) -> None:
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(self.grace)
            self._server = None
        if self._channel is not None:
            await self._channel.close()
            self._channel, self._catalog = None, None
