"""``agency serve``: the gRPC gateway, on embedded defaults or from an agency definition file."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import start_http_server

from ..access import DEFAULT_ROLE, Principal, Role
from ..audit.retention import RetentionSchedule
from ..audit.witness_http import WitnessClient, Witnessing
from ..errors import InvalidInput, Unavailable
from ..liveness import KeepAlive
from ..redis.health import BackendMonitor, redis_monitor
from ..schema_guard import set_schema_limits
from ..server.bootstrap import build_agency, build_post_office, start_webhooks
from ..server.definition import AgencyDefinition, definition_from, load_definition, name_problems
from ..server.event_loop import loop_name
from ..server.event_loop import run as run_loop
from ..server.grpc_api import build_server
from ..server.grpc_api.gate import BackendGate
from ..server.http_limits import ensure_fd_headroom
from ..server.identity import Identities
from ..server.metrics import Metrics
from ..server.settings import (
    ENV_VARIABLES,
    ServerConfig,
    caller_limits_from_env,
    http_limits_from_env,
    schema_limits_from_env,
)

log = logging.getLogger("agency.serve")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    variables = ", ".join(f"{var} ({path})" for var, path in ENV_VARIABLES.items())
    p = sub.add_parser(
        "serve",
        help="run the gRPC gateway",
        description="Run the gRPC gateway (CatalogService, AgencyService, MessageService, AuditService, "
        "GoalService, health, reflection): on embedded defaults (an in-memory catalog and mailboxes, an "
        "audit log on local disk), or as an agency definition file describes it (--config). Stops "
        "cleanly on SIGTERM/SIGINT: in-flight calls and tasks submitted without waiting drain, the "
        "audit log is closed. "
        "Precedence: flags > AGENCY_* environment variables > the definition file > defaults. "
        f"Environment: {variables}. "
        "AGENCY_REDIS_URL alone also selects Redis storage; AGENCY_TLS_CLIENT_CA also requires client "
        "certificates; a data directory given without an audit directory moves the audit log to "
        "DATA_DIR/audit.",
    )
    p.add_argument("--address", help="host:port to listen on (default 127.0.0.1:50051; port 0 = any)")
    p.add_argument(
        "--data-dir",
        type=Path,
        help="data directory; the audit log goes to DATA_DIR/audit (default ./agency-data)",
    )
    p.add_argument(
        "--metrics-address",
        help="host:port for Prometheus /metrics (default 127.0.0.1:9464; '' = off)",
    )
    p.add_argument("--tls-cert", type=Path, help="PEM server certificate chain: serve TLS")
    p.add_argument("--tls-key", type=Path, help="PEM server private key (with --tls-cert)")
    p.add_argument(
        "--tls-client-ca", type=Path, help="PEM CA of client certificates: require them (mutual TLS)"
    )
    p.add_argument(
        "--auth-tokens",
        type=Path,
        help="token file ('CLIENT_NAME SHA256_HEX [ROLE [TENANT]]' per line; ROLE client, agent, auditor "
        "or admin, default agent; TENANT: the client's tenant): require a bearer token on every call; "
        "catalog writes need an agent token named after the contract, or admin",
    )
    p.add_argument(
        "--reuse-port",
        action="store_true",
        default=None,
        help="share the port with other processes listening on it (SO_REUSEPORT; the kernel splits "
        "connections between them); without it a port already taken is refused (exit code 2)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="run N gateway processes on the address (they share the port with SO_REUSEPORT; each is "
        "its own audit node NODE-w1..NODE-wN; needs Redis storage); SIGTERM drains them all",
    )
    p.add_argument(
        "--tracing",
        choices=["off", "console", "otlp"],
        help="export OpenTelemetry traces (needs agency-middleware[otel]; default off)",
    )
    p.add_argument(
        "--a2a",
        metavar="HOST:PORT",
        help="also serve A2A (JSON-RPC and HTTP+JSON, Agent Card at /.well-known/agent-card.json) on "
        "HOST:PORT (needs agency-middleware[protocols]; default off; see docs/protocols.md)",
    )
    p.add_argument(
        "--mcp",
        metavar="HOST:PORT",
        help="also serve the governed capabilities as MCP tools over Streamable HTTP at "
        "http://HOST:PORT/mcp (needs agency-middleware[protocols]; default off)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="agency definition file (YAML): agents, contracts, goals, messaging agents and flows, "
        "storage, audit, addresses; AGENCY_* variables and flags override it "
        "(check it with 'agency config check')",
    )
    p.add_argument(
        "--console",
        metavar="HOST:PORT",
        help="serve the operator console (needs agency-middleware[console]) on this address, e.g. "
        "127.0.0.1:8080 (default: humans.console.address of the definition; off when empty)",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="pre-register the reference scenario's agents and GOAL_WARRANTY_001 (see 'agency demo')",
    )
    p.set_defaults(handler=_run)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given, as a partial definition (they win over the environment and the file)."""
    server: dict[str, Any] = {
        key: value
        for key, value in (
            ("address", args.address),
            ("data_dir", args.data_dir),
            ("metrics_address", args.metrics_address),
            ("auth_tokens", args.auth_tokens),
            ("tracing", args.tracing),
            ("reuse_port", args.reuse_port),
        )
        if value is not None
    }
    tls = {
        key: value
        for key, value in (("cert", args.tls_cert), ("key", args.tls_key), ("client_ca", args.tls_client_ca))
        if value is not None
    }
    if args.tls_client_ca is not None:
        tls["require_client_cert"] = True
    if tls:
        server["tls"] = tls
    overrides: dict[str, Any] = {"server": server}
    if getattr(args, "console", None) is not None:
        overrides["humans"] = {"console": {"address": args.console}}
    protocols = {
        key: {"address": value}
        for key, value in (("a2a", getattr(args, "a2a", None)), ("mcp", getattr(args, "mcp", None)))
        if value is not None
    }
    if protocols:
        overrides["protocols"] = protocols
    return overrides


