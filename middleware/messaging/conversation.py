"""A user's conversation with agents: user turns go to the active agent; a handoff changes it.

The receiving agent of a handoff answers the same user turn (with a reminder of who
it is now in the history) and every later user turn, until it hands off in turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..audit.record import AuditEventType
from ..errors import FailedPrecondition

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["MAX_HANDOFFS_PER_TURN", "Conversation"]

#: Handoffs followed within one user turn before giving up (ping-pong guard).
MAX_HANDOFFS_PER_TURN = 8


class Conversation:
    """A user's conversation: user turns go to the active agent; a handoff changes it."""

    def __init__(self, runtime: Runtime, entry: str, thread_id: str) -> None:
        self.runtime = runtime
        self.active = entry
        self.thread_id = thread_id
        self.history: list[dict[str, Any]] = []

    async def user_turn(self, text: str) -> Any:
        """Run the active agent on ``text``; follow handoffs; return the final output."""
        rt = self.runtime
        self.history.append({"role": "user", "content": text})
        for _ in range(MAX_HANDOFFS_PER_TURN):
            host = rt._host(self.active)
            async with rt._session_turn(host) as inbox:
                output, ctx = await rt._run(
                    host,
                    thread_id=self.thread_id,
                    input=text,
                    sender=None,
                    parent_run_id=None,
                    history=self.history,
                    inbox=inbox,
                )
            if ctx.handoff_to is None:
                self.history.append({"role": "assistant", "agent": host.name, "content": output})
                return output
            target = rt.flows.handle(ctx.handoff_to)
            self.active = target.name
            reminder = target.reminder()
            if reminder:
                self.history.append({"role": "system", "agent": target.name, "content": reminder})
            await rt._audit(
                AuditEventType.AGENT_HANDOFF,
                "transferred",
                host.name,
                {"to": target.name, "thread_id": self.thread_id, "reminder": reminder},
            )
        raise FailedPrecondition(f"more than {MAX_HANDOFFS_PER_TURN} handoffs in one user turn")
