"""Taking over the tasks of a gateway that died: leases renewed, expired leases taken over.

With shared task leases (:mod:`middleware.task_leases`, Redis for replicas) every gateway
runs a :class:`Takeover`. It

* **holds** the lease of each task it runs, from the segment's start until the task stops
  (the pipeline calls :meth:`Takeover.hold` and :meth:`Takeover.release`), and saves the task
  record before every dispatch, so the shared store knows which steps are done and which
  one may be in flight;
* **renews** its leases every ``interval`` seconds (a third of the lease), and drops those of
  the tasks that stopped since the last round in the same call (a stopped task's lease, renewed
  at most an interval ago, cannot expire before then: no Redis call when a task stops);
* **sweeps** for expired leases every ``interval`` seconds: each expired lease goes to
  exactly one replica (:meth:`~middleware.task_leases.TaskLeases.take`), which marks the
  task ``interrupted`` in the shared store (with the dead node's id), appends a
  ``task.interrupted`` record naming that node to its own audit log, lowers the agent's
  ``in_flight`` count in the routing statistics when a call was in flight, and tells the
  human desk.

So a task of a gateway killed with -9 is ``interrupted`` on every replica within
``lease_seconds + interval`` (4/3 of the lease) of its last renewal. An interrupted task is
then resumed (``Agency.resume``: its interrupted step dispatched again only where the
agent's contract allows it, see :func:`redispatch_allowed`) or canceled (``Agency.cancel``).

A gateway cut off from Redis for longer than a lease loses its leases like a dead one: its
tasks are taken over, and its own next save of each is refused (the version check of the
task store), so it never writes over the replica that took them.

**The backstop for tasks with no lease at all.** No gateway path leaves a task stored in a
running state without a lease entry (the lease is taken before the task is stored, and dropped
only once the store shows the task stopped), but Redis losing data can: a Sentinel failover
without ``min-replicas-to-write`` may lose a task's final save on the old primary while its lease
release reached the new one. The sweep, which only scans the lease set, never finds such a task.
So every ``orphan_every`` rounds (default 10: every 3⅓ leases) a round also reads one page of the
task list (:meth:`~middleware.task_store.TaskStore.list`, running states, created more than two
leases ago, newest first; a page reads at most a bounded number of list rows, Redis: 1,000), and
continues with the next page in the next such round, from the newest again once the list ends.
A listed task still running, last updated more than two leases ago, that the gateway can take a
lease on (:meth:`~middleware.task_leases.TaskLeases.hold`: no lease, live or expired, exists) is
taken over as the sweep does: ``interrupted``, its ``pending.node`` the gateway of its last
transition. So such a task is ``interrupted`` within ``orphan_every`` rounds of its turn in the
walk: within ``orphan_every`` rounds when it is among the newest 1,000 tasks created more than
two leases ago and behind fewer than ``orphan_page`` running ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from .audit import AuditRecord
from .audit.record import AuditEventType
from .background import BackgroundErrorHook, LoopErrors
from .catalog import Catalog
from .contracts import CapabilityContract
from .errors import ConcurrentUpdate, NotFound
from .people.approvals import TaskObserver
from .routing_stats import RoutingStats
from .smf import utcnow
from .task_leases import Holder, TaskLeases
from .task_listing import TaskQuery
from .task_store import TaskStore
from .tasks import TaskRecord, TaskState, Transition, check_transition

__all__ = ["INTERRUPTED", "Takeover", "mark_interrupted", "redispatch_allowed"]

log = logging.getLogger("agency.takeover")

#: ``pending["kind"]`` of an interrupted task.
INTERRUPTED = "interrupted"

#: States a task is saved in while a gateway runs it: a lease that expires on one of these
#: is a task its gateway never finished.
_RUNNING = frozenset(
    {TaskState.SUBMITTED, TaskState.ROUTING, TaskState.DISPATCHED, TaskState.RETRYING, TaskState.VERIFYING}
)

Append = Callable[[AuditRecord], Awaitable[int]]


def redispatch_allowed(contract: CapabilityContract) -> str:
    """Why a step interrupted while ``contract``'s agent ran it may be dispatched again
    (``side_effect_free``, ``idempotency``), or ``""``: it may have acted, and doing it again
    could act twice."""
    if contract.side_effect_free:
        return "side_effect_free"
    if contract.idempotency:
        return "idempotency"
    return ""


def mark_interrupted(
    run: TaskRecord, *, dead_node: str, node: str, reason: str, redispatch: str = ""
) -> dict[str, Any]:
    """Move ``run`` to ``interrupted`` (it must be running) and say what was cut off.

    Args:
        dead_node: The gateway that ran it.
        node: The gateway marking it (the same one when a call is cut short locally).
        reason: Why, for people.
        redispatch: :func:`redispatch_allowed` of the agent of the step in flight, if any.

    Returns:
        The ``pending`` packet: the step, the agent in flight (if a call was), whether it may
        be dispatched again, the state and the node it was lost at.
    """
    old = run.state
    check_transition(old, TaskState.INTERRUPTED)
    names = [s.name for s in run.request.steps] or ["main"]
    step = names[run.step_index] if run.step_index < len(names) else ""  # "": at the final verification
    last = run.steps[-1] if run.steps else None
    in_flight = old is TaskState.DISPATCHED and last is not None and last.status == "running"
    pending: dict[str, Any] = {
        "kind": INTERRUPTED,
        "node": dead_node,
        "state": old.value,
        "step": step,
        "agent": last.agent if in_flight and last is not None else "",
        "in_flight": in_flight,
        "redispatch": redispatch if in_flight else "",
        "reason": reason,
        "at": utcnow().isoformat(),
    }
    run.state = TaskState.INTERRUPTED
    run.transitions.append(Transition.now(old, TaskState.INTERRUPTED, node))
    run.pending, run.reason = pending, reason
    run.updated_at = utcnow()
    return pending


class Takeover:
    """Leases of this gateway's running tasks, and the takeover of dead gateways' tasks.

    Args:
        leases: The shared leases.
        tasks: The shared task store.
        stats: Routing statistics (an in-flight call of a dead gateway is released there).
        catalog: Where the contract of an interrupted step's agent is looked up.
        node: This gateway's node id (in the records it writes).
        append: Appends an audit record to this gateway's log (``agency.audit.append``).
        observer: The human desk to tell about an interrupted task, if any (asked each time).
        interval: Seconds between rounds (default: a third of the lease).
        sleep: How to wait between rounds (injected in tests).
        on_error: Called with ``"takeover"`` for every failed round (a metric).
        batch: Expired leases taken per round at most.
        orphan_every: Every how many rounds one page of the task list is read for running tasks
            with no lease (the backstop above); 0: never.
        orphan_page: Running tasks looked at per such round at most.
        now: The current time (compared with the tasks' ``updated_at``; injected in tests).
    """

    def __init__(
        self,
        *,
        leases: TaskLeases,
        tasks: TaskStore,
        stats: RoutingStats,
        catalog: Catalog,
        node: str,
        append: Append,
        observer: Callable[[], TaskObserver | None] = lambda: None,
        interval: float | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_error: BackgroundErrorHook | None = None,
        batch: int = 100,
        orphan_every: int = 10,
        orphan_page: int = 50,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.leases = leases
        self.tasks = tasks
        self.stats = stats
        self.catalog = catalog
        self.node = node
        self.holder = Holder(node=node, token=secrets.token_hex(8))
        self.interval = interval if interval is not None else leases.lease_seconds / 3
        self._append = append
        self._observer = observer
        self._sleep = sleep
        self._batch = batch
        self._orphan_every = orphan_every
        self._orphan_page = orphan_page
        self._now = now
        self._rounds = 0
        self._orphan_token = ""  # where the walk of the task list goes on ("": from the newest)
        self._held: set[str] = set()
        self._released: set[str] = set()  # stopped since the last round: dropped by the next one
        self._task: asyncio.Task[None] | None = None
        self.errors = LoopErrors("takeover", on_error=on_error, cap=min(self.interval, 1.0), logger=log)
        self.taken: list[str] = []  # tasks this gateway took over (most recent last; bounded)

    # -------------------------------------------------------- the tasks this gateway runs
    async def hold(self, task_id: str, *, force: bool = False) -> bool:
        """Hold the lease of a task this gateway starts running; False: another gateway holds
        one on it (a task of that id runs, or awaits its takeover). ``force``: see
        :meth:`~middleware.task_leases.TaskLeases.hold` (a resume that checked the task waits)."""
        if not await self.leases.hold(task_id, self.holder, force=force):
            return False
        self._held.add(task_id)
        self._released.discard(task_id)
        return True

    def held_now(self, task_id: str) -> None:
        """This gateway holds the task's lease, taken with the task itself (a batching store's
        :meth:`~middleware.task_store.BatchingTaskStore.create_leased`): renew it as :meth:`hold` would."""
        self._held.add(task_id)
        self._released.discard(task_id)

    async def release(self, task_id: str) -> None:
        """The task stopped here (an outcome, or waiting for input): its lease goes with the next
        round (:meth:`renew`). A lease left behind (Redis failing then) expires, and the sweep
        drops it without touching the task, which is no longer running."""
        if task_id in self._held:
            self._held.discard(task_id)
            self._released.add(task_id)

    def forget(self, task_id: str) -> None:
        """Stop renewing the task's lease without releasing it: it expires, and a replica (or
        this one) takes the task over (when marking it here failed)."""
        self._held.discard(task_id)

    async def renew(self) -> list[str]:
        """Renew every lease this gateway holds and drop those of the tasks that stopped;
        returns the tasks it lost (taken over)."""
        held, released = sorted(self._held), sorted(self._released)
        lost = await self.leases.renew(held, self.holder, release=released) if held or released else []
        self._released.difference_update(released)
        for task_id in lost:
            self._held.discard(task_id)
            log.warning("task %s: lease lost (taken over by another gateway)", task_id)
        return lost

    async def interrupt(self, run: TaskRecord, why: str) -> None:
        """Mark a task this gateway cannot finish ``interrupted`` in the store now, and drop its
        lease. Whenever what the store holds is not known (the task was not running here, the
        save failed, or was refused as stale: an earlier write of this gateway may have been
        applied although it reported an error) its lease is left to expire instead, so the sweep
        (here or on a replica) reads the stored task and interrupts it if it is still running:
        no task is left running in the store without a lease."""
        if run.state not in _RUNNING:
            self.forget(run.task_id)
            return
        try:
            mark_interrupted(run, dead_node=self.node, node=self.node, reason=why)
            await self.tasks.save(run)
        except ConcurrentUpdate:  # taken over since, or our own earlier write was applied after all
            self.forget(run.task_id)
        except Exception as exc:  # the store is what failed: the lease decides
            log.warning("task %s: not marked interrupted here (%s); its lease will expire", run.task_id, exc)
            self.forget(run.task_id)
        else:
            await self.release(run.task_id)

    async def settle_cut_create(self, task_id: str, why: str) -> None:
        """Stop at once what a creation cut short before its reply left (the call cancelled while
        the store wrote the task with its lease: all of it, part of it or nothing may have been
        applied). The lease is this gateway's when it can hold it again (holding is idempotent for
        its holder; another gateway's lease means another gateway's task of that id: left alone).
        A stored task under it is marked ``interrupted`` now and its lease released; a lease on no
        task is released. Without this the task stayed ``submitted`` under a lease nobody renewed,
        and 4/3 of a lease later this gateway's own sweep took it over as a dead gateway's."""
        try:
            if not await self.leases.hold(task_id, self.holder):
                return
            try:
                stored = await self.tasks.get(task_id)
            except NotFound:
                await self.leases.release(task_id, self.holder)
                return
            self.held_now(task_id)
            await self.interrupt(stored, why)
        except Exception as exc:  # the store is what fails: the lease decides, as in interrupt()
            log.warning(
                "task %s: creation cut short and not settled here (%s); its lease will expire", task_id, exc
            )
            self.forget(task_id)

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    # ------------------------------------------------------- the tasks of dead gateways
    async def sweep(self) -> list[str]:
        """Take over every task whose lease expired (as many as one round allows); returns
        the ids this gateway took over."""
        taken = []
        for task_id in await self.leases.expired(limit=self._batch):
            if task_id in self._held:  # ours, renewed late: keep it
                continue
            holder = await self.leases.take(task_id)
            if holder is None:
                continue
            # an error here leaves the lease to expire again: this or another replica retries
            if await self.take_over(task_id, holder):
                taken.append(task_id)
            await self.leases.release(task_id, holder)
        return taken

    async def sweep_orphans(self) -> list[str]:
        """The backstop (module docstring): read the next page of the walk over the task list
        and take over each task found running with no lease; returns the ids taken over."""
        older = self._now() - timedelta(seconds=2 * self.leases.lease_seconds)
        query = TaskQuery(
            states=sorted(_RUNNING, key=lambda s: s.value),
            created_before=older,
            page_size=self._orphan_page,
            page_token=self._orphan_token,
        )
        page = await self.tasks.list(query)
        self._orphan_token = page.next_page_token
        taken = []
        for summary in page.tasks:
            task_id = summary.task_id
            if summary.updated_at >= older or task_id in self._held or task_id in self._released:
                continue  # recent (its gateway may still hold it), or this gateway's own
            if not await self.leases.hold(task_id, self.holder):
                continue  # a lease exists: its gateway renews it, or the sweep takes it when expired
            try:
                if await self.take_over(task_id, self.holder, orphan=True):
                    taken.append(task_id)
            finally:
                await self.leases.release(task_id, self.holder)
        return taken

    async def take_over(self, task_id: str, holder: Holder, *, orphan: bool = False) -> bool:
        """Mark the task of the dead ``holder`` interrupted (this gateway won its lease; the
        caller releases it afterwards).

        ``orphan``: the task had no lease at all (:meth:`sweep_orphans`; ``holder`` is this
        gateway): the dead node named is the one of the task's last transition.

        Returns:
            False when there was nothing to take over: the task is gone, or it had stopped
            (its gateway died after saving the outcome, before dropping the lease), or the
            holder was alive after all and saved it meanwhile.
        """
        try:
            run = await self.tasks.get(task_id)
        except NotFound:
            return False
        if run.state not in _RUNNING:
            return False
        last = run.steps[-1] if run.steps else None
        in_flight = run.state is TaskState.DISPATCHED and last is not None and last.status == "running"
        agent = last.agent if in_flight and last is not None else ""
        redispatch = await self._redispatch(agent) if agent else ""
        old = run.state
        dead = holder.node
        if orphan:
            dead = run.transitions[-1].node if run.transitions else ""
            reason = (
                f"found {old.value} with no lease (Redis lost a write: its gateway {dead or '?'} no "
                f"longer runs it); {self.node} took it over: resume or cancel it"
            )
        else:
            reason = (
                f"gateway {holder.node} stopped while the task was {old.value} (its lease expired); "
                f"{self.node} took it over: resume or cancel it"
            )
        pending = mark_interrupted(run, dead_node=dead, node=self.node, reason=reason, redispatch=redispatch)
        try:
            await self.tasks.save(run)
        except ConcurrentUpdate:  # its gateway was alive and saved it since: nothing lost
            return False
        if agent:  # the call died with its gateway: the agent's load falls
            await self.stats.released(agent)
        await self._append(_record(run, pending, node=self.node))
        self.taken = [*self.taken[-999:], task_id]
        log.warning("task %s of gateway %s taken over: interrupted (%s)", task_id, dead, old.value)
        observer = self._observer()
        if observer is not None:
            try:
                await observer.task_stopped(run)
            except Exception:  # the desk's trouble never changes the task's course
                log.exception("human desk: task_stopped failed for interrupted task %s", task_id)
        return True

    async def _redispatch(self, agent: str) -> str:
        try:
            return redispatch_allowed((await self.catalog.get(agent)).contract)
        except NotFound:
            return ""

    # ---------------------------------------------------------------------- the loop
    async def round(self) -> None:
        """One round: renew, then sweep, and every ``orphan_every`` rounds the backstop
        (:meth:`sweep_orphans`) (raises the first backend error)."""
        await self.renew()
        await self.sweep()
        self._rounds += 1
        if self._orphan_every and self._rounds % self._orphan_every == 0:
            await self.sweep_orphans()

    async def _run(self) -> None:
        wait = self.interval
        while True:
            await self._sleep(wait)
            try:
                await self.round()
            except Exception as exc:
                wait = self.errors.failed(exc)
            else:
                self.errors.succeeded()
                wait = self.interval

    def start(self) -> None:
        """Run a round every ``interval`` seconds until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="agency-takeover")

    async def stop(self) -> None:
        """Stop the rounds (the leases of stopped tasks are dropped first, best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._released:
            with contextlib.suppress(Exception):  # left behind, they expire and the sweep drops them
                await self.leases.renew([], self.holder, release=sorted(self._released))
                self._released.clear()


def _record(run: TaskRecord, pending: dict[str, Any], *, node: str) -> AuditRecord:
    """The ``task.interrupted`` record of a task taken over (names the dead node)."""
    request = run.request
    return AuditRecord.model_validate(
        {
            "event_type": AuditEventType.TASK_INTERRUPTED.value,
            "node": node,
            "component": "gateway",
            "actors": {"user": request.user_id, "agent": pending["agent"], "session": request.session_id},
            "task_id": run.task_id,
            "trace_id": run.trace_id,
            "goal_id": run.goal.id if run.goal else "",
            "rule": "lease_expired",
            "outcome": "interrupted",
            "detail": {**pending, "taken_over_by": node},
        }
    )
