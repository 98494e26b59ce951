"""The fleet under fire: 3 gateways + 2 workers on Redis, client load spread over them, then
kill -9 a gateway and kill -9 a worker, each under load.

Used by ``tests/service/test_fleet.py`` (which asserts what must hold: nothing acknowledged is
lost, nothing is stuck, the fleet routes again after each kill) and by ``bench/bench_fleet.py``
(which prints the figures: acknowledged vs lost, stuck after 2 leases, the time until the fleet
is SERVING and routing again).

Each gateway is its own ``agency serve --config`` process with its own node id and audit log,
on one definition with Redis storage and a short lease; each worker is ``agency worker`` given
every gateway's address, serving the same action under its own contract (so each is the
other's backup). Each client loop has its own :class:`~middleware.client.AgencyClient` given all
three addresses, starting at a different one, and submits tasks back to back with task ids of
its own (``fleet-<loop>-<n>``), so every task can be looked for afterwards.

The Redis is the local one (``redis_url``, default the tests' Redis) or any other URL: a private
server, a Sentinel set or a Cluster (``bench/bench_fleet.py --redis``). :meth:`Fleet.disrupt`
measures the recovery from any fault given as a coroutine (a Redis failover, a restart), and
:class:`HealthWatch` records each gateway's health over the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from gateway_processes import (
    REDIS_URL,
    GatewayProcess,
    WorkerProcess,
    redis_definition,
    start_gateways,
    start_worker,
    write_definition,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from middleware.cli.health import check
from middleware.client import AgencyClient
from middleware.errors import AgencyError, NotFound, Unavailable
from middleware.tasks import TaskState

HERE = Path(__file__).resolve().parent / "service"  # fleet_agents.py
RUNNING = {"submitted", "routing", "dispatched", "retrying", "verifying"}
ACTION = "fleet_work"


@dataclass
class Attempt:
    """One Submit of a client loop."""

    task_id: str
    loop: int
    sent: float
    ended: float = 0.0
    state: str = ""  # the outcome's state, when the client got one
    reason: str = ""  # the outcome's reason, when it was not completed
    error: str = ""  # the error's reason, when it got none
    detail: str = ""  # the error's message


@dataclass
class Recovery:
    """After one kill: when each surviving gateway was SERVING and completed a task, and when
    each client loop completed a task again (seconds after the kill)."""

    what: str
    at: float
    settled: float = 0.0  # seconds from ``at`` until the fault had taken effect (a failover done)
    serving: dict[str, float] = field(default_factory=dict)
    routing: dict[str, float] = field(default_factory=dict)
    loops: dict[int, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Until the fleet served and routed everywhere again (the slowest of all of them)."""
        return max(
            [*self.serving.values(), *self.routing.values(), *self.loops.values()], default=float("nan")
        )


@dataclass
class Audit:
    """Every attempted task, looked up in the shared store at the end."""

    acknowledged: int = 0  # the client got an outcome, or was told the task id of a broken call that exists
    lost: list[str] = field(default_factory=list)  # acknowledged, then not found or not as told
    not_accepted: int = 0  # the client was told UNAVAILABLE and no gateway had the task
    stuck: list[str] = field(default_factory=list)  # in a running state
    interrupted: list[str] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)


class HealthWatch:
    """Each gateway's health every ``interval`` seconds over one channel per gateway: the
    stretches during which one did not answer SERVING (NOT_SERVING, or no answer)."""

    def __init__(self, gateways: Sequence[GatewayProcess], interval: float = 0.1) -> None:
        self.gateways = list(gateways)
        self.interval = interval
        self.samples: dict[str, list[tuple[float, bool]]] = {g.node: [] for g in self.gateways}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        channels = {g.node: grpc.aio.insecure_channel(g.address) for g in self.gateways}
        try:
            while True:
                await asyncio.gather(*(self._sample(node, ch) for node, ch in channels.items()))
                await asyncio.sleep(self.interval)
        finally:
            for ch in channels.values():
                await ch.close()

    async def _sample(self, node: str, channel: grpc.aio.Channel) -> None:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[no-untyped-call]
                health_pb2.HealthCheckRequest(service=""), timeout=1
            )
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.aio.AioRpcError:
            serving = False
        self.samples[node].append((time.monotonic(), serving))

    def not_serving(self, start: float, end: float, *, alive: Sequence[str]) -> dict[str, float]:
        """Per gateway in ``alive``: seconds within [start, end] it was seen not SERVING (a
        sample's state counts until the next sample)."""
        out: dict[str, float] = {}
        for node in alive:
            samples = [s for s in self.samples[node] if s[0] <= end]
            total = 0.0
            for (t, ok), (t_next, _) in zip(samples, [*samples[1:], (end, True)], strict=True):
                lo, hi = max(t, start), min(t_next, end)
                if not ok and hi > lo:
                    total += hi - lo
            out[node] = total
        return out


