"""One CLI convention: --json everywhere, 'nothing found' is exit 3, ids matched one way, progress bars."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from middleware import Agency
from middleware.audit.checkpoint import Signer
from middleware.audit.wal import WalAuditLog
from middleware.cli import main
from middleware.demo import build_demo_agency, warranty_request


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> tuple[Path, list[str]]:
    """A gateway data directory whose audit log holds two warranty tasks (two traces)."""
    root = tmp_path_factory.mktemp("data")

    async def fill() -> list[str]:
        async def no_sleep(_: float) -> None:
            return None

        audit = WalAuditLog(root / "audit", "n1", signer=Signer("cli-test"))
        agency = await build_demo_agency(Agency(audit=audit, sleep=no_sleep))
        traces = [(await agency.submit(warranty_request())).trace_id for _ in range(2)]
        await agency.close()
        return traces

    return root, asyncio.run(fill())


def test_export_by_trace_prefix_like_trace_show(data_dir, capsys) -> None:
    root, traces = data_dir
    audit = str(root / "audit")
    assert (
        main(["audit", "export", audit, "--format", "csv", "--trace", traces[0][:10], "--no-progress"]) == 0
    )
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows and all(traces[0] in row for row in rows)
    assert main(["trace", "show", traces[0][:10], "--data-dir", str(root), "--json"]) == 0
    (timeline,) = json.loads(capsys.readouterr().out)
    assert timeline["trace_id"] == traces[0]


def test_an_export_that_matches_nothing_warns_and_exits_3(data_dir, capsys) -> None:
    root, _ = data_dir
    audit = str(root / "audit")
    for flt in (["--trace", "0123456789abcdef"], ["--agent", "nobody"], ["--event-type", "nope"]):
        assert main(["audit", "export", audit, *flt, "--no-progress"]) == 3, flt
        assert "warning: no record matches the filter" in capsys.readouterr().err
    assert main(["contracts", "review", "--data-dir", str(root / "nonexistent")]) == 3
    assert "no audit log at" in capsys.readouterr().err


def test_verify_and_checkpoint_speak_json(data_dir, capsys) -> None:
    root, _ = data_dir
    audit = str(root / "audit")
    assert main(["audit", "verify", audit, "--json", "--no-progress"]) == 5  # intact, no --key pinned
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["nodes"][0]["node"] == "n1" and report["nodes"][0]["events"] > 10
    assert main(["audit", "checkpoint", audit, "--json"]) == 0
    (node,) = json.loads(capsys.readouterr().out)
    assert node["node"] == "n1" and node["vkey"].startswith("cli-test+")


def test_old_format_spelling_still_works_hidden(tmp_path, capsys) -> None:
    goal = tmp_path / "g.yaml"
    goal.write_text("id: GOAL_X_001\ndescription: d\nverification_steps: ['output contains hi']\n")
    assert main(["goal", "lint", str(goal), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    assert main(["goal", "lint", str(goal), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    with pytest.raises(SystemExit):
        main(["goal", "lint", "--help"])
    assert "--format" not in capsys.readouterr().out


def test_progress_bars_show_rate_and_time_left(data_dir, capsys) -> None:
    root, _ = data_dir
    audit = str(root / "audit")
    assert main(["audit", "verify", audit, "--progress"]) == 5  # intact, no --key pinned
    err = capsys.readouterr().err
    assert "verifying n1" in err and "B/s" in err and "<" in err  # rate, then elapsed<left
    out = root / "bundle.jsonl"
    assert main(["audit", "export", audit, "--progress", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "verifying n1" in err and "exporting" in err and "rec/s" in err
    assert main(["audit", "verify", audit]) == 5  # intact, unpinned; stderr is not a terminal here: no bar
    assert "verifying" not in capsys.readouterr().err


def test_a_trace_prefix_matching_two_traces_is_an_error(tmp_path, capsys) -> None:
    from middleware.audit.record import AuditRecord

    async def fill() -> None:
        log = WalAuditLog(tmp_path / "audit", "n1", signer=Signer("cli-test"))
        for trace in ("deadbeef00000001", "deadbeef00000002"):
            await log.append(AuditRecord(event_type="task.submitted", node="n1", trace_id=trace))
        await log.close()

    asyncio.run(fill())
    out = tmp_path / "x.csv"
    argv = ["audit", "export", str(tmp_path / "audit"), "--format", "csv", "--no-progress", "-o", str(out)]
    assert main([*argv, "--trace", "deadbeef"]) == 2
    err = capsys.readouterr().err
    assert "matches 2 traces" in err and "deadbeef00000002" in err
    assert not out.exists()  # no half-right export left behind
    assert main([*argv, "--trace", "DEADBEEF00000002"]) == 0
    assert out.read_text().count("deadbeef00000002") == 1
    assert main(["trace", "show", "deadbeef", "--data-dir", str(tmp_path)]) == 2
    assert "matches 2 traces" in capsys.readouterr().err


def test_a_path_the_command_cannot_use_is_an_error_naming_it_never_a_traceback(
    data_dir, tmp_path, capsys
) -> None:
    root, traces = data_dir
    audit = str(root / "audit")
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("agents: [unclosed\n")
    agents = str(tmp_path / "agents")
    assert main(["messaging", "keygen", "alice", "--dir", agents]) == 0
    html = str(tmp_path / "missing" / "t.html")
    cases = [
        ["audit", "export", audit, "--output", str(tmp_path / "missing" / "x.jsonl"), "--no-progress"],
        ["audit", "export", audit, "--output", str(tmp_path), "--no-progress"],
        ["audit", "verify", audit, "--checkpoint", str(tmp_path / "missing")],
        ["trace", "show", traces[0][:10], "--data-dir", str(root), "--html", html],
        ["demo", "--data-dir", str(a_file)],
        ["messaging", "enroll", "alice", "--dir", agents, "--config", str(bad_yaml)],
    ]
    capsys.readouterr()
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("agency: error:") and "Traceback" not in err, (argv, err)
        assert "missing" in err or str(tmp_path) in err or "YAML" in err, (argv, err)


def test_missing_logs_and_empty_periods_are_nothing_found_bad_times_are_errors(data_dir, capsys) -> None:
    root, _ = data_dir
    assert main(["audit", "verify", str(root / "nonexistent")]) == 3
    assert main(["audit", "export", str(root / "nonexistent"), "--no-progress"]) == 3
    assert main(["report", "--data-dir", str(root / "nonexistent")]) == 3
    assert "no audit log at" in capsys.readouterr().err
    assert main(["report", "--data-dir", str(root), "--since", "yesterday"]) == 2
    assert "--since" in capsys.readouterr().err
    assert main(["report", "--data-dir", str(root), "--since", "2099-01-01"]) == 3
    assert "no task was submitted in that period" in capsys.readouterr().err
    assert main(["report", "--data-dir", str(root)]) == 0


def test_health_reads_agency_address_and_names_the_address_it_tried(monkeypatch, capsys) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AGENCY_ADDRESS", f"127.0.0.1:{port}")
    assert main(["health", "--timeout", "0.5"]) == 4
    assert "UNREACHABLE" in (out := capsys.readouterr().out) and f"127.0.0.1:{port}" in out
