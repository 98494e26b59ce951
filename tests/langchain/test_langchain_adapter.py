"""LangChain runnables wrapped behind contracts and run through ``Agency.submit``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import JsonOutputParser, StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import ToolException, tool
from lc_helpers import ToolCallingFakeModel, contract, scripted

from middleware import AgentRequest, FailureType, ResolutionKind, TaskState
from middleware.errors import AgentFailure
from middleware.langchain import DEFAULT_CONFIDENCE, LangChainAgent, contract_variables, wrap_runnable


def answer_prompt() -> ChatPromptTemplate:
    return ChatPromptTemplate.from_messages([("system", "{contract}"), ("human", "Question: {question}")])


@tool
def lookup_order(order_id: str) -> str:
    """Look up the shipping status of an order."""
    return f"order {order_id}: shipped, tracking EXP123456"


@tool
def broken_lookup(order_id: str) -> str:
    """A tool whose backend is broken."""
    raise ToolException(f"order database refused {order_id}")


def tool_agent(model: Any, tools: list[Any]) -> RunnableLambda:
    """A minimal tool-calling agent loop (what AgentExecutor / create_react_agent do)."""
    bound = model.bind_tools(tools)
    by_name = {t.name: t for t in tools}

    async def run(inputs: dict[str, Any], config: Any) -> dict[str, Any]:
        messages: list[Any] = [SystemMessage(inputs["contract"]), HumanMessage(inputs["question"])]
        for _ in range(5):
            reply = await bound.ainvoke(messages, config)
            messages.append(reply)
            if not reply.tool_calls:
                return {"answer": reply.content}
            for call in reply.tool_calls:
                messages.append(await by_name[call["name"]].ainvoke(call, config))
        raise RuntimeError("agent did not finish in 5 turns")

    return RunnableLambda(run, name="order_agent")


ANSWER = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}
QUESTION = {"type": "object", "required": ["question"], "properties": {"question": {"type": "string"}}}


async def test_plain_chain_through_the_pipeline(agency):
    chain = answer_prompt() | FakeListChatModel(responses=["Your order ships today."]) | StrOutputParser()
    agent = wrap_runnable(chain, contract("faq_agent", "answer_faq", input_schema=QUESTION))
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {
            "text": "when does it ship?",
            "input": {"question": "when?"},
            "constraints": {"action": "answer_faq"},
        }
    )
    assert outcome.state is TaskState.COMPLETED
    assert outcome.output == "Your order ships today."
    assert outcome.steps[0].confidence_score == DEFAULT_CONFIDENCE


async def test_tool_calling_agent_audits_llm_and_tool_steps_under_the_trace(agency):
    usage = {"input_tokens": 40, "output_tokens": 12, "total_tokens": 52}
    model = ToolCallingFakeModel(
        messages=scripted(
            AIMessage(
                content="",
                tool_calls=[{"name": "lookup_order", "args": {"order_id": "A1"}, "id": "call_1"}],
                usage_metadata=usage,
            ),
            AIMessage(
                content="Order A1 has shipped (EXP123456).",
                usage_metadata={"input_tokens": 70, "output_tokens": 9, "total_tokens": 79},
            ),
        )
    )
    agent = wrap_runnable(
        tool_agent(model, [lookup_order]),
        contract("order_agent", "order_status", input_schema=QUESTION, output_schema=ANSWER),
        audit=agency.audit,
    )
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {
            "text": "where is A1?",
            "input": {"question": "where is A1?"},
            "constraints": {"action": "order_status"},
        }
    )
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"answer": "Order A1 has shipped (EXP123456)."}

    steps = [r for _, r in agency.audit.records() if r.event_type == "agent.step"]
    assert {r.trace_id for r in steps} == {outcome.trace_id}
    assert {r.task_id for r in steps} == {outcome.task_id}
    assert [(r.detail["kind"], r.detail["name"]) for r in steps] == [
        ("llm", "ToolCallingFakeModel"),
        ("tool", "lookup_order"),
        ("llm", "ToolCallingFakeModel"),
        ("runnable", "order_agent@1.0.0"),
    ]
    first_llm, tool_step, second_llm, run = steps
    assert first_llm.detail["token_usage"] == usage
    assert first_llm.detail["tool_calls"] == ["lookup_order"]
    assert second_llm.detail["token_usage"]["total_tokens"] == 79
    assert tool_step.detail["input_preview"] == '{"order_id": "A1"}'
    assert "EXP123456" in tool_step.detail["output_preview"]
    assert all(r.outcome == "success" and r.actors.agent == "order_agent@1.0.0" for r in steps)
    assert all(r.detail["duration_ms"] >= 0 for r in steps)
    assert run.detail["duration_ms"] >= max(s.detail["duration_ms"] for s in steps[:3])
    # the inner steps come between the dispatch and the result of that attempt
    kinds = [r.event_type for _, r in agency.audit.records() if r.trace_id == outcome.trace_id]
    assert kinds.index("agent.dispatch") < kinds.index("agent.step") < kinds.index("agent.result")


async def test_streaming_runnable_is_aggregated_and_reports_confidence(agency):
    chain = (
        answer_prompt()
        | FakeListChatModel(responses=['{"answer": "Screen covered", "confidence": 0.93}'])
        | JsonOutputParser()
    )
    seen: list[Any] = []

    async def spy(chunks):  # a streaming step: passes chunks through, counting them
        async for chunk in chunks:
            seen.append(chunk)
            yield chunk

    from langchain_core.runnables import RunnableGenerator

    agent = wrap_runnable(
        chain | RunnableGenerator(spy),
        contract("stream_agent", "answer_faq", output_schema=ANSWER),
        stream=True,
    )
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "covered?", "input": {"question": "covered?"}, "constraints": {"action": "answer_faq"}}
    )
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"answer": "Screen covered", "confidence": 0.93}
    assert outcome.steps[0].confidence_score == 0.93
    assert len(seen) > 1  # it really streamed: several partial objects


async def test_streaming_text_chunks_are_concatenated(agency):
    chain = answer_prompt() | FakeListChatModel(responses=["shipped today"]) | StrOutputParser()
    agent = wrap_runnable(chain, contract("faq_agent", "answer_faq"), stream=True)
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "when?", "input": {"question": "when?"}, "constraints": {"action": "answer_faq"}}
    )
    assert outcome.output == "shipped today"


def test_stream_is_on_by_default_only_when_the_model_streams():
    class StreamingFake(FakeListChatModel):
        streaming: bool = True

    streaming = answer_prompt() | StreamingFake(responses=["x"]) | StrOutputParser()
    plain = answer_prompt() | FakeListChatModel(responses=["x"]) | StrOutputParser()
    assert wrap_runnable(streaming, contract("a", "x")).stream is True
    assert wrap_runnable(plain, contract("a", "x")).stream is False


async def test_slow_runnable_times_out_then_the_backup_answers(agency):
    started = asyncio.Event()

    async def hang(_: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    slow = wrap_runnable(
        RunnableLambda(hang, name="slow"), contract("slow_agent", "answer_faq", slo=40), audit=agency.audit
    )
    backup_chain = answer_prompt() | FakeListChatModel(responses=["from the backup"]) | StrOutputParser()
    backup = wrap_runnable(backup_chain, contract("backup_agent", "answer_faq", slo=2000))
    await agency.register(slow.contract, slow)
    await agency.register(backup.contract, backup)
    outcome = await agency.submit(
        {"text": "q", "input": {"question": "q"}, "constraints": {"action": "answer_faq"}}
    )
    assert started.is_set()
    assert outcome.state is TaskState.COMPLETED
    assert outcome.output == "from the backup"
    assert [f.type for f in outcome.failures] == [FailureType.TOOL_TIMEOUT] * 3
    assert [r.kind for r in outcome.resolutions][-1] is ResolutionKind.USE_BACKUP
    assert outcome.steps[0].agent == "backup_agent@1.0.0"
    cancelled = [
        r for _, r in agency.audit.records() if r.event_type == "agent.step" and r.outcome == "cancelled"
    ]
    assert len(cancelled) == 3 and {r.trace_id for r in cancelled} == {outcome.trace_id}


async def test_runnable_that_raises_is_a_tool_error_with_its_cause(agency):
    def explode(_: Any) -> str:
        raise ValueError("inventory service returned garbage")

    agent = wrap_runnable(RunnableLambda(explode), contract("bad_agent", "answer_faq"))
    await agency.register(agent.contract, agent)
    outcome = await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    assert outcome.state is TaskState.INPUT_REQUIRED  # retried, no backup: handed to a human
    assert {f.type for f in outcome.failures} == {FailureType.TOOL_ERROR}
    assert "ValueError: inventory service returned garbage" in outcome.failures[0].detail
    assert outcome.failures[0].context["cause"] == "ValueError"


async def test_tool_error_names_the_tool(agency):
    model = ToolCallingFakeModel(
        messages=scripted(
            AIMessage(
                content="", tool_calls=[{"name": "broken_lookup", "args": {"order_id": "B2"}, "id": "c"}]
            )
        )
    )
    agent = wrap_runnable(
        tool_agent(model, [broken_lookup]), contract("order_agent", "order_status"), audit=agency.audit
    )
    policy_agency = agency
    policy_agency.failures.policy.max_retries = 0
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "q", "input": {"question": "B2?"}, "constraints": {"action": "order_status"}}
    )
    failure = outcome.failures[0]
    assert failure.type is FailureType.TOOL_ERROR
    assert "tool 'broken_lookup' raised ToolException: order database refused B2" in failure.detail
    assert failure.context["source"] == "tool:broken_lookup"
    errors = [r for _, r in agency.audit.records() if r.event_type == "agent.step" and r.outcome == "error"]
    assert errors[0].detail["name"] == "broken_lookup"
    assert errors[0].detail["error"]["type"] == "ToolException"


async def test_output_that_does_not_parse_is_a_schema_violation(agency):
    chain = answer_prompt() | FakeListChatModel(responses=["sorry, no JSON today"]) | JsonOutputParser()
    agent = wrap_runnable(chain, contract("json_agent", "answer_faq"))
    agency.failures.policy.max_retries = 0
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "q", "input": {"question": "q"}, "constraints": {"action": "answer_faq"}}
    )
    assert outcome.failures[0].type is FailureType.SCHEMA_VIOLATION
    assert outcome.failures[0].context["direction"] == "output"
    assert "OutputParserException" in outcome.failures[0].detail


async def test_rate_limited_model_switches_to_the_backup_at_once(agency):
    from langchain_core.exceptions import ModelRateLimitError

    def limited(_: Any) -> str:
        raise ModelRateLimitError("429 too many requests")

    first = wrap_runnable(RunnableLambda(limited), contract("first_agent", "answer_faq", slo=100))
    second = wrap_runnable(RunnableLambda(lambda _: "ok"), contract("second_agent", "answer_faq", slo=900))
    await agency.register(first.contract, first)
    await agency.register(second.contract, second)
    outcome = await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    assert outcome.output == "ok"
    assert [f.type for f in outcome.failures] == [FailureType.TOOL_UNAVAILABLE]
    assert outcome.failures[0].context["rate_limited"] is True
    assert outcome.resolutions[0].kind is ResolutionKind.USE_BACKUP


async def test_input_is_checked_against_the_contract_before_the_runnable_runs(agency):
    calls: list[Any] = []
    agent = wrap_runnable(
        RunnableLambda(lambda x: calls.append(x) or "x"), contract("a", "x", input_schema=QUESTION)
    )
    from middleware.smf import SMFMessage

    request = AgentRequest(
        message=SMFMessage.parse(
            {
                "sender": "gateway",
                "receiver": "a@1.0.0",
                "content": {"question": 7},
                "metadata": {
                    "provenance": {"source": "user", "reliability_score": 1},
                    "freshness_ttl": 60,
                    "confidence_score": 1,
                    "intention_trace": ["GOAL_TEST_001"],
                },
            }
        ),
        contract=agent.contract,
        task_id="t1",
        step="main",
    )
    with pytest.raises(AgentFailure) as info:
        await agent(request)
    assert info.value.failure_type == "SCHEMA_VIOLATION"
    assert info.value.context == {"direction": "input"}
    assert "question" in str(info.value)
    assert calls == []


async def test_the_runnable_gets_the_mapped_input_with_the_contract(agency):
    received: list[Any] = []

    def capture(value: Any) -> dict[str, Any]:
        received.append(value)
        return {"answer": "done"}

    c = contract(
        "limited_agent",
        "answer_faq",
        cannot_do=["issue_refund"],
        description="Answers FAQ.",
        output_schema=ANSWER,
    )
    agent = wrap_runnable(RunnableLambda(capture), c, input_mapping={"question": "$.ticket.text"})
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {
            "text": "q",
            "input": {"ticket": {"text": "Can I get a refund?"}},
            "constraints": {"action": "answer_faq"},
        }
    )
    assert outcome.output == {"answer": "done"}
    assert received == [{"question": "Can I get a refund?", **contract_variables(agent.contract)}]
    assert received[0]["contract_cannot_do"] == "issue_refund"
    assert "You must never: issue_refund" in received[0]["contract"]


async def test_a_chat_model_alone_gets_the_contract_as_system_prompt(agency):
    from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel

    class Echo(ParrotFakeChatModel):  # answers with the system prompt it was given
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            from langchain_core.outputs import ChatGeneration, ChatResult

            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=messages[0].content))])

    agent = wrap_runnable(Echo(), contract("echo", "answer_faq", cannot_do=["delete_account"]))
    await agency.register(agent.contract, agent)
    outcome = await agency.submit({"text": "say something", "constraints": {"action": "answer_faq"}})
    assert "You must never: delete_account" in outcome.output


async def test_output_mapping_and_reported_confidence(agency):
    graph_like = RunnableLambda(
        lambda _: {"messages": [HumanMessage("hi"), AIMessage("final answer")], "steps": 2}
    )
    agent = wrap_runnable(graph_like, contract("graph_agent", "answer_faq"))
    await agency.register(agent.contract, agent)
    assert (
        await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    ).output == "final answer"

    executor_like = RunnableLambda(lambda _: {"input": "q", "output": "42", "confidence": 0.55})
    picked = wrap_runnable(executor_like, contract("exec_agent", "compute"), output_mapping="output")
    await agency.register(picked.contract, picked)
    outcome = await agency.submit({"text": "q", "constraints": {"action": "compute"}})
    assert outcome.output == "42" and outcome.steps[0].confidence_score == 0.55


async def test_confidence_outside_0_1_is_a_schema_violation(agency):
    agent = wrap_runnable(
        RunnableLambda(lambda _: {"answer": "x", "confidence": 7}), contract("c", "answer_faq")
    )
    agency.failures.policy.max_retries = 0
    await agency.register(agent.contract, agent)
    outcome = await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    assert outcome.failures[0].type is FailureType.SCHEMA_VIOLATION
    assert "confidence 7" in outcome.failures[0].detail


def test_bad_arguments_are_refused_early():
    with pytest.raises(TypeError, match="Runnable"):
        LangChainAgent(lambda x: x, contract("a", "x"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        wrap_runnable(RunnableLambda(lambda x: x), contract("a", "x"), confidence=1.5)
    with pytest.raises(ValueError, match=r"input_mapping\['q'\]"):
        wrap_runnable(RunnableLambda(lambda x: x), contract("a", "x"), input_mapping={"q": "no-dollar"})


def test_output_parser_exception_maps_to_schema_violation_directly():
    from middleware.langchain import failure_from_exception

    assert failure_from_exception(OutputParserException("bad")).failure_type == "SCHEMA_VIOLATION"


async def test_a_failing_audit_write_fails_the_call(agency):
    from middleware import MemoryAuditLog
    from middleware.errors import AuditError

    class BrokenAudit(MemoryAuditLog):
        async def append(self, record):
            if record.event_type == "agent.step":
                raise AuditError("disk full")
            return await super().append(record)

    chain = answer_prompt() | FakeListChatModel(responses=["x"]) | StrOutputParser()
    agent = wrap_runnable(chain, contract("faq_agent", "answer_faq"), audit=BrokenAudit())
    agency.failures.policy.max_retries = 0
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "q", "input": {"question": "q"}, "constraints": {"action": "answer_faq"}}
    )
    assert outcome.state is not TaskState.COMPLETED
    assert "disk full" in outcome.failures[0].detail


async def test_steps_of_sync_code_inside_the_runnable_are_audited_too(agency):
    # a sync tool calling a model: LangChain runs our async handler on a loop of its own in a
    # worker thread; the records must still reach the audit log (which belongs to our loop)
    inner_model = FakeListChatModel(responses=["inner answer"])

    @tool
    def ask_expert(question: str) -> str:
        """Ask the expert model."""
        return inner_model.invoke(question).content

    model = ToolCallingFakeModel(
        messages=scripted(
            AIMessage(content="", tool_calls=[{"name": "ask_expert", "args": {"question": "?"}, "id": "1"}]),
            AIMessage(content="done"),
        )
    )
    agent = wrap_runnable(tool_agent(model, [ask_expert]), contract("a", "x"), audit=agency.audit)
    await agency.register(agent.contract, agent)
    outcome = await agency.submit({"text": "q", "input": {"question": "q"}, "constraints": {"action": "x"}})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    steps = [r for _, r in agency.audit.records() if r.event_type == "agent.step"]
    names = [(r.detail["kind"], r.detail["name"]) for r in steps]
    assert ("llm", "FakeListChatModel") in names and ("tool", "ask_expert") in names
    assert {r.trace_id for r in steps} == {outcome.trace_id}


async def test_the_users_own_callbacks_still_run(agency):
    from langchain_core.callbacks import AsyncCallbackManager, BaseCallbackHandler

    seen: list[str] = []

    class Mine(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kwargs):
            seen.append("chat_model_start")

    mine = Mine()
    chain = answer_prompt() | FakeListChatModel(responses=["x"]) | StrOutputParser()
    as_list = wrap_runnable(chain, contract("a", "x"), audit=agency.audit, config={"callbacks": [Mine()]})
    as_manager = wrap_runnable(
        chain,
        contract("b", "y"),
        audit=agency.audit,
        config={"callbacks": AsyncCallbackManager([mine], inheritable_handlers=[mine])},
    )
    await agency.register(as_list.contract, as_list)
    await agency.register(as_manager.contract, as_manager)
    for action in ("x", "y"):
        outcome = await agency.submit(
            {"text": "q", "input": {"question": "q"}, "constraints": {"action": action}}
        )
        assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert seen == ["chat_model_start", "chat_model_start"]
    assert len([r for _, r in agency.audit.records() if r.event_type == "agent.step"]) == 4


async def test_a_message_state_graph_gets_messages_and_answers_with_its_last_message(agency):
    from middleware.langchain import as_messages

    received: list[Any] = []

    def graph(state: dict[str, Any]) -> dict[str, Any]:  # what a compiled LangGraph agent does
        received.append(state)
        return {"messages": [*state["messages"], AIMessage("Covered for 12 months.")]}

    c = contract("graph_agent", "answer_faq", cannot_do=["issue_refund"])
    agent = wrap_runnable(RunnableLambda(graph), c, input_mapping=as_messages)
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "q", "input": {"question": "covered?"}, "constraints": {"action": "answer_faq"}}
    )
    assert outcome.output == "Covered for 12 months."
    (state,) = received
    assert set(state) == {"messages"}  # no contract variables leak into the graph's state
    system, human = state["messages"]
    assert isinstance(system, SystemMessage) and "You must never: issue_refund" in system.content
    assert isinstance(human, HumanMessage) and human.content == '{"question": "covered?"}'


async def test_a_chat_model_is_asked_the_users_request_with_the_structured_input(agency):
    from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel

    agent = wrap_runnable(ParrotFakeChatModel(), contract("parrot", "answer_faq"), inject_contract=False)
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {
            "text": "What is your refund window?",
            "input": {"order_id": "A1"},
            "constraints": {"action": "answer_faq"},
        }
    )
    assert outcome.output.startswith("What is your refund window?")
    assert '"order_id"' in outcome.output and "A1" in outcome.output


async def test_a_plain_runnable_gets_the_request_text_as_input(agency):
    seen = []
    agent = wrap_runnable(
        RunnableLambda(lambda x: seen.append(x) or {"ok": True}), contract("lam", "answer_faq")
    )
    await agency.register(agent.contract, agent)
    await agency.submit({"text": "hello there", "input": {"n": 1}, "constraints": {"action": "answer_faq"}})
    assert seen[0]["input"] == "hello there" and seen[0]["n"] == 1
