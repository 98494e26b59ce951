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
            desk, secret=secret, secure_cookies=self.tls, session_seconds=session_seconds, sso=self.sso
        )
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            ssl_certfile=str(tls_cert) if self.tls else None,
            ssl_keyfile=str(tls_key) if self.tls else None,
        )
        self._server = _QuietServer(config)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_definition(cls, definition: AgencyDefinition, desk: HumanDesk) -> ConsoleServer:
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
        return cls(
            desk,
            settings.address,
            tls_cert=tls.cert if tls is not None else None,
            tls_key=tls.key if tls is not None else None,
            secret=secret,
            session_seconds=settings.session_seconds,
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
        if self.sso is not None:
            await self.sso.aclose()
