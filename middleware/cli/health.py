"""``agency health``: ask a gateway's gRPC health service; exit 0 if SERVING, else 1.

Meant for container HEALTHCHECKs and scripts (Kubernetes uses its native gRPC probe).
"""

from __future__ import annotations

import argparse
import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..config import ClientTlsConfig
from ..grpc_api.channel import open_channel
from ._client_tls import add_client_tls_options, client_tls


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "health",
        help="check a gateway's gRPC health (exit 0 = SERVING)",
        description="Call grpc.health.v1.Health/Check on a gateway. Exit status 0 when it reports "
        "SERVING, 1 otherwise (NOT_SERVING, unreachable, timeout).",
    )
    p.add_argument("--address", default="127.0.0.1:50051", help="host:port (default 127.0.0.1:50051)")
    p.add_argument("--service", default="", help="service name to check (default: the whole server)")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    add_client_tls_options(p, peer="the server")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    tls = client_tls(args)
    status = asyncio.run(check(args.address, service=args.service, wait_seconds=args.timeout, tls=tls))
    print(status)
    return 0 if status == "SERVING" else 1


async def check(
    address: str, *, service: str = "", wait_seconds: float = 3.0, tls: ClientTlsConfig | None = None
) -> str:
    """The health status name of ``service`` at ``address`` (``UNREACHABLE: ...`` on errors)."""
    channel = open_channel(address, tls=tls)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=wait_seconds
        )
    except grpc.aio.AioRpcError as exc:
        return f"UNREACHABLE: {exc.code().name}: {exc.details()}"
    finally:
        await channel.close()
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