class Fleet:
    """The processes, the load and the measurements of one run."""

    def __init__(
        self,
        tmp: Path,
        prefix: str,
        *,
        lease: float = 1.0,
        loops: int = 4,
        agent_ms: int = 20,
        redis_url: str = REDIS_URL,
        storage: dict[str, Any] | None = None,
    ) -> None:
        self.storage = dict(storage or {})  # more storage settings (replica_acks ...)
        self.tmp = tmp
        self.prefix = prefix
        self.redis_url = redis_url
        self.lease = lease
        self.loops = loops
        self.agent_ms = agent_ms
        self.gateways: list[GatewayProcess] = []
        self.workers: list[WorkerProcess] = []
        self.attempts: list[Attempt] = []
        self._stop = asyncio.Event()
        self._load: list[asyncio.Task[None]] = []
        self.read_retries = 0  # GetTask calls of the audit answered a retryable error, then asked again

    # ------------------------------------------------------------------ processes
    async def start(self) -> None:
        definition = redis_definition(
            self.prefix,
            storage={
                "backend": "redis",
                "redis_url": self.redis_url,
                "key_prefix": self.prefix,
                "lease_seconds": self.lease,
                **self.storage,
            },
            # a call a dead worker took: the other worker at once
            agency={"failure_policies": {"TOOL_TIMEOUT": {"resolution": "use_backup"}}},
        )
        config = write_definition(self.tmp / "fleet.yaml", definition)
        self.gateways = await start_gateways(config, ["gw-1", "gw-2", "gw-3"], self.tmp, pythonpath=[HERE])
        addresses = [g.address for g in self.gateways]
        for name in ("fleet-w1", "fleet-w2"):
            contract = {
                "name": name,
                "can_do": [ACTION],
                "slo_latency_ms": 5000,
                "side_effect_free": True,  # a lookup: a task interrupted with its gateway runs on on resume
            }
            self.workers.append(
                await start_worker(
                    "fleet_agents:slow",
                    contract,
                    addresses,
                    self.tmp,
                    pythonpath=[HERE],
                    heartbeat=self.lease / 4,
                )
            )

    async def stop(self) -> None:
        await self.stop_load()
        for w in self.workers:
            if w.proc.returncode is None:
                w.proc.terminate()
                try:
                    await asyncio.wait_for(w.proc.wait(), 20)
                except TimeoutError:
                    w.proc.kill()
                    await w.proc.wait()
        for g in self.gateways:
            await g.stop()

    @property
    def addresses(self) -> list[str]:
        return [g.address for g in self.gateways]

    def live_gateways(self) -> list[GatewayProcess]:
        return [g for g in self.gateways if g.proc.returncode is None]

    # ----------------------------------------------------------------------- load
    def start_load(self) -> None:
        self._stop.clear()
        self._load = [asyncio.ensure_future(self._loop(i)) for i in range(self.loops)]

    async def stop_load(self) -> None:
        self._stop.set()
        if self._load:
            await asyncio.gather(*self._load)
            self._load = []

    async def _loop(self, i: int) -> None:
        n = len(self.addresses)
        order = self.addresses[i % n :] + self.addresses[: i % n]  # spread over the gateways
        count = 0
        async with AgencyClient(order, timeout=60) as client:
            while not self._stop.is_set():
                count += 1
                attempt = Attempt(f"fleet-{i}-{count}", i, time.monotonic())
                self.attempts.append(attempt)
                try:
                    outcome = await client.submit(
                        "fleet work",
                        constraints={"action": ACTION},
                        input={"ms": self.agent_ms},
                        task_id=attempt.task_id,
                    )
                    attempt.state = outcome.state.value
                    attempt.reason = outcome.reason
                except AgencyError as exc:
                    attempt.error, attempt.detail = exc.reason, str(exc)[:240]
                attempt.ended = time.monotonic()

    async def load_for(self, completions: int, *, within: float = 60) -> None:
        """Let the load run until ``completions`` more tasks completed (polled, bounded)."""
        target = sum(a.state == "completed" for a in self.attempts) + completions
        deadline = time.monotonic() + within
        while sum(a.state == "completed" for a in self.attempts) < target:
            assert time.monotonic() < deadline, f"the load stalled: {self.summary()}"
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ the faults
    async def kill(
        self, process: GatewayProcess | WorkerProcess, what: str, *, within: float = 60
    ) -> Recovery:
        """Kill -9 ``process`` under load; measure until the fleet serves and routes again."""

        async def kill_9() -> None:
            process.proc.kill()
            await process.proc.wait()

        return await self.disrupt(what, kill_9, within=within)

    async def disrupt(
        self, what: str, fault: Callable[[], Awaitable[object]], *, within: float = 60
    ) -> Recovery:
        """Run ``fault`` under load (it returns once the fault has taken effect: a process gone,
        a failover done, a server back); measure from its start until every surviving gateway
        is SERVING and completes a task, and every client loop completes a task *sent after the
        fault took effect* (so a task that slipped through before it does not count)."""
        at = time.monotonic()
        await fault()
        recovery = Recovery(what, at, settled=time.monotonic() - at)
        after = at + recovery.settled
        deadline = time.monotonic() + within

        async def serving(g: GatewayProcess) -> None:
            while await check(g.address, wait_seconds=2) != "SERVING":
                assert time.monotonic() < deadline, f"{g.node} never SERVING again after {what}"
                await asyncio.sleep(0.02)
            recovery.serving[g.node] = time.monotonic() - at

        async def routing(g: GatewayProcess) -> None:
            async with AgencyClient(g.address, timeout=30) as client:
                while True:
                    try:
                        outcome = await client.submit("fleet probe", constraints={"action": ACTION})
                        if outcome.state is TaskState.COMPLETED:
                            break
                    except AgencyError:
                        pass
                    assert time.monotonic() < deadline, f"{g.node} never routed again after {what}"
                    await asyncio.sleep(0.02)
            recovery.routing[g.node] = time.monotonic() - at

        async def loops() -> None:
            while len(recovery.loops) < self.loops:
                for a in list(self.attempts):
                    if a.sent >= after and a.state == "completed" and a.loop not in recovery.loops:
                        recovery.loops[a.loop] = a.ended - at
                if time.monotonic() >= deadline:
                    late = [a for a in self.attempts if a.loop not in recovery.loops and a.sent >= at - 5]
                    raise AssertionError(f"client loops never completed again after {what}: {late[-8:]}")
                await asyncio.sleep(0.02)

        live = self.live_gateways()
        await asyncio.gather(*(serving(g) for g in live), *(routing(g) for g in live), loops())
        return recovery

    def errors_between(self, start: float, end: float) -> tuple[dict[str, int], float]:
        """The errors client loops were told for calls that ended in [start, end], by reason,
        and the seconds from ``start`` to the end of the last of them (0: none)."""
        failed = [a for a in self.attempts if a.error and start <= a.ended <= end]
        reasons: dict[str, int] = {}
        for a in failed:
            reasons[a.error] = reasons.get(a.error, 0) + 1
        return reasons, max((a.ended - start for a in failed), default=0.0)

    async def taken_over(self, at: float, *, within: float = 60) -> tuple[int, float]:
        """The tasks whose call broke with a gateway killed at ``at``: how many, and the seconds
        from ``at`` until every one of them is ``interrupted`` on the survivors (polled)."""
        broken = [a.task_id for a in self.attempts if a.error and a.sent <= at]
        pending = set(broken)
        async with AgencyClient([g.address for g in self.live_gateways()], timeout=30) as client:
            while pending:
                for task_id in sorted(pending):
                    try:
                        state = (await client.get_task(task_id)).state
                        if state is TaskState.INTERRUPTED or state.terminal:  # terminal: it finished
                            pending.discard(task_id)  # before the kill, the reply cut off with it
                    except NotFound:
                        pending.discard(task_id)  # never created: nothing to take over
                assert time.monotonic() < at + within, f"not taken over: {sorted(pending)}"
                if pending:
                    await asyncio.sleep(0.02)
        return len(broken), time.monotonic() - at

    # -------------------------------------------------------------------- the audit
    async def audit(self, *, settle: float | None = None) -> Audit:
        """Look every attempted task up on the surviving gateways. ``settle``: wait that long
        first (the benchmark: 2 leases), else wait until no task runs (bounded)."""
        if settle is not None:
            await asyncio.sleep(settle)  # a measurement window, not a synchronisation
        async with AgencyClient([g.address for g in self.live_gateways()], timeout=30) as client:
            if settle is None:
                deadline = time.monotonic() + 60
                while await self._running(client):
                    assert time.monotonic() < deadline, "tasks still running 60 s after the load"
                    await asyncio.sleep(0.1)
            result = Audit()
            for a in self.attempts:
                try:
                    outcome = await self._get(client, a.task_id)
                except NotFound:
                    if a.state:  # the client was told an outcome
                        result.acknowledged += 1
                        result.lost.append(a.task_id)
                    else:
                        result.not_accepted += 1
                    continue
                result.acknowledged += 1
                state = outcome.state.value
                result.states[state] = result.states.get(state, 0) + 1
                if a.state and a.state != state and a.state not in RUNNING:
                    result.lost.append(a.task_id)  # told one end, stored another
                if state in RUNNING:
                    result.stuck.append(a.task_id)
                if state == "interrupted":
                    result.interrupted.append(a.task_id)
        return result

    async def _get(self, client: AgencyClient, task_id: str, *, within: float = 60) -> Any:
        """GetTask, again while the answer is a retryable error (a Redis just failed over: a
        gateway's connections to it are re-made on the next call); bounded."""
        deadline = time.monotonic() + within
        while True:
            try:
                return await client.get_task(task_id)
            except AgencyError as exc:
                if not exc.retryable or time.monotonic() >= deadline:
                    raise
                self.read_retries += 1
                await asyncio.sleep(0.1)

    async def _running(self, client: AgencyClient) -> bool:
        for a in self.attempts:
            if a.state and a.state not in RUNNING:
                continue
            try:
                if (await self._get(client, a.task_id)).state.value in RUNNING:
                    return True
            except NotFound:
                continue
        return False

    async def resume(self, task_ids: Sequence[str]) -> dict[str, int]:
        """Resume interrupted tasks (their workers are side-effect-free): the states they end in."""
        ends: dict[str, int] = {}
        async with AgencyClient([g.address for g in self.live_gateways()], timeout=60) as client:
            for task_id in task_ids:
                try:
                    state = (await client.resume(task_id)).state.value
                except AgencyError as exc:
                    state = f"error:{exc.reason}"
                ends[state] = ends.get(state, 0) + 1
        return ends

    def summary(self) -> dict[str, Any]:
        done = [a for a in self.attempts if a.ended]
        unavailable = (Unavailable.reason, "BACKEND_UNAVAILABLE")
        return {
            "attempts": len(self.attempts),
            "completed": sum(a.state == "completed" for a in done),
            "unavailable": sum(a.error in unavailable for a in done),
            "other_errors": sorted(
                {f"{a.error}: {a.detail}" for a in done if a.error and a.error not in unavailable}
            ),
            "not_completed": _count(
                f"{a.state}: {a.reason[:240]}" for a in done if a.state and a.state != "completed"
            ),
        }


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts
