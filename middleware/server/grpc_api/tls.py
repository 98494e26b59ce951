"""TLS on both ends of a gRPC connection.

Servers (the gateway's :func:`~.server.build_server`, a worker's
:class:`~middleware.server.worker.Worker`) bind their port with :func:`add_port`: plaintext,
TLS, or mutual TLS, with the same semantics everywhere. Clients (a worker calling the
gateway, the gateway calling a worker) turn the terse UNAVAILABLE details of a failed
handshake into a sentence naming the likely TLS cause and the setting that fixes it
(:func:`tls_hint`).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from ...errors import Unavailable
from ..settings import ClientTlsConfig, TlsConfig
from .ports import check_port_free

__all__ = ["TlsSettingNames", "add_port", "tls_hint"]


def add_port(
    server: grpc.aio.Server, address: str, tls: TlsConfig | None, *, reuse_port: bool = False
) -> int:
    """Bind ``server`` to ``address`` (port 0 = any free port) and return the bound port.

    Args:
        tls: Serve TLS with this certificate; with ``require_client_cert``, only to clients
            presenting a certificate signed by ``client_ca`` (mTLS). None = plaintext.
        reuse_port: The server was built to share its port (``grpc.so_reuseport``): do not
            refuse a port another process holds.

    Raises:
        Unavailable: the address cannot be bound (e.g. another process listens on it).
    """
    if not reuse_port:
        check_port_free(address)
    try:
        if tls is None:
            port: int = server.add_insecure_port(address)
            return port
        cert, key, ca = tls.read()
        creds = grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=tls.require_client_cert
        )
        port = server.add_secure_port(address, creds)
        return port
    except RuntimeError as exc:  # grpc reports bind failures this way
        raise Unavailable(f"cannot listen on {address}: {exc}") from None


@dataclass(frozen=True)
class TlsSettingNames:
    """Where the user sets a client's TLS, for :func:`tls_hint` (flags or definition fields)."""

    ca: str
    cert: str
    server_name: str


def tls_hint(detail: str, tls: ClientTlsConfig | None, names: TlsSettingNames) -> str:
    """The likely TLS cause of a failed connection, and what to set; ``""`` when TLS is unlikely.

    Args:
        detail: The details of the UNAVAILABLE status the call ended with.
        tls: The client's TLS settings (None = it connected in plaintext).
        names: Where those settings are given.
    """
    text = detail.lower()
    if "certificate_verify_failed" in text:
        return f"TLS: the server's certificate is not signed by a CA this client trusts (set {names.ca})"
    if "hostname verification" in text:
        return (
            "TLS: the server's certificate does not name the address called "
            f"(set the name it carries with {names.server_name})"
        )
    if "wrong_version_number" in text:
        return f"TLS: the server does not speak TLS (it serves plaintext: drop {names.ca} and the rest)"
    if "handshake" in text:
        return "TLS: the handshake failed"
    if "socket closed" in text or "connection reset" in text:
        if tls is None:
            return f"the server closed a plaintext connection: it probably serves TLS (set {names.ca})"
        if tls.cert is None:
            return (
                "the server closed the TLS connection: it probably requires a client certificate "
                f"(mutual TLS: set {names.cert})"
            )
        return (
            "the server closed the TLS connection: it probably refused this client certificate "
            "(not signed by the CA it trusts for clients)"
        )
    return ""
