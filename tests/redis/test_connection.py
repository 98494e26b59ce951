"""A storage URL becomes redis-py's own client for its deployment, or a refusal naming the field.

No server is needed: nothing connects before the first command. The clients are tried against
real servers in tests/redis/test_failover_health.py and test_store_tour.py.
"""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

from middleware.errors import InvalidInput
from middleware.redis.connection import redis_client
from middleware.server.definition import StorageSettings


async def test_a_standalone_url_keeps_redis_py_options_and_drops_connections_answered_read_only() -> None:
    client = redis_client("redis://u:secret@db.example:6380/3?socket_timeout=2")
    assert type(client) is Redis
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"], kwargs["username"], kwargs["password"]) == (
        "db.example",
        6380,
        3,
        "u",
        "secret",
    )
    assert kwargs["socket_timeout"] == 2
    assert client.connection_pool.connection_class.__name__ == "DroppedWhenReadOnlyConnection"
    tls = redis_client("rediss://db.example/0")
    assert tls.connection_pool.connection_class.__name__ == "DroppedWhenReadOnlySSLConnection"
    sock = redis_client("unix:///run/redis.sock?db=2")
    assert sock.connection_pool.connection_kwargs["path"] == "/run/redis.sock"
    for c in (client, tls, sock):
        await c.aclose()


async def test_a_sentinel_url_asks_the_sentinels_for_the_primary_of_its_service() -> None:
    client = redis_client(
        "redis+sentinel://app:pw@s1:26380,s2,[::1]:26381/orders?db=4&sentinel_password=sp&socket_timeout=1.5"
    )
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "orders" and pool.is_master
    sentinels = pool.sentinel_manager.sentinels
    addresses = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in sentinels
    ]
    assert addresses == [("s1", 26380), ("s2", 26379), ("::1", 26381)]
    assert all(s.connection_pool.connection_kwargs["password"] == "sp" for s in sentinels)
    assert all(s.connection_pool.connection_kwargs["socket_timeout"] == 1.5 for s in sentinels)
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["username"], kwargs["password"]) == (4, "app", "pw")
    await client.aclose()


async def test_a_cluster_url_gives_redis_cluster_its_startup_nodes() -> None:
    client = redis_client("redis+cluster://n1:7000,n2:7001")
    assert isinstance(client, RedisCluster)
    nodes = {(n.host, n.port) for n in client.startup_nodes}
    assert nodes == {("n1", 7000), ("n2", 7001)}
    await client.aclose()


@pytest.mark.parametrize(
    ("url", "wrong"),
    [
        ("redis+sentinel://s1:26379", "service name"),
        ("redis+sentinel://s1:26379/", "service name"),
        ("redis+sentinel://s1:26379/m?colour=red", "unknown option colour"),
        ("redis+sentinel://s1:x/m", "port 'x'"),
        ("redis+sentinel:///m", "no host"),
        ("redis+sentinel://s1/m?db=one", "db 'one'"),
        ("redis+sentinel://s1/m?ssl=maybe", "ssl 'maybe'"),
        ("redis+cluster://n1:7000/2", "only database 0"),
        ("redis+cluster://n1?db=2", "unknown option db"),
        ("http://db.example", "unknown scheme http://"),
        ("db.example:6379", "not a URL"),
        ("redis://db.example:port", "Port could not be cast"),
    ],
)
def test_a_url_that_cannot_be_used_is_refused_naming_the_field_and_what_is_wrong(
    url: str, wrong: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        redis_client(url)
    assert raised.value.field == "storage.redis_url"
    assert wrong in str(raised.value)


def test_a_password_is_not_repeated_in_the_refusal() -> None:
    with pytest.raises(InvalidInput) as raised:
        redis_client("redis://u:hunter2@db.example:port/0")
    assert "hunter2" not in str(raised.value)


def test_the_definition_accepts_every_form_and_refuses_a_sentinel_url_without_its_service() -> None:
    for url in ("redis://r:6379/0", "redis+sentinel://s1:26379,s2:26379/mymaster", "redis+cluster://n1:7000"):
        assert StorageSettings(backend="redis", redis_url=url).redis_url == url
    with pytest.raises(ValueError, match="redis_url: a Sentinel URL needs the service name"):
        StorageSettings(backend="redis", redis_url="redis+sentinel://s1:26379")
