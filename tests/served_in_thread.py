"""Servers on their own event loop in a thread, for tests that call them with the sync gRPC client
(hypothesis drives sync test functions)."""

from __future__ import annotations

import asyncio
import threading


class ServedInThread:
    """Subclasses start their servers in ``start`` and stop them in ``stop``; use as a context manager."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.start())
        except BaseException as exc:  # reported by __enter__
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()

    def __enter__(self) -> ServedInThread:
        self._thread.start()
        assert self._ready.wait(30), "servers did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.stop(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
