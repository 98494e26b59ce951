"""Keeping in-process agents alive in a catalog with a lease.

Remote agents renew their own lease (``CatalogService.Heartbeat``). Agents that run
inside a gateway cannot, so the gateway does it for them: :class:`KeepAlive` heartbeats
the keys it is given every third of the lease while it is open. Only the gateway that
hosts an agent renews it, so when that gateway dies its agents go stale in a shared
catalog instead of being routed to forever.

The loop survives backend outages (see :mod:`middleware.background`): a round that
fails (Redis down) is counted and retried with a backoff, so the leases are renewed
again within moments of Redis coming back; an entry that is gone (Redis restarted
without persistence, or its key expired during the outage) is registered again with
the contract last seen for it (``restore``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable

from .background import BackgroundErrorHook, LoopErrors
from .catalog import Catalog
from .contracts import CapabilityContract
from .errors import NotFound, Unavailable

__all__ = ["KeepAlive"]

log = logging.getLogger("agency.liveness")

Restore = Callable[[CapabilityContract], Awaitable[object]]


class KeepAlive:
    """Heartbeats ``keys()`` every ``interval`` seconds while open (``async with``).

    Args:
        catalog: Where the entries live.
        keys: Returns the keys (``name@version``) to renew, asked afresh each round.
        interval: Seconds between rounds (default: a third of the catalog's lease; no
            lease means nothing can go stale, so nothing runs).
        sleep: How to wait between rounds (injected in tests).
        restore: Registers a contract again when its entry is gone (default:
            ``catalog.register(contract, replace=True)``); the contract is the one the
            catalog last returned for the key.
        on_error: Called with ``"keepalive"`` for every failed round (a metric).
    """

    def __init__(
        self,
        catalog: Catalog,
        keys: Callable[[], Iterable[str]],
        *,
        interval: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        restore: Restore | None = None,
        on_error: BackgroundErrorHook | None = None,
    ) -> None:
        lease = getattr(catalog, "lease_seconds", None)
        self.catalog = catalog
        self.keys = keys
        self.interval = interval if interval is not None else (lease / 3 if lease else None)
        self._sleep = sleep
        self._restore = restore
        self._task: asyncio.Task[None] | None = None
        self._contracts: dict[str, CapabilityContract] = {}
        self.errors = LoopErrors(
            "keepalive", on_error=on_error, cap=min(self.interval or 1.0, 1.0), logger=log
        )
        self.restored = 0

    async def remember(self) -> None:
        """Note the contract of every key now (what ``restore`` registers if it goes)."""
        for key in list(self.keys()):
            with contextlib.suppress(NotFound):
                self._contracts[key] = (await self.catalog.get(key)).contract

    async def beat(self) -> int:
        """One round: renew every key now; returns how many were renewed.

        Raises:
            Exception: the first backend error of the round (after trying every key).
        """
        renewed = 0
        first: Exception | None = None
        for key in list(self.keys()):
            try:
                try:
                    self._contracts[key] = (await self.catalog.heartbeat(key)).contract
                except NotFound:
                    if not await self._put_back(key):
                        continue
                renewed += 1
            except Exception as exc:  # the backend is down: the round failed, the loop goes on
                first = first or exc
        if first is not None:
            raise first
        return renewed

    async def _put_back(self, key: str) -> bool:
        """Register ``key`` again with its last contract; False when none is known."""
        contract = self._contracts.get(key)
        if contract is None:
            log.warning("heartbeat for %s: not in the catalog, and no contract known to restore", key)
            return False
        if self._restore is not None:
            await self._restore(contract)
        else:
            await self.catalog.register(contract, replace=True)
        self.restored += 1
        log.warning("%s was gone from the catalog: registered again", key)
        return True

    async def check(self) -> None:
        """Raise :class:`Unavailable` unless every key is in the catalog and live (routable).

        A check for :class:`~middleware.redis.health.BackendMonitor`: health reports
        NOT_SERVING while the gateway's own agents cannot be routed to.
        """
        missing: list[str] = []
        for key in list(self.keys()):
            try:
                if (await self.catalog.get(key)).stale:
                    missing.append(f"{key} (stale)")
            except NotFound:
                missing.append(f"{key} (not registered)")
        if missing:
            raise Unavailable("agents not routable: " + ", ".join(missing))

    async def _run(self) -> None:
        assert self.interval is not None
        wait = self.interval
        while True:
            await self._sleep(wait)
            try:
                await self.beat()
            except Exception as exc:
                wait = self.errors.failed(exc)
            else:
                self.errors.succeeded()
                wait = self.interval

    async def __aenter__(self) -> KeepAlive:
        if self.interval is not None and self._task is None:
            with contextlib.suppress(Exception):  # a backend down at start: remembered on the first beat
                await self.remember()
            self._task = asyncio.create_task(self._run(), name="agency-keepalive")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
