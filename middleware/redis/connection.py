"""Connections: the one place a storage URL becomes a ``redis.asyncio`` client.

Every Redis-backed store (``X.from_url``), the health monitor and the CLI call
:func:`redis_client`, so Redis in its three standard deployments is chosen by URL alone:

- ``redis://[user:pass@]host:port/db``, ``rediss://`` (TLS), ``unix:///path.sock?db=0``: one
  server, through :meth:`redis.asyncio.Redis.from_url`. A connection that is answered
  ``READONLY`` (the node was demoted to a replica) is dropped when it goes back to the pool, so
  the next one is made anew (and reaches the new primary if the host name now points there).
- ``redis+sentinel://[user:pass@]host:port[,host:port...]/service_name[?db=0&ssl=true&
  sentinel_password=...&sentinel_username=...]`` (``rediss+sentinel://`` is ``ssl=true``): the
  primary of ``service_name`` as told by the Sentinels, through
  :meth:`redis.asyncio.sentinel.Sentinel.master_for`. The client asks the Sentinels again
  whenever a connection is made and at most every second while in use (see
  ``FollowingSentinelPool``), and drops a connection answered ``READONLY``, so it follows a
  failover with no restart. ``user:pass`` authenticate to Redis, ``sentinel_*`` to the
  Sentinels. The Sentinel port defaults to 26379.
- ``redis+cluster://[user:pass@]host:port[,host:port...]`` (``rediss+cluster://`` for TLS): a
  Redis Cluster through :class:`redis.asyncio.cluster.RedisCluster`, the hosts being its
  startup nodes. The client learns the slot map from them and refreshes it on ``MOVED``,
  ``ASK`` and ``CLUSTERDOWN``. Cluster has only database 0.

A URL that cannot be used raises :class:`~middleware.errors.InvalidInput` naming the field it
came from (``storage.redis_url`` unless told) and what is wrong with it; nothing connects
until the first command.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, unquote

from ..errors import InvalidInput

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.connection import AbstractConnection

__all__ = ["REDIS_URL_FORMS", "redis_client"]

#: The schemes :func:`redis_client` accepts (what a definition's ``storage.redis_url`` may use).
REDIS_URL_FORMS = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
)

_SENTINEL_OPTIONS = frozenset(
    {"db", "ssl", "sentinel_password", "sentinel_username", "socket_timeout", "socket_connect_timeout"}
)
_CLUSTER_OPTIONS = frozenset({"socket_timeout", "socket_connect_timeout"})
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def redis_client(url: str, *, field: str = "storage.redis_url", **kwargs: Any) -> Redis:
    """A ``redis.asyncio`` client for ``url`` (see the module docstring for the forms).

    Args:
        url: The storage URL.
        field: The setting ``url`` came from, named in the error when it cannot be used.
        **kwargs: Connection options for redis-py (``socket_timeout``, ``socket_connect_timeout``
            ...); options in the URL win.

    Returns:
        A client with the command methods of :class:`redis.asyncio.Redis`; for a cluster URL a
        :class:`redis.asyncio.cluster.RedisCluster` (the same command methods, one slot per
        multi-key command), typed as ``Redis`` so the stores need not know the deployment.

    Raises:
        InvalidInput: the URL has an unknown scheme, no host, no Sentinel service name, a
            database on a cluster, a bad port, or an option that is not understood.
    """
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise InvalidInput.single(
            field, f"{_redacted(url)!r} is not a URL: use one of {', '.join(REDIS_URL_FORMS)}"
        )
    if scheme in ("redis", "rediss", "unix"):
        return _standalone(url, field, kwargs)
    if scheme in ("redis+sentinel", "rediss+sentinel"):
        return _sentinel(rest, scheme.startswith("rediss"), field, kwargs)
    if scheme in ("redis+cluster", "rediss+cluster"):
        return _cluster(rest, scheme.startswith("rediss"), field, kwargs)
    raise InvalidInput.single(field, f"unknown scheme {scheme}://: use one of {', '.join(REDIS_URL_FORMS)}")


def _standalone(url: str, field: str, kwargs: dict[str, Any]) -> Redis:
    from redis.asyncio import ConnectionPool, Redis

    try:
        pool = ConnectionPool.from_url(url, **kwargs)
    except ValueError as exc:  # redis-py's own parse errors (bad port, db, option value)
        raise InvalidInput.single(field, f"{_redacted(url)}: {exc}") from None
    pool.connection_class = _dropped_when_read_only(pool.connection_class)
    return Redis.from_pool(pool)


def _sentinel(rest: str, ssl: bool, field: str, kwargs: dict[str, Any]) -> Redis:
    from redis.asyncio.sentinel import Sentinel

    auth, hosts, path, options = _split(rest, field, default_port=26379, allowed=_SENTINEL_OPTIONS)
    service = unquote(path.strip("/"))
    if not service or "/" in service:
        raise InvalidInput.single(
            field, "a Sentinel URL needs the service name as its path: redis+sentinel://host:26379/mymaster"
        )
    db = _integer(options.pop("db", "0"), "db", field)
    ssl = _boolean(options.pop("ssl", "true" if ssl else "false"), "ssl", field)
    timeouts = {k: _number(options.pop(k), k, field) for k in list(options) if k.startswith("socket_")}
    connection = {**kwargs, **timeouts, **auth, "db": db, "ssl": ssl}
    sentinel_auth = {
        k.removeprefix("sentinel_"): options.pop(k)
        for k in ("sentinel_username", "sentinel_password")
        if k in options
    }
    sentinel_kwargs = {k: v for k, v in connection.items() if k.startswith("socket_")}
    sentinel_kwargs.update(sentinel_auth)
    if ssl:
        sentinel_kwargs["ssl"] = True
    sentinel = Sentinel(hosts, sentinel_kwargs=sentinel_kwargs, **connection)  # type: ignore[no-untyped-call]
    primary = sentinel.master_for(
        service, redis_class=_sentinel_primary_class(), connection_pool_class=_following_pool_class()
    )
    return cast("Redis", primary)


def _cluster(rest: str, ssl: bool, field: str, kwargs: dict[str, Any]) -> Redis:
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    auth, hosts, path, options = _split(rest, field, default_port=6379, allowed=_CLUSTER_OPTIONS)
    if path.strip("/") not in ("", "0"):
        raise InvalidInput.single(field, f"a Redis Cluster has only database 0, not {path.strip('/')!r}")
    timeouts = {k: _number(v, k, field) for k, v in options.items()}
    nodes = [ClusterNode(host, port) for host, port in hosts]
    client = RedisCluster(startup_nodes=nodes, ssl=ssl, **{**kwargs, **timeouts, **auth})
    # connection_class is not an argument of RedisCluster: set where its nodes are made
    safe = _loop_bound(client.connection_kwargs["connection_class"])
    client.connection_kwargs["connection_class"] = safe
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = safe  # type: ignore[assignment]  # a Connection subclass
    return cast("Redis", client)


def _sentinel_primary_class() -> type[Redis]:
    from redis.asyncio import Redis

    class SentinelPrimary(Redis):
        """The primary's client; closing it also closes the connections to the Sentinels."""

        async def aclose(self, close_connection_pool: bool | None = None) -> None:
            await super().aclose(close_connection_pool)
            for sentinel in self.connection_pool.sentinel_manager.sentinels:  # type: ignore[attr-defined]
                await sentinel.aclose()

    return SentinelPrimary


