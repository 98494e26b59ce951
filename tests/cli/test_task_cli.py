"""``agency submit|route|task`` and the CLI conventions (exit codes, C-core logs, catalog hints)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from served_in_thread import ServedInThread

from middleware import Agency
from middleware.cli import main
from middleware.demo import build_demo_agency
from middleware.server.grpc_api import build_server

pytestmark = pytest.mark.timeout(60)


class Served(ServedInThread):
    """The demo gateway on its own loop: ``main()`` runs its own ``asyncio.run`` in the test thread."""

    async def start(self) -> None:
        async def no_sleep(_: float) -> None:
            return None

        self.agency = await build_demo_agency(Agency(sleep=no_sleep))
        self.server = build_server(self.agency, "127.0.0.1:0")
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop(0)
        await self.agency.close()


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    with Served() as served:
        yield f"127.0.0.1:{served.server.port}"


def test_submit_prints_the_outcome_and_the_next_command(address, capsys) -> None:
    code = main(
        [
            "submit", "我上周买的手机屏幕碎了，要换新",
            "--user-id", "u_789",
            "--input", '{"user_id": "u_789", "device": "fp_7f3a"}',
            "--step", "intake:extract_intent",
            "--step", "order:get_order_detail",
            "--step", "warranty:warranty_check",
            "--step", "shipping:ship_replacement",
            "--step", "reply:compose_reply",
            "--address", address,
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert ": completed (TASK_STATE_COMPLETED)" in out
    assert "step warranty: warranty_agent@2.1.0" in out
    assert "resolution use_backup -> express_shipper@1.0.0" in out
    assert re.search(r"goal GOAL_WARRANTY_001: passed \((\d+)/\1 checks?\)", out), out
    assert "timeline: agency trace show" in out
    task_id = out.split()[1].rstrip(":")

    assert main(["task", "get", task_id, "--address", address, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["task_id"] == task_id and got["state"] == "completed"


def test_refusals_and_misses_have_their_own_exit_codes(address, capsys) -> None:
    assert main(["submit", "Predict next quarter's stock price", "--address", address]) == 1
    out = capsys.readouterr().out
    assert "rejected" in out
    # said plainly (issue 27): no "on - (attempt 1)"
    assert "refused: no registered agent's contract allows this request, so no agent ran" in out
    assert (
        "failure CAPABILITY_MISMATCH at step main, before any agent ran: refused (action=stock_prediction)"
        in out
    )
    assert "on - (attempt" not in out
    assert main(["route", "predict the stock price", "--address", address, "--json"]) == 1
    decision = json.loads(capsys.readouterr().out)
    assert decision["refused"] and decision["rejected"][0]["constraint"] == "cannot_do"
    assert main(["route", "I need a replacement for my shattered screen", "--address", address]) == 0
    assert "chosen: warranty_agent@2.1.0" in capsys.readouterr().out
    assert main(["task", "get", "task_nope", "--address", address]) == 3
    assert "task_nope" in capsys.readouterr().err
    assert main(["task", "resume", "task_nope", "--answer", "x", "--address", address]) == 3
    capsys.readouterr()
    assert main(["submit", "x", "--input", "[1]", "--address", address]) == 2
    assert "input: must be a JSON object" in capsys.readouterr().err
    assert main(["route", "x", "--address", "127.0.0.1:1", "--timeout", "5"]) == 4
    assert "no gateway answers at 127.0.0.1:1" in capsys.readouterr().err


def test_catalog_show_without_a_version_lists_the_versions(address, capsys) -> None:
    assert main(["catalog", "show", "warranty_agent", "--address", address]) == 3
    err = capsys.readouterr().err
    assert "give NAME@VERSION: 'warranty_agent' has 1 version: warranty_agent@2.1.0" in err


def test_catalog_help_names_only_real_flags(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["catalog", "--help"])
    assert "--catalog-prefix" not in capsys.readouterr().out


def test_grpc_core_log_lines_stay_out_of_the_terminal(tmp_path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "middleware", "serve", "--address", f"127.0.0.1:{port}",
             "--data-dir", str(tmp_path), "--metrics-address", ""],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 2  # a taken port is the command line's error, not the gateway's
    assert "cannot listen" in proc.stderr
    assert "add_port.cc" not in proc.stderr, proc.stderr  # the C core's own line


def test_exit_codes_are_listed_in_the_help(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out and "3    nothing found" in out


def test_health_of_an_unknown_service_is_the_servers_answer(address, capsys) -> None:
    assert main(["health", "--address", address]) == 0
    assert capsys.readouterr().out.strip() == "SERVING"
    assert main(["health", "--address", address, "--service", "agency.v1.Nope", "--json"]) == 3
    reply = json.loads(capsys.readouterr().out)
    assert reply["status"] == "SERVICE_UNKNOWN" and "agency.v1.Nope" in reply["detail"]
    assert main(["health", "--address", "127.0.0.1:1", "--timeout", "2"]) == 4
    assert capsys.readouterr().out.startswith("UNREACHABLE")


def test_one_command_imports_only_its_own_module() -> None:
    """Start-up time: ``agency worker`` does not import the gateway (``serve``'s bootstrap)."""
    code = (
        "import sys\n"
        "from middleware.cli import build_parser\n"
        "build_parser(['worker', '--agent', 'm:a', '--gateway', 'h:1'])\n"
        "print('middleware.server.bootstrap' in sys.modules, 'middleware.cli.serve' in sys.modules)\n"
        "build_parser(['--help'])\n"
        "print('middleware.cli.serve' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.split() == ["False", "False", "True"]


def test_catalog_list_that_matches_nothing_warns_and_exits_3(address, capsys) -> None:
    assert main(["catalog", "list", "--address", address, "--action", "ship_replacement"]) == 0
    assert "2 capabilities" in capsys.readouterr().out
    assert main(["catalog", "list", "--address", address, "--action", "nope", "--json"]) == 3
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and "no capability matches" in captured.err


def test_config_check_counts_with_the_right_plural(capsys) -> None:
    goal_only = Path(__file__).parents[2] / "examples" / "ecommerce.yaml"
    assert main(["config", "check", str(goal_only)]) == 0
    out = capsys.readouterr().out
    assert "1 goal," in out and "1 goals" not in out, out
