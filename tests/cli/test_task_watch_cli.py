"""``agency submit --no-wait``, ``agency task watch`` and ``agency task list`` against a real gateway."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from served_in_thread import ServedInThread

from middleware import Agency
from middleware.cli import main
from middleware.demo import build_demo_agency, warranty_request
from middleware.server.grpc_api import build_server
from middleware.testing import GatedAgent

pytestmark = pytest.mark.timeout(60)


class Served(ServedInThread):
    """The demo gateway plus a slow agent that streams its text (its own loop, in a thread)."""

    async def start(self) -> None:
        async def no_sleep(_: float) -> None:
            return None

        self.agency = await build_demo_agency(Agency(sleep=no_sleep))
        self.slow = GatedAgent(
            {"answer": 42}, progress=[("token", {"text": "hello "}), ("token", {"text": "world"})]
        )
        await self.agency.register(
            {"name": "slow", "can_do": ["think"], "slo_latency_ms": 60000, "stream_progress": True}, self.slow
        )
        self.server = build_server(self.agency, "127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(0)
        await self.agency.close()

    def release(self) -> None:
        self.loop.call_soon_threadsafe(self.slow.release)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with Served() as gateway:
        yield gateway


def test_submit_no_wait_then_watch_live_then_list(served, capsys) -> None:
    address = f"127.0.0.1:{served.server.port}"
    assert (
        main(
            [
                "submit",
                "please think",
                "--constraints",
                '{"action": "think"}',
                "--no-wait",
                "--address",
                address,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert ": submitted (accepted; it runs on in the gateway)" in out
    task_id = out.split()[1].rstrip(":")
    assert f"follow with: agency task watch {task_id}" in out

    # the watch starts while the agent is still held, and the agent is released while it runs
    entered = asyncio.run_coroutine_threadsafe(served.slow.entered.wait(), served.loop)
    entered.result(10)
    result: dict[str, int] = {}
    watcher = threading.Thread(
        target=lambda: result.update(code=main(["task", "watch", task_id, "--address", address]))
    )
    watcher.start()
    served.release()
    watcher.join(30)
    assert result["code"] == 0
    view = capsys.readouterr().out
    lines = view.splitlines()
    assert lines[0].split()[0] == "1" and "accepted: please think" in lines[0]
    assert any("routed to slow@1.0.0" in line for line in lines)
    assert any("step main: dispatched to slow@1.0.0 (attempt 1)" in line for line in lines)
    assert any(line.endswith("slow@1.0.0 writes: hello world") for line in lines)  # streamed text, one line
    assert any("step main: slow@1.0.0 answered" in line for line in lines)
    assert any("outcome completed" in line for line in lines)
    assert f"task {task_id}: completed (TASK_STATE_COMPLETED)" in view  # then the outcome, as task get

    assert main(["task", "watch", task_id, "--json", "--after", "3", "--address", address]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0]["seq"] == 4 and events[-1]["type"] == "task.outcome"
    assert events[-1]["final"]["output"] == {"answer": 42}

    assert main(["task", "list", "--state", "completed", "--address", address]) == 0
    listed = capsys.readouterr().out
    assert task_id in listed and "completed" in listed and "please think" in listed
    assert main(["submit", "again", "--constraints", '{"action": "think"}', "--address", address]) == 0
    capsys.readouterr()
    assert main(["task", "list", "--json", "--limit", "1", "--address", address]) == 0
    page = json.loads(capsys.readouterr().out)
    assert len(page["tasks"]) == 1 and page["next_page_token"]


def test_watch_tells_failures_retries_and_backups(served, capsys) -> None:
    address = f"127.0.0.1:{served.server.port}"
    outcome = asyncio.run_coroutine_threadsafe(served.agency.submit(warranty_request()), served.loop).result(
        30
    )
    assert main(["task", "watch", outcome.task_id, "--address", address]) == 0
    view = capsys.readouterr().out
    assert view.count("step shipping: failure TOOL_TIMEOUT on replacement_shipper@1.0.0") == 3
    assert "resolution retry" in view and "resolution use_backup -> express_shipper@1.0.0" in view
    assert "goal GOAL_WARRANTY_001 anchored by greeting_agent@1.0.0" in view
    assert "stage eligibility: passed (2/2 checks)" in view


def test_watch_and_list_misses_and_bad_options(served, capsys) -> None:
    address = f"127.0.0.1:{served.server.port}"
    assert main(["task", "watch", "task_nope", "--address", address]) == 3
    assert "task_nope" in capsys.readouterr().err
    assert main(["task", "list", "--goal-id", "GOAL_NOBODY_HAS", "--address", address]) == 3
    assert "no tasks match" in capsys.readouterr().out
    assert main(["task", "list", "--since", "last tuesday", "--address", address]) == 2
    assert "since" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        main(["task", "list", "--limit", "501", "--address", address])
    assert bad.value.code == 2
    assert "--limit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["task", "watch", "--help"])
    assert "Follow a task as it runs" in capsys.readouterr().out
