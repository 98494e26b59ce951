"""Every HTTP listener of the gateway bounded the same way (:class:`~.http_limits.HttpLimits`).

* **Connections** are counted when they open, per source address and in total, before uvicorn
  reads a byte: one past a cap is answered ``503`` (``Retry-After: 1``) and closed at once.
* **Time**: a request's headers must arrive within ``header_timeout`` of the connection's start
  (or of the previous response's end) and its body within ``body_timeout`` of its headers; a
  kept-alive connection waits ``idle_timeout`` for its next request. A client that drips a
  header line every few seconds (slowloris) is closed when its time is up, whatever it sends.
* **Bodies**: a declared ``Content-Length`` over ``max_body_bytes`` is answered ``413`` before
  the application reads anything; a chunked body is cut off at the limit (``413`` when no
  response has started).

:func:`uvicorn_options` gives the uvicorn ``Config`` keywords of a guarded listener and
:func:`limit_body` wraps its application.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from .http_limits import HttpLimits

__all__ = ["ConnectionGuard", "limit_body", "uvicorn_options"]

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: 40\r\n\r\n"
    b"too many connections from here, or to me"
)
_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 28\r\n\r\nthe request took too long.\r\n"
)


class ConnectionGuard:
    """The open connections of one listener, per source and in total.

    Attributes:
        refused: Connections refused for a cap since the start (metrics, tests).
        timed_out: Connections closed for a header or body timeout since the start.
    """

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.open: Counter[str] = Counter()
        self.total = 0
        self.refused = 0
        self.timed_out = 0

    def admit(self, source: str) -> bool:
        """Count one connection from ``source``; False (not counted) when a cap is reached."""
        if (
            self.total >= self.limits.max_connections
            or self.open[source] >= self.limits.max_connections_per_source
        ):
            self.refused += 1
            return False
        self.open[source] += 1
        self.total += 1
        return True

    def release(self, source: str) -> None:
        self.total -= 1
        left = self.open[source] - 1
        if left > 0:
            self.open[source] = left
        else:
            del self.open[source]


class _GuardedH11(H11Protocol):
    """uvicorn's h11 protocol, with the guard's caps and the header and body deadlines."""

    guard: ConnectionGuard  # set on the per-listener subclass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._source = ""
        self._admitted = False
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        source = self.client[0] if self.client else "unknown"
        if not self.guard.admit(source):
            transport.write(_BUSY)
            transport.close()
            return
        self._source, self._admitted = source, True
        self._arm(self.guard.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._admitted:
            self._admitted = False
            self.guard.release(self._source)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        cycle = self.cycle
        super().data_received(data)
        self._follow(cycle)

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self.cycle is cycle:  # waiting for the next request's headers
            self._arm(self.guard.limits.header_timeout)
        else:  # a pipelined request began
            self._follow(cycle)

    def _follow(self, before: Any) -> None:
        """Move the deadline along with the request: headers in -> the body's; body in -> none."""
        cycle = self.cycle
        if cycle is None or self.transport.is_closing():
            return
        if cycle is not before and cycle.more_body:
            self._arm(self.guard.limits.body_timeout)
        elif not cycle.more_body and self._deadline is not None and not cycle.response_complete:
            self._disarm()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self.guard.timed_out += 1
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE) and (
            self.cycle is None or not self.cycle.response_started
        ):
            self.transport.write(_TIMEOUT)
        self.transport.close()


def uvicorn_options(guard: ConnectionGuard) -> dict[str, Any]:
    """The ``uvicorn.Config`` keywords of a listener guarded by ``guard``."""
    protocol = type("GuardedH11Protocol", (_GuardedH11,), {"guard": guard})
    return {
        "http": protocol,
        "timeout_keep_alive": guard.limits.idle_timeout,
        "ws": "none",  # no listener speaks WebSocket: an upgrade must not escape the guard
    }


def limit_body(app: ASGIApp, max_bytes: int) -> ASGIApp:
    """``app`` with request bodies bounded by ``max_bytes`` (see the module docstring).

    A declared ``Content-Length`` is checked before anything is read (h11 then holds the client
    to it). A body without one (chunked) is read here, up to the limit, before ``app`` sees the
    request: one byte over and the answer is 413 without ``app`` ever running -- the same bytes
    ``app`` would have buffered to parse it, and no exception thrown into a framework's reader.
    """

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None:
            if not declared.strip().isdigit() or int(declared) > max_bytes:
                await _too_large(send, max_bytes)
                return
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                await _too_large(send, max_bytes)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        await app(scope, replayed, send)

    return guarded


async def _too_large(send: Send, max_bytes: int) -> None:
    body = f"request body over {max_bytes} bytes (AGENCY_HTTP_MAX_BODY_BYTES)".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
