"""Real Redis deployments for tests: a server, a Sentinel set, a Cluster (Debian's binaries).

Every process is started here on a free port, in its own temporary directory, and stopped by
its PID (never by name: other test runs use the same programs). Every wait polls the servers
(PING, INFO, CLUSTER INFO, SENTINEL ...) until a deadline, never a fixed sleep.

- :class:`RedisServer`: one ``redis-server`` (``stop``/``start`` again on the same port keep
  its address; ``kill`` is kill -9).
- :func:`sentinel_set`: 1 primary, 1 replica and 3 ``redis-sentinel`` processes watching
  :data:`SERVICE`; :func:`failover` runs ``SENTINEL FAILOVER`` and waits until every Sentinel
  names the new primary, it takes writes and the old primary replicates from it.
- :func:`cluster`: 3 masters with 1 replica each (``redis-cli --cluster create``), waited
  until ``cluster_state:ok`` everywhere; :func:`kill_master` kill -9s the master of a slot and
  waits until its replica serves the slot and the cluster is ok again.

The pytest fixtures over these live in tests/redis/conftest.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

REDIS_SERVER = os.environ.get(
    "AGENCY_TEST_REDIS_SERVER", shutil.which("redis-server") or "/usr/bin/redis-server"
)
REDIS_SENTINEL = os.environ.get(
    "AGENCY_TEST_REDIS_SENTINEL", shutil.which("redis-sentinel") or "/usr/bin/redis-sentinel"
)
REDIS_CLI = os.environ.get("AGENCY_TEST_REDIS_CLI", shutil.which("redis-cli") or "/usr/bin/redis-cli")
HINT = "Debian: apt-get install redis-server redis-sentinel (bash .ci/run installs them)"

#: The service name the Sentinel set watches.
SERVICE = "agency"
#: How long any wait here may take before the test fails (a failover takes 1-3 s).
DEADLINE_S = 30.0


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            port -= 30000  # the kernel picks from 32768-60999: move below 55536
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


def wait_until(what: str, check: Callable[[], Any], *, deadline_s: float = DEADLINE_S) -> Any:
    """Poll ``check`` until it returns something true (returned) or ``deadline_s`` passes;
    a Redis error counts as not yet."""
    end = time.monotonic() + deadline_s
    last: object = None
    while True:
        try:
            result = check()
        except (redis.RedisError, OSError) as exc:
            result, last = None, exc
        if result:
            return result
        if time.monotonic() > end:
            raise TimeoutError(f"waited {deadline_s} s for {what} (last: {last!r})")
        time.sleep(0.02)  # polling interval: a separate process, no event to wait on


def _client(port: int, **kwargs: Any) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=2, **kwargs)


@dataclass
class RedisServer:
    """One ``redis-server`` on 127.0.0.1:``port`` with its files under ``directory``."""

    directory: Path
    port: int = field(default_factory=free_port)
    args: tuple[str, ...] = ()
    program: str = REDIS_SERVER
    config: Path | None = None
    """A configuration file, instead of ``args`` (Sentinel takes its settings from one)."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new synchronous client of this server (close it)."""
        return _client(self.port, **kwargs)

    def command_line(self) -> list[str]:
        if self.config is not None:
            return [self.program, str(self.config)]
        return [
            self.program,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "no",
            "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not after 5 s
            "--logfile", str(self.directory / "redis.log"),
            *self.args,
        ]  # fmt: skip

    def start(self) -> RedisServer:
        """Start it (again) and wait until it answers PING."""
        if not os.access(self.program, os.X_OK):
            raise RuntimeError(f"{self.program} is not installed; {HINT}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.command_line(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.directory
        )
        process = self.process

        def answers() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"{self.program} on port {self.port} exited: {self.log_tail()}")
            with self.client() as c:
                return bool(c.ping())

        try:
            wait_until(f"{self.program} on port {self.port} to answer PING", answers)
        except BaseException:
            self.stop(signal.SIGKILL)
            raise
        return self

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it by PID (``signal.SIGKILL``: kill -9) and reap it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=DEADLINE_S)
        self.process = None

    def kill(self) -> None:
        """kill -9."""
        self.stop(signal.SIGKILL)

    def info(self, section: str) -> dict[str, Any]:
        with self.client() as c:
            result: dict[str, Any] = c.info(section)
            return result

    def log_tail(self) -> str:
        log = self.directory / "redis.log"
        return log.read_text(errors="replace")[-400:] if log.exists() else "no log"


