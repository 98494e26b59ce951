"""The agency definition file: validation by path, env overrides, config check, serve --config."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml

from middleware import InvalidInput, TaskState
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.cli import main
from middleware.demo import CONTRACTS, WARRANTY_GOAL, warranty_request
from middleware.server.bootstrap import build_agency
from middleware.server.settings import load_definition

ROOT = Path(__file__).resolve().parents[2]
ECOMMERCE = ROOT / "examples" / "ecommerce.yaml"


def test_the_shipped_scenario_file_matches_the_demo():
    definition = load_definition(ECOMMERCE, env={})
    assert [a.contract.model_dump() for a in definition.agents] == [c.model_dump() for c in CONTRACTS]
    assert [g.model_dump() for g in definition.goals] == [WARRANTY_GOAL.model_dump()]


async def test_the_scenario_file_governs_like_the_demo(tmp_path):
    definition = load_definition(ECOMMERCE, env={"AGENCY_AUDIT_DIR": str(tmp_path)})
    agency = await build_agency(definition)
    try:
        outcome = await agency.submit(warranty_request())
    finally:
        await agency.close()
    assert outcome.state is TaskState.COMPLETED
    assert [r.kind.value for r in outcome.resolutions] == ["retry", "retry", "use_backup"]
    assert list(tmp_path.glob("*/*.wal*"))


def write(tmp_path: Path, data) -> Path:
    path = tmp_path / "agency.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_every_problem_is_listed_by_path(tmp_path):
    good = yaml.safe_load(ECOMMERCE.read_text())
    bad = json.loads(json.dumps(good))
    bad["agents"][2]["contract"]["input_schema"] = {"type": "nonsense"}
    bad["agents"][0]["contract"]["cannot_do"] = ["extract_intent"]
    bad["agents"][1]["factory"] = "middleware.demo:no_such_factory"
    bad["server"]["address"] = "nowhere"
    bad["storage"] = {"backend": "redis"}
    bad["goals"][0]["timeout_seconds"] = 0
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, bad), env={})
    paths = {p.field for p in info.value.problems}
    assert "agents[2].contract.input_schema" in paths
    assert "agents[0].contract.cannot_do" in paths  # can_do/cannot_do overlap
    assert "agents[1].factory" in paths
    assert "server.address" in paths
    assert "storage" in paths
    assert "goals[0].timeout_seconds" in paths
    assert "overlap" in str(info.value) and "no attribute" in str(info.value)


def test_duplicate_agents_and_goals_are_reported(tmp_path):
    good = yaml.safe_load(ECOMMERCE.read_text())
    good["agents"].append(good["agents"][0])
    good["goals"].append(good["goals"][0])
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, good), env={})
    n = len(good["agents"]) - 1  # the duplicate is the last one
    assert {p.field for p in info.value.problems} == {f"agents[{n}].contract", "goals[1].id"}


def test_yaml_errors_name_the_line_and_missing_files_are_clear(tmp_path):
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, "agents:\n  - [unclosed\n"), env={})
    assert info.value.field.startswith("line 3")
    with pytest.raises(InvalidInput) as info:
        load_definition(tmp_path / "missing.yaml", env={})
    assert "cannot read" in str(info.value)
    with pytest.raises(InvalidInput):
        load_definition(write(tmp_path, "- a list\n"), env={})


def test_environment_overrides_the_file(tmp_path):
    env = {
        "AGENCY_ADDRESS": "0.0.0.0:6000",
        "AGENCY_NODE_ID": "gw-7",
        "AGENCY_REDIS_URL": "redis://127.0.0.1:6379/3",
    }
    definition = load_definition(ECOMMERCE, env=env)
    assert definition.server.address == "0.0.0.0:6000"
    assert definition.agency.node_id == "gw-7"
    assert definition.storage.backend == "redis"
    assert definition.storage.redis_url.endswith("/3")


def test_config_check_command(tmp_path, capsys):
    assert main(["config", "check", str(ECOMMERCE)]) == 0
    assert "valid (9 agents, 1 goal," in capsys.readouterr().out
    bad = write(tmp_path, {"agents": [{"contract": {"name": "x", "can_do": []}, "agent": "os:getcwd"}]})
    assert main(["config", "check", str(bad), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert report["problems"][0]["path"] == "agents[0].contract.can_do"


def test_serve_with_the_scenario_file_over_grpc(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "middleware",
            "serve",
            "--config",
            str(ECOMMERCE),
            "--address",
            "127.0.0.1:0",
            "--metrics-address",
            "",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"AGENCY_AUDIT_DIR": str(tmp_path / "audit"), "PATH": "/usr/bin:/bin"},
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"serving on \S+:(\d+)", line)
        assert m, line + proc.stderr.read()
        request = warranty_request()
        with grpc.insecure_channel(f"127.0.0.1:{m.group(1)}") as channel:
            outcome = agency_pb2_grpc.AgencyServiceStub(channel).Submit(
                agency_pb2.SubmitRequest(
                    text=request.text,
                    goal_id="GOAL_WARRANTY_001",
                    input_json=json.dumps(request.input),
                    steps=[agency_pb2.TaskStep(name=s.name, action=s.action) for s in request.steps],
                ),
                timeout=30,
            )
        assert outcome.state == "completed" and outcome.goal_verdict.passed
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert list((tmp_path / "audit").glob("*/*.wal*"))
