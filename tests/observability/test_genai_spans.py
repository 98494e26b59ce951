"""OpenTelemetry GenAI semantic conventions: a wrapped LangChain agent's model and tool calls
become ``chat`` / ``execute_tool`` spans with ``gen_ai.*`` attributes, children of the dispatch
span, which itself says ``invoke_agent``."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from middleware import Agency
from middleware.audit import MemoryAuditLog
from middleware.langchain import wrap_runnable
from middleware.server.tracing import Tracing


@tool
def warranty_lookup(order: str) -> str:
    """How long the order's warranty runs."""
    return "12 months"


def agent_chain() -> Any:
    def look_up(inputs: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {**inputs, "found": warranty_lookup.invoke({"order": "A-1"}, config)}

    answer = AIMessage(
        content="Covered for 12 months.",
        usage_metadata={"input_tokens": 21, "output_tokens": 7, "total_tokens": 28},
        response_metadata={"model_name": "fake-model-2026"},
    )
    prompt = ChatPromptTemplate.from_messages([("system", "{contract}"), ("human", "{question} {found}")])
    return (
        RunnableLambda(look_up) | prompt | GenericFakeChatModel(messages=iter([answer])) | StrOutputParser()
    )


async def test_llm_and_tool_spans_follow_the_genai_conventions() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    audit = Tracing(provider).audit_log(MemoryAuditLog())
    agency = Agency(audit=audit)
    agent = wrap_runnable(
        agent_chain(),
        {"name": "faq_agent", "can_do": ["answer_faq"], "slo_latency_ms": 5000},
        audit=audit,
    )
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "covered?", "input": {"question": "covered?"}, "constraints": {"action": "answer_faq"}}
    )
    assert outcome.state.value == "completed"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    dispatch = spans["agency.dispatch faq_agent@1.0.0"]
    assert dispatch.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert dispatch.attributes["gen_ai.agent.name"] == "faq_agent"
    assert dispatch.attributes["gen_ai.agent.id"] == "faq_agent@1.0.0"

    chat = next(s for name, s in spans.items() if name.startswith("chat "))
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.response.model"] == "fake-model-2026"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 21
    assert chat.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat.attributes["gen_ai.provider.name"]
    assert chat.parent is not None and chat.parent.span_id == dispatch.context.span_id
    assert chat.end_time >= chat.start_time and chat.context.trace_id == dispatch.context.trace_id

    call = spans["execute_tool warranty_lookup"]
    assert call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert call.attributes["gen_ai.tool.name"] == "warranty_lookup"
    assert call.attributes["gen_ai.tool.type"] == "function"
    assert call.parent is not None and call.parent.span_id == dispatch.context.span_id
    await agency.close()