@contextlib.contextmanager
def _scratch(prefix: str) -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def redis_server(*args: str) -> Iterator[RedisServer]:
    """A standalone server on a free port (extra ``args`` to redis-server), stopped at the end."""
    with _scratch("agency-redis-") as directory:
        server = RedisServer(directory, args=args).start()
        try:
            yield server
        finally:
            server.stop()


# ---------------------------------------------------------------------------------- Sentinel
@dataclass
class SentinelSet:
    """Two data servers (one primary, one replica) and three Sentinels watching :data:`SERVICE`."""

    servers: list[RedisServer]
    sentinels: list[RedisServer]
    service: str = SERVICE

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL the gateway uses."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def primary_address(self, sentinel: RedisServer | None = None) -> tuple[str, int]:
        with (sentinel or self.sentinels[0]).client() as c:
            host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
            return (host.decode(), int(port))

    def primary(self) -> RedisServer:
        address = self.primary_address()
        return next(s for s in self.servers if s.address == address)

    def replica(self) -> RedisServer:
        address = self.primary_address()
        return next(s for s in self.servers if s.address != address)

    def wait_settled(self) -> tuple[str, int]:
        """Wait until every Sentinel names the same primary, which takes writes, knows the other
        two Sentinels and the replica, and the replica replicates from it; the primary's address."""

        def settled() -> tuple[str, int] | None:
            addresses = {self.primary_address(s) for s in self.sentinels}
            if len(addresses) != 1:
                return None
            (address,) = addresses
            primary = next(s for s in self.servers if s.address == address)
            replica = next(s for s in self.servers if s.address != address)
            if primary.info("replication")["role"] != "master":
                return None
            link = replica.info("replication")
            if link["role"] != "slave" or link.get("master_port") != address[1]:
                return None
            if link.get("master_link_status") != "up":
                return None
            for sentinel in self.sentinels:
                with sentinel.client() as c:
                    state = c.sentinel_master(self.service)
                if state["num-other-sentinels"] != len(self.sentinels) - 1 or state["num-slaves"] < 1:
                    return None
                replicas = c_replicas(sentinel, self.service)
                if not any(r["port"] == replica.port and "s_down" not in r["flags"] for r in replicas):
                    return None
            return address

        address: tuple[str, int] = wait_until(f"the Sentinel set of {self.service} to settle", settled)
        return address


def c_replicas(sentinel: RedisServer, service: str) -> list[dict[str, Any]]:
    with sentinel.client() as c:
        replicas: list[dict[str, Any]] = c.sentinel_slaves(service)
        return replicas


@contextlib.contextmanager
def sentinel_set(*, down_after_ms: int = 1000) -> Iterator[SentinelSet]:
    """1 primary, 1 replica, 3 Sentinels (quorum 2), all on free ports, stopped at the end."""
    with _scratch("agency-sentinel-") as root:
        started: list[RedisServer] = []
        try:
            primary = RedisServer(root / "primary").start()
            started.append(primary)
            replica = RedisServer(
                root / "replica", args=("--replicaof", "127.0.0.1", str(primary.port))
            ).start()
            started.append(replica)
            sentinels = []
            for i in range(3):
                directory = root / f"sentinel{i}"
                directory.mkdir()
                port = free_port()
                conf = directory / "sentinel.conf"  # Sentinel rewrites its file: one each
                conf.write_text(
                    f"port {port}\nbind 127.0.0.1\ndir {directory}\nprotected-mode no\n"
                    f"logfile {directory / 'redis.log'}\n"
                    f"sentinel monitor {SERVICE} 127.0.0.1 {primary.port} 2\n"
                    f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
                    f"sentinel failover-timeout {SERVICE} 10000\n"
                    f"sentinel parallel-syncs {SERVICE} 1\n"
                )
                sentinel = RedisServer(directory, port=port, program=REDIS_SENTINEL, config=conf)
                started.append(sentinel.start())
                sentinels.append(sentinel)
            the_set = SentinelSet([primary, replica], sentinels)
            the_set.wait_settled()
            yield the_set
        finally:
            for process in reversed(started):
                process.stop()