#: How often a Sentinel client asks the Sentinels where the primary is, besides on connecting.
SENTINEL_RECHECK_S = 1.0


def _following_pool_class() -> type[Any]:
    from redis.asyncio.sentinel import MasterNotFoundError, SentinelConnectionPool

    class FollowingSentinelPool(SentinelConnectionPool):
        """redis-py's pool asks the Sentinels only when it opens a connection, so after a
        ``SENTINEL FAILOVER`` of a live primary its pooled connections go on writing to the old
        primary until Sentinel demotes it (~10 s: writes then lost). This one also asks at most
        every :data:`SENTINEL_RECHECK_S` when it hands out a connection, and reconnects one that
        is not on the primary the Sentinels name (one ``SENTINEL MASTERS`` per second per pool)."""

        _checked_at = float("-inf")

        async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            now = time.monotonic()
            if self.is_master and now - self._checked_at >= SENTINEL_RECHECK_S:
                self._checked_at = now
                with contextlib.suppress(MasterNotFoundError):  # connecting raises it, if it must
                    await self.get_master_address()  # type: ignore[no-untyped-call]  # new: idle ones dropped
            connection = await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            primary = self.master_address
            if (
                self.is_master
                and primary is not None
                and connection.is_connected
                and (connection.host, connection.port) != primary
            ):  # busy while the address changed: on the old primary still
                await connection.disconnect()
                await connection.connect()
            return connection

    return FollowingSentinelPool


