"""Limits of the gateway's HTTP listeners (console, A2A, MCP) and the file descriptors they may hold.

The HTTP listeners share the gateway's process (and event loop) with gRPC: they answer through
the same agency, the console through the same desk. An HTTP flood must not take the file
descriptors or the loop gRPC needs, so every listener is bounded on its own
(:class:`HttpLimits`, enforced by :mod:`.http_guard`) and the sum of what they may hold is kept
below the process's descriptor limit with a reserve left for gRPC, the audit log and Redis
(:func:`ensure_fd_headroom`, at start).

Separate limits in one process, not a separate process: the console decides escalations
through the desk's in-process state and the A2A and MCP bindings stream task states from the
pipeline's audit wrapper; moving them out would put a network hop (and a second copy of that
state) between every HTTP request and the core. Caps that are counted before a connection
costs anything but its socket keep the guarantee without that.

Settings come from the environment (:func:`middleware.server.settings.http_limits_from_env`);
docs/operations.md, "Security", lists them.
"""

from __future__ import annotations

import resource

from pydantic import Field

from .._model import Model
from ..errors import InvalidInput

__all__ = ["HttpLimits", "ensure_fd_headroom"]


class HttpLimits(Model):
    """What one HTTP listener may hold, and how long a client may take (each listener counts its own)."""

    header_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a client has to send a request's headers, from the connection's start or "
        "the end of the previous response (a slow header drip is cut off).",
    )
    body_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a client has to send a request's body, once its headers are in.",
    )
    idle_timeout: float = Field(
        default=5.0, gt=0, description="Seconds a kept-alive connection may wait for its next request."
    )
    max_connections: int = Field(
        default=512,
        ge=1,
        description="Connections one listener holds at once; more are answered 503 and closed.",
    )
    max_connections_per_source: int = Field(
        default=64,
        ge=1,
        description="Connections one source address holds on one listener at once (behind a proxy every "
        "client shares the proxy's address: raise it there).",
    )
    max_body_bytes: int = Field(
        default=4 << 20,
        ge=1,
        description="Largest request body (the gRPC message limit); a larger declared body is answered 413 "
        "before it is read, a larger chunked one is cut off at the limit.",
    )
    fd_reserve: int = Field(
        default=1024,
        ge=64,
        description="File descriptors kept free of HTTP for gRPC, the audit log, Redis and the rest.",
    )


def ensure_fd_headroom(listeners: int, limits: HttpLimits) -> int:
    """Make sure ``listeners`` HTTP listeners at ``limits.max_connections`` each, plus the reserve,
    fit under the process's descriptor limit: the soft limit is raised (up to the hard limit) when
    it is lower. Returns the soft limit in force.

    Raises:
        InvalidInput: they cannot fit, naming the settings to lower (or the limit to raise).
    """
    needed = listeners * limits.max_connections + limits.fd_reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed <= soft or listeners == 0:
        return soft
    if hard == resource.RLIM_INFINITY or needed <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        return needed
    raise InvalidInput.single(
        "AGENCY_HTTP_MAX_CONNECTIONS",
        f"{listeners} HTTP listeners x {limits.max_connections} connections + {limits.fd_reserve} kept for "
        f"gRPC (AGENCY_FD_RESERVE) = {needed} file descriptors, over this process's limit of {hard} "
        "(ulimit -n): lower AGENCY_HTTP_MAX_CONNECTIONS or raise the limit, so that an HTTP flood can "
        "never take the descriptors gRPC needs",
        what="HTTP limits",
    )
