"""The Redis deployments of the fleet scenario, each with the fault to run under load: a private
``redis-server`` restarted, a Sentinel set failed over (``SENTINEL FAILOVER``), a Cluster losing a
master to kill -9 (its replica promoted), or the tests' shared Redis (no fault).

Used by ``bench/bench_fleet.py --redis`` (which prints the figures) and by
``tests/redis/test_fleet_redis_faults.py`` (which asserts what must hold). Every server is
started on free ports and stopped by PID (tests/redis_servers.py, tests/gateway_processes.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEPLOYMENTS = ("standalone", "sentinel", "cluster", "shared")


@dataclass
class Deployment:
    """A Redis for the fleet: its URL, and the fault to run under load (None: none)."""

    name: str
    url: str
    fault_name: str = ""
    fault: Callable[[], Awaitable[str]] | None = None  # returns what happened, once it took effect
    shared: bool = False
    report: Callable[[], str] | None = None  # after the run: the fault's own timeline
    timeline: dict[str, float] | None = None  # monotonic times of the fault's steps ("command" first)


#: Work a fault leaves running after it took effect (a demotion being timed): awaited at the end.
background: list[asyncio.Future[None]] = []


@contextlib.contextmanager
def deployment(kind: str, tmp: Path, *, min_replicas: int = 0, replicas: int = 1) -> Iterator[Deployment]:
    """Start the Redis deployment ``kind`` (stopped by PID at the end). ``min_replicas``: set
    ``min-replicas-to-write`` (with ``min-replicas-max-lag 1``) on the Sentinel set's servers;
    ``replicas``: how many replicas the Sentinel set's primary has."""
    if kind == "shared":
        from gateway_processes import REDIS_URL

        yield Deployment("the local Redis (shared)", REDIS_URL, shared=True)
        return
    if kind == "standalone":
        from gateway_processes import free_port, start_redis

        port, files = free_port(), tmp / "redis"
        server = [start_redis(port, persist_in=files)]  # append-only file, fsync always

        async def restart() -> str:
            def stop_and_start() -> None:
                server[0].terminate()  # SIGTERM: Redis writes its append-only file and exits
                server[0].wait(timeout=30)
                server[0] = start_redis(port, persist_in=files)  # same port and files: the data is back

            await asyncio.to_thread(stop_and_start)
            return "redis-server stopped (SIGTERM) and started again on its append-only file"

        try:
            name = "a private redis-server (appendonly, fsync always)"
            yield Deployment(name, f"redis://127.0.0.1:{port}/0", "restart", restart)
        finally:
            server[0].terminate()
            server[0].wait(timeout=30)
        return
    import redis_servers as rs  # tests/redis_servers.py: real Sentinel sets and Clusters

    if kind == "sentinel":
        with rs.sentinel_set() as the_set, contextlib.ExitStack() as extra:
            timeline: dict[str, float] = {}
            primary = the_set.primary()
            for i in range(1, replicas):  # more replicas of the primary than the set's one
                server = rs.RedisServer(
                    tmp / f"replica-{i}", args=("--replicaof", "127.0.0.1", str(primary.port))
                )
                server.start()
                extra.callback(server.stop)
                the_set.servers.append(server)

            def known() -> bool:
                for sentinel in the_set.sentinels:
                    with sentinel.client() as c:
                        if c.sentinel_master(the_set.service)["num-slaves"] < replicas:
                            return False
                return True

            rs.wait_until(f"every Sentinel to know {replicas} replicas", known)
            if min_replicas:
                for server in the_set.servers:  # both: either may be the primary
                    with server.client() as c:
                        c.config_set("min-replicas-to-write", min_replicas)
                        c.config_set("min-replicas-max-lag", 1)

            async def failover() -> str:
                """SENTINEL FAILOVER; returns once every Sentinel names the new primary (the old
                one is demoted later, when the Sentinels reconfigure it: timed in the background)."""
                old = the_set.wait_settled()
                old_server = the_set.primary()

                def promote() -> None:
                    timeline["command"] = time.monotonic()
                    with the_set.sentinels[0].client() as c:
                        c.execute_command("SENTINEL", "FAILOVER", the_set.service)
                    rs.wait_until(
                        "every Sentinel to name a new primary",
                        lambda: all(the_set.primary_address(s) != old for s in the_set.sentinels),
                    )
                    timeline["promoted"] = time.monotonic()

                def demoted() -> None:
                    rs.wait_until(
                        "the old primary to become a replica",
                        lambda: old_server.info("replication")["role"] == "slave",
                    )
                    timeline["demoted"] = time.monotonic()
                    the_set.wait_settled()
                    timeline["settled"] = time.monotonic()

                await asyncio.to_thread(promote)
                background.append(asyncio.ensure_future(asyncio.to_thread(demoted)))
                new = the_set.primary_address()
                return f"SENTINEL FAILOVER: primary {old[1]} -> {new[1]}"

            def report() -> str:
                t = timeline
                promoted = t["promoted"] - t["command"]
                parts = [f"every Sentinel named the new primary {promoted:.2f} s after the command"]
                if "demoted" in t:
                    parts.append(
                        f"the old primary took writes until it was made a replica "
                        f"{t['demoted'] - t['command']:.2f} s after it"
                    )
                if "settled" in t:
                    parts.append(
                        f"the set settled (replica linked) after {t['settled'] - t['command']:.2f} s"
                    )
                return "; ".join(parts)

            yield Deployment(
                "a Sentinel set (1 primary, 1 replica, 3 Sentinels, down-after 1 s)",
                the_set.url,
                "SENTINEL FAILOVER",
                failover,
                report=report,
                timeline=timeline,
            )
    elif kind == "cluster":
        with rs.cluster() as the_cluster:

            async def kill_master() -> str:
                def busiest_slot() -> tuple[int, int]:
                    masters = [n for n in the_cluster.live() if n.info("replication")["role"] == "master"]
                    sizes = {}
                    for n in masters:
                        with n.client() as c:
                            sizes[n.port] = c.dbsize()
                    port = max(sizes, key=lambda p: sizes[p])
                    with masters[0].client() as c:
                        for start, _end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                            if int(master[1]) == port:
                                return int(start), sizes[port]
                    raise LookupError(f"no slot served by {port}")

                slot, keys = await asyncio.to_thread(busiest_slot)
                victim = await asyncio.to_thread(rs.kill_master, the_cluster, slot)
                return (
                    f"kill -9 the master on port {victim.port} ({keys} keys, slot {slot} among its own); "
                    f"its replica serves its slots, cluster_state:ok on every node"
                )

            yield Deployment(
                "a Redis Cluster (3 masters + 1 replica each, node timeout 1 s)",
                the_cluster.url,
                "kill -9 a master",
                kill_master,
            )
    else:
        raise ValueError(f"--redis must be one of {', '.join(DEPLOYMENTS)}")
