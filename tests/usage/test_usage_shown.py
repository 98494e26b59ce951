"""Where usage and budget stops are shown: the outcome over gRPC, ``agency trace show``,
Prometheus and the console's task page."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import httpx
from humans.cases import TOKENS, people
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from middleware import Agency
from middleware.agency_config import AgencyConfig
from middleware.audit import WalAuditLog
from middleware.cli import main as agency_main
from middleware.langchain import wrap_runnable
from middleware.people import Person
from middleware.people.desk import HumanDesk
from middleware.server.console import build_app
from middleware.server.metrics import MeteredAuditLog, Metrics
from middleware.tasks import TaskState
from middleware.testing import ManualClock

CONFIG = {
    "usage": {
        "currency": "USD",
        "prices": {"gpt-test": {"input": 3.0, "output": 15.0}},
        "budgets": [{"scope": "user", "name": "*", "period": "day", "limit": 0.004, "alerts": [0.5]}],
    }
}


def model() -> GenericFakeChatModel:
    return GenericFakeChatModel(
        messages=iter(
            AIMessage(
                content=f"step {i}",
                usage_metadata={"input_tokens": 500, "output_tokens": 40, "total_tokens": 540},
                response_metadata={"model_name": "gpt-test"},
            )
            for i in range(10)
        )
    )


async def test_usage_in_trace_show_prometheus_and_the_console(tmp_path: Path, capsys) -> None:
    metrics = Metrics()
    wal = WalAuditLog(tmp_path / "audit", "node-1")
    agency = Agency(
        config=AgencyConfig.model_validate(CONFIG),
        audit=MeteredAuditLog(wal, metrics),
        clock=ManualClock(datetime(2026, 6, 30, 23, 0, tzinfo=UTC)),
    )
    agent = wrap_runnable(model(), {"name": "analyst", "can_do": ["analyse"], "slo_latency_ms": 5000})
    await agency.register(agent.contract, agent)
    # each step: 500 x 3 + 40 x 15 per million = 0.0021 USD; the second step spends the 0.004
    outcome = await agency.submit(
        {
            "text": "analyse",
            "user_id": "u_9",
            "steps": [{"name": f"s{i}", "action": "analyse"} for i in range(4)],
        }
    )
    assert outcome.state is TaskState.INPUT_REQUIRED and outcome.pending["step"] == "s2"
    assert outcome.usage is not None and outcome.usage.cost == 0.0042

    # Prometheus
    text = metrics.registry.get_sample_value
    assert text("agency_llm_tokens_total", {"model": "gpt-test", "direction": "input", "tenant": "-"}) == 1000
    assert text("agency_llm_cost_total", {"model": "gpt-test", "tenant": "-", "currency": "USD"}) == 0.0042
    assert text("agency_budget_alerts_total", {"scope": "user"}) == 1
    assert text("agency_budget_stops_total", {"scope": "user", "outcome": "held"}) == 1

    # the console's task page
    desk = HumanDesk(agency, [Person.model_validate(p) for p in people()])
    app = build_app(desk, secret="s" * 40)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as c:
        page = await c.get("/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        await c.post("/signin", data={"csrf": csrf, "token": TOKENS["alice"]})
        task_page = (await c.get(f"/tasks/{outcome.task_id}")).text
    assert re.search(r'id="task-usage">1000 input \+ 80 output tokens,\s+0.0042 USD', task_page)
    assert "<td>gpt-test</td><td>1000</td><td>80</td><td>0.0042</td>" in task_page
    assert 'id="task-budget">Stopped: budget exhausted: user' in task_page
    await agency.close()

    # agency trace show, from the log on disk
    assert agency_main(["trace", "show", outcome.trace_id, "--audit-dir", str(tmp_path / "audit")]) == 0
    shown = capsys.readouterr().out
    assert "usage        [s0] gpt-test: 500 in / 40 out, 0.0021 USD" in shown
    assert "Usage: 1000 input + 80 output tokens, 0.0042 USD" in shown
    assert "budget       [s0] alert at 50%" in shown  # 0.0021 of 0.004 after the first step
    assert "stopped (held): budget exhausted: user 'u_9' spent 0.0042 USD of 0.004 in 2026-06-30" in shown
    assert (
        agency_main(["trace", "show", outcome.trace_id, "--audit-dir", str(tmp_path / "audit"), "--json"])
        == 0
    )
    (timeline,) = json.loads(capsys.readouterr().out)
    assert timeline["usage"]["by_model"]["gpt-test"] == [1000, 80, 0.0042]
