"""Background loops that outlive backend outages.

Every loop a gateway runs beside its calls (the keep-alive of its agents' leases, the
backend monitor, audit retention) goes through :class:`LoopErrors` when a round fails:
the error is counted (``agency_background_errors_total{loop=...}`` when a hook is given),
logged once when the outage starts and once when it ends (not on every round; a relapse
within ``settle`` seconds of the recovery, such as a pooled connection opened before the
outage failing on its first use, is the same outage: a warning, not a new one), and the
loop waits with an exponential backoff before the next round instead of ending. A loop
therefore never dies of a Redis (or disk) error: it resumes by itself within one backoff
of the backend's return.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["BackgroundErrorHook", "LoopErrors"]

#: Called with the loop's name each time one of its rounds fails.
BackgroundErrorHook = Callable[[str], None]

log = logging.getLogger("agency.background")


class LoopErrors:
    """The failures of one background loop: counted, logged once per outage, backed off.

    Args:
        name: The loop's name (the metric label and the log's subject), e.g. ``"keepalive"``.
        on_error: Called with ``name`` for every failed round (e.g. ``Metrics.background_error``).
        base: Seconds to wait after the first failure.
        cap: The longest wait between failing rounds.
        logger: Where the start and the end of an outage are logged.
        subject: How the log names the loop (default: ``name``).
        settle: Seconds after a recovery within which a failure continues the same outage.
        clock: Monotonic seconds (injected in tests).
    """

    def __init__(
        self,
        name: str,
        *,
        on_error: BackgroundErrorHook | None = None,
        base: float = 0.1,
        cap: float = 5.0,
        logger: logging.Logger = log,
        subject: str = "",
        settle: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.subject = subject or name
        self.on_error = on_error
        self.base = base
        self.cap = cap
        self.settle = settle
        self.clock = clock
        self.total = 0
        self.consecutive = 0
        self._log = logger
        self._recovered_at: float | None = None

    @property
    def failing(self) -> bool:
        """True from a failed round until the next round that succeeds."""
        return self.consecutive > 0

    def failed(self, error: BaseException) -> float:
        """Record one failed round; returns how long to wait before the next one."""
        self.total += 1
        self.consecutive += 1
        if self.on_error is not None:
            self.on_error(self.name)
        if self.consecutive == 1 and self._relapse():
            self._log.warning(
                "%s: %s (%s) again within %gs of recovering; the same outage, retrying with backoff",
                self.subject,
                error,
                type(error).__name__,
                self.settle,
            )
        elif self.consecutive == 1:
            self._log.error(
                "%s failed: %s (%s; retrying with backoff, logged again when it recovers)",
                self.subject,
                error,
                type(error).__name__,
            )
        return float(min(self.cap, self.base * 2.0 ** (self.consecutive - 1)))

    def succeeded(self) -> None:
        """Record a round that worked: ends the outage (logged once) if there was one."""
        if self.consecutive:
            self._log.warning("%s recovered after %d failed round(s)", self.subject, self.consecutive)
            self.consecutive = 0
            self._recovered_at = self.clock()

    def _relapse(self) -> bool:
        return self._recovered_at is not None and self.clock() - self._recovered_at < self.settle
