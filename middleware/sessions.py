"""Conversation state by session: what a user's earlier tasks established.

The seed (section 4.1, problem 3; section 4.2; section 5.1) asks the orchestrator to
hold a ``ConversationState`` per session so a user who reconnects is not asked again
for what they already said (the order number, the device, the fault). The pipeline
plays the orchestrator: when a task of a session ends (or stops to wait for input) it
merges into the session's state the intent, the goal it anchored, a context map of
SMF messages (each extracted fact, each step's result, keyed like
``context_map["warranty"]``), the failures it met and whether it went to a human.
A later task of the same session starts with that context: every agent's input holds
it.

A session belongs to the client that opened it, as a task does: another client's task
naming the session is refused (PERMISSION_DENIED); an admin is not an exception here,
since a submit does not act on another client's behalf.

Stores: :class:`~middleware.memory_session_store.MemorySessionStore` (default) and
:class:`~middleware.redis.session_store.RedisSessionStore` (24 h TTL, configurable; a
lock for concurrent changes, as the seed's section 5.1 asks).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from ._model import Model
from .errors import PermissionDenied
from .failures import FailureEvent
from .goals import GoalAssertion
from .smf import utcnow

__all__ = [
    "DEFAULT_SESSION_TTL_S",
    "MAX_FAILURE_HISTORY",
    "ConversationState",
    "SessionStore",
    "authorize_session",
]

#: How long a session's state lives after its last change (the seed: 24 h).
DEFAULT_SESSION_TTL_S = 24 * 3600.0
#: Failures kept per session (the oldest go first).
MAX_FAILURE_HISTORY = 50


class ConversationState(Model):
    """The state of one conversation (the seed's section 4.2 model)."""

    session_id: str = Field(min_length=1, max_length=256)
    client: str = Field(default="", description="The client that owns the session (empty: tokens off).")
    tenant: str = Field(default="", description="The tenant the session belongs to (empty: none).")
    user_id: str = ""
    intent_id: str = Field(default="", description="The user's intent, as an intake agent extracted it.")
    current_goal: GoalAssertion | None = None
    language: str = ""
    context_map: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="context key -> the SMF message that established it (JSON)."
    )
    failure_history: list[FailureEvent] = Field(default_factory=list)
    human_handoff_requested: bool = False
    task_ids: list[str] = Field(default_factory=list, description="The session's tasks, oldest first.")
    updated_at: datetime = Field(default_factory=utcnow)

    def context(self) -> dict[str, Any]:
        """The facts a new task of this session starts with: each message's content."""
        return {key: message.get("content") for key, message in self.context_map.items()}


def authorize_session(state: ConversationState, client: str, *, tenant: str = "") -> None:
    """Refuse a client that is not the session's owner (no owner or no client: allowed), and
    any task of another tenant than the session's.

    Raises:
        PermissionDenied: naming the client and the session.
    """
    if state.tenant != tenant:
        raise PermissionDenied(
            f"client {client!r} may not use session {state.session_id}: a session is used only "
            "within its own tenant",
            details={"client": client, "permission": "tenant", "target": state.session_id},
        )
    if not state.client or not client or state.client == client:
        return
    raise PermissionDenied(
        f"client {client!r} may not use session {state.session_id}: a session belongs to the client "
        "that opened it",
        details={"client": client, "permission": "session_owner", "target": state.session_id},
    )


@runtime_checkable
class SessionStore(Protocol):
    """Conversation states by session id, with a per-session lock."""

    async def get(self, session_id: str) -> ConversationState | None:
        """The session's state, or ``None`` (never opened, or expired)."""
        ...

    async def save(self, state: ConversationState) -> None:
        """Store ``state`` (and restart its TTL)."""
        ...

    def lock(self, session_id: str, *, wait_s: float = 5.0) -> AbstractAsyncContextManager[None]:
        """Hold the session's lock for the ``async with`` block (read-merge-write under it).

        Raises:
            ConcurrentUpdate: the lock was not free within ``wait_s`` seconds.
        """
        ...

    async def close(self) -> None: ...
