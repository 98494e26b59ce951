"""``agency goal lint``: findings, exit codes, JSON output; in process and as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from middleware.cli import main

GOOD = {
    "id": "GOAL_WARRANTY_001",
    "description": "screen replacement",
    "verification_steps": [
        "output contains the tracking number",
        {"kind": "json_path", "path": "$.fee", "le": 0},
    ],
    "timeout_seconds": 120,
    "criticality": "high",
}
BAD = {
    "id": "GOAL_REPORT_001",
    "description": "GDPR report",
    "verification_steps": [
        "检查输出是否包含DataController字段",
        "确保用户满意",
        "ensure the user is satisfied",
        {"kind": "teleport"},
        {"kind": "regex", "pattern": "([a-z"},
    ],
    "timeout_seconds": 30,
    "criticality": "high",
}


def write(tmp_path, name, data, as_yaml=None):
    path = tmp_path / name
    if as_yaml if as_yaml is not None else name.endswith((".yaml", ".yml")):
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    else:
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def lint_json(capsys, *argv):
    code = main(["goal", "lint", "--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_a_clean_goal_passes(tmp_path, capsys):
    path = write(tmp_path, "good.yaml", GOOD)
    assert main(["goal", "lint", path]) == 0
    out = capsys.readouterr().out
    assert f"✅ {path}:GOAL_WARRANTY_001: goal is valid and machine-checkable" in out
    assert "0 error(s), 0 warning(s)" in out


def test_every_finding_is_reported_with_its_code(tmp_path, capsys):
    path = write(tmp_path, "bad.json", [BAD, GOOD])
    code, doc = lint_json(capsys, path)
    assert code == 1 and doc["ok"] is False
    assert doc["summary"] == {"errors": 4, "warnings": 1, "files": 1, "goals": 2}
    found = {(f["code"], f["field"]) for f in doc["findings"]}
    assert {
        ("not-machine-checkable", "verification_steps[1]"),
        ("not-machine-checkable", "verification_steps[2]"),
        ("unknown-kind", "verification_steps[3]"),
        ("bad-regex", "verification_steps[4].pattern"),
        ("short-timeout-high-criticality", "timeout_seconds"),
    } == found - {("ok", "")}
    severities = {f["code"]: f["severity"] for f in doc["findings"]}
    assert severities["short-timeout-high-criticality"] == "warning"
    assert severities["bad-regex"] == "error"
    assert any(f["item"] == "GOAL_WARRANTY_001" and f["severity"] == "ok" for f in doc["findings"])


def test_text_output_is_one_line_per_finding(tmp_path, capsys):
    path = write(tmp_path, "bad.yaml", BAD)
    assert main(["goal", "lint", path]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6  # 4 errors, 1 warning, 1 summary
    assert lines[0].startswith(f"❌ {path}:GOAL_REPORT_001 verification_steps[1]: cannot turn '确保用户满意'")
    assert lines[0].endswith("[not-machine-checkable]")
    assert any(line.startswith("⚠️") and "recommended min: 60 s" in line for line in lines)
    assert lines[-1] == "4 error(s), 1 warning(s)"


def test_timeout_beyond_declared_sla_and_catalog_slo(tmp_path, capsys):
    goal = {
        **GOOD,
        "timeout_seconds": 300,
        "target_capabilities": [{"name": "customer_service", "sla_seconds": 180}, "warranty_agent", "ghost"],
    }
    catalog = write(
        tmp_path,
        "catalog.yaml",
        {
            "contracts": [
                {
                    "name": "warranty_agent",
                    "version": "2.1.0",
                    "can_do": ["warranty_claim"],
                    "slo_latency_ms": 1200,
                }
            ]
        },
    )
    code, doc = lint_json(capsys, write(tmp_path, "g.json", goal), "--catalog", catalog)
    assert code == 0  # warnings only
    messages = [f["message"] for f in doc["findings"] if f["severity"] == "warning"]
    assert "timeout_seconds=300 is beyond the SLA of customer_service (180 s, declared)" in messages
    assert (
        "timeout_seconds=300 is beyond the SLA of warranty_agent (1.2 s, catalog SLO of warranty_agent@2.1.0)"
        in messages
    )
    assert any("'ghost' has no sla_seconds" in m for m in messages)
    assert main(["goal", "lint", "--strict", write(tmp_path, "g2.json", goal)]) == 1


def test_manual_steps_are_warnings_not_errors(tmp_path, capsys):
    goal = {**GOOD, "verification_steps": ["人工：确保用户满意", "output contains ok"]}
    code, doc = lint_json(capsys, write(tmp_path, "m.yaml", goal))
    assert code == 0
    assert [f["code"] for f in doc["findings"]] == ["manual-step"]


def test_duplicate_ids_across_files_and_unreadable_files(tmp_path, capsys):
    a = write(tmp_path, "a.json", GOOD)
    b = write(tmp_path, "b.json", {"goals": [GOOD]})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json: [", encoding="utf-8")
    code, doc = lint_json(capsys, a, b, str(broken), str(tmp_path / "missing.yaml"))
    assert code == 1
    codes = [f["code"] for f in doc["findings"]]
    assert codes.count("duplicate-id") == 1 and codes.count("unreadable") == 2


def test_bad_catalog_is_a_usage_error(tmp_path, capsys):
    catalog = write(tmp_path, "c.json", [{"name": "x"}])
    assert main(["goal", "lint", "--catalog", catalog, write(tmp_path, "g.json", GOOD)]) == 2
    assert "contracts[0].can_do" in capsys.readouterr().err


def test_missing_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["goal", "lint"])
    assert info.value.code == 2


def test_goal_lint_as_a_subprocess(tmp_path):
    path = write(tmp_path, "bad.yaml", BAD)
    proc = subprocess.run(
        [sys.executable, "-m", "middleware", "goal", "lint", "--format", "json", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["summary"]["errors"] == 4


def test_nested_quantifiers_are_flagged(tmp_path, capsys):
    goal = {
        **GOOD,
        "verification_steps": [
            {"kind": "regex", "pattern": "^(a+)+$"},
            {"kind": "regex", "pattern": "(a+)+", "literal": True},
        ],
    }
    code, doc = lint_json(capsys, write(tmp_path, "r.json", goal))
    assert code == 0
    assert [(f["code"], f["field"]) for f in doc["findings"]] == [
        ("regex-backtracking", "verification_steps[0].pattern")
    ]


def test_a_definition_file_is_both_goals_and_catalog(tmp_path, capsys):
    from pathlib import Path

    example = str(Path(__file__).resolve().parents[2] / "examples" / "ecommerce.yaml")
    goal = {**GOOD, "id": "GOAL_SLA_001", "target_capabilities": ["warranty_agent"], "timeout_seconds": 1}
    code, doc = lint_json(capsys, example, write(tmp_path, "g.json", goal), "--catalog", example)
    assert code == 0
    assert [f["code"] for f in doc["findings"]] == ["ok", "short-timeout-high-criticality"]
    goal["timeout_seconds"] = 120
    code, doc = lint_json(capsys, write(tmp_path, "g2.json", goal), "--catalog", example)
    assert [f["message"] for f in doc["findings"]] == [
        "timeout_seconds=120 is beyond the SLA of warranty_agent (1.2 s, catalog SLO of warranty_agent@2.1.0)"
    ]
