"""Refusing a port another process already listens on.

gRPC servers set ``SO_REUSEPORT`` by default, so a second gateway started on a port the
first one holds binds it too and the kernel splits the clients between them. Agency
servers turn that off (the ``grpc.so_reuseport`` option, see
:func:`~.server.build_server`) and, before asking gRPC to bind, probe the address
themselves (:func:`check_port_free`) so a taken port is refused with a sentence naming
the cause, without gRPC's C-core log line.
"""

from __future__ import annotations

import contextlib
import errno
import socket

from ...errors import Unavailable

__all__ = ["check_port_free"]


def check_port_free(address: str) -> None:
    """Raise :class:`Unavailable` if another process listens on ``address`` (``host:port``).

    Port 0 (any free port) and names that do not resolve are left to gRPC to report.
    """
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not port_text.isdigit() or int(port_text) == 0:
        return
    try:
        infos = socket.getaddrinfo(
            host or None, int(port_text), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except OSError:
        return
    for family, kind, proto, _, sockaddr in infos:
        with contextlib.closing(socket.socket(family, kind, proto)) as probe:
            # as gRPC binds: SO_REUSEADDR (a port in TIME_WAIT is free), no SO_REUSEPORT
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise Unavailable(
                        f"cannot listen on {address}: the port is taken (another process, perhaps "
                        "another gateway, listens on it); choose another address, or share the port "
                        "deliberately with --reuse-port (server.reuse_port: true)"
                    ) from None
                return  # another problem (no such local address ...): gRPC reports it
