"""LangChain v1 / LangGraph as people write them: create_agent and message-state graphs get
messages by default, object output schemas get structured output, remote failures name the tool."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from lc_helpers import ToolCallingFakeModel, contract, no_sleep
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from middleware import Agency, FailureType, TaskState
from middleware.agents import AgentRegistry
from middleware.langchain import wrap_runnable
from middleware.langchain.adapter import takes_messages
from middleware.server.grpc_api import build_server
from middleware.server.remote_agent import RemoteAgent
from middleware.server.worker import Worker

OBJECT = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}


class Recording(GenericFakeChatModel):
    """A scripted chat model that keeps the messages it was sent."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


async def test_create_agent_gets_the_request_as_messages_by_default() -> None:
    model = Recording(messages=iter([AIMessage("the warranty covers it")]))
    agent = create_agent(model, tools=[])
    assert takes_messages(agent)
    wrapped = wrap_runnable(agent, contract("warranty_agent", "warranty_claim"))
    agency = Agency(sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    await agency.register(wrapped.contract, wrapped)
    outcome = await agency.submit(
        {
            "text": "is my screen covered?",
            "constraints": {"action": "warranty_claim"},
            "input": {"model": "X"},
        }
    )
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == "the warranty covers it"
    (sent,) = model.seen
    assert [m.type for m in sent] == ["system", "human"]
    assert "warranty_agent@1.0.0" in str(sent[0].content) and "is my screen covered?" in str(sent[1].content)
    await agency.close()


async def test_a_messages_state_graph_is_detected_too() -> None:
    seen: list[Any] = []

    def node(state: MessagesState) -> dict[str, Any]:
        seen.append(state["messages"])
        return {"messages": [AIMessage('{"answer": 42}')]}

    g = StateGraph(MessagesState)
    g.add_node("n", node)
    g.add_edge(START, "n")
    wrapped = wrap_runnable(g.compile(), contract("calc", "compute", output_schema=OBJECT))
    agency = Agency(sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    await agency.register(wrapped.contract, wrapped)
    outcome = await agency.submit({"text": "six times seven", "constraints": {"action": "compute"}})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"answer": 42}  # the JSON object in the final message, parsed
    assert len(seen[0]) == 2
    await agency.close()


def test_a_graph_needing_more_than_messages_is_refused_at_wrap_time() -> None:
    class State(TypedDict):
        messages: list[Any]
        customer_id: str

    g = StateGraph(State)
    g.add_node("n", lambda s: {})
    g.add_edge(START, "n")
    with pytest.raises(ValueError, match="customer_id"):
        wrap_runnable(g.compile(), contract("x", "y"))
    wrap_runnable(
        g.compile(), contract("x", "y"), input_mapping=lambda r: {"messages": [], "customer_id": "c"}
    )


class Answer(BaseModel):
    answer: int


async def test_structured_output_conventions() -> None:
    schema = contract("calc", "compute", output_schema=OBJECT)
    # create_agent's response_format: the structured_response key
    model = ToolCallingFakeModel(
        messages=iter([AIMessage("", tool_calls=[{"name": "Answer", "args": {"answer": 7}, "id": "c1"}])])
    )
    agent = create_agent(model, tools=[], response_format=ToolStrategy(Answer))
    agency = Agency(sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    wrapped = wrap_runnable(agent, schema)
    await agency.register(wrapped.contract, wrapped)
    outcome = await agency.submit({"text": "compute", "constraints": {"action": "compute"}})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"answer": 7}
    await agency.close()
    # a chat model's tool-call arguments, and fenced JSON text
    m = wrap_runnable(GenericFakeChatModel(messages=iter([])), schema)
    assert m.map_output(AIMessage("", tool_calls=[{"name": "a", "args": {"answer": 1}, "id": "x"}])) == {
        "answer": 1
    }
    assert m.map_output(AIMessage('```json\n{"answer": 2}\n```')) == {"answer": 2}
    from middleware.errors import AgentFailure

    with pytest.raises(AgentFailure) as info:
        m.map_output(AIMessage("forty-two"))
    assert info.value.failure_type == "SCHEMA_VIOLATION" and "no JSON object" in str(info.value)
    # a text contract keeps the text
    t = wrap_runnable(GenericFakeChatModel(messages=iter([])), contract("t", "talk"))
    assert t.map_output(AIMessage('{"answer": 2}')) == '{"answer": 2}'


@tool
def lookup_order(order_id: str) -> str:
    """Look an order up."""
    raise RuntimeError("order database is down")


async def test_a_remote_workers_failure_names_the_tool_that_raised() -> None:
    model = ToolCallingFakeModel(
        messages=iter(
            [AIMessage("", tool_calls=[{"name": "lookup_order", "args": {"order_id": "1"}, "id": "c"}])]
        )
    )
    agent = create_agent(model, tools=[lookup_order])
    gateway = Agency(sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    gateway.failures.policy.max_retries = 0
    server = build_server(gateway, "127.0.0.1:0")
    await server.start()
    try:
        worker_agent = wrap_runnable(agent, contract("orders", "lookup"))  # no audit log on the worker
        async with Worker(worker_agent, gateway=f"127.0.0.1:{server.port}"):
            outcome = await gateway.submit({"text": "where is order 1", "constraints": {"action": "lookup"}})
    finally:
        await server.stop(0)
        await gateway.close()
    failure = outcome.failures[0]
    assert failure.type is FailureType.TOOL_ERROR
    assert "tool 'lookup_order' raised RuntimeError: order database is down" in failure.detail, failure.detail
