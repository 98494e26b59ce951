"""Shared fixtures: a fresh Agency, a real Redis (flushed per test, own DB), a real gRPC server."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

# No property test fails for being slow: the machine is shared and the suite runs on every core
# (hypothesis' default 200 ms deadline per example is a timed assertion).
settings.register_profile("agency", deadline=None)
settings.load_profile("agency")

REDIS_URL = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def redis_client() -> AsyncIterator[object]:
    """A real Redis connection on a test database; keys are namespaced per test."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:  # CI must not silently skip these
        pytest.fail(f"Redis is required at {REDIS_URL}: {exc}")
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """Throwaway certificates for TLS tests (see tests/pki.py)."""
    from pki import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def redis_prefix() -> str:
    """A unique key prefix so parallel/previous tests never see each other's keys."""
    return f"test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
async def demo_agency():
    """The reference scenario's agency, with no real backoff sleeping."""
    from middleware import Agency
    from middleware.agents import AgentRegistry
    from middleware.demo import build_demo_agency
    from middleware.server.remote_agent import RemoteAgent

    async def no_sleep(_: float) -> None:
        return None

    # served over gRPC by grpc_gateway, where workers register: the gateway calls them over gRPC
    remote = AgentRegistry(remote_factory=RemoteAgent.factory())
    agency = await build_demo_agency(Agency(sleep=no_sleep, agents=remote))
    yield agency
    await agency.close()


@pytest.fixture
async def grpc_gateway(demo_agency):
    """A real gRPC server on port 0 over the demo agency, and a channel to it."""
    import grpc

    from middleware.server.grpc_api import build_server

    server = build_server(demo_agency, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield demo_agency, channel, server
    await channel.close()
    await server.stop(0)


_REDIS_HINTS = ("redis://", "import redis", "redis.asyncio", "redis_client", "redis_prefix")
_module_uses_redis: dict[str, bool] = {}


def uses_redis(item: pytest.Item) -> bool:
    """Whether a test talks to a Redis server: a Redis fixture, or a module that connects to one."""
    if any("redis" in name for name in getattr(item, "fixturenames", ())):
        return True
    path = str(item.path)
    if path not in _module_uses_redis:
        text = item.path.read_text(encoding="utf-8") if item.path.suffix == ".py" else ""
        _module_uses_redis[path] = any(hint in text for hint in _REDIS_HINTS)
    return _module_uses_redis[path]


#: What to run when the local Redis is not there (printed once, then the session stops).
REDIS_HINT = (
    "start it with: redis-server --daemonize yes --port 6379 --save '' --appendonly no "
    "(Debian: apt-get install redis-server; or: bash .ci/run, which starts it), "
    "or leave its tests out: pytest -m 'not redis'"
)


def redis_unreachable(url: str = REDIS_URL) -> str:
    """Why the test Redis at ``url`` does not answer a PING ('' when it does): one attempt, 2 s."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return ""


#: The browser the console's tests drive (Debian's package; never `playwright install`).
CHROMIUM = os.environ.get("AGENCY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_HINT = (
    "install it with: apt-get install chromium (bash .ci/run installs it when missing), "
    "or leave the browser tests out: pytest --deselect tests/humans/test_console_browser.py"
)


def _selected_modules_using(config: pytest.Config, hints: tuple[str, ...]) -> bool:
    """Whether a test module under the run's paths mentions one of ``hints`` (for Redis the same
    text hints as :func:`uses_redis`), known before anything is collected."""
    root = Path(config.invocation_params.dir)
    for arg in config.args:
        path = root / str(arg).split("::", 1)[0]
        files = sorted(path.rglob("test_*.py")) if path.is_dir() else [path] if path.suffix == ".py" else []
        for file in files:
            if "node_modules" in file.parts:
                continue
            text = file.read_text(encoding="utf-8", errors="replace")
            if any(hint in text for hint in hints):
                return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Fail fast, once: when the selected tests need the local Redis and it does not answer, or
    the console's browser tests need Chromium and it is not installed, stop before any test runs
    with one message and the command that fixes it (instead of hundreds of identical failures,
    minutes later). Checked once, in the controlling process (before the xdist workers start);
    ``-m "not redis"`` runs without Redis."""
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller checked
    browser = _selected_modules_using(config, ("async_playwright",))
    if browser and not os.access(CHROMIUM, os.X_OK):
        pytest.exit(
            f"Chromium is required at {CHROMIUM} by the console's browser tests and is not there; "
            f"{CHROMIUM_HINT}",
            returncode=3,
        )
    if "not redis" in " ".join((config.getoption("markexpr", "") or "").split()):
        return
    if not _selected_modules_using(config, _REDIS_HINTS):
        return
    why = redis_unreachable()
    if why:
        pytest.exit(
            f"Redis is required at {REDIS_URL} by the selected tests and does not answer ({why}); "
            f"{REDIS_HINT}",
            returncode=3,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply the `redis` marker, so `pytest -m redis` / `-m "not redis"` select by it."""
    for item in items:
        if uses_redis(item):
            item.add_marker(pytest.mark.redis)
