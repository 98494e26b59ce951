"""The fleet under fire: kill -9 a gateway, then a worker, under load; lost, stuck, recovery time.

3 gateways (``agency serve`` processes, each its own node id and audit log, Redis storage, a
short lease) and 2 workers (``agency worker`` given every gateway, the same action under two
contracts) on the local Redis; client loops (``AgencyClient`` given all three addresses, each
starting at another) submit tasks back to back. Then, under that load: kill -9 the gateway the
first loop and both workers started on; later kill -9 a worker. Printed:

* acknowledged vs lost: tasks the client was told about (an outcome, or the task id of a call
  whose connection broke) against those not found afterwards or stored otherwise (goal: 0);
* stuck after 2 leases: tasks still in a running state 2 leases after the load stopped (goal: 0;
  the dead gateway's tasks are ``interrupted`` by then, and resumed here: they complete);
* time until the fleet is SERVING and routing again after each kill: every surviving gateway
  answers SERVING, completes a task, and every client loop completes one again (goal < 5 s);
* time until the killed gateway's tasks in flight are ``interrupted`` on the survivors (bound:
  4/3 of the lease);
* the baseline, measured in the same run: tasks/s and p50 before the first kill, against the
  same after each recovery.

    python -m bench.bench_fleet                        # lease 1 s, 4 loops, 5 s per phase
    python -m bench.bench_fleet --lease 2 --loops 8 --phase 10

Needs the local Redis (``AGENCY_TEST_REDIS_URL``, default redis://127.0.0.1:6379/15).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the scenario's helpers

from fleet_scenario import Attempt, Fleet, Recovery

GOAL_RECOVERY_S = 5.0


def _rate(attempts: list[Attempt], start: float, end: float) -> tuple[float, float]:
    """Completed tasks/s and their p50 latency (ms) among attempts sent in [start, end)."""
    done = [a for a in attempts if start <= a.sent < end and a.state == "completed"]
    if not done or end <= start:
        return 0.0, float("nan")
    return len(done) / (end - start), statistics.median((a.ended - a.sent) * 1000 for a in done)


def _recovery(r: Recovery) -> str:
    slowest_loop = max(r.loops.values(), default=float("nan"))
    serving = max(r.serving.values(), default=float("nan"))
    routing = max(r.routing.values(), default=float("nan"))
    verdict = "OK" if r.seconds < GOAL_RECOVERY_S else "ABOVE GOAL"
    return (
        f"{r.what}: fleet SERVING and routing again after {r.seconds:.2f} s (goal < {GOAL_RECOVERY_S:g} s: "
        f"{verdict}; SERVING {serving:.2f} s, a task through every survivor {routing:.2f} s, "
        f"every client loop again {slowest_loop:.2f} s)"
    )


def _after(rate: tuple[float, float], base: float) -> str:
    ratio = rate[0] / base if base else float("nan")
    return f"  after it: {rate[0]:.1f} tasks/s ({ratio:.2f}x the baseline), p50 {rate[1]:.1f} ms"


async def run(args: argparse.Namespace) -> int:
    import redis.asyncio as aioredis
    from gateway_processes import REDIS_URL

    prefix = f"bench-fleet:{uuid.uuid4().hex[:8]}:"
    redis = aioredis.Redis.from_url(REDIS_URL)
    code = 0
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        fleet = Fleet(Path(tmp), prefix, lease=args.lease, loops=args.loops, agent_ms=args.agent_ms)
        try:
            await fleet.start()
            print(
                f"fleet: 3 gateways, 2 workers, lease {args.lease:g} s, {args.loops} client loops, "
                f"agent {args.agent_ms} ms, {args.phase:g} s per phase",
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
            await fleet.stop_load()
            audit = await fleet.audit(settle=2 * args.lease)
            ends = await fleet.resume(audit.interrupted)

            base_rate, base_p50 = _rate(fleet.attempts, t0, gateway.at)
            after_gw = _rate(fleet.attempts, gateway.at + gateway.seconds, t1)
            after_w = _rate(fleet.attempts, worker.at + worker.seconds, t2)
            summary = fleet.summary()
            print(f"baseline (before any kill): {base_rate:.1f} tasks/s, p50 {base_p50:.1f} ms")
            print(_recovery(gateway))
            print(
                f"  its {broken} task(s) in flight interrupted on the survivors after {takeover:.2f} s "
                f"(bound: 4/3 of the lease = {args.lease * 4 / 3:.2f} s, from its last renewal)"
            )
            print(_after(after_gw, base_rate))
            print(_recovery(worker))
            print(_after(after_w, base_rate))
            print(
                f"tasks: {summary['attempts']} submitted, {summary['completed']} completed at once, "
                f"{summary['unavailable']} told UNAVAILABLE (the call broke with its gateway), other errors: "
                f"{summary['other_errors'] or 'none'}"
            )
            print(
                f"acknowledged {audit.acknowledged}, lost {len(audit.lost)} (goal 0); not accepted "
                f"{audit.not_accepted} (told UNAVAILABLE, no gateway had them)"
            )
            print(f"stuck after 2 leases: {len(audit.stuck)} (goal 0); stored states: {audit.states}")
            taken = len(audit.interrupted)
            print(f"interrupted (the dead gateway's tasks, taken over): {taken}; resumed: {ends}")
            if audit.lost or audit.stuck or set(ends) - {"completed"}:
                code = 1
            if max(gateway.seconds, worker.seconds) >= GOAL_RECOVERY_S:
                code = code or 3
        finally:
            await fleet.stop()
            async for key in redis.scan_iter(match=prefix + "*"):
                await redis.delete(key)
            await redis.aclose()
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lease", type=float, default=1.0, help="storage.lease_seconds (default 1)")
    p.add_argument("--loops", type=int, default=4, help="client loops submitting back to back (default 4)")
    p.add_argument("--agent-ms", type=int, default=20, help="what each worker call takes (default 20 ms)")
    p.add_argument("--phase", type=float, default=5.0, help="seconds of load before and after each kill")
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
