"""Console sign-ins kept on the server, so that signing out ends one everywhere.

The console's cookie is signed, so it cannot be forged, but a copied cookie would keep working
until it expires. The cookie therefore carries a random sign-in id, and the sign-in itself --
whose it is, until when -- lives in a :class:`SignInStore`: :class:`MemorySignIns` (one
process) or :class:`~middleware.redis.sign_ins.RedisSignIns` (every replica of a deployment
whose storage is Redis). Signing out removes it: the cookie is worthless at once, on every
replica that shares the store. Only a hash of the id is stored, so a copy of the store does
not yield working cookies.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .._lazy import lazy_exports

__all__ = ["MemorySignIns", "SignInStore", "sign_in_key"]


def sign_in_key(sign_in_id: str) -> str:
    """What a store keeps for a sign-in id (its SHA-256): the cookie's secret is not in the store."""
    return hashlib.sha256(sign_in_id.encode()).hexdigest()


@runtime_checkable
class SignInStore(Protocol):
    """Who is signed in under which id, until when."""

    async def start(self, person: str, *, seconds: float) -> str:
        """A new sign-in of ``person`` lasting ``seconds``; returns its id (for the cookie)."""
        ...

    async def holder(self, sign_in_id: str) -> str | None:
        """The person signed in under ``sign_in_id``, or None (ended, expired, never was)."""
        ...

    async def end(self, sign_in_id: str) -> None:
        """End the sign-in (sign-out): its id is refused from now on."""
        ...


class MemorySignIns:
    """The sign-ins of one process (a clock is injected in tests)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_sign_ins: int = 100_000) -> None:
        self._clock = clock
        self._max = max_sign_ins
        self._held: dict[str, tuple[str, float]] = {}  # key -> (person, until)

    async def start(self, person: str, *, seconds: float) -> str:
        now = self._clock()
        if len(self._held) >= self._max:  # forget the expired ones now and then
            self._held = {k: v for k, v in self._held.items() if v[1] > now}
        sign_in_id = secrets.token_urlsafe(32)
        self._held[sign_in_key(sign_in_id)] = (person, now + seconds)
        return sign_in_id

    async def holder(self, sign_in_id: str) -> str | None:
        key = sign_in_key(sign_in_id)
        held = self._held.get(key)
        if held is None:
            return None
        if held[1] <= self._clock():
            del self._held[key]
            return None
        return held[0]

    async def end(self, sign_in_id: str) -> None:
        self._held.pop(sign_in_key(sign_in_id), None)


__getattr__, __dir__ = lazy_exports(
    __name__, {"RedisSignIns": "middleware.redis.sign_ins"}, [*__all__, "RedisSignIns"]
)
