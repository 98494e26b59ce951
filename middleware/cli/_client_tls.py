"""The client TLS flags the CLI commands that call a gateway share (``catalog``, ``health``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..server.settings import ClientTlsConfig


def add_client_tls_options(parser: Any, peer: str = "the gateway") -> None:
    """``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name`` on ``parser`` (or a group)."""
    parser.add_argument("--tls-ca", type=Path, help=f"PEM CA to verify {peer} (enables TLS)")
    parser.add_argument("--tls-cert", type=Path, help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key", type=Path, help="PEM client key (mutual TLS)")
    parser.add_argument("--tls-server-name", default="", help=f"expected name in {peer}'s certificate")


def client_tls(args: argparse.Namespace) -> ClientTlsConfig | None:
    """The TLS settings the flags give (None: plaintext); bad files are named by flag."""
    if not (args.tls_ca or args.tls_cert or args.tls_key):
        return None
    return ClientTlsConfig.parse(
        {"ca": args.tls_ca, "cert": args.tls_cert, "key": args.tls_key, "server_name": args.tls_server_name},
        what="TLS options",
    )
