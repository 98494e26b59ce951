"""``agency health``: ask a gateway's gRPC health service; exit 0 if SERVING.

Meant for container HEALTHCHECKs and scripts (Kubernetes uses its native gRPC probe).
Exit status: 0 SERVING, 1 NOT_SERVING (or another status), 3 the server answered that it
does not know ``--service`` (SERVICE_UNKNOWN), 4 nothing answered (UNREACHABLE).
"""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..server.grpc_api.channel import open_channel
from ..server.settings import ClientTlsConfig
from ._client_tls import add_client_tls_options, client_tls
from .exit_codes import CHECK_FAILED, NOTHING_FOUND, OK, UNAVAILABLE


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "health",
        help="check a gateway's gRPC health (exit 0 = SERVING)",
        description="Call grpc.health.v1.Health/Check on a gateway. Exit status 0 when it reports "
        "SERVING, 1 NOT_SERVING, 3 SERVICE_UNKNOWN (the server answered that it has no such "
        "--service), 4 UNREACHABLE (nothing answered, or not in time).",
    )
    p.add_argument("--address", help="gateway host:port (gRPC); default $AGENCY_ADDRESS or 127.0.0.1:50051")
    p.add_argument("--service", default="", help="service name to check (default: the whole server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait up to --timeout for a server that is still starting (default: a refused "
        "connection is UNREACHABLE at once)",
    )
    p.add_argument("--json", action="store_true", help='print {"status": ..., "detail": ...} as JSON')
    add_client_tls_options(p, peer="the server")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from ..server.settings import ServerConfig

    tls = client_tls(args)
    address = ServerConfig.from_env(address=args.address).address  # as the other client commands
    status = asyncio.run(
        check(address, service=args.service, wait_seconds=args.timeout, tls=tls, wait=args.wait)
    )
    if status.startswith("UNREACHABLE"):
        status = f"{status} (at {address})"
    if args.json:
        name, _, detail = status.partition(": ")
        print(json.dumps({"status": name, "detail": detail, "service": args.service}))
    else:
        print(status)
    if status == "SERVING":
        return OK
    if status.startswith("SERVICE_UNKNOWN"):
        return NOTHING_FOUND
    return UNAVAILABLE if status.startswith("UNREACHABLE") else CHECK_FAILED


async def check(
    address: str,
    *,
    service: str = "",
    wait_seconds: float = 3.0,
    tls: ClientTlsConfig | None = None,
    wait: bool = False,
) -> str:
    """The health status name of ``service`` at ``address``.

    ``SERVING``, ``NOT_SERVING`` ...; ``SERVICE_UNKNOWN: ...`` when the server answered
    NOT_FOUND for ``service``; ``UNREACHABLE: ...`` when nothing answered; ``ERROR: CODE: ...``
    for any other failed call. ``wait``: wait up to ``wait_seconds`` for the server to come up.
    """
    channel = open_channel(address, tls=tls)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=wait_seconds, wait_for_ready=wait
        )
    except grpc.aio.AioRpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.NOT_FOUND:
            return f"SERVICE_UNKNOWN: the server has no service {service!r}"
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return f"UNREACHABLE: {code.name}: {exc.details()}"
        return f"ERROR: {code.name}: {exc.details()}"
    finally:
        await channel.close()
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
