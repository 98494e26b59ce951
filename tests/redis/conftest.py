"""Real Redis deployments as fixtures (tests/redis_servers.py): each starts Debian's processes on
free ports and stops them by PID. Their names hold "redis", so tests using them carry the
``redis`` marker (tests/conftest.py) and CI runs them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from redis_servers import Cluster, RedisServer, SentinelSet, cluster, redis_server, sentinel_set

#: The tests' shared Redis, as tests/conftest.py names it: a module here that imports
#: ``conftest`` may get this one (both are "conftest" to Python), so it says the same.
REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
def redis_standalone() -> Iterator[RedisServer]:
    """A redis-server of this test's own (it may stop, restart or demote it)."""
    with redis_server() as server:
        yield server


@pytest.fixture(scope="module")
def redis_sentinel_set() -> Iterator[SentinelSet]:
    """1 primary, 1 replica, 3 Sentinels; a test may fail it over (``failover``)."""
    with sentinel_set() as the_set:
        yield the_set


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[Cluster]:
    """3 masters with a replica each; a test may kill a master (``kill_master``)."""
    with cluster() as the_cluster:
        yield the_cluster
