"""Keeping in-process agents alive in a catalog with a lease.

Remote agents renew their own lease (``CatalogService.Heartbeat``). Agents that run
inside a gateway cannot, so the gateway does it for them: :class:`KeepAlive` heartbeats
the keys it is given every third of the lease while it is open. Only the gateway that
hosts an agent renews it, so when that gateway dies its agents go stale in a shared
catalog instead of being routed to forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from .catalog import Catalog
from .errors import AgencyError

__all__ = ["KeepAlive"]

log = logging.getLogger("agency.liveness")


class KeepAlive:
    """Heartbeats ``keys()`` every ``interval`` seconds while open (``async with``).

    Args:
        catalog: Where the entries live.
        keys: Returns the keys (``name@version``) to renew, asked afresh each round.
        interval: Seconds between rounds (default: a third of the catalog's lease; no
            lease means nothing can go stale, so nothing runs).
        sleep: How to wait between rounds (injected in tests).
    """

    def __init__(
        self,
        catalog: Catalog,
        keys: Callable[[], Iterable[str]],
        *,
        interval: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        lease = getattr(catalog, "lease_seconds", None)
        self.catalog = catalog
        self.keys = keys
        self.interval = interval if interval is not None else (lease / 3 if lease else None)
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    async def beat(self) -> int:
        """One round: renew every key now; returns how many were renewed."""
        renewed = 0
        for key in list(self.keys()):
            try:
                await self.catalog.heartbeat(key)
                renewed += 1
            except AgencyError as exc:  # deregistered meanwhile, or Redis briefly down
                log.warning("heartbeat for %s failed: %s", key, exc)
        return renewed

    async def _run(self) -> None:
        assert self.interval is not None
        while True:
            await self._sleep(self.interval)
            await self.beat()

    async def __aenter__(self) -> KeepAlive:
        if self.interval is not None and self._task is None:
            self._task = asyncio.create_task(self._run(), name="agency-keepalive")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
