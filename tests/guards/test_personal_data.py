"""Personal data: the recognizers, redaction before dispatch by contract, tokens restored in a
reply, and no raw value in the audit log or any export."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from middleware import Agency, AgencyConfig, TaskState, WalAuditLog
from middleware.audit.export import export
from middleware.audit.verify import verify_path
from middleware.guards import GuardConfig, PiiScanner
from middleware.guards.redaction import Tokenizer, redact_value, redacted

RESIDENT_ID = "110101199003074258"  # valid birth date and ISO 7064 check character
PHONE = "13812345678"  # a Chinese mobile number
EMAIL = "zhang.san@example.com"
CARD = "4111 1111 1111 1111"  # passes Luhn
IBAN = "DE89 3704 0044 0532 0130 00"


def classes(text: str) -> list[tuple[str, str]]:
    return [(m.data_class, text[m.start : m.end]) for m in PiiScanner().scan(text)]


def test_each_built_in_class_is_found_and_validated() -> None:
    text = f"身份证{RESIDENT_ID}，手机{PHONE}，邮箱{EMAIL}; card {CARD}; IBAN {IBAN}; call +1 650-253-0000"
    assert classes(text) == [
        ("cn_resident_id", RESIDENT_ID),
        ("phone", PHONE),
        ("email", EMAIL),
        ("payment_card", CARD),
        ("iban", IBAN),
        ("phone", "+1 650-253-0000"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "110101199003074259",  # resident id with a wrong check character
        "110101199013074258",  # month 13
        "4111 1111 1111 1112",  # fails Luhn
        "DE89 3704 0044 0532 0130 01",  # IBAN with wrong check digits
        "trace 4bf92f3577b34da6a3ce929d0e0e4736 evt_1388123456781234 order 20261128",
        "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "price 1299.00 CNY, 12 months, 2026-11-28T10:00:00Z",
    ],
)
def test_near_misses_and_identifiers_are_not_personal_data(text: str) -> None:
    assert classes(text) == []


def test_a_resident_id_is_not_also_a_phone_number() -> None:
    assert [c for c, _ in classes(f"id:{RESIDENT_ID}")] == ["cn_resident_id"]


def test_redaction_keeps_keys_and_shared_objects_untouched() -> None:
    value: dict[str, Any] = {"phone": PHONE, "nested": {"note": f"call {PHONE}"}, "n": 3, "same": {"a": "x"}}
    out = redact_value(value, PiiScanner(), redacted, allowed=())
    assert out == {
        "phone": "[redacted:phone]",
        "nested": {"note": "call [redacted:phone]"},
        "n": 3,
        "same": {"a": "x"},
    }
    assert value["phone"] == PHONE and out["same"] is value["same"]


def test_tokens_are_task_scoped_and_restorable() -> None:
    key = b"k" * 32
    a, b = Tokenizer(key, "task-1"), Tokenizer(key, "task-2")
    assert a.token("phone", PHONE) == a.token("phone", PHONE) != b.token("phone", PHONE)
    scanner = PiiScanner()
    vault = a.vault([{"phone": PHONE}], scanner)
    restored, n = a.restore({"reply": f"we call {a.token('phone', PHONE)}"}, vault)
    assert restored == {"reply": f"we call {PHONE}"} and n == 1
    # a token of another task is not restored from this task's data
    assert b.restore(f"{b.token('phone', PHONE)}", vault)[1] == 0


def guarded(mode: str = "tokenize") -> AgencyConfig:
    return AgencyConfig(guards=GuardConfig.model_validate({"personal_data": {"enabled": True, "mode": mode}}))


async def two_agents(agency: Agency, seen: dict[str, list[Any]]) -> None:
    def lookup(request: Any) -> dict[str, Any]:
        seen.setdefault("lookup", []).append((request.text, request.input))
        return {"order": "A-1", "contact": request.input["phone"]}

    def reply(request: Any) -> dict[str, Any]:
        seen.setdefault("reply", []).append((request.text, request.input))
        return {"message": f"We will call you at {request.input['find']['contact']}."}

    await agency.register(
        {"name": "lookup", "can_do": ["lookup"], "data_classes": ["phone"], "slo_latency_ms": 5000}, lookup
    )
    await agency.register(
        {"name": "reply", "can_do": ["compose"], "restore_personal_data": True, "slo_latency_ms": 5000}, reply
    )


def request() -> dict[str, Any]:
    return {
        "text": f"我的身份证是{RESIDENT_ID}，请打电话给{PHONE}",
        "user_id": "u_42",
        "input": {"resident_id": RESIDENT_ID, "phone": PHONE},
        "steps": [{"name": "find", "action": "lookup"}, {"name": "answer", "action": "compose"}],
    }


async def test_a_resident_id_and_a_phone_reach_only_the_agent_allowed_to_see_them(tmp_path: Path) -> None:
    agency = Agency(config=guarded(), audit=WalAuditLog(tmp_path / "audit", "n1"))
    seen: dict[str, list[Any]] = {}
    await two_agents(agency, seen)
    outcome = await agency.submit(request())
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    (lookup_text, lookup_input), (_reply_text, reply_input) = seen["lookup"][0], seen["reply"][0]
    # lookup may get phones, never the resident id
    assert lookup_input["phone"] == PHONE and PHONE in lookup_text
    assert RESIDENT_ID not in repr(seen["lookup"]) and "[cn_resident_id:" in lookup_input["resident_id"]
    # reply may get neither: tokens in their place
    assert PHONE not in repr(seen["reply"]) and RESIDENT_ID not in repr(seen["reply"])
    assert reply_input["find"]["contact"].startswith("[phone:")
    # its contract restores the task's tokens: the user gets the number back
    assert outcome.output == {"message": f"We will call you at {PHONE}."}
    records = [r for _, r in agency.audit.records() if r.task_id == outcome.task_id]
    guard = [r for r in records if r.event_type == "guard.redacted"]
    assert [r.actors.agent for r in guard] == ["lookup@1.0.0", "reply@1.0.0"]
    assert guard[1].detail["classes"] == {"cn_resident_id": 2, "phone": 3}
    await agency.close()
    blob = b"".join(p.read_bytes() for p in (tmp_path / "audit" / "n1").glob("*.wal"))
    assert RESIDENT_ID.encode() not in blob and PHONE.encode() not in blob

    # no export format holds either value, and the log still verifies against its key
    vkey = (tmp_path / "audit" / "n1" / "checkpoint.vkey").read_text().strip()
    for fmt in ("jsonl", "jsonl-flat", "csv", "cef", "ocsf"):
        out = io.BytesIO()
        export(tmp_path / "audit", out, fmt, key=vkey)
        data = out.getvalue()
        assert data and RESIDENT_ID.encode() not in data and PHONE.encode() not in data, fmt
        assert b"[redacted:cn_resident_id]" in data, fmt
    assert verify_path(tmp_path / "audit", key=vkey).ok


async def test_redact_mode_is_irreversible() -> None:
    agency = Agency(config=guarded("redact"))
    seen: dict[str, list[Any]] = {}
    await two_agents(agency, seen)
    outcome = await agency.submit(request())
    assert outcome.state is TaskState.COMPLETED
    assert seen["reply"][0][1]["find"]["contact"] == "[redacted:phone]"
    assert outcome.output == {"message": "We will call you at [redacted:phone]."}


async def test_guards_off_change_nothing() -> None:
    agency = Agency()
    seen: dict[str, list[Any]] = {}
    await two_agents(agency, seen)
    outcome = await agency.submit(request())
    assert seen["reply"][0][1]["find"]["contact"] == PHONE and outcome.state is TaskState.COMPLETED
    assert not [r for _, r in agency.audit.records() if r.event_type == "guard.redacted"]


def test_unknown_data_classes_are_refused_by_name() -> None:
    from middleware.errors import InvalidInput

    with pytest.raises(InvalidInput) as err:
        AgencyConfig.parse({"guards": {"personal_data": {"classes": ["phone", "dna"]}}})
    assert "guards.personal_data.classes" in str(err.value) and "dna" in str(err.value)


def test_replicas_given_one_token_key_file_make_the_same_tokens_and_a_bad_file_is_refused(
    tmp_path: Path,
) -> None:
    """Two gateways (replicas, or one restarted) reading the same ``token_key_file`` tokenise a
    task's values alike, so either restores what the other made; without it each process has its
    own random key. A missing or short file is refused naming the field."""
    from pydantic import ValidationError

    from middleware.guards import ContentGuard

    key_file = tmp_path / "token.key"
    key_file.write_bytes(bytes(range(32)))

    def replica(**settings: Any) -> ContentGuard:
        return ContentGuard(GuardConfig.model_validate({"personal_data": {"enabled": True, **settings}}))

    first, second = replica(token_key_file=str(key_file)), replica(token_key_file=str(key_file))
    made = first.tokenizer("task-1").token("phone", PHONE)
    vault = second.tokenizer("task-1").vault([{"phone": PHONE}], PiiScanner())
    assert second.tokenizer("task-1").restore(f"call {made}", vault) == (f"call {PHONE}", 1)
    assert replica().tokenizer("task-1").token("phone", PHONE) != made  # a random key each

    key_file.write_bytes(b"short")
    for path in (key_file, tmp_path / "missing.key"):
        with pytest.raises(ValidationError) as bad:
            replica(token_key_file=str(path))
        assert bad.value.errors()[0]["loc"] == ("personal_data", "token_key_file")
        assert str(path) in str(bad.value)
