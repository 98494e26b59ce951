"""Task leases in this process: for an embedded agency and for tests of the takeover (two
``Agency`` objects sharing one :class:`~middleware.memory_task_store.MemoryTaskStore` and one
:class:`MemoryTaskLeases` behave as two replicas). Time comes from an injected clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from .task_leases import Holder

__all__ = ["MemoryTaskLeases"]


class MemoryTaskLeases:
    """A :class:`~middleware.task_leases.TaskLeases` in a dict.

    Args:
        lease_seconds: How long a lease lasts unless renewed.
        clock: Seconds, monotonic (injected in tests to step past a lease).
    """

    def __init__(self, lease_seconds: float = 30.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be > 0")
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._leases: dict[str, tuple[Holder, float]] = {}  # task id -> (holder, expiry)

    async def hold(self, task_id: str, holder: Holder, *, force: bool = False) -> bool:
        current = self._leases.get(task_id)
        if current is not None and current[0] != holder and not force:
            return False
        self._leases[task_id] = (holder, self._clock() + self.lease_seconds)
        return True

    async def renew(
        self, task_ids: Sequence[str], holder: Holder, *, release: Sequence[str] = ()
    ) -> list[str]:
        for task_id in release:
            await self.release(task_id, holder)
        until = self._clock() + self.lease_seconds
        lost = []
        for task_id in task_ids:
            current = self._leases.get(task_id)
            if current is None or current[0] != holder:
                lost.append(task_id)
            else:
                self._leases[task_id] = (holder, until)
        return lost

    async def release(self, task_id: str, holder: Holder) -> None:
        current = self._leases.get(task_id)
        if current is not None and current[0] == holder:
            del self._leases[task_id]

    async def expired(self, *, limit: int = 100) -> list[str]:
        now = self._clock()
        due = sorted((until, task_id) for task_id, (_, until) in self._leases.items() if until <= now)
        return [task_id for _, task_id in due[:limit]]

    async def take(self, task_id: str) -> Holder | None:
        current = self._leases.get(task_id)
        now = self._clock()
        if current is None or current[1] > now:
            return None
        self._leases[task_id] = (current[0], now + self.lease_seconds)
        return current[0]

    async def close(self) -> None:
        return None