def _split(
    rest: str, field: str, *, default_port: int, allowed: frozenset[str]
) -> tuple[dict[str, str], list[tuple[str, int]], str, dict[str, str]]:
    """``[user:pass@]host:port[,host:port]/path?query`` -> (auth, hosts, path, options)."""
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    path = slash + path
    auth: dict[str, str] = {}
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon:
            auth["password"] = unquote(password)
        if user:
            auth["username"] = unquote(user)
    hosts = [_host(part, default_port, field) for part in netloc.split(",") if part]
    if not hosts:
        raise InvalidInput.single(field, "no host: list host:port[,host:port...] after the scheme")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidInput.single(
            field, f"unknown option {', '.join(unknown)} (known: {', '.join(sorted(allowed)) or 'none'})"
        )
    return auth, hosts, path, options


def _host(part: str, default_port: int, field: str) -> tuple[str, int]:
    if part.startswith("["):  # [::1]:26379
        host, _, after = part[1:].partition("]")
        port_text = after.removeprefix(":")
    else:
        host, _, port_text = part.partition(":")
    if not host:
        raise InvalidInput.single(field, f"{part!r}: no host name")
    return host, _integer(port_text, "port", field) if port_text else default_port


def _integer(text: str, name: str, field: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidInput.single(field, f"{name} {text!r} is not a whole number") from None


def _number(text: str, name: str, field: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidInput.single(field, f"{name} {text!r} is not a number") from None


def _boolean(text: str, name: str, field: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise InvalidInput.single(field, f"{name} {text!r} is not true or false")


def _redacted(url: str) -> str:
    """``url`` without its password (for error messages)."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    return f"{scheme}{sep}{netloc}{slash}{path}"


_READ_ONLY_AWARE: dict[type[Any], type[Any]] = {}


def _dropped_when_read_only(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` made to leave the pool when answered ``READONLY``: the pool disconnects it on
    release, so the next command opens a new connection instead of writing to a replica forever."""
    from redis.exceptions import ReadOnlyError

    if base in _READ_ONLY_AWARE:
        return _READ_ONLY_AWARE[base]

    class DroppedWhenReadOnly(base):  # type: ignore[valid-type,misc]
        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super().read_response(*args, **kwargs)
            except ReadOnlyError:
                self.mark_for_reconnect()  # the pool disconnects it on release (not mid-pipeline)
                raise

    DroppedWhenReadOnly.__name__ = DroppedWhenReadOnly.__qualname__ = f"DroppedWhenReadOnly{base.__name__}"
    _READ_ONLY_AWARE[base] = DroppedWhenReadOnly
    return DroppedWhenReadOnly


_LOOP_BOUND: dict[type[Any], type[Any]] = {}


def _loop_bound(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` made to reconnect when it was opened on another event loop than the caller's.

    redis-py's cluster client queues each command of a transaction (``pipeline(transaction=True)``)
    by running ``asyncio.run`` in a thread (``TransactionStrategy.execute_command``); when the
    client must first learn the slot map again (after a failover), it does so there, and the
    connections it opens stay in the nodes' pools bound to that thread's loop, closed once the
    command is queued. The next command on one of them failed with ``RuntimeError: Event loop is
    closed`` (not a Redis error: ``INTERNAL`` on Submit during a cluster failover). A connection
    of another loop has its socket closed directly (its loop is gone) and a new one is made on
    this loop.
    """
    import asyncio

    if base in _LOOP_BOUND:
        return _LOOP_BOUND[base]

    class LoopBound(base):  # type: ignore[valid-type,misc]
        def _on_another_loop(self) -> bool:
            writer = getattr(self, "_writer", None)
            if writer is None:
                return False
            loop = getattr(writer.transport, "_loop", None)
            return loop is not None and loop is not asyncio.get_running_loop()

        def _drop(self) -> None:
            """Close the socket itself (its transport's loop is closed: it cannot) and forget it:
            ``is_connected`` is then False, so the next command connects anew."""
            transport: Any = getattr(self, "_writer").transport  # noqa: B009 (typed by redis-py as unknown)
            sock = getattr(transport, "_sock", None)
            if sock is not None:
                sock.close()
                transport._sock = None  # closed here: neither the transport nor its stream
                transport._closing = True  # writer may warn of it when collected
            self._reader = self._writer = None

        async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
            if self._on_another_loop():
                self._drop()
            await super().send_packed_command(*args, **kwargs)

        async def disconnect(self, *args: Any, **kwargs: Any) -> None:
            if self._on_another_loop():
                self._drop()
            await super().disconnect(*args, **kwargs)

    LoopBound.__name__ = LoopBound.__qualname__ = f"LoopBound{base.__name__}"
    _LOOP_BOUND[base] = LoopBound
    return LoopBound
