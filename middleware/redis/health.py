"""Watch the backends a gateway needs (Redis) and say whether it can serve.

``BackendMonitor`` runs named async checks on an interval and calls ``on_change``
when the overall verdict flips, so the gRPC health service can report
NOT_SERVING while Redis cannot take the gateway's writes and SERVING again when it can, and
the transport can refuse calls at once with UNAVAILABLE instead of letting them hang.

The Redis check is a write, not a PING: a PING succeeds on a read-only replica (a primary that
was demoted, or a URL pointed at a replica), on a server out of memory and, depending on the
node, in a cluster that lost a master; ``SET key PX`` fails in every one of these cases
(``READONLY``, ``OOM``, ``CLUSTERDOWN``, ``MASTERDOWN``) as every store's next write would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from ..background import BackgroundErrorHook, LoopErrors

__all__ = ["HEALTH_KEY", "PROBE_TTL_MS", "BackendMonitor", "redis_check", "redis_monitor"]

log = logging.getLogger("agency.health")

Check = Callable[[], Awaitable[None]]


#: The key the write probe sets (under the storage prefix), gone ``PROBE_TTL_MS`` after.
HEALTH_KEY = "health"
PROBE_TTL_MS = 10_000


def redis_check(client: object, *, timeout: float = 1.0, key: str | None = None) -> Check:
    """A check that a ``redis.asyncio`` client can write, within ``timeout`` seconds.

    Args:
        client: The client (standalone, Sentinel primary or cluster).
        timeout: Seconds the probe may take.
        key: The key to ``SET`` (with ``PX`` :data:`PROBE_TTL_MS`, so probes leave nothing
            behind); None only PINGs (which a read-only replica answers too).
    """

    async def check() -> None:
        async with asyncio.timeout(timeout):
            if key is None:
                await client.ping()  # type: ignore[attr-defined]
            else:
                await client.set(key, b"1", px=PROBE_TTL_MS)  # type: ignore[attr-defined]

    return check


class BackendMonitor:
    """Runs ``checks`` every ``interval`` seconds; ``healthy`` is True when all pass.

    Args:
        checks: name -> async callable that raises when the backend is unusable.
        interval: seconds between rounds.
        on_change: called with the new verdict whenever it flips (and once at start).
        on_error: called with ``"backend-monitor"`` when a round itself fails (not a check:
            e.g. ``on_change`` raised); the loop goes on.
    """

    def __init__(
        self,
        checks: Mapping[str, Check],
        *,
        interval: float = 1.0,
        on_change: Callable[[bool], Awaitable[None]] | None = None,
        on_error: BackgroundErrorHook | None = None,
    ) -> None:
        self._checks = dict(checks)
        self._errors = LoopErrors("backend-monitor", on_error=on_error, cap=interval, logger=log)
        self._interval = interval
        self._on_change = on_change
        self.healthy: bool | None = None
        self.failing: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        self._cleanups: list[Callable[[], Awaitable[None]]] = []

    def add_check(self, name: str, check: Check) -> None:
        """Add a check (e.g. that the gateway's own agents are routable) to every round."""
        self._checks[name] = check

    def on_stop(self, cleanup: Callable[[], Awaitable[None]]) -> None:
        """Await ``cleanup`` when the monitor stops (e.g. to close the client its checks use)."""
        self._cleanups.append(cleanup)

    async def check_once(self) -> bool:
        """Run every check now and update ``healthy`` (notifying on a flip)."""
        failing: dict[str, str] = {}
        for name, check in self._checks.items():
            try:
                await check()
            except Exception as exc:  # any failure means "not usable"
                failing[name] = f"{type(exc).__name__}: {exc}"
        healthy = not failing
        self.failing = failing
        if healthy != self.healthy:
            was, self.healthy = self.healthy, healthy
            if healthy:
                if was is False:  # not at start: only after an outage
                    log.warning("backends healthy again")
            else:
                log.error("backend unavailable: %s", failing)
            if self._on_change is not None:
                await self._on_change(healthy)
            async with self._changed:
                self._changed.notify_all()
        return healthy

    async def wait_for(self, healthy: bool) -> None:
        """Wait until the verdict is ``healthy`` (for tests and start-up)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.healthy is healthy)

    async def start(self) -> None:
        await self.check_once()
        self._task = asyncio.create_task(self._loop(), name="backend-monitor")

    async def _loop(self) -> None:
        wait = self._interval
        while True:
            await asyncio.sleep(wait)
            try:
                await self.check_once()
            except Exception as exc:  # the monitor must outlive whatever fails in a round
                wait = max(self._errors.failed(exc), self._interval)
            else:
                self._errors.succeeded()
                wait = self._interval

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        cleanups, self._cleanups = self._cleanups, []
        for cleanup in cleanups:
            await cleanup()


def redis_monitor(
    url: str,
    on_change: Callable[[bool], Awaitable[None]] | None = None,
    *,
    interval: float = 1.0,
    timeout: float = 1.0,
    on_error: BackgroundErrorHook | None = None,
    prefix: str = "agency:",
) -> BackendMonitor:
    """A monitor of the Redis at ``url`` (any form :func:`~.connection.redis_client` takes),
    with its own client (closed when the monitor stops): the check writes
    ``{prefix}health`` (see :func:`redis_check`)."""
    from .connection import redis_client

    client = redis_client(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    monitor = BackendMonitor(
        {"redis": redis_check(client, timeout=timeout, key=prefix + HEALTH_KEY)},
        interval=interval,
        on_change=on_change,
        on_error=on_error,
    )
    monitor.on_stop(client.aclose)
    return monitor
