"""Serving the console inside the gateway process: uvicorn on its own port, same event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn

from ...errors import InvalidInput
from ...people.desk import HumanDesk
from ...people.model import ConsoleOidcSettings
from ...people.sign_ins import SignInStore
from ..http_guard import ConnectionGuard, limit_body, uvicorn_options
from ..http_limits import HttpLimits
from .app import build_app

if TYPE_CHECKING:
    from ..definition import AgencyDefinition

__all__ = ["ConsoleServer"]

log = logging.getLogger("agency.console")


class _QuietServer(uvicorn.Server):
    """Leaves signals to the gateway (its SIGTERM handler stops everything, the console too)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ConsoleServer:
    """The console on ``address`` (``host:port``; port 0 picks one), TLS when cert and key are given.

    Uvicorn's access log is off (a path is all it would add; tokens are never in URLs anyway).
    ``limits`` bound it like every HTTP listener of the gateway (:mod:`..http_guard`).
    """

    def __init__(
        self,
        desk: HumanDesk,
        address: str,
        *,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        secret: str | None = None,
        session_seconds: float = 8 * 3600,
        limits: HttpLimits | None = None,
        sign_ins: SignInStore | None = None,
        signin_per_minute: float = 10.0,
        signin_burst: int = 10,
        sso: ConsoleOidcSettings | None = None,
    ) -> None:
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]") or "127.0.0.1"
        self._sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.host, int(port or 0)))
        self.port: int = self._sock.getsockname()[1]
        self.tls = tls_cert is not None and tls_key is not None
        secret = secret or secrets.token_urlsafe(32)
        self.sso = None
        if sso is not None:
            from .sso import ConsoleSso

            self.sso = ConsoleSso(sso, secret=secret)
        app = build_app(
            desk,
            secret=secret,
            secure_cookies=self.tls,
            session_seconds=session_seconds,
            sign_ins=sign_ins,
            signin_per_minute=signin_per_minute,
            signin_burst=signin_burst,
            sso=self.sso,
        )
        self.refusals = app.state.refusals
        self.sign_ins = sign_ins
        self.limits = limits or HttpLimits()
        self.guard = ConnectionGuard(self.limits)
        config = uvicorn.Config(
            limit_body(app, self.limits.max_body_bytes),
            **uvicorn_options(self.guard),
            log_config=None,
            access_log=False,
            lifespan="off",
            ssl_certfile=str(tls_cert) if self.tls else None,
            ssl_keyfile=str(tls_key) if self.tls else None,
        )
        self._server = _QuietServer(config)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_definition(
        cls, definition: AgencyDefinition, desk: HumanDesk, *, limits: HttpLimits | None = None
    ) -> ConsoleServer:
        """The console of ``definition.humans.console``, over TLS when the gateway has TLS."""
        settings = definition.humans.console
        tls = definition.server.tls
        secret = None
        if settings.secret_file:
            try:
                secret = Path(settings.secret_file).read_text().strip()
            except OSError as exc:
                raise InvalidInput.single(
                    "humans.console.secret_file", f"cannot read {settings.secret_file}: {exc.strerror}"
                ) from None
            if len(secret) < 32:
                raise InvalidInput.single(
                    "humans.console.secret_file", "the secret needs 32 characters or more"
                )
        sign_ins: SignInStore | None = None
        if definition.storage.backend == "redis":  # a sign-out ends the session on every replica
            from ...redis.sign_ins import RedisSignIns

            sign_ins = RedisSignIns.from_url(
                definition.storage.redis_url, prefix=definition.storage.key_prefix
            )
        return cls(
            desk,
            settings.address,
            tls_cert=tls.cert if tls is not None else None,
            tls_key=tls.key if tls is not None else None,
            secret=secret,
            session_seconds=settings.session_seconds,
            limits=limits,
            sign_ins=sign_ins,
            signin_per_minute=settings.signin_per_minute,
            signin_burst=settings.signin_burst,
            sso=settings.oidc,
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._server.serve(sockets=[self._sock])))
        while not self._server.started:
            if self._tasks[0].done():
                self._tasks[0].result()  # raises why it could not start
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._sock.close()
        await self.refusals.flush()  # the counts of refused sign-ins not yet summed up
        close = getattr(self.sign_ins, "close", None)
        if close is not None:
            await close()
        if self.sso is not None:
            await self.sso.aclose()
