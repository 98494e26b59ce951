"""Who runs a task right now: owner leases on running tasks, so another replica can take over.

While a gateway runs a task (from ``task.submitted`` or ``task.resumed`` until the task stops
or is cut short) it holds the task's **lease**: its node id, a token of this process, and an
expiry it renews every third of ``lease_seconds`` (:class:`middleware.takeover.Takeover`).
When the gateway dies (kill -9, a lost machine) its leases expire; every replica looks for
expired leases and :meth:`TaskLeases.take` — a compare-and-set — gives each expired lease
to exactly one of them, which marks the task ``interrupted`` and then releases the lease.

:class:`MemoryTaskLeases` (``memory_task_leases.py``) serves one process (tests, an embedded
agency); ``RedisTaskLeases`` (``redis/task_leases.py``) is shared by replicas and reads the
time from the Redis server, so the gateways' clocks need not agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Holder", "TaskLeases"]


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lease: a gateway's node id and a token of its process (a node restarted
    under the same id is another holder: it never renews its predecessor's leases)."""

    node: str
    token: str

    def encode(self) -> str:
        """As stored: ``TOKEN NODE`` (the token is hex, so the first space splits them)."""
        return f"{self.token} {self.node}"

    @classmethod
    def decode(cls, text: str) -> Holder:
        token, _, node = text.partition(" ")
        return cls(node=node, token=token)


@runtime_checkable
class TaskLeases(Protocol):
    """Leases on running tasks: held, renewed and released by their gateway, taken over once
    expired."""

    lease_seconds: float

    async def hold(self, task_id: str, holder: Holder, *, force: bool = False) -> bool:
        """Take the lease of ``task_id`` for ``holder`` (or renew it if already its own).

        Args:
            force: Take it even from another holder: the caller checked, under the task's lock,
                that no gateway runs the task (it waits, or was interrupted), so another
                holder's lease on it is one its gateway has not dropped yet.

        Returns:
            False when another holder has a lease on the task, live or expired, and not
            ``force`` (an expired one is only ever removed by :meth:`take`, so its task is
            always taken over).
        """
        ...

    async def renew(
        self, task_ids: Sequence[str], holder: Holder, *, release: Sequence[str] = ()
    ) -> list[str]:
        """Extend the leases ``holder`` holds on ``task_ids`` by ``lease_seconds`` from now, and
        drop its leases on ``release`` (tasks that stopped since the last round), in one go.

        Returns:
            The ids of ``task_ids`` whose lease ``holder`` no longer holds (taken over, or never
            held).
        """
        ...

    async def release(self, task_id: str, holder: Holder) -> None:
        """Drop the lease of ``task_id`` if ``holder`` holds it (the task stopped)."""
        ...

    async def expired(self, *, limit: int = 100) -> list[str]:
        """Up to ``limit`` task ids whose lease has expired, the oldest first."""
        ...

    async def take(self, task_id: str) -> Holder | None:
        """Claim the takeover of ``task_id`` if its lease has expired, atomically: the lease is
        extended by ``lease_seconds`` (the taker's time to mark the task), its holder kept.

        The taker then releases it for that holder (:meth:`release`) once the task is marked; a
        taker that fails midway leaves it to expire again, to be taken by any replica.

        Returns:
            The holder it has, to exactly one caller; None to every other (the lease is live,
            gone, or another caller took it first).
        """
        ...

    async def close(self) -> None: ...
