"""HTTP floods cannot starve gRPC (issue 26, item 1): the liveness property of the gRPC edge --
health within 2 s and another client's Submit completing -- holds while the console, A2A and
MCP listeners of the same process are under a slowloris flood and a body flood.

The flood of the report (2 x 10,000 connections, a header line every 5 s) is scaled to this
machine: the caps are lowered in the test's limits instead (a few dozen connections per
listener, a 1-second header deadline), so the attack exceeds them many times over, from
several source addresses of the loopback range.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from middleware.errors import InvalidInput
from middleware.server.http_limits import HttpLimits, ensure_fd_headroom
from middleware.server.settings import http_limits_from_env
from tests.security.liveness import TOKENS, HttpGateway, check_live, check_live_while

LIMITS = HttpLimits(
    header_timeout=1.0,
    body_timeout=1.0,
    idle_timeout=1.0,
    max_connections=32,
    max_connections_per_source=6,
    max_body_bytes=64 * 1024,
)
#: Attacker addresses (loopback range); the honest client below comes from 127.0.0.1.
ATTACKERS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
LISTENERS = ("console", "a2a", "mcp")


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[HttpGateway]:
    with HttpGateway(tmp_path, LIMITS) as gateway:
        yield gateway


def _connect(port: int, source: str) -> socket.socket | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        return s
    except OSError:
        s.close()
        return None


def slowloris(gw: HttpGateway, *, per_port: int = 40, drip_for: float = 2.5) -> None:
    """Open ``per_port`` connections to each listener from the attacker addresses, send a request
    line, then one header line every 0.2 s for ``drip_for`` seconds (past the header deadline)."""
    held: list[socket.socket] = []
    try:
        for name in LISTENERS:
            for i in range(per_port):
                s = _connect(gw.port(name), ATTACKERS[i % len(ATTACKERS)])
                if s is not None:
                    held.append(s)
        for s in held:
            _send(s, b"GET /inbox HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + drip_for
        while time.monotonic() < deadline and held:
            held = [s for s in held if _send(s, b"X-Drip: 1\r\n") or s.close()]
            threading.Event().wait(0.2)
    finally:
        for s in held:
            s.close()


def _send(s: socket.socket, data: bytes) -> bool:
    try:
        s.sendall(data)
        return True
    except OSError:  # the server closed it (a cap, or the deadline): what the attack meets
        return False


def test_live_while_every_http_listener_is_slowlorised(gw: HttpGateway) -> None:
    check_live_while(gw, lambda: slowloris(gw))
    for name in LISTENERS:
        guard = gw.listeners[name].guard
        assert guard.refused > 0, name  # the caps turned connections away ...
        assert guard.timed_out > 0, name  # ... and the header deadline closed the drips
    for name in LISTENERS:  # nothing is held once the attack is over
        guard = gw.listeners[name].guard
        for _ in range(100):
            if guard.total == 0:
                break
            threading.Event().wait(0.05)
        assert guard.total == 0, (name, guard.open)


def test_an_honest_client_gets_in_while_attackers_fill_their_share(gw: HttpGateway) -> None:
    """Per-source caps: four attacking addresses hold 6 connections each, the listener takes 32."""
    stop = threading.Event()

    def attack() -> None:
        slowloris(gw, per_port=30, drip_for=0.5)

    threads = [threading.Thread(target=lambda: [attack() for _ in iter(stop.is_set, True)], daemon=True)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            conn = http.client.HTTPConnection("127.0.0.1", gw.port("a2a"), timeout=5)
            conn.request("GET", "/.well-known/agent-card.json")
            response = conn.getresponse()
            assert response.status == 200
            response.read()
            conn.close()
            check_live(gw)
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def _post(port: int, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("POST", path)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        if body:
            with contextlib.suppress(OSError):  # cut off at the limit: the answer is what counts
                conn.send(body)
        try:
            response = conn.getresponse()
            return response.status, response.read()
        except ConnectionResetError:  # answered and closed while the client was still sending
            return 0, b""
    finally:
        conn.close()


def test_a2a_refuses_a_300_mb_body_before_reading_it(gw: HttpGateway) -> None:
    """The report: 300 MB to /a2a/jsonrpc answered 200 after 11 s, 912 MB held afterwards."""
    auth = {"Authorization": f"Bearer {TOKENS['bob']}", "Content-Type": "application/json"}
    status, body = _post(gw.port("a2a"), "/a2a/jsonrpc", {**auth, "Content-Length": str(300 << 20)})
    assert status == 413 and b"AGENCY_HTTP_MAX_BODY_BYTES" in body
    # no Content-Length (chunked): cut off at the limit, not read to the end
    chunk = b"x" * 40_000  # two of them: over the limit, and small enough to be sent whole
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(2)) + b"0\r\n\r\n"
    status, _ = _post(gw.port("a2a"), "/a2a/jsonrpc", {**auth, "Transfer-Encoding": "chunked"}, chunked)
    assert status == 413
    for name, path in (("mcp", "/mcp"), ("console", "/signin")):  # the same limit on every listener
        status, _ = _post(gw.port(name), path, {**auth, "Content-Length": str(300 << 20)})
        assert status == 413, name


def test_live_while_large_bodies_are_posted(gw: HttpGateway) -> None:
    auth = {"Authorization": f"Bearer {TOKENS['bob']}", "Content-Type": "application/json"}
    chunk = b"1," * 32768
    big = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(32)) + b"0\r\n\r\n"  # 2 MB

    def attack() -> None:
        for name, path in (("a2a", "/a2a/jsonrpc"), ("mcp", "/mcp"), ("console", "/signin")):
            status, _ = _post(gw.port(name), path, {**auth, "Transfer-Encoding": "chunked"}, big)
            assert status in (413, 503, 0), (name, status)  # 0: cut off mid-body (reset)

    check_live_while(gw, attack)


def test_http_limits_come_from_the_environment() -> None:
    limits = http_limits_from_env({"AGENCY_HTTP_HEADER_TIMEOUT": "2.5", "AGENCY_HTTP_MAX_CONNECTIONS": "100"})
    assert limits.header_timeout == 2.5 and limits.max_connections == 100
    assert HttpLimits().max_connections_per_source == 64
    for var, value in (("AGENCY_HTTP_MAX_BODY_BYTES", "big"), ("AGENCY_HTTP_BODY_TIMEOUT", "0")):
        with pytest.raises(InvalidInput) as info:
            http_limits_from_env({var: value})
        assert info.value.field == var


def test_the_http_listeners_leave_gRPC_its_file_descriptors() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert ensure_fd_headroom(0, HttpLimits()) == soft
    fits = HttpLimits(max_connections=8, fd_reserve=64)
    assert ensure_fd_headroom(3, fits) >= 3 * 8 + 64
    if hard != resource.RLIM_INFINITY:
        too_many = HttpLimits(max_connections=hard, fd_reserve=64)
        with pytest.raises(InvalidInput) as info:
            ensure_fd_headroom(3, too_many)
        assert info.value.field == "AGENCY_HTTP_MAX_CONNECTIONS" and "AGENCY_FD_RESERVE" in str(info.value)