def failover(the_set: SentinelSet) -> tuple[str, int]:
    """``SENTINEL FAILOVER``, then wait until the set has settled on a new primary; its address."""
    old = the_set.wait_settled()
    with the_set.sentinels[0].client() as c:
        c.execute_command("SENTINEL", "FAILOVER", the_set.service)

    def moved() -> bool:
        return all(the_set.primary_address(s) != old for s in the_set.sentinels)

    wait_until(f"the Sentinels to name a primary other than {old}", moved)
    new = the_set.wait_settled()
    assert new != old
    return new


# ---------------------------------------------------------------------------------- Cluster
@dataclass
class Cluster:
    """A Redis Cluster of 3 masters with 1 replica each (node list in start order)."""

    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        """The ``redis+cluster://`` URL the gateway uses (every node a startup node)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def live(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.running()]

    def master_of(self, slot: int) -> RedisServer:
        """The node serving ``slot`` now (asked of a live node)."""
        with self.live()[0].client() as c:
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(master[1])
                    return next(n for n in self.nodes if n.port == port)
        raise LookupError(f"no node serves slot {slot}")

    def wait_ok(self) -> None:
        """Wait until every live node says ``cluster_state:ok`` and agrees on who serves what."""

        def ok() -> bool:
            views = []
            for node in self.live():
                with node.client() as c:
                    if c.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") < 0:
                        return False
                    views.append(
                        sorted((s, e, int(m[1])) for s, e, m, *_ in c.execute_command("CLUSTER", "SLOTS"))
                    )
            return all(v == views[0] for v in views) and sum(e - s + 1 for s, e, _ in views[0]) == 16384

        wait_until("cluster_state:ok on every live node", ok)


@contextlib.contextmanager
def cluster(*, node_timeout_ms: int = 1000) -> Iterator[Cluster]:
    """3 masters + 1 replica each on free ports (``redis-cli --cluster create``), stopped at the end."""
    with _scratch("agency-cluster-") as root:
        nodes: list[RedisServer] = []
        try:
            for i in range(6):
                directory = root / f"node{i}"
                node = RedisServer(
                    directory,
                    port=free_cluster_port(),
                    args=(
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", str(directory / "nodes.conf"),
                        "--cluster-node-timeout", str(node_timeout_ms),
                    ),
                )  # fmt: skip
                nodes.append(node.start())
            subprocess.run(
                [
                    *(REDIS_CLI, "--cluster", "create"),
                    *(f"127.0.0.1:{n.port}" for n in nodes),
                    *("--cluster-replicas", "1", "--cluster-yes"),
                ],
                check=True,
                capture_output=True,
                timeout=DEADLINE_S,
            )
            the_cluster = Cluster(nodes)
            the_cluster.wait_ok()
            _wait_replicas_linked(the_cluster)
            yield the_cluster
        finally:
            for node in nodes:
                node.stop()


def _wait_replicas_linked(the_cluster: Cluster) -> None:
    def linked() -> bool:
        for node in the_cluster.live():
            info = node.info("replication")
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
            if info["role"] == "master" and info.get("connected_slaves", 0) < 1:
                return False
        return True

    wait_until("every cluster replica to replicate its master", linked)


def kill_master(the_cluster: Cluster, slot: int) -> RedisServer:
    """kill -9 the master serving ``slot``; wait until its replica serves it and the cluster is
    ok again. Returns the killed node (``start()`` brings it back, as a replica)."""
    victim = the_cluster.master_of(slot)
    victim.kill()

    def promoted() -> bool:
        return the_cluster.master_of(slot) is not victim

    wait_until(f"a replica to take slot {slot} from port {victim.port}", promoted)
    the_cluster.wait_ok()
    return victim
