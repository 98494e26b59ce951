"""``agency smf validate``: findings like the seed's smf-validate, exit codes, JSON output."""

from __future__ import annotations

import json
import subprocess
import sys

from middleware.cli import main

NOW = "2026-11-29T12:00:00Z"


def message(**meta):
    return {
        "message_id": "msg_1",
        "sender": "order_agent",
        "receiver": "warranty_agent",
        "content": {"order_id": "ORD-1"},
        "created_at": "2026-11-29T11:59:50Z",
        "metadata": {
            "provenance": {"source": "orders_db", "reliability_score": 0.95},
            "freshness_ttl": 300,
            "confidence_score": 0.9,
            "intention_trace": ["GOAL_ORDER_001"],
            **meta,
        },
    }


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_the_seed_example(tmp_path, capsys):
    path = write(tmp_path, "msg.json", message(freshness_ttl=30))
    code = main(["smf", "validate", path, "--expect-goal", "GOAL_WARRANTY_001", "--now", NOW])
    assert code == 1
    assert capsys.readouterr().out.splitlines() == [
        "✅ Valid SMF message",
        "⚠️ freshness_ttl=30 (recommended min: 60 for real-time data) [short-ttl]",
        "❌ intention_trace missing GOAL_WARRANTY_001 (found: [GOAL_ORDER_001]) [goal-missing]",
        "1 error(s), 1 warning(s)",
    ]


def test_a_good_message_passes(tmp_path, capsys):
    path = write(tmp_path, "msg.json", message())
    assert main(["smf", "validate", path, "--expect-goal", "GOAL_ORDER_001", "--now", NOW]) == 0
    assert capsys.readouterr().out.splitlines() == ["✅ Valid SMF message", "0 error(s), 0 warning(s)"]


def test_min_ttl_is_configurable(tmp_path, capsys):
    path = write(tmp_path, "msg.json", message(freshness_ttl=30))
    assert main(["smf", "validate", path, "--now", NOW, "--min-ttl", "10", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["warnings"] == 0
    assert main(["smf", "validate", path, "--now", NOW, "--strict"]) == 1


def test_schema_errors_name_each_field(tmp_path, capsys):
    bad = message(confidence_score=1.5)
    del bad["metadata"]["provenance"]
    code = main(["smf", "validate", write(tmp_path, "bad.json", bad), "--format", "json", "--now", NOW])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and not doc["ok"]
    assert {(f["code"], f["field"]) for f in doc["findings"]} == {
        ("schema", "metadata.provenance"),
        ("schema", "metadata.confidence_score"),
    }


def test_stale_drift_and_lists(tmp_path, capsys):
    stale = message(freshness_ttl=60)
    stale["created_at"] = "2026-11-29T10:00:00Z"
    drifting = message(intention_trace=["GOAL_A_001", "GOAL_B_001", "GOAL_A_001"])
    drifting["message_id"] = "msg_2"
    path = write(tmp_path, "many.json", {"messages": [stale, drifting]})
    code = main(["smf", "validate", path, "--now", NOW, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["summary"]["messages"] == 2
    by_code = {f["code"]: f for f in doc["findings"]}
    assert by_code["stale"]["severity"] == "error" and by_code["stale"]["item"] == "msg_1"
    assert "cycle at GOAL_A_001" in by_code["intent-drift"]["message"]
    assert main(["smf", "validate", path, "--now", NOW, "--allow-stale"]) == 1  # drift is still an error
    out = capsys.readouterr().out
    assert f"⚠️ {path}:msg_1" in out  # several messages: each line says which


def test_unreadable_file_and_bad_now(tmp_path, capsys):
    assert main(["smf", "validate", str(tmp_path / "nope.json")]) == 1
    assert "cannot read" in capsys.readouterr().out
    assert main(["smf", "validate", write(tmp_path, "m.json", message()), "--now", "yesterday"]) == 2


def test_smf_validate_as_a_subprocess(tmp_path):
    path = write(tmp_path, "msg.json", message())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "middleware",
            "smf",
            "validate",
            path,
            "--expect-goal",
            "GOAL_X_001",
            "--now",
            NOW,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "❌ intention_trace missing GOAL_X_001 (found: [GOAL_ORDER_001])" in proc.stdout
