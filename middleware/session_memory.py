"""What a task leaves in its session's conversation state (see ``middleware.sessions``).

:func:`remember` merges, under the session's lock so two tasks of one session cannot
overwrite each other, the task's intent, goal, context facts and step results (each as
the SMF message that established it), its failures and whether it went to a human.
"""

from __future__ import annotations

from typing import Any

from .sessions import MAX_FAILURE_HISTORY, ConversationState, SessionStore
from .smf import Provenance, SMFMessage
from .tasks import TaskRecord

__all__ = ["remember"]


def _message(run: TaskRecord, sender: str, content: Any, provenance: Provenance | None) -> dict[str, Any]:
    message = SMFMessage(
        sender=sender or "gateway",
        receiver="orchestrator",
        content=content if content is not None else "",
        trace_id=run.trace_id,
        metadata={
            "provenance": provenance or run.last_source,
            "intention_trace": [run.goal.id] if run.goal else [run.task_id],
        },
    )
    return message.model_dump(mode="json")


async def remember(store: SessionStore, run: TaskRecord) -> None:
    """Merge what ``run`` established into its session's state (a session owned by another
    client is left alone: the task could not have read it either)."""
    session_id = run.request.session_id
    async with store.lock(session_id):
        state = await store.get(session_id) or ConversationState(
            session_id=session_id, client=run.client, user_id=run.request.user_id, tenant=run.tenant
        )
        if state.tenant != run.tenant or (state.client and run.client and state.client != run.client):
            return
        state.intent_id = run.intent or state.intent_id
        state.language = run.language or state.language
        state.current_goal = run.goal or state.current_goal
        intake = next(
            (
                s
                for s in run.steps
                if isinstance(s.output, dict) and "intent" in s.output and "context" in s.output
            ),
            None,
        )
        for key, value in run.context.items():
            held = state.context_map.get(key)
            if held is not None and held.get("content") == value:
                continue  # already known (e.g. carried over from an earlier task)
            state.context_map[key] = _message(
                run, intake.agent if intake else "", value, intake.provenance if intake else None
            )
        for step in run.steps:
            if step.status == "completed":
                state.context_map[step.name] = _message(run, step.agent, step.output, step.provenance)
        known = {f.event_id for f in state.failure_history}
        state.failure_history.extend(f for f in run.failures if f.event_id not in known)
        del state.failure_history[:-MAX_FAILURE_HISTORY]
        state.human_handoff_requested = run.pending.get("kind") == "human_handover"
        if run.task_id not in state.task_ids:
            state.task_ids.append(run.task_id)
        state.updated_at = run.updated_at
        await store.save(state)
