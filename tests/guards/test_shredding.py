"""Crypto-shredding: personal data sealed under a key per subject; after `agency audit erase`
the subject's data is unreadable while `verify --key`, bundles and the other subjects' data
stay as they were."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

from middleware import Agency, AgencyConfig, TaskState, WalAuditLog
from middleware.audit.compression import read_segment
from middleware.audit.export import export
from middleware.audit.shredding import (
    ERASED,
    FileKeyStore,
    MemoryKeyStore,
    SubjectSealer,
    default_subject_key_dir,
    key_id,
    reveal,
)
from middleware.audit.verify import verify_path
from middleware.cli import main
from middleware.guards import ContentGuard, GuardConfig

RESIDENT_ID = "110101199003074258"
PHONE = "13812345678"
OTHER_PHONE = "13987654321"


def test_sealed_values_open_only_for_an_allowed_reader_holding_the_key() -> None:
    store = MemoryKeyStore()
    sealer = SubjectSealer(store)
    sealed = sealer.replacer({"actors": {"user": "u_1"}})("phone", PHONE)
    assert sealed.startswith(f"[sealed:phone:{key_id('u_1')}.") and PHONE not in sealed
    text = f"call {sealed} now"
    assert reveal(text, store, allowed=True) == f"call {PHONE} now"
    assert reveal(text, store, allowed=False) == "call [redacted:phone] now"
    assert reveal(text, None, allowed=True) == "call [redacted:phone] now"
    assert store.erase(key_id("u_1")) and not store.erase(key_id("u_1"))
    assert reveal(text, store, allowed=True) == f"call {ERASED} now"
    # a record without a subject has no key to seal under: redacted
    assert sealer.replacer({"actors": {}})("phone", PHONE) == "[redacted:phone]"
    # a session stands for the subject when there is no user
    assert key_id("s_9") in sealer.replacer({"actors": {"session": "s_9"}})("phone", PHONE)


def test_key_files_live_outside_the_audit_directory_and_erase_for_good(tmp_path: Path) -> None:
    keys = default_subject_key_dir(tmp_path / "audit")
    assert keys == tmp_path / "keys" / "subjects"
    store = FileKeyStore(keys)
    key = store.key(key_id("u_1"), create=True)
    path = keys / f"{key_id('u_1')}.key"
    assert path.read_bytes() == key and path.stat().st_mode & 0o777 == 0o600
    assert FileKeyStore(keys).key(key_id("u_1"), create=False) == key  # another process reads it
    assert store.erase(key_id("u_1")) and not path.exists()
    assert FileKeyStore(keys).key(key_id("u_1"), create=False) is None


def export_text(audit: Path, fmt: str, vkey: str, **kw: Any) -> str:
    out = io.BytesIO()
    export(audit, out, fmt, key=vkey, **kw)
    return out.getvalue().decode()


async def two_subjects(audit: Path, store: FileKeyStore) -> None:
    """Tasks of two users, each with a phone number and a resident id, on a sealing gateway."""
    config = AgencyConfig(guards=GuardConfig.model_validate({"personal_data": {"enabled": True}}))
    guard = ContentGuard(config.guards, audit_replacer=SubjectSealer(store).replacer)
    agency = Agency(config=config, guard=guard, audit=WalAuditLog(audit, "n1"))
    await agency.register(
        {"name": "lookup", "can_do": ["lookup"], "data_classes": ["phone"], "slo_latency_ms": 5000},
        lambda request: {"contact": request.input["phone"]},
    )
    for user, phone in (("u_42", PHONE), ("u_7", OTHER_PHONE)):
        outcome = await agency.submit(
            {
                "text": f"身份证{RESIDENT_ID}",
                "user_id": user,
                "input": {"phone": phone},
                "constraints": {"action": "lookup"},
            }
        )
        assert outcome.state is TaskState.COMPLETED
    await agency.close()


def test_after_audit_erase_the_subjects_data_is_unreadable_and_verify_key_passes(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    store = FileKeyStore(default_subject_key_dir(audit))
    asyncio.run(two_subjects(audit, store))  # the CLI below runs its own event loop
    node = audit / "n1"
    vkey = (node / "checkpoint.vkey").read_text().strip()
    blob = b"".join(read_segment(p) for p in node.glob("*.wal*"))  # compressed once sealed
    assert PHONE.encode() not in blob and RESIDENT_ID.encode() not in blob and b"[sealed:phone:" in blob

    from middleware.audit.shredding import reveal_bytes

    allowed = reveal_bytes(store, allowed=True)
    before = export_text(audit, "jsonl-flat", vkey, reveal=allowed)
    assert PHONE in before and OTHER_PHONE in before and RESIDENT_ID in before  # an allowed reader reads it
    assert PHONE not in export_text(audit, "csv", vkey, reveal=reveal_bytes(store, allowed=False))
    bundle = tmp_path / "before.jsonl"
    bundle.write_text(export_text(audit, "jsonl", vkey))

    assert main(["audit", "erase", "u_42", str(audit), "--by", "dpo"]) == 0

    after = export_text(
        audit, "jsonl-flat", vkey, reveal=reveal_bytes(FileKeyStore(store.directory), allowed=True)
    )
    assert PHONE not in after and ERASED in after
    assert OTHER_PHONE in after  # another subject's data is untouched
    for fmt in ("csv", "cef", "ocsf"):
        text = export_text(audit, fmt, vkey, reveal=reveal_bytes(FileKeyStore(store.directory), allowed=True))
        assert PHONE not in text and ERASED in text, fmt
    # the log, its proofs and checkpoints, and a bundle exported before the erasure all still verify
    assert verify_path(audit, key=vkey).ok
    assert verify_path(bundle, key=vkey).ok
    assert main(["audit", "verify", str(audit), "--key", vkey]) == 0
    erased = [
        json.loads(line)
        for line in export_text(audit, "jsonl-flat", vkey).splitlines()
        if '"audit.erased"' in line
    ]
    assert len(erased) == 1
    assert erased[0]["detail"] == {"subject_key_id": key_id("u_42"), "by": "dpo", "key_found": True}
    assert "u_42" not in json.dumps(erased[0])

    # the CLI's export shows the same: [erased] for the subject, redacted for the others
    out = tmp_path / "flat.jsonl"
    assert main(["audit", "export", str(audit), "--format", "jsonl-flat", "--key", vkey, "-o", str(out)]) == 0
    flat = out.read_text()
    assert ERASED in flat and OTHER_PHONE not in flat and "[redacted:phone]" in flat
