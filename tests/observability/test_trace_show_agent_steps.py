"""``agency trace show`` lists the inner steps (LLM and tool calls) of wrapped LangChain agents.

``agency audit export`` listed the ``agent.step`` records of a wrapped agent; the
timeline (text and HTML) left them out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from middleware import Agency
from middleware.audit import WalAuditLog
from middleware.cli import main
from middleware.langchain import wrap_runnable


def _chain(answer: str) -> Any:
    prompt = ChatPromptTemplate.from_messages([("system", "{contract}"), ("human", "{question}")])
    return prompt | FakeListChatModel(responses=[answer]) | StrOutputParser()


async def test_trace_show_includes_a_wrapped_agents_llm_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = WalAuditLog(tmp_path / "audit", "g1")
    agency = Agency(audit=audit)
    agent = wrap_runnable(
        _chain("Covered for 12 months."),
        {"name": "faq_agent", "can_do": ["answer_faq"], "slo_latency_ms": 5000},
        audit=audit,
    )
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(
        {"text": "covered?", "input": {"question": "covered?"}, "constraints": {"action": "answer_faq"}}
    )
    await agency.close()
    assert outcome.state.value == "completed"
    steps = [r for _, r in WalAuditLog(tmp_path / "audit", "g1").records() if r.event_type == "agent.step"]
    assert {r.detail["kind"] for r in steps} >= {"llm"}  # what export lists

    html = tmp_path / "trace.html"
    assert (
        main(["trace", "show", outcome.trace_id, "--audit-dir", str(tmp_path / "audit"), "--html", str(html)])
        == 0
    )
    out = capsys.readouterr().out
    step_lines = [line for line in out.splitlines() if " agent-step " in line]
    assert len(step_lines) == len(steps), out
    assert any("faq_agent@1.0.0: llm" in line and "success" in line for line in step_lines), out
    page = html.read_text()
    assert page.count('<td class="k">agent-step</td>') == len(steps)
    assert "faq_agent@1.0.0: llm" in page
