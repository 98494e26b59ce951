"""``agency serve``: the gRPC gateway on embedded defaults."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import start_http_server

from ..audit import WalAuditLog, WalOptions
from ..bootstrap import build_agency
from ..config import ServerConfig, load_definition
from ..definition import AgencyDefinition
from ..errors import InvalidInput, Unavailable
from ..grpc_api import build_server
from ..liveness import KeepAlive
from ..metrics import MeteredAuditLog, Metrics
from ..pipeline import Agency

log = logging.getLogger("agency.serve")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the gRPC gateway",
        description="Run the gRPC gateway (CatalogService, AgencyService, health, reflection) on "
        "embedded defaults: an in-memory catalog and an audit log on local disk. Stops cleanly on "
        "SIGTERM/SIGINT: in-flight calls drain, the audit log is closed. "
        "Environment: AGENCY_ADDRESS, AGENCY_DATA_DIR, AGENCY_NODE_ID, AGENCY_METRICS_ADDRESS, "
        "AGENCY_TLS_CERT, AGENCY_TLS_KEY, AGENCY_TLS_CLIENT_CA, AGENCY_AUTH_TOKENS (flags win).",
    )
    p.add_argument("--address", help="host:port to listen on (default 127.0.0.1:50051; port 0 = any)")
    p.add_argument("--data-dir", type=Path, help="directory for the audit log (default ./agency-data)")
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
        help="token file ('CLIENT_NAME SHA256_HEX' per line): require a bearer token on every call",
    )
    p.add_argument(
        "--tracing",
        choices=["off", "console", "otlp"],
        help="export OpenTelemetry traces (needs agency-middleware[otel]; default off)",
    )
    p.add_argument(
        "--config",
        type=Path,
        help="agency definition file (YAML): agents, contracts, goals, storage, audit, addresses; "
        "flags and AGENCY_* variables override it (check it with 'agency config check')",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="pre-register the reference scenario's agents and GOAL_WARRANTY_001 (see 'agency demo')",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    tls = None
    if args.tls_cert or args.tls_key or args.tls_client_ca:
        tls = {
            "cert": args.tls_cert,
            "key": args.tls_key,
            "client_ca": args.tls_client_ca,
            "require_client_cert": args.tls_client_ca is not None,
        }
    given = {
        "address": args.address,
        "data_dir": args.data_dir,
        "metrics_address": args.metrics_address,
        "tls": tls,
        "auth_tokens": args.auth_tokens,
        "tracing": args.tracing,
    }
    if args.config is not None:
        if args.demo:
            raise InvalidInput.single(
                "--demo", "cannot be combined with --config (the file names the agents)"
            )
        definition = load_definition(args.config)
        server = definition.server.model_dump()
        server.update({k: v for k, v in given.items() if v is not None})
        config = ServerConfig.parse(server, what="server configuration")
        return asyncio.run(serve(config, definition=definition))
    config = ServerConfig.from_env(**given)
    return asyncio.run(serve(config, demo=args.demo))


async def serve(
    config: ServerConfig,
    *,
    demo: bool = False,
    definition: AgencyDefinition | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the gateway until SIGTERM/SIGINT (or until ``stop`` is set)."""
    metrics = Metrics()
    if definition is not None:
        agency = await build_agency(definition, metrics=metrics)
    else:
        wal = WalAuditLog(
            Path(config.data_dir) / "audit",
            config.agency.node_id,
            options=WalOptions(on_sync=metrics.audit_fsync_latency.observe),
        )
        audit = MeteredAuditLog(wal, metrics)
        agency = Agency(audit=audit, config=config.agency)
    interceptors: list[grpc.aio.ServerInterceptor] = []
    tracing = None
    if config.tracing != "off":
        from ..grpc_api.tracing import TracingServerInterceptor
        from ..tracing import Tracing

        tracing = Tracing.with_exporter(config.tracing, service_name=f"agency-{config.agency.node_id}")
        agency.audit = tracing.audit_log(agency.audit)
        interceptors.append(TracingServerInterceptor(tracing))
    metrics_server = None
    keep_alive = KeepAlive(agency.catalog, agency.agents.keys)
    try:
        if demo:
            from ..demo import build_demo_agency

            await build_demo_agency(agency)
        server = build_server(
            agency,
            config.address,
            tls=config.tls,
            token_hashes=config.token_hashes(),
            interceptors=interceptors,
        )
        if config.metrics_address:
            metrics_server = _start_metrics(config.metrics_address, metrics)
        await server.start()
        await keep_alive.__aenter__()  # renews this gateway's in-process agents' leases
        host = config.address.rsplit(":", 1)[0]
        scheme = "plaintext" if config.tls is None else ("mTLS" if config.tls.require_client_cert else "TLS")
        print(
            f"agency: serving on {host}:{server.port} ({scheme}; audit log: {agency.audit.location})",
            flush=True,
        )
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        print("agency: shutting down (draining in-flight calls)", flush=True)
        await server.stop(config.grace_seconds)
    finally:
        await keep_alive.__aexit__(None, None, None)
        await agency.close()
        await agency.catalog.close()
        if tracing is not None:
            tracing.shutdown()
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
    print("agency: stopped", flush=True)
    return 0


def _start_metrics(address: str, metrics: Metrics) -> WSGIServer:
    host, _, port = address.rpartition(":")
    try:
        server, _thread = start_http_server(int(port), addr=host.strip("[]"), registry=metrics.registry)
    except OSError as exc:
        raise Unavailable(f"cannot serve metrics on {address}: {exc}") from None
    print(f"agency: metrics on http://{host}:{server.server_port}/metrics", flush=True)
    return server
