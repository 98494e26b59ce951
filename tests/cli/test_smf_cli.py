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


def minimal(**meta):
    """Only the seed's minimum viable set: provenance and intention_trace."""
    return {
        "sender": "greeting_agent",
        "receiver": "warranty_agent",
        "content": "请为用户u_789处理屏幕更换申请",
        "metadata": {
            "provenance": {"source": "greeting_agent", "reliability_score": 0.98},
            "intention_trace": ["GOAL_WARRANTY_001"],
            **meta,
        },
    }


def test_only_provenance_and_intention_trace_is_valid(tmp_path, capsys):
    path = write(tmp_path, "min.json", minimal())
    assert main(["smf", "validate", path, "--now", NOW]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "✅ Valid SMF message"


def test_a_message_without_intention_trace_fails(tmp_path, capsys):
    bad = minimal()
    del bad["metadata"]["intention_trace"]
    empty = minimal(intention_trace=[])
    for data in (bad, empty):
        path = write(tmp_path, "bad.json", data)
        assert main(["smf", "validate", path, "--now", NOW, "--format", "json"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert ("schema", "metadata.intention_trace") in {(f["code"], f["field"]) for f in doc["findings"]}


def test_a_time_critical_domain_requires_a_ttl(tmp_path, capsys):
    path = write(tmp_path, "quote.json", minimal(domain="logistics"))
    assert main(["smf", "validate", path, "--now", NOW]) == 1
    out = capsys.readouterr().out
    assert "❌ freshness_ttl required in the time-critical domain 'logistics' [ttl-required]" in out
    # with a TTL it passes; an ordinary domain needs none; the domain list is configurable
    assert (
        main(["smf", "validate", write(tmp_path, "ok.json", minimal(domain="logistics", freshness_ttl=120))])
        == 0
    )
    assert main(["smf", "validate", write(tmp_path, "faq.json", minimal(domain="faq"))]) == 0
    assert (
        main(
            [
                "smf",
                "validate",
                write(tmp_path, "faq2.json", minimal(domain="faq")),
                "--time-critical-domain",
                "faq",
            ]
        )
        == 1
    )
    assert main(["smf", "validate", write(tmp_path, "any.json", minimal()), "--time-critical"]) == 1
    capsys.readouterr()


def test_optional_fields_keep_their_range_checks(tmp_path, capsys):
    path = write(tmp_path, "bad.json", minimal(freshness_ttl=-1, confidence_score=2, domain="x" * 65))
    assert main(["smf", "validate", path, "--format", "json"]) == 1
    fields = {f["field"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert fields == {"metadata.freshness_ttl", "metadata.confidence_score", "metadata.domain"}
    reliability = minimal()
    reliability["metadata"]["provenance"]["reliability_score"] = 1.2
    assert main(["smf", "validate", write(tmp_path, "r.json", reliability)]) == 1
    capsys.readouterr()


def test_smf_validate_console_script_with_file_option(tmp_path):
    import shutil

    script = shutil.which("smf-validate") or str(
        __import__("pathlib").Path(sys.executable).with_name("smf-validate")
    )
    good = write(tmp_path, "msg.json", minimal())
    proc = subprocess.run([script, "--file", good], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "✅ Valid SMF message"
    bad = minimal()
    del bad["metadata"]["intention_trace"]
    proc = subprocess.run(
        [script, "--file", write(tmp_path, "bad.json", bad)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1 and "intention_trace" in proc.stdout


def test_the_example_messages(capsys):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples" / "smf"
    assert main(["smf", "validate", str(examples / "minimal.json")]) == 0
    assert main(["smf", "validate", str(examples / "logistics-without-ttl.json")]) == 1
    assert "[ttl-required]" in capsys.readouterr().out
