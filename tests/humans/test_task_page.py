"""The task page's timeline: bars per attempt, per LangChain LLM and tool call, per wait for a person."""

from __future__ import annotations

import re
from typing import Any

import httpx
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool

from middleware import Agency
from middleware.langchain import wrap_runnable
from middleware.people import Person
from middleware.people.desk import HumanDesk
from middleware.server.console import build_app
from middleware.server.console.views import task_bars

from .cases import TOKENS, people


class ToolCallingFake(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


@tool
def lookup_order(order_id: str) -> str:
    """Look up the shipping status of an order."""
    return f"order {order_id}: shipped"


def order_agent() -> RunnableLambda:
    model = ToolCallingFake(
        messages=iter(
            [
                AIMessage(
                    content="", tool_calls=[{"name": "lookup_order", "args": {"order_id": "A1"}, "id": "c1"}]
                ),
                AIMessage(content="Order A1 has shipped."),
            ]
        )
    ).bind_tools([lookup_order])

    async def run(inputs: dict[str, Any], config: Any) -> dict[str, Any]:
        messages: list[Any] = [HumanMessage(inputs["question"])]
        for _ in range(3):
            reply = await model.ainvoke(messages, config)
            messages.append(reply)
            if not reply.tool_calls:
                return {"answer": reply.content}
            for call in reply.tool_calls:
                messages.append(await lookup_order.ainvoke(call, config))
        raise RuntimeError("no answer")

    return RunnableLambda(run, name="order_agent")


async def test_a_wrapped_langchain_agent_shows_its_llm_and_tool_calls_as_bars():
    agency = Agency()
    desk = HumanDesk(agency, [Person.model_validate(p) for p in people()])
    agent = wrap_runnable(
        order_agent(),
        {"name": "order_agent", "version": "1.0.0", "can_do": ["order_status"], "slo_latency_ms": 2000},
        audit=agency.audit,
    )
    await agency.register(agent.contract, agent)
    done = await agency.submit(
        {
            "text": "where is A1?",
            "input": {"question": "where is A1?"},
            "constraints": {"action": "order_status"},
        }
    )
    assert done.state.value == "completed", done.reason
    records = [r for _, r in agency.audit.records() if r.task_id == done.task_id]
    bars = task_bars(records)
    labels = [b.label for b in bars.bars]
    assert labels[:3] == ["llm: ToolCallingFake", "tool: lookup_order", "llm: ToolCallingFake"]
    assert "main · order_agent@1.0.0 · attempt 1" in labels
    attempt = next(b for b in bars.bars if b.label.startswith("main ·"))
    for inner in bars.bars[:3]:  # the LLM and tool calls sit inside the attempt's bar
        assert attempt.start_ms <= inner.end_ms <= attempt.end_ms + 1
    app = build_app(desk, secret="s" * 40)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c") as c:
        page = await c.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        await c.post("/signin", data={"csrf": csrf, "token": TOKENS["alice"]})
        html = (await c.get(f"/tasks/{done.task_id}")).text
    assert html.count("<rect") == len(bars.bars) and "tool: lookup_order" in html
    assert "provenance" in html  # the SMF metadata of each hop


async def test_the_contracts_page_figures_rates_review_flags_circuits_and_latency():
    from middleware import AgencyConfig, CapabilityContract, TaskRequest
    from middleware.server.console.views import contract_rows
    from middleware.testing import ScriptedAgent

    def flaky_answer(request: Any) -> dict[str, Any]:
        if request.input.get("n", 0) % 2:
            raise ValueError("boom")
        return {"ok": True}

    async def no_sleep(_: float) -> None:
        return None

    agency = Agency(
        sleep=no_sleep,
        config=AgencyConfig.model_validate(
            {"monitor": {"min_tasks": 2}, "failure_policy": {"max_retries": 0, "on_exhausted": "abort"}}
        ),
    )
    await agency.register(
        CapabilityContract(name="flaky", can_do=["lookup"], slo_latency_ms=100),
        ScriptedAgent(*[flaky_answer] * 10),
    )
    for n in range(4):
        await agency.submit(TaskRequest(text="x", input={"n": n}, constraints={"action": "lookup"}))
    (row,) = await contract_rows(agency)
    assert row["key"] == "flaky@1.0.0" and row["tasks"] == 4
    assert row["rates"] == {"TOOL_ERROR": (2, 0.5)}
    assert [f["failure_type"] for f in row["flags"]] == ["TOOL_ERROR"]  # above 15 %: flagged for review
    assert row["circuit"] == "closed" and row["slo_ms"] == 100 and row["samples"] == 2
    assert row["p95_ms"] is not None and not row["over_slo"]
