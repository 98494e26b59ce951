"""``agency serve``: the gRPC gateway on embedded defaults."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from ..audit import FileAuditLog
from ..backends import open_backends
from ..config import ServerConfig
from ..grpc_api import build_server
from ..pipeline import Agency
from ..router import Router

log = logging.getLogger("agency.serve")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the gRPC gateway",
        description="Run the gRPC gateway (CatalogService, AgencyService, health, reflection) on "
        "embedded defaults: an in-memory catalog and an audit log on local disk. Stops cleanly on "
        "SIGTERM/SIGINT: in-flight calls drain, the audit log is closed. "
        "Environment: AGENCY_ADDRESS, AGENCY_DATA_DIR, AGENCY_NODE_ID (flags win).",
    )
    p.add_argument("--address", help="host:port to listen on (default 127.0.0.1:50051; port 0 = any)")
    p.add_argument("--data-dir", type=Path, help="directory for the audit log (default ./agency-data)")
    p.add_argument(
        "--catalog-url",
        help="redis://host:port/db to share the catalog and routing stats with other gateways "
        "(default: in memory; env AGENCY_CATALOG_URL)",
    )
    p.add_argument("--catalog-prefix", help="Redis key prefix of the shared catalog (default agency:)")
    p.add_argument("--lease-seconds", type=float, help="heartbeat lease of catalog entries")
    p.add_argument(
        "--demo",
        action="store_true",
        help="pre-register the reference scenario's agents and GOAL_WARRANTY_001 (see 'agency demo')",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    config = ServerConfig.from_env(
        address=args.address,
        data_dir=args.data_dir,
        catalog_url=args.catalog_url,
        catalog_prefix=args.catalog_prefix,
        lease_seconds=args.lease_seconds,
    )
    return asyncio.run(serve(config, demo=args.demo))


async def serve(config: ServerConfig, *, demo: bool = False, ready: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or until ``stop`` is set on the returned server)."""
    audit = FileAuditLog(Path(config.data_dir) / "audit")
    catalog, stats = open_backends(
        config.catalog_url, prefix=config.catalog_prefix, lease_seconds=config.lease_seconds
    )
    agency = Agency(audit=audit, config=config.agency, catalog=catalog, router=Router(catalog, stats=stats))
    if demo:
        from ..demo import build_demo_agency

        await build_demo_agency(agency)
    server = build_server(agency, config.address)
    await server.start()
    host = config.address.rsplit(":", 1)[0]
    print(f"agency: serving on {host}:{server.port} (audit log: {audit.location})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    print("agency: shutting down (draining in-flight calls)", flush=True)
    await server.stop(config.grace_seconds)
    await agency.close()
    await catalog.close()
    print("agency: stopped", flush=True)
    return 0