def _run(args: argparse.Namespace) -> int:
    if args.config is not None and args.demo:
        raise InvalidInput.single("--demo", "cannot be combined with --config (the file names the agents)")
    overrides = _overrides(args)
    if args.demo:  # the scenario's sources and their authority, as `agency demo` scores them
        from ..demo import DEMO_RELIABILITY

        overrides["agency"] = {"reliability": DEMO_RELIABILITY.model_dump(mode="json")}
    if args.config is not None:
        definition = load_definition(args.config, overrides=overrides)
    else:
        definition = definition_from(overrides=overrides, source="server configuration")
    if args.workers is not None:
        from .serve_workers import run_workers

        argv = getattr(args, "argv", None) or sys.argv[1:]
        return run_workers(args.workers, definition, argv, explicit_sharing=definition.server.reuse_port)
    log.info("event loop: %s", loop_name())
    code = run_loop(serve(definition.server, definition=definition, demo=args.demo))
    _exit_within(EXIT_WITHIN_SECONDS, code)
    return code


#: Seconds the interpreter may take to end once the gateway has stopped (audit log sealed).
EXIT_WITHIN_SECONDS = 10.0


def _exit_within(seconds: float, code: int) -> None:
    """End the process ``seconds`` from now if the interpreter's own teardown has not.

    Called once everything is closed and flushed. A thread someone else left running (an
    agent module's, a library's; gRPC's C core is known to hang at exit now and then) must
    not keep a stopped gateway alive until its supervisor's SIGKILL.
    """

    def force() -> None:
        print(
            f"agency: still not exited {seconds:g} s after stopping (a thread that does not end); "
            f"exiting now with {code}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(code)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()


async def serve(
    config: ServerConfig,
    *,
    demo: bool = False,
    definition: AgencyDefinition | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the gateway until SIGTERM/SIGINT (or until ``stop`` is set).

    ``definition`` describes the agency; without one, ``config`` alone does (embedded
    defaults, the audit log in ``config.data_dir/audit``). The gRPC and metrics settings
    always come from ``config``.
    """
    if definition is None:
        definition = AgencyDefinition(server=config, agency=config.agency)
    clients = config.token_hashes()  # a bad token file stops us before anything is opened
    if clashes := name_problems(definition, clients):  # 'Alice' the person, 'alice' the client
        raise InvalidInput(clashes, what="definition")
    limits = caller_limits_from_env()  # per-caller and schema limits (docs/operations.md, Security)
    set_schema_limits(schema_limits_from_env())
    http_limits = http_limits_from_env()  # every HTTP listener: console, A2A, MCP
    listeners = [
        definition.humans.console.address,
        definition.protocols.a2a.address,
        definition.protocols.mcp.address,
    ]
    ensure_fd_headroom(sum(1 for a in listeners if a), http_limits)  # an HTTP flood never starves gRPC
    if clients is not None:
        _log_roles(config.auth_tokens, clients)
        _warn_ungranted(clients, definition.grants)
    identities = Identities.build(clients, definition.identity.oidc)  # token file + OIDC issuer
    if definition.identity.oidc is not None:
        oidc = definition.identity.oidc
        log.info("OIDC bearer tokens of %s (audience %s) accepted", oidc.issuer, oidc.audience)
    metrics = Metrics(sla_seconds=definition.agency.sla_seconds)
    agency = await build_agency(definition, metrics=metrics)
    node_id = definition.agency.node_id
    interceptors: list[grpc.aio.ServerInterceptor] = []
    tracing = None
    post_office = None
    webhooks = None
    monitor: BackendMonitor | None = None
    retention: RetentionSchedule | None = None
    witnessing: Witnessing | None = None
    metrics_server = None
    console = None
    protocols = None
    desk = None
    keep_alive = KeepAlive(
        agency.catalog,
        agency.agents.keys,
        # an entry gone with Redis's data is registered again, as the definition declared it
        restore=lambda contract: agency.register(contract, replace=True, actor="keep-alive"),
        on_error=metrics.background_error,
    )
    try:
        if config.tracing != "off":
            from ..server.grpc_api.tracing import TracingServerInterceptor
            from ..server.tracing import Tracing

            tracing = Tracing.with_exporter(config.tracing, service_name=f"agency-{node_id}")
            agency.audit = tracing.audit_log(agency.audit)
            interceptors.append(TracingServerInterceptor(tracing))
        if demo:
            from ..demo import build_demo_agency

            await build_demo_agency(agency)
        post_office = await build_post_office(definition, audit=agency.audit, metrics=metrics)
        humans = definition.humans
        if humans.people or humans.approvals or humans.console.address:
            from ..people.desk import HumanDesk

            desk = await HumanDesk.from_definition(definition, agency, post_office, metrics=metrics)
            desk.start_sweeper()  # ends tasks whose approvals timed out
            if humans.console.address:
                from ..server.console import ConsoleServer

                console = ConsoleServer.from_definition(definition, desk, limits=http_limits)
                await console.start()
                print(f"agency: operator console on {console.url}", flush=True)
        if definition.storage.backend == "redis":
            # health follows Redis: NOT_SERVING and fast UNAVAILABLE while it is unreachable
            monitor = redis_monitor(
                definition.storage.redis_url,
                lambda ok: server.set_serving(ok),
                on_error=metrics.background_error,
                prefix=definition.storage.key_prefix,
            )
            # and while this gateway's own agents cannot be routed to (stale, or gone with
            # Redis's data until the keep-alive registers them again)
            monitor.add_check("catalog", _within(2.0, keep_alive.check))
            interceptors.append(BackendGate(monitor))
        server = build_server(
            agency,
            config.address,
            tls=config.tls,
            token_hashes=identities if identities.required else None,
            grants=definition.grants,
            limits=limits,
            interceptors=interceptors,
            post_office=post_office,
            reuse_port=config.reuse_port,
        )
        if config.metrics_address:
            metrics_server = _start_metrics(config.metrics_address, metrics)
        if definition.protocols.needed:  # the A2A / MCP extra is loaded only when asked for
            from ..server.protocols.card_signing import default_card_key_path
            from ..server.protocols.serving import Protocols

            protocols = Protocols(
                agency,
                definition.protocols,
                token_hashes=identities if identities.required else None,
                card_key=default_card_key_path(definition.audit_directory),  # the gateway's card is signed
                http_limits=http_limits,
            )
            await protocols.start()
        await server.start()
        webhooks = await start_webhooks(  # push delivery for agents with webhooks
            definition, post_office, metrics=metrics, health=lambda name, ok: _health_detail(server, name, ok)
        )
        # Everything built so far lives as long as the gateway: keep it out of the cyclic
        # collector's scans (measured: GC time per benchmark run 0.24 -> 0.08 s, p99 72 -> ~45 ms).
        gc.freeze()
        await keep_alive.__aenter__()  # renews this gateway's in-process agents' leases
        if agency.takeover is not None:  # renews its tasks' leases, takes over dead gateways' tasks
            agency.takeover.errors.on_error = metrics.background_error
            agency.takeover.start()
        if monitor is not None:
            await monitor.start()
        if (retain := definition.audit.retention) is not None:
            retention = RetentionSchedule(
                agency.audit,  # type: ignore[arg-type]  # a WalAuditLog behind its wrappers
                retain.max_age,
                archive_dir=retain.archive_dir,
                interval=retain.interval,
                on_error=metrics.background_error,
            )
            retention.start()
        if definition.audit.witness:
            witnessing = Witnessing(
                agency.audit,  # type: ignore[arg-type]  # a WalAuditLog behind its wrappers
                WitnessClient(definition.audit.witness),
                on_refused=lambda status, why: metrics.background_error("witness"),
            )
            witnessing.start()
        host = config.address.rsplit(":", 1)[0]
        scheme = "plaintext" if config.tls is None else config.tls.scheme
        to_workers = definition.workers.tls
        workers = "plaintext" if to_workers is None else ("mTLS" if to_workers.cert else "TLS")
        print(
            f"agency: serving on {host}:{server.port} ({scheme}; audit log: {agency.audit.location}; "
            f"mailboxes: {definition.mailbox_backend}; calls workers over {workers})",
            flush=True,
        )
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("agency: shutting down (draining in-flight calls and background tasks)", flush=True)
        # tasks submitted without waiting run on in this gateway: they get the same drain time
        # as the calls in flight, then are cancelled (ended in the audit log as interrupted)
        _, left = await asyncio.gather(
            server.stop(config.grace_seconds), agency.runner.drain(config.grace_seconds)
        )
        if left:
            print(
                f"agency: {left} background task(s) still running after {config.grace_seconds:g} s: "
                "interrupting them",
                flush=True,
            )
    finally:
        # Every step runs whatever failed before it (a Redis gone, a worker hung): the audit
        # log is always closed (final checkpoint, sealed segment).
        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = []
        if console is not None:
            steps.append(("operator console", console.stop))
        if desk is not None:
            steps.append(("approval sweeper", desk.stop_sweeper))
            steps.append(("escalation store", desk.store.close))
        if protocols is not None:
            steps.append(("A2A/MCP listeners", protocols.stop))
        if retention is not None:
            steps.append(("audit retention", retention.stop))
        if witnessing is not None:
            steps.append(("audit witnessing", witnessing.stop))
        if monitor is not None:
            steps.append(("backend monitor", monitor.stop))
        steps.append(("keep-alive", lambda: keep_alive.__aexit__(None, None, None)))
        if webhooks is not None:
            steps.append(("webhook delivery", webhooks.stop))
        if post_office is not None:
            steps.append(("mailboxes", post_office.transport.close))
        steps.append(("agents, audit log and task store", agency.close))
        steps.append(("catalog", agency.catalog.close))
        steps.append(("OIDC key cache", identities.aclose))
        for what, step in steps:
            try:
                await step()
            except Exception as exc:  # logged in one line: the rest must still run
                log.error("shutdown: closing the %s failed: %s: %s", what, type(exc).__name__, exc)
        if tracing is not None:
            tracing.shutdown()
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
    print("agency: stopped", flush=True)
    return 0


def _within(seconds: float, check: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """``check``, failing after ``seconds`` (a hung backend is as down as a refusing one)."""

    async def bounded() -> None:
        async with asyncio.timeout(seconds):
            await check()

    return bounded


def _log_roles(path: Path | None, clients: dict[str, Principal]) -> None:
    """Say who may do what, and warn about lines that rely on the default role."""
    by_role = {role: sorted({p.name for p in clients.values() if p.role is role}) for role in Role}
    log.info(
        "bearer tokens from %s: %s",
        path,
        "; ".join(f"{role.value}: {', '.join(names)}" for role, names in by_role.items() if names) or "none",
    )
    implicit = sorted({p.name for p in clients.values() if not p.role_given})
    if implicit:
        log.warning(
            "token file %s: no role on the lines of %s: they get the %r role (catalog writes only for "
            "contracts of their own name, no goal registration); add a third column "
            "(client, agent or admin) to each line to say what each may do",
            path,
            ", ".join(implicit),
            DEFAULT_ROLE.value,
        )


def _warn_ungranted(clients: dict[str, Principal], grants: Mapping[str, Any]) -> None:
    """Agents with no grant may register nothing (issue 14): say so at start, by name."""
    granted = {name.strip().casefold() for name in grants}
    agents = sorted({p.name for p in clients.values() if p.role is Role.AGENT})
    ungranted = [name for name in agents if name.strip().casefold() not in granted]
    if ungranted:
        log.warning(
            "agent tokens without a grant may register nothing: %s; add them to the definition's "
            "grants (actions, tags, endpoints they may declare; docs/operations.md)",
            ", ".join(ungranted),
        )


def _start_metrics(address: str, metrics: Metrics) -> WSGIServer:
    host, _, port = address.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=metrics.registry)
    except OSError as exc:
        raise Unavailable(f"cannot serve metrics on {address}: {exc}") from None
    print(f"agency: metrics on http://{host}:{server.server_port}/metrics", flush=True)
    return server


async def _health_detail(server: Any, name: str, serving: bool) -> None:
    """Report one health detail (``agency.webhooks/<agent>``) without touching the overall status."""
    from grpc_health.v1 import health_pb2

    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    await server.health.set(name, status)
