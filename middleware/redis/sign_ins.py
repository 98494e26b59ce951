"""Console sign-ins in Redis (:class:`RedisSignIns`), shared by every replica; the interface and
why it exists are :mod:`middleware.people.sign_ins`.

Layout: ``{prefix}{signin:<sha256 of the id>}`` = the person's name, expiring with the
sign-in (``SET ... EX``); sign-out deletes it (one key per sign-in: see :mod:`.keys`).
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from ..people.sign_ins import sign_in_key
from . import keys as key_names

__all__ = ["RedisSignIns"]


class RedisSignIns:
    """Sign-ins every replica sees (``redis.asyncio`` client)."""

    def __init__(self, client: Any, *, prefix: str = "agency:") -> None:
        self._r = client
        self._p = prefix

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "agency:") -> RedisSignIns:
        import redis.asyncio as aioredis

        return cls(aioredis.Redis.from_url(url), prefix=prefix)

    def _key(self, sign_in_id: str) -> str:
        return key_names.sign_in(self._p, sign_in_key(sign_in_id))

    async def start(self, person: str, *, seconds: float) -> str:
        sign_in_id = secrets.token_urlsafe(32)
        await self._r.set(self._key(sign_in_id), person, ex=max(1, math.ceil(seconds)))
        return sign_in_id

    async def holder(self, sign_in_id: str) -> str | None:
        raw = await self._r.get(self._key(sign_in_id))
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    async def end(self, sign_in_id: str) -> None:
        await self._r.delete(self._key(sign_in_id))

    async def close(self) -> None:
        await self._r.aclose()
