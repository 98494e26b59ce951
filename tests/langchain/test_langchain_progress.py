"""A LangChain chat model's token deltas in the task's event stream (contract ``stream_progress``),
never audited token by token; without the opt-in the model is not even streamed."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from lc_helpers import contract, scripted

from middleware import Agency, TaskState
from middleware.langchain import wrap_runnable
from middleware.task_events import PROGRESS

pytestmark = pytest.mark.timeout(60)

ANSWER = "Your replacement ships today with tracking EXP123456"


class Streamed(AsyncCallbackHandler):
    """Counts the token callbacks a model made (did it stream at all?)."""

    def __init__(self) -> None:
        self.tokens = 0

    async def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self.tokens += 1


async def test_token_deltas_of_a_chat_model_are_progress_events_of_the_task_and_not_audited() -> None:
    agency = Agency()
    model = GenericFakeChatModel(messages=scripted(AIMessage(ANSWER)))
    terms = contract("replier", "compose_reply", stream_progress=True)
    await agency.register(terms, wrap_runnable(model, terms, audit=agency.audit))
    outcome = await agency.submit({"text": "compose the reply", "constraints": {"action": "compose_reply"}})
    assert outcome.state is TaskState.COMPLETED and outcome.output == ANSWER

    events = [e async for e in agency.watch(outcome.task_id)]
    tokens = [e for e in events if e.type == PROGRESS and e.outcome == "token"]
    assert tokens and "".join(e.detail["data"]["text"] for e in tokens) == ANSWER
    kinds = [e.type for e in events]
    assert kinds.index("agent.dispatch") < kinds.index(PROGRESS) < kinds.index("agent.result")
    records = [r for _, r in agency.audit.records() if r.task_id == outcome.task_id]
    assert not {e.id for e in tokens} & {r.event_id for r in records}
    steps = [r for r in records if r.event_type == "agent.step"]
    assert len(steps) <= 2  # the model call's own records (start, end), whatever the token count
    await agency.close()


async def test_without_the_opt_in_the_model_is_invoked_not_streamed() -> None:
    agency = Agency()
    counter = Streamed()
    model = GenericFakeChatModel(messages=scripted(AIMessage(ANSWER)), callbacks=[counter])
    terms = contract("replier", "compose_reply")
    await agency.register(terms, wrap_runnable(model, terms))
    outcome = await agency.submit({"text": "compose the reply", "constraints": {"action": "compose_reply"}})
    assert outcome.output == ANSWER
    assert counter.tokens == 0
    assert [e for e in [e async for e in agency.watch(outcome.task_id)] if e.type == PROGRESS] == []
    await agency.close()
