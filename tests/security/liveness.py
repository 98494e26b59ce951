"""A gateway in its own thread, and the liveness property the attack tests check.

The property (issue 14): while an attack runs, a health check with a 2-second deadline
succeeds and another client's Submit completes. The attack runs in background threads,
over and over, until the checks are done; each check must succeed while it does.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from middleware import Agency
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.agents import AgentRegistry
from middleware.audit import MemoryAuditLog
from middleware.demo import build_demo_agency
from middleware.server.grpc_api import build_server
from middleware.server.remote_agent import RemoteAgent
from middleware.server.settings import hash_token, read_token_hashes
from tests.served_in_thread import ServedInThread

TOKENS = {
    "bob": "tok-bob",
    "alice": "tok-alice",
    "mallory": "tok-mallory",
    "ops": "tok-ops",
    "audrey": "tok-aud",
}
ROLES = {"bob": "client", "alice": "client", "mallory": "agent", "ops": "admin", "audrey": "auditor"}

#: The liveness deadline of the property (not a performance figure).
HEALTH_DEADLINE_S = 2.0
#: Generous: a Submit of the demo scenario "completes" (it does in milliseconds when live).
SUBMIT_DEADLINE_S = 20.0

WARRANTY = agency_pb2.SubmitRequest(  # the seed's case: greeting_agent anchors the goal itself
    text="我上周买的手机屏幕碎了，要换新",
    user_id="u_789",
    input_json=json.dumps({"user_id": "u_789", "device": "fp_7f3a"}),
    steps=[
        agency_pb2.TaskStep(name="intake", action="extract_intent"),
        agency_pb2.TaskStep(name="order", action="get_order_detail"),
        agency_pb2.TaskStep(name="warranty", action="warranty_check"),
        agency_pb2.TaskStep(name="shipping", action="ship_replacement"),
        agency_pb2.TaskStep(name="reply", action="compose_reply"),
    ],
)


def token_file(tmp: Path) -> Path:
    path = tmp / "tokens"
    path.write_text("".join(f"{n} {hash_token(t)} {ROLES[n]}\n" for n, t in TOKENS.items()))
    path.chmod(0o600)
    return path


class Gateway(ServedInThread):
    """The demo agency served on port 0 with bearer tokens, on its own loop and thread."""

    def __init__(self, tmp: Path, audit: Any = None, **server_kwargs: Any) -> None:
        super().__init__()
        self.tokens = token_file(tmp)
        self.server_kwargs = server_kwargs
        self.audit = audit if audit is not None else MemoryAuditLog()
        self.address = ""

    async def start(self) -> None:
        async def no_sleep(_: float) -> None:
            return None

        self.agency = await build_demo_agency(
            Agency(
                audit=self.audit,
                sleep=no_sleep,
                agents=AgentRegistry(remote_factory=RemoteAgent.factory()),
            )
        )
        self.server = build_server(
            self.agency, "127.0.0.1:0", token_hashes=read_token_hashes(self.tokens), **self.server_kwargs
        )
        await self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"

    async def stop(self) -> None:
        await self.server.stop(0)
        await self.agency.close()
        # as asyncio.run does: what the server left (streams cut mid-way) ends on this loop
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()

    def run(self, coro: Any, timeout: float = 30) -> Any:
        """Run ``coro`` on the gateway's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address)


def auth(who: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[who]}"),)


def check_live(gw: Gateway) -> None:
    """The property: health answers within 2 s and alice's Submit completes."""
    with gw.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(), timeout=HEALTH_DEADLINE_S)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        outcome = agency_pb2_grpc.AgencyServiceStub(channel).Submit(
            WARRANTY, timeout=SUBMIT_DEADLINE_S, metadata=auth("alice")
        )
        assert outcome.state == "completed", outcome.reason


@contextmanager
def attacking(attack: Callable[[], None], *, threads: int = 2) -> Iterator[list[BaseException]]:
    """Run ``attack`` over and over in ``threads`` threads for the duration of the block.

    Yields the list of unexpected errors the attack raised (checked by the caller after).
    """
    stop = threading.Event()
    started = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def loop() -> None:
        started.wait(10)
        while not stop.is_set():
            try:
                attack()
            except BaseException as exc:  # reported to the test
                errors.append(exc)
                return

    workers = [threading.Thread(target=loop, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    started.wait(10)
    try:
        yield errors
    finally:
        stop.set()
        for w in workers:
            w.join(60)


def check_live_while(gw: Gateway, attack: Callable[[], None], *, rounds: int = 3) -> None:
    """:func:`check_live` ``rounds`` times while ``attack`` runs, then the attack's own errors."""
    with attacking(attack) as errors:
        for _ in range(rounds):
            check_live(gw)
    assert not errors, errors


class HttpGateway(Gateway):
    """:class:`Gateway` with every HTTP listener of ``agency serve`` on the same loop and in the
    same process: the operator console, A2A and MCP, each bounded by ``limits``."""

    def __init__(self, tmp: Path, limits: Any, **server_kwargs: Any) -> None:
        super().__init__(tmp, **server_kwargs)
        self.limits = limits
        self.listeners: dict[str, Any] = {}

    async def start(self) -> None:
        from middleware.people import Person
        from middleware.people.desk import HumanDesk
        from middleware.server.console import ConsoleServer
        from middleware.server.protocols.a2a_server import build_a2a_app
        from middleware.server.protocols.common import HttpServer
        from middleware.server.protocols.mcp_server import build_mcp_http_app

        await super().start()
        hashes = read_token_hashes(self.tokens)
        desk = HumanDesk(self.agency, [Person(name="olga", roles=["operator"], token_sha256="0" * 64)])
        console = ConsoleServer(desk, "127.0.0.1:0", secret="s" * 40, limits=self.limits)
        await console.start()
        a2a = HttpServer(None, "127.0.0.1:0", name="A2A", limits=self.limits)
        a2a.set_app(build_a2a_app(self.agency, url=a2a.url, token_hashes=hashes))
        await a2a.start()
        mcp = HttpServer(
            build_mcp_http_app(self.agency, token_hashes=hashes),
            "127.0.0.1:0",
            name="MCP",
            limits=self.limits,
        )
        await mcp.start()
        self.listeners = {"console": console, "a2a": a2a, "mcp": mcp}

    async def stop(self) -> None:
        for listener in self.listeners.values():
            await listener.stop()
        await super().stop()

    def port(self, name: str) -> int:
        return int(self.listeners[name].port)
