"""Audit records of refused calls, aggregated per source so a flood cannot flood the log.

A call refused before it is known who makes it (a missing or unknown bearer token,
``UNAUTHENTICATED``) costs the caller nothing, so writing one durable record per call
would let anyone fill the audit log. :class:`RefusalAggregator` writes one record per
source (the peer's address without its port) and reason per interval (60 s by default):

* the first refusal of a source in an interval is recorded at once (``count: 1``), so a
  single refusal is in the log when the call ends;
* further refusals of that source in the interval are only counted; when the interval is
  over the count is recorded in one summary record (``count: N``, ``summary: true``),
  written by the next refusal of anyone after the interval, or by :meth:`flush` when
  the gateway stops.

The records are ``message.rejected``, component ``gateway``, outcome ``refused``, rule
the error's reason (``UNAUTHENTICATED``); ``detail`` holds ``source``, ``operation``
(the first one refused in the interval), ``why``, ``count``, ``interval_s`` and
``first_at``. At most ``max_sources`` sources are tracked at once: past that, every
open interval is summed up and the table starts again, so memory stays bounded.

The post office refuses ``MessageService`` calls for their *agent* token itself (the
gateway's token check only knows client tokens); it reports them to the same aggregator.
The transport names the call's source and operation with :func:`calling_from` (the core
does not see the peer); a call made in process is from ``local``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

from .audit.record import AuditEventType, AuditRecord
from .errors import AgencyError
from .smf import utcnow

__all__ = ["RefusalAggregator", "calling_from", "current_call", "source_of"]

Append = Callable[[AuditRecord], Awaitable[int]]

#: The source and operation of the call being served (set by the transport).
_call: ContextVar[tuple[str, str] | None] = ContextVar("agency_refusal_source", default=None)


@contextmanager
def calling_from(source: str, operation: str) -> Iterator[None]:
    """Within the block, :func:`current_call` is ``(source, operation)``."""
    token = _call.set((source, operation))
    try:
        yield
    finally:
        with suppress(ValueError):  # a stream closed from another context
            _call.reset(token)


def current_call(operation: str) -> tuple[str, str]:
    """The ``(source, operation)`` of the call being served; ``("local", operation)`` for a
    call made in process."""
    return _call.get() or ("local", operation)


def source_of(peer: str) -> str:
    """The source of a gRPC peer string: its address without the port
    (``ipv4:10.0.0.7:51234`` -> ``ipv4:10.0.0.7``, ``ipv6:[::1]:5`` -> ``ipv6:[::1]``)."""
    kind, sep, rest = peer.partition(":")
    if sep and kind in ("ipv4", "ipv6"):
        host, colon, port = rest.rpartition(":")
        if colon and port.isdigit():
            return f"{kind}:{host}"
    return peer or "unknown"


@dataclass
class _Window:
    started: float
    first_at: datetime
    operation: str
    why: str
    count: int = 0  # refusals in this interval not recorded yet (the first one is)


class RefusalAggregator:
    """One audit record per source and reason per ``interval`` seconds, with a count.

    Args:
        append: Appends a record to the audit log (``AuditLog.append``).
        node: This gateway's name in the records.
        interval: Seconds one record stands for.
        clock: Monotonic seconds (injectable for tests).
        max_sources: Sources tracked at once before every open interval is summed up.
    """

    def __init__(
        self,
        append: Append,
        *,
        node: str,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = 10_000,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0 seconds")
        self._append = append
        self._node = node
        self._interval = interval
        self._clock = clock
        self._max_sources = max_sources
        self._windows: dict[tuple[str, str], _Window] = {}
        self._swept = clock()

    async def refused(self, source: str, operation: str, error: AgencyError) -> None:
        """Note one refused call from ``source`` (audited at once if it opens an interval)."""
        now = self._clock()
        if now - self._swept >= self._interval or len(self._windows) >= self._max_sources:
            await self._sweep(now, everything=len(self._windows) >= self._max_sources)
        key = (source, error.reason)
        window = self._windows.get(key)
        if window is not None and now - window.started < self._interval:
            window.count += 1
            return
        # a new interval (the table changes before any await: concurrent refusals count in it)
        fresh = _Window(started=now, first_at=utcnow(), operation=operation, why=error.message)
        self._windows[key] = fresh
        if window is not None:  # the interval that is over is summed up first
            await self._summary(key, window)
        await self._append(self._record(key, fresh, count=1, summary=False))

    async def flush(self) -> None:
        """Record the count of every open interval (call when the gateway stops)."""
        await self._sweep(self._clock(), everything=True)

    async def _sweep(self, now: float, *, everything: bool) -> None:
        self._swept = now
        done = [k for k, w in self._windows.items() if everything or now - w.started >= self._interval]
        closed = [(key, self._windows.pop(key)) for key in done]  # before any await
        for key, window in closed:
            await self._summary(key, window)

    async def _summary(self, key: tuple[str, str], window: _Window) -> None:
        if window.count > 0:
            await self._append(self._record(key, window, count=window.count, summary=True))

    def _record(self, key: tuple[str, str], window: _Window, *, count: int, summary: bool) -> AuditRecord:
        source, reason = key
        return AuditRecord(
            event_type=AuditEventType.MESSAGE_REJECTED.value,
            node=self._node,
            component="gateway",
            rule=reason,
            outcome="refused",
            detail={
                "source": source[:200],
                "operation": window.operation,
                "why": window.why,
                "count": count,
                "summary": summary,
                "interval_s": self._interval,
                "first_at": window.first_at.isoformat(),
            },
        )
