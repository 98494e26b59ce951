"""What a self-registering agent (``MessageService.Register``) may be called, and how many one
client may register.

* **Names**: not under a prefix the gateway keeps for itself (``human:``, ``agency:``,
  ``runtime.watcher:`` -- in any spelling that looks like them), and not a look-alike of an
  agent that exists: compared case-folded and by UTS #39 confusable skeleton
  (:mod:`middleware.names`), against the definition's agents, people's mailboxes and every
  registered agent (the directory holds the keys, so the check is atomic across replicas).
* **Quotas per client** (the gateway token's name; without tokens the source address counts
  for the rate): at most :attr:`RegistrationQuota.max_per_client` agents registered at once,
  and :attr:`RegistrationQuota.per_minute` registrations a minute (bursts of
  :attr:`RegistrationQuota.burst`). Admins are not limited.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import Field

from .._model import Model
from ..errors import AlreadyExists, InvalidInput, ResourceExhausted
from ..names import look_alike, reserved_prefix
from .clock import Clock, system_clock

__all__ = ["RegistrationQuota", "RegistrationRate", "check_new_name"]


class RegistrationQuota(Model):
    """``messaging.registration`` limits per gateway client."""

    max_per_client: int = Field(
        default=100,
        ge=1,
        description="Agents one client may have registered at once (deregistering frees one).",
    )
    per_minute: float = Field(default=10.0, gt=0, description="Registrations one client may make per minute.")
    burst: int = Field(default=20, ge=1, description="Registrations one client may make at once.")


def check_new_name(name: str, existing: Iterable[str]) -> None:
    """Refuse ``name`` under a reserved prefix, or looking like one of ``existing``.

    Raises:
        InvalidInput: a reserved prefix, naming ``name``. AlreadyExists: a look-alike.
    """
    prefix = reserved_prefix(name)
    if prefix:
        raise InvalidInput.single(
            "name",
            f"{name!r} is under the reserved prefix {prefix!r} (or looks like it): names under "
            "human:, agency: and runtime.watcher: are the gateway's own",
            what="registration",
        )
    for other in existing:
        if look_alike(name, other):
            raise AlreadyExists(
                f"agent name {name!r} is taken: it looks like {other!r} (names are compared case-folded "
                "and by their Unicode confusable skeleton, UTS #39)",
                details={"name": name, "looks_like": other},
            )


class RegistrationRate:
    """Registrations per client: a token bucket each (this gateway's)."""

    def __init__(self, quota: RegistrationQuota, *, clock: Clock = system_clock) -> None:
        self.quota, self.clock = quota, clock
        self._rate = quota.per_minute / 60.0
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, client: str) -> None:
        """Spend one registration of ``client``.

        Raises:
            ResourceExhausted: with ``retry_after_ms``.
        """
        now = self.clock()
        burst = float(self.quota.burst)
        tokens, at = self._buckets.get(client, (burst, now))
        tokens = min(burst, tokens + max(0.0, now - at) * self._rate)
        if tokens < 1.0:
            self._buckets[client] = (tokens, now)
            wait_ms = max(1, math.ceil((1.0 - tokens) / self._rate * 1000))
            raise ResourceExhausted(
                f"{client!r} registered too many agents too fast: at most {self.quota.per_minute:g} a "
                f"minute, bursts of {self.quota.burst} (messaging.registration.per_minute); retry later",
                details={"client": client, "retry_after_ms": wait_ms},
            )
        self._buckets[client] = (tokens - 1.0, now)
        if len(self._buckets) > 10_000:
            self._buckets = {
                c: (t, a) for c, (t, a) in self._buckets.items() if t + (now - a) * self._rate < burst
            }
