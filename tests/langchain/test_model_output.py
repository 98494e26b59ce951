"""LLM output as it really comes (issue 27, fifth item): prose around fenced or bare JSON, one
object or several chosen by the output schema; a wrong answer fails with an exact message; every
name docs/langchain.md gives is importable. A scripted fake chat model plays the LLM."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from lc_helpers import contract, no_sleep

from middleware import Agency, FailureType, TaskState
from middleware.errors import AgentFailure
from middleware.langchain import json_objects, structured_output, wrap_runnable

STATUS = {
    "type": "object",
    "required": ["status", "eta"],
    "properties": {"status": {"type": "string"}, "eta": {"type": "string"}},
}
ANSWER = {"status": "shipped", "eta": "2026-12-03"}
JSON = '{"status": "shipped", "eta": "2026-12-03"}'


def model_saying(*texts: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(t) for t in texts]))


@pytest.mark.parametrize(
    "text",
    [
        f"Here you go:\n```json\n{JSON}\n```",  # prose, then a fence
        f"```json\n{JSON}\n```\nLet me know if there is anything else.",  # a fence, then prose
        f"Sure! Here is the order:\n\n```json\n{JSON}\n```\n\nThe parcel left this morning.",
        f"The order status is {JSON}.",  # prose with bare JSON
        f"{JSON}\nI checked the carrier's system.",  # bare JSON, then prose
        f"```\n{JSON}\n```",  # a fence without a language
        '```json\n{"status": "shipped\n(by air)", "eta": "2026-12-03"}\n```',  # a raw newline in a string
        f"Based on the order: ```json {JSON} ``` as requested.",  # an inline fence
    ],
)
async def test_what_models_emit_is_read_through_the_pipeline(text):
    agent = wrap_runnable(model_saying(text), contract("orders", "order_status", output_schema=STATUS))
    agency = Agency(sleep=no_sleep)
    await agency.register(agent.contract, agent)
    outcome = await agency.submit({"text": "where is my order?", "constraints": {"action": "order_status"}})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output["status"].startswith("shipped") and outcome.output["eta"] == "2026-12-03"
    await agency.close()


def test_several_objects_are_chosen_by_the_output_schema():
    agent = wrap_runnable(model_saying(), contract("orders", "order_status", output_schema=STATUS))
    example_then_answer = (
        f'The format is {{"status": "<status>"}}. Checking the order... Answer:\n```json\n{JSON}\n```'
    )
    assert agent.map_output(AIMessage(example_then_answer)) == ANSWER
    answer_then_note = f'{JSON}\nNote: the previous status was {{"status": "packed"}}.'
    assert agent.map_output(AIMessage(answer_then_note)) == ANSWER
    two_answers = f'Draft: {{"status": "packed", "eta": "2026-12-05"}}\nFinal: {JSON}'
    assert agent.map_output(AIMessage(two_answers)) == ANSWER  # both match: the last one
    assert json_objects(two_answers) == [{"status": "packed", "eta": "2026-12-05"}, ANSWER]


def test_a_wrong_answer_still_fails_with_an_exact_message():
    agent = wrap_runnable(model_saying(), contract("orders", "order_status", output_schema=STATUS))
    with pytest.raises(AgentFailure) as none:
        agent.map_output(AIMessage("I could not find that order, sorry."))
    assert none.value.failure_type == "SCHEMA_VIOLATION"
    assert str(none.value) == (
        "the contract's output_schema asks for an object but the final message holds no JSON object: "
        "'I could not find that order, sorry.'"
    )
    with pytest.raises(AgentFailure) as several:
        agent.map_output(AIMessage('First {"status": "packed"} then {"eta": "soon"}'))
    assert str(several.value) == (
        "the final message holds 2 JSON objects and none matches the contract's output_schema: "
        "object 1: (root): 'eta' is a required property; object 2: (root): 'status' is a required property"
    )
    # truncated JSON is not completed into an answer
    with pytest.raises(AgentFailure, match="no JSON object"):
        agent.map_output(AIMessage('```json\n{"status": "shipped", "eta": "2026-'))
    # one object that does not match goes to the pipeline's schema check, which names the field
    assert agent.map_output(AIMessage('Result: {"status": "shipped"}')) == {"status": "shipped"}


async def test_one_object_that_breaks_the_schema_is_a_schema_violation_naming_the_field():
    agent = wrap_runnable(
        model_saying('Result: {"status": "shipped"}'),
        contract("orders", "order_status", output_schema=STATUS),
    )
    agency = Agency(sleep=no_sleep)
    agency.failures.policy.max_retries = 0
    await agency.register(agent.contract, agent)
    outcome = await agency.submit({"text": "where?", "constraints": {"action": "order_status"}})
    failure = outcome.failures[0]
    assert failure.type is FailureType.SCHEMA_VIOLATION and "'eta' is a required property" in failure.detail
    await agency.close()


def test_structured_output_keeps_the_libraries_conventions():
    assert structured_output(AIMessage("", tool_calls=[{"name": "a", "args": {"x": 1}, "id": "c"}])) == {
        "x": 1
    }
    assert structured_output({"structured_response": {"x": 2}, "messages": []}) == {"x": 2}
    assert structured_output({"messages": [AIMessage(f"ok {JSON}")]}, STATUS) == ANSWER


def test_every_name_docs_langchain_gives_is_importable():
    """Each public name of the adapter's modules that docs/langchain.md names (`takes_messages(...)`,
    `structured_output(result)` ...) is importable from middleware.langchain itself."""
    text = (Path(__file__).parents[2] / "docs" / "langchain.md").read_text(encoding="utf-8")
    package = importlib.import_module("middleware.langchain")
    public = {
        name
        for module in ("adapter", "callbacks", "errors", "output")
        for name in importlib.import_module(f"middleware.langchain.{module}").__all__
    }
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\(|`)", text)) & public
    assert {"takes_messages", "structured_output", "contract_variables"} <= named
    missing = sorted(n for n in named if n not in package.__all__ or not hasattr(package, n))
    assert missing == [], (
        f"named in docs/langchain.md but not importable from middleware.langchain: {missing}"
    )
