"""The options every CLI command that calls a gateway shares, and the client they open."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ._client_tls import add_client_tls_options, client_tls

if TYPE_CHECKING:
    from ..client import AgencyClient

__all__ = ["add_gateway_options", "open_client"]


def add_gateway_options(parser: argparse.ArgumentParser) -> None:
    """``--address``, ``--token-file``, ``--timeout`` and the TLS flags."""
    parser.add_argument(
        "--address",
        action="append",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="gateway host:port (gRPC); several (repeat it, or a comma list): when one cannot be "
        "reached the next is called; default $AGENCY_ADDRESS or 127.0.0.1:50051",
    )
    parser.add_argument(
        "--token-file", type=Path, help="file holding the bearer token for the gateway (the token alone)"
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=None, help="seconds to wait for the reply (default: no limit)"
    )
    add_client_tls_options(parser)


def open_client(args: argparse.Namespace) -> AgencyClient:
    """An :class:`AgencyClient` for the gateway the flags name (call inside the event loop)."""
    from ..client import AgencyClient
    from ..server.settings import ServerConfig, read_token

    tls = client_tls(args)
    token = read_token(args.token_file, field="--token-file") if args.token_file else None
    addresses = args.address or [ServerConfig.from_env().address]
    return AgencyClient(addresses, tls=tls, token=token, timeout=getattr(args, "timeout", None))


def _seconds(value: str) -> float:
    """A positive, finite number of seconds (argparse names the option when this refuses)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r}: must be a positive number of seconds")
    return seconds
