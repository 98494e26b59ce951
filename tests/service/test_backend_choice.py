"""Every backend of the server is chosen by one function from the definition's storage section; the
workers' remote factory is injected when the agency's agent registry is built."""

from __future__ import annotations

import os

from middleware.server.backends import choose_backends
from middleware.server.settings import definition_from

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


async def test_memory_storage_chooses_every_memory_backend() -> None:
    definition = definition_from({}, env={})
    agency = choose_backends(definition, "agency")
    messaging = choose_backends(definition, "messaging")
    assert type(agency.catalog).__name__ == "MemoryCatalog"
    assert type(agency.stats).__name__ == "MemoryRoutingStats"
    assert agency.tasks is None and agency.sessions is None  # the agency's memory defaults
    assert agency.leases is None  # one process: no takeover
    assert agency.events is None
    assert [type(s).__name__ for s in vars(messaging).values()] == [
        "MemoryMailbox",
        "MemoryBuckets",
        "MemorySubscriptions",
        "MemoryDirectory",
        "MemoryBoard",
    ]


async def test_redis_storage_chooses_every_redis_backend_under_the_key_prefix(redis_prefix: str) -> None:
    definition = definition_from(
        {
            "storage": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": redis_prefix},
            "agency": {"usage": {"prices": {"gpt-x": {"input": 1, "output": 2}}}},  # metered
        },
        env={},
    )
    agency = choose_backends(definition, "agency")
    messaging = choose_backends(definition, "messaging")
    try:
        assert [type(s).__name__ for s in vars(agency).values()] == [
            "RedisCatalog",
            "RedisRoutingStats",
            "RedisTaskStore",
            "RedisSessionStore",
            "RedisTaskLeases",  # a replica takes over the tasks of a gateway that died
            "RedisTaskEventLog",  # a task's events, served by any replica
            "RedisUsageMeter",  # spending sums shared by the replicas (agency.usage)
        ]
        assert agency.leases is not None and agency.leases.lease_seconds == 30.0
        assert [type(s).__name__ for s in vars(messaging).values()] == [
            "RedisMailbox",
            "RedisBuckets",
            "RedisSubscriptions",
            "RedisDirectory",
            "RedisBoard",
        ]
        await messaging.subscriptions.add("news", "a")
        assert await messaging.subscriptions.members("news") == {"a"}
    finally:
        await messaging.mailboxes.close()
        for store in (
            agency.catalog,
            agency.stats,
            agency.tasks,
            agency.sessions,
            agency.leases,
            agency.events,
            agency.usage,
        ):
            close = getattr(store, "close", None) or getattr(store, "aclose", None)
            if close is not None:
                await close()


async def test_the_workers_remote_factory_is_injected_when_the_registry_is_built(
    tmp_path, monkeypatch
) -> None:
    from middleware.agents import AgentRegistry
    from middleware.server.bootstrap import build_agency

    # the registry's remote factory is read-only here: the agency must be built with it
    monkeypatch.setattr(AgentRegistry, "remote_factory", property(lambda self: self._remote_factory))
    token = tmp_path / "workers-token"
    token.write_text("s3cret-workers-token\n")
    definition = definition_from(
        {"workers": {"token_file": str(token)}}, env={"AGENCY_AUDIT_DIR": str(tmp_path)}
    )
    agency = await build_agency(definition)
    try:
        assert AgentRegistry().remote_factory is None  # the core has no transport of its own
        assert agency.agents.remote_factory is not None
    finally:
        await agency.close()
