"""``agency trace show``: the timeline of one task, read back from a real audit log."""

from __future__ import annotations

import io
import json
import re
from datetime import date
from html.parser import HTMLParser

import pytest

from middleware import Agency
from middleware.audit import WalAuditLog
from middleware.cli import main
from middleware.cli.demo import run_demo
from middleware.demo import build_demo_agency, clock_on


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """A data dir holding the demo's two tasks, plus (from another node) one task whose text
    is hostile HTML."""
    import asyncio

    d = tmp_path_factory.mktemp("data")

    async def go():
        out = io.StringIO()
        await run_demo(d, as_json=True, out=out, clock=clock_on(date(2026, 11, 30)))
        first, *_, second = json.loads(out.getvalue())  # the happy path and the refused request
        # a second node writing its own log next to the demo's: trace show reads both
        agency = await build_demo_agency(Agency(audit=WalAuditLog(d / "audit", "gateway-2")))
        hostile = await agency.submit(
            {"text": "<script>alert('x')</script> predict the stock price", "user_id": "<b>eve</b>"}
        )
        await agency.close()
        return first, second, hostile.model_dump(mode="json")

    return d, *asyncio.run(go())


def test_trace_show_prints_the_timeline_of_the_demo_task(demo_dir, capsys):
    data, first, _, _ = demo_dir
    assert main(["trace", "show", first["trace_id"], "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == f"Task {first['task_id']}  trace {first['trace_id']}"
    assert "state completed" in out and "goal GOAL_WARRANTY_001" in out
    kinds = [m.group(1) for m in re.finditer(r"^[ !]\s*[\d.]+ ms  (\w+)", out, re.M)]
    # greeting_agent answers first, then anchors the goal
    assert kinds[:6] == ["submitted", "message", "route", "dispatch", "result", "goal"]
    assert (
        kinds.count("failure") == 3
        and kinds.count("result") == 5
        and kinds[-2:]
        == [
            "verification",
            "completed",
        ]
    )
    # failures and their resolutions, in order
    fails = [line for line in lines if "TOOL_TIMEOUT on replacement_shipper@1.0.0" in line]
    assert [f.split("(attempt ")[1][0] for f in fails] == ["1", "2", "3"]
    assert "resolution use_backup" in out and "switching to backup express_shipper@1.0.0" in out
    # inputs with their SMF metadata
    assert '"device_model": "PhoneX"' in out
    # the computed reliability (the agent claimed 0.98; see middleware.reliability)
    assert "provenance warranty_db (reliability 0.975); confidence 0.96" in out
    assert "intention GOAL_WARRANTY_001" in out
    # verification per step, and the per-step summary with attempts
    assert out.count("PASS ") == 3
    assert re.search(r"shipping\s+express_shipper@1.0.0\s+attempts 4", out)
    # times increase
    offsets = [float(m.group(1)) for m in re.finditer(r"^[ !]\s*([\d.]+) ms", out, re.M)]
    assert offsets == sorted(offsets) and offsets[-1] > 100  # three timeouts of 150 ms


def test_trace_show_accepts_a_prefix_and_names_unknown_traces(demo_dir, capsys):
    data, _, second, _ = demo_dir
    assert main(["trace", "show", second["trace_id"][:10], "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "state rejected" in out and "contract says it cannot do stock_prediction" in out
    assert main(["trace", "show", "0123456789abcdef", "--data-dir", str(data)]) == 3  # nothing found
    assert "no audit record has trace id" in capsys.readouterr().err
    assert main(["trace", "show", "x", "--data-dir", str(data / "nowhere")]) == 3


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in {"meta", "br"}:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)


def test_html_page_is_self_contained_and_escapes_content(demo_dir, tmp_path, capsys):
    data, first, _, hostile = demo_dir
    page = tmp_path / "trace.html"
    assert main(["trace", "show", first["trace_id"], "--data-dir", str(data), "--html", str(page)]) == 0
    html = page.read_text()
    parser = _Collect()
    parser.feed(html)
    assert parser.open == [] and html.startswith("<!DOCTYPE html>")
    assert "script" not in parser.tags and "link" not in parser.tags
    assert "http://" not in html and "https://" not in html and "src=" not in html
    text = "".join(parser.text)
    for agent in ("warranty_agent@2.1.0", "replacement_shipper@1.0.0", "express_shipper@1.0.0"):
        assert agent in text
    assert "PASSED (2/2 checks)" in text and "PASSED (1/1 checks)" in text and "TOOL_TIMEOUT" in text

    evil = tmp_path / "evil.html"
    assert main(["trace", "show", hostile["trace_id"], "--data-dir", str(data), "--html", str(evil)]) == 0
    html = evil.read_text()
    assert "<script>" not in html and "<b>eve</b>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    parser = _Collect()
    parser.feed(html)
    assert "script" not in parser.tags and "b" in parser.tags  # <b> only from our own markup
    assert "<b>eve</b>" in "".join(parser.text)


def test_trace_show_reads_an_audit_dir_given_directly(demo_dir, capsys):
    data, first, _, _ = demo_dir
    assert main(["trace", "show", first["trace_id"], "--audit-dir", str(data / "audit")]) == 0
    assert f"trace {first['trace_id']}" in capsys.readouterr().out


def test_trace_show_reads_the_json_lines_file_log_too(tmp_path, capsys):
    import asyncio

    from middleware.audit import FileAuditLog

    async def go():
        agency = await build_demo_agency(Agency(audit=FileAuditLog(tmp_path / "audit")))
        outcome = await agency.submit({"text": "Predict next quarter's stock price"})
        await agency.close()
        return outcome

    outcome = asyncio.run(go())
    assert main(["trace", "show", outcome.trace_id, "--data-dir", str(tmp_path)]) == 0
    assert "state rejected" in capsys.readouterr().out
