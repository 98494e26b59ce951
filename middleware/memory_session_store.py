"""Conversation states in process memory (the default; one gateway only)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .errors import ConcurrentUpdate
from .sessions import DEFAULT_SESSION_TTL_S, ConversationState

__all__ = ["MemorySessionStore"]


class MemorySessionStore:
    """A :class:`~middleware.sessions.SessionStore` in memory.

    Args:
        ttl_s: How long a state lives after its last save.
        max_sessions: Sessions kept at most; past it the least recently saved go first.
    """

    def __init__(self, *, ttl_s: float = DEFAULT_SESSION_TTL_S, max_sessions: int = 100_000) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._states: OrderedDict[str, tuple[float, str]] = OrderedDict()  # id -> (expires at, JSON)
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, session_id: str) -> ConversationState | None:
        held = self._states.get(session_id)
        if held is None:
            return None
        if held[0] < time.monotonic():
            del self._states[session_id]
            return None
        return ConversationState.model_validate_json(held[1])  # a copy: callers may change theirs

    async def save(self, state: ConversationState) -> None:
        self._states.pop(state.session_id, None)  # the most recently saved is last
        self._states[state.session_id] = (time.monotonic() + self.ttl_s, state.model_dump_json())
        while len(self._states) > self.max_sessions:
            self._states.popitem(last=False)

    @asynccontextmanager
    async def lock(self, session_id: str, *, wait_s: float = 5.0) -> AsyncIterator[None]:
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        try:
            async with asyncio.timeout(wait_s):
                await lock.acquire()
        except TimeoutError:
            raise ConcurrentUpdate(f"session {session_id} is locked by another task") from None
        try:
            yield
        finally:
            lock.release()
            if not lock.locked():
                self._locks.pop(session_id, None)

    async def close(self) -> None:
        return None
