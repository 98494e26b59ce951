"""A TCP proxy in front of a real Redis server, for faults a server alone cannot make on cue.

- :meth:`TcpProxy.cut_after` makes an *ambiguous write*: the next command whose bytes contain
  a marker is forwarded to the server and answered there, then the reply is dropped and the
  connection closed, so the client sees a connection error for a write that was applied.
- :meth:`TcpProxy.refuse` makes the server unreachable (every connection closed, new ones
  closed on arrival) until :meth:`TcpProxy.accept`.

It forwards bytes and nothing else: the client and the server are the real programs.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

__all__ = ["TcpProxy"]


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    cut_pending: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.close()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` (chosen on start) to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.refusing = False
        self.cuts: list[bytes] = []  # the commands whose replies were dropped
        self._marker: bytes | None = None
        self._cut_done = asyncio.Event()
        self._pairs: set[_Pair] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pair in list(self._pairs):
            pair.close()
        tasks = [task for pair in list(self._pairs) for task in pair.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)  # they end with their sockets
        if self._server is not None:
            await self._server.wait_closed()

    # ------------------------------------------------------------------------- faults
    def cut_after(self, marker: bytes) -> asyncio.Event:
        """Drop the reply to the next command containing ``marker`` (after the server answered
        it) and close that connection; the event is set once it happened."""
        self._marker = marker
        self._cut_done = asyncio.Event()
        return self._cut_done

    def refuse(self) -> None:
        """Close every connection and every new one on arrival, until :meth:`accept`."""
        self.refusing = True
        for pair in list(self._pairs):
            pair.close()

    def accept(self) -> None:
        self.refusing = False

    # ---------------------------------------------------------------------- forwarding
    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        pair = _Pair(client=writer, server=server_writer)
        self._pairs.add(pair)
        pair.tasks = [
            asyncio.create_task(self._upstream(pair, reader)),
            asyncio.create_task(self._downstream(pair, server_reader)),
        ]
        await asyncio.gather(*pair.tasks, return_exceptions=True)
        self._pairs.discard(pair)
        pair.close()
        for end in (pair.client, pair.server):
            with contextlib.suppress(Exception):
                await end.wait_closed()

    async def _upstream(self, pair: _Pair, reader: asyncio.StreamReader) -> None:
        tail = b""
        try:
            while data := await reader.read(65536):
                window = tail + data
                if self._marker is not None and self._marker in window:
                    self._marker = None
                    pair.cut_pending = True
                    self.cuts.append(data)
                tail = window[-256:]
                pair.server.write(data)
                await pair.server.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            pair.close()

    async def _downstream(self, pair: _Pair, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(65536):
                if pair.cut_pending:  # the server answered the marked command: drop it, hang up
                    pair.close()
                    self._cut_done.set()
                    return
                pair.client.write(data)
                await pair.client.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            pair.close()
