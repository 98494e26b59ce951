"""The fleet under fire: kill -9 a gateway, a worker, then fail its Redis; lost, stuck, recovery.

3 gateways (``agency serve`` processes, each its own node id and audit log, Redis storage, a
short lease) and 2 workers (``agency worker`` given every gateway, the same action under two
contracts) on one Redis; client loops (``AgencyClient`` given all three addresses, each starting
at another) submit tasks back to back. Then, under that load: kill -9 the gateway the first loop
and both workers started on; later kill -9 a worker; then the Redis fault of the deployment
chosen with ``--redis``:

* ``standalone``: one private ``redis-server`` (append-only file, fsync always), **restarted**
  (SIGTERM, started again on the same port and files);
* ``sentinel``: a Sentinel set (1 primary, 1 replica or ``--replicas N``, 3 Sentinels),
  **``SENTINEL FAILOVER``** of the primary; the gateways use the ``redis+sentinel://`` URL;
  ``--min-replicas N`` sets ``min-replicas-to-write N`` (max lag 1 s) on the data servers;
* ``cluster``: a Redis Cluster of 3 masters with a replica each, the master holding the most keys
  **killed with -9** (its replica takes over after the cluster's node timeout); the gateways use
  the ``redis+cluster://`` URL;
* ``shared``: the local Redis of the tests (``AGENCY_TEST_REDIS_URL``, default
  redis://127.0.0.1:6379/15) under a fresh key prefix, and no Redis fault (it is shared).

Printed:

* acknowledged vs lost: tasks the client was told about (an outcome, or the task id of a call
  whose connection broke) against those not found afterwards or stored otherwise (goal: 0);
* stuck after 2 leases: tasks still in a running state 2 leases after the load stopped (goal: 0;
  the dead gateway's tasks are ``interrupted`` by then, and resumed here: they complete);
* time until the fleet is SERVING and routing again after each fault: every surviving gateway
  answers SERVING, completes a task, and every client loop completes a task sent after the
  fault took effect (goal < 5 s);
* for the Redis fault: how long it took to take effect (the failover, the restart), what the
  client loops were told meanwhile (errors by reason, and the last one's time), and how long
  each gateway's health said NOT_SERVING (sampled every 0.1 s);
* time until the killed gateway's tasks in flight are ``interrupted`` on the survivors (bound:
  4/3 of the lease);
* the baseline, measured in the same run: tasks/s and p50 before the first kill, against the
  same after each recovery.

    python -m bench.bench_fleet                         # standalone: lease 1 s, 4 loops, 5 s phases
    python -m bench.bench_fleet --redis sentinel
    python -m bench.bench_fleet --redis cluster
    python -m bench.bench_fleet --lease 2 --loops 8 --phase 10

Needs Debian's ``redis-server`` (and ``redis-sentinel`` for ``--redis sentinel``; ``redis-cli``
for ``--redis cluster``); every server is started here on free ports and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the scenario's helpers

from fleet_redis import DEPLOYMENTS, background, deployment
from fleet_scenario import Attempt, Fleet, HealthWatch, Recovery

from middleware.client import AgencyClient

GOAL_RECOVERY_S = 5.0


def _rate(attempts: list[Attempt], start: float, end: float) -> tuple[float, float]:
    """Completed tasks/s and their p50 latency (ms) among attempts sent in [start, end)."""
    done = [a for a in attempts if start <= a.sent < end and a.state == "completed"]
    if not done or end <= start:
        return 0.0, float("nan")
    return len(done) / (end - start), statistics.median((a.ended - a.sent) * 1000 for a in done)


def _recovery(fleet: Fleet, r: Recovery, end: float) -> tuple[str, float]:
    """The recovery line, and the seconds until the fleet was back: SERVING and routing everywhere,
    every client loop completing again, and no client told an error any more (in [r.at, end])."""
    slowest_loop = max(r.loops.values(), default=float("nan"))
    serving = max(r.serving.values(), default=float("nan"))
    routing = max(r.routing.values(), default=float("nan"))
    _, last_error = fleet.errors_between(r.at, end)
    back = max(r.seconds, last_error)
    verdict = "OK" if back < GOAL_RECOVERY_S else "ABOVE GOAL"
    took = f"; the fault took {r.settled:.2f} s to take effect" if r.settled >= 0.05 else ""
    line = (
        f"{r.what}: fleet back after {back:.2f} s (goal < {GOAL_RECOVERY_S:g} s: {verdict}{took}; "
        f"SERVING {serving:.2f} s, a task through every survivor {routing:.2f} s, every client loop "
        f"again {slowest_loop:.2f} s, the last error told to a client {last_error:.2f} s)"
    )
    return line, back


def _after(rate: tuple[float, float], base: float) -> str:
    ratio = rate[0] / base if base else float("nan")
    return f"  after it: {rate[0]:.1f} tasks/s ({ratio:.2f}x the baseline), p50 {rate[1]:.1f} ms"


def _seen(fleet: Fleet, watch: HealthWatch, r: Recovery, end: float) -> str:
    reasons, _ = fleet.errors_between(r.at, end)
    told = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items())) or "no error"
    down = watch.not_serving(r.at, end, alive=[g.node for g in fleet.live_gateways()])
    health = ", ".join(f"{node} {s:.2f} s" for node, s in down.items())
    return f"  the client loops were told: {told}; health not SERVING (sampled every 0.1 s): {health}"


async def run(args: argparse.Namespace) -> int:
    code = 0
    lost_ids: set[str] = set()
    with (
        tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp,
        deployment(args.redis, Path(tmp), min_replicas=args.min_replicas, replicas=args.replicas) as redis,
    ):
        prefix = f"bench-fleet:{uuid.uuid4().hex[:8]}:"
        fleet = Fleet(
            Path(tmp),
            prefix,
            lease=args.lease,
            loops=args.loops,
            agent_ms=args.agent_ms,
            redis_url=redis.url,
            storage={"replica_acks": args.replica_acks} if args.replica_acks else None,
        )
        watch: HealthWatch | None = None
        try:
            await fleet.start()
            watch = HealthWatch(fleet.gateways)
            watch.start()
            extra = f", min-replicas-to-write {args.min_replicas}" if args.min_replicas else ""
            extra += f", {args.replicas} replicas" if args.redis == "sentinel" else ""
            extra += f", storage.replica_acks {args.replica_acks}" if args.replica_acks else ""
            print(
                f"fleet on {redis.name}{extra} ({redis.url}): 3 gateways, 2 workers, lease {args.lease:g} s, "
                f"{args.loops} client loops, agent {args.agent_ms} ms, {args.phase:g} s per phase",
                flush=True,
            )
            fleet.start_load()
            t0 = time.monotonic()
            await asyncio.sleep(args.phase)  # the baseline phase (a measurement window)
            gateway = await fleet.kill(fleet.gateways[0], "kill -9 gw-1")
            broken, takeover = await fleet.taken_over(gateway.at)
            await asyncio.sleep(args.phase)
            t1 = time.monotonic()
            worker = await fleet.kill(fleet.workers[0], "kill -9 fleet-w1")
            await asyncio.sleep(args.phase)
            t2 = time.monotonic()
            fault: Recovery | None = None
            happened = ""
            if redis.fault is not None:
                outcome: dict[str, str] = {}
                fault_coro = redis.fault

                async def run_fault() -> None:
                    outcome["what"] = await fault_coro()

                fault = await fleet.disrupt(redis.fault_name, run_fault)
                happened = outcome["what"]
                await asyncio.sleep(args.phase)
            t3 = time.monotonic()
            await fleet.stop_load()
            if background:
                await asyncio.gather(*background)
            audit = await fleet.audit(settle=2 * args.lease)
            ends = await fleet.resume(audit.interrupted)

            base_rate, base_p50 = _rate(fleet.attempts, t0, gateway.at)
            summary = fleet.summary()
            print(f"baseline (before any fault): {base_rate:.1f} tasks/s, p50 {base_p50:.1f} ms")
            line, back_gw = _recovery(fleet, gateway, t1)
            print(line)
            print(
                f"  its {broken} task(s) in flight interrupted on the survivors after {takeover:.2f} s "
                f"(bound: 4/3 of the lease = {args.lease * 4 / 3:.2f} s, from its last renewal)"
            )
            print(_after(_rate(fleet.attempts, gateway.at + back_gw, t1), base_rate))
            print(_seen(fleet, watch, gateway, t1))
            line, back_w = _recovery(fleet, worker, t2)
            print(line)
            print(_after(_rate(fleet.attempts, worker.at + back_w, t2), base_rate))
            print(_seen(fleet, watch, worker, t2))
            backs = [back_gw, back_w]
            if fault is not None:
                print(f"{happened} ({fault.at - t0:.2f} s into the run)")
                if redis.report is not None:
                    print(f"  {redis.report()}")
                line, back_fault = _recovery(fleet, fault, t3)
                backs.append(back_fault)
                print(line)
                print(_after(_rate(fleet.attempts, fault.at + back_fault, t3), base_rate))
                print(_seen(fleet, watch, fault, t3))
            print(
                f"tasks: {summary['attempts']} submitted, {summary['completed']} completed at once, "
                f"{summary['unavailable']} told UNAVAILABLE, "
                f"other errors: {summary['other_errors'] or 'none'}"
            )
            print(
                f"acknowledged {audit.acknowledged}, lost {len(audit.lost)} (goal 0); not accepted "
                f"{audit.not_accepted} (told UNAVAILABLE, no gateway had them)"
            )
            if audit.lost:
                lost = lost_ids = set(audit.lost)
                sent = sorted(a.sent for a in fleet.attempts if a.task_id in lost)
                since = fault.at if fault is not None else t0
                if redis.timeline and "command" in redis.timeline:
                    since = redis.timeline["command"]
                print(
                    f"  lost: {audit.lost[:6]} ...; "
                    f"sent from {sent[0] - since:.2f} s to {sent[-1] - since:.2f} s "
                    f"after the {'Redis fault' if fault is not None else 'start'} began"
                )
            if summary["not_completed"]:
                print(f"  outcomes not completed: {summary['not_completed']}")
            print(f"stuck after 2 leases: {len(audit.stuck)} (goal 0); stored states: {audit.states}")
            if audit.stuck:
                print(f"  stuck: {audit.stuck[:6]}")
                async with AgencyClient([g.address for g in fleet.live_gateways()], timeout=30) as client:
                    for task_id in audit.stuck[:3]:
                        stuck = await client.get_task(task_id)
                        attempt = next(a for a in fleet.attempts if a.task_id == task_id)
                        print(
                            f"  {task_id}: {stuck.state.value}, pending {stuck.pending}; sent "
                            f"{attempt.sent - t0:.2f} s into the run, the client told "
                            f"{attempt.state or attempt.error} after {attempt.ended - attempt.sent:.2f} s"
                        )
            taken = len(audit.interrupted)
            print(f"interrupted (taken over, or cut short by the Redis fault): {taken}; resumed: {ends}")
            if audit.lost or audit.stuck or set(ends) - {"completed"}:
                code = 1
            if max(backs) >= GOAL_RECOVERY_S:
                code = code or 3
        finally:
            if watch is not None:
                await watch.stop()
            await fleet.stop()
        if lost_ids:  # Redis lost them: does each gateway's own audit log still have them?
            print(
                f"  of the lost tasks, {_in_audit_logs(fleet, lost_ids)} have task.completed in an audit log"
            )
            if redis.shared:
                await _clean(redis.url, prefix)
    return code


def _in_audit_logs(fleet: Fleet, task_ids: set[str]) -> int:
    from middleware.audit.wal_reader import WalLogReader

    found: set[str] = set()
    for g in fleet.gateways:
        for _, record in WalLogReader(fleet.tmp / g.node / "audit").records():
            if record.event_type == "task.completed" and record.task_id in task_ids:
                found.add(record.task_id)
    return len(found)


async def _clean(url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    client: Any = aioredis.Redis.from_url(url)
    async for key in client.scan_iter(match=prefix + "*"):
        await client.delete(key)
    await client.aclose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--redis",
        choices=DEPLOYMENTS,
        default="standalone",
        help="the Redis deployment and its fault: standalone (restarted), sentinel (SENTINEL FAILOVER), "
        "cluster (kill -9 a master), shared (the tests' Redis, no fault); default standalone",
    )
    p.add_argument(
        "--min-replicas",
        type=int,
        default=0,
        help="sentinel: min-replicas-to-write on the data servers (max lag 1 s); default 0 (off)",
    )
    p.add_argument("--replicas", type=int, default=1, help="sentinel: replicas of the primary (default 1)")
    p.add_argument(
        "--replica-acks",
        type=int,
        default=0,
        help="storage.replica_acks: task writes acknowledged once this many replicas have them (default 0)",
    )
    p.add_argument("--lease", type=float, default=1.0, help="storage.lease_seconds (default 1)")
    p.add_argument("--loops", type=int, default=4, help="client loops submitting back to back (default 4)")
    p.add_argument("--agent-ms", type=int, default=20, help="what each worker call takes (default 20 ms)")
    p.add_argument("--phase", type=float, default=5.0, help="seconds of load before and after each fault")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
