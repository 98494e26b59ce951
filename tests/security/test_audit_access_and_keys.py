"""Nobody reads what is not theirs, and the audit key never sits under the log it signs
(issue 14, items 6, 7, 9, 10).

* AuditService is an auditor's right: client and agent tokens get PERMISSION_DENIED
  (audited); ``auditor`` and ``admin`` tokens read it.
* The checkpoint key lives beside the audit directory; a key under it is refused, with
  what to do; ``agency audit verify`` without ``--key`` exits 3, not 0.
* Token and key files writable by group or others are refused.
* One name rule (case-folded) for catalog and task ownership.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2_grpc, audit_pb2, audit_pb2_grpc
from middleware.access import Principal, Role, authorize_task, same_name
from middleware.audit import AuditRecord, WalAuditLog
from middleware.audit.checkpoint import default_key_path, load_or_create_signer
from middleware.cli import main
from middleware.errors import AuditError, InvalidInput, PermissionDenied
from middleware.server.bootstrap import build_agency
from middleware.server.settings import definition_from, hash_token, read_token, read_token_hashes
from tests.security.liveness import WARRANTY, Gateway, auth


@pytest.fixture
def gw(tmp_path: Path) -> Any:
    with Gateway(tmp_path) as gateway:
        yield gateway


# ------------------------------------------------------------------ 6: audit reading


def test_clients_and_agents_may_not_read_the_audit_log(gw: Gateway) -> None:
    with gw.channel() as channel:
        agency_pb2_grpc.AgencyServiceStub(channel).Submit(WARRANTY, metadata=auth("alice"), timeout=20)
        audit = audit_pb2_grpc.AuditServiceStub(channel)
        for who in ("bob", "mallory"):
            with pytest.raises(grpc.RpcError) as info:
                list(audit.Export(audit_pb2.ExportRequest(), metadata=auth(who), timeout=10))
            assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "auditor or admin" in (info.value.details() or "")
            for call, request in (
                (audit.LatestCheckpoint, audit_pb2.LatestCheckpointRequest()),
                (audit.InclusionProof, audit_pb2.InclusionProofRequest(index=1)),
                (audit.ConsistencyProof, audit_pb2.ConsistencyProofRequest(old_size=1)),
            ):
                with pytest.raises(grpc.RpcError) as info:
                    call(request, metadata=auth(who), timeout=10)
                assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
        denied = [r for _, r in gw.audit.records() if r.rule == "PERMISSION_DENIED"]
        assert {r.detail["client"] for r in denied} == {"bob", "mallory"}


def test_auditors_and_admins_read_the_audit_log(tmp_path: Path) -> None:
    with Gateway(tmp_path, audit=WalAuditLog(tmp_path / "audit", "gw")) as gw, gw.channel() as channel:
        agency_pb2_grpc.AgencyServiceStub(channel).Submit(WARRANTY, metadata=auth("alice"), timeout=20)
        audit = audit_pb2_grpc.AuditServiceStub(channel)
        for who in ("audrey", "ops"):
            entries = list(audit.Export(audit_pb2.ExportRequest(), metadata=auth(who), timeout=10))
            assert any(b"shattered screen" in e.record for e in entries)


# ------------------------------------------------------------------ 7: where the key lives


async def test_the_default_key_is_created_beside_the_audit_directory(tmp_path: Path) -> None:
    log = WalAuditLog(tmp_path / "data" / "audit", "n1")
    await log.append(AuditRecord(event_type="task.submitted", node="n1"))
    await log.close()
    assert default_key_path(tmp_path / "data" / "audit", "n1") == tmp_path / "data" / "keys" / "n1.key"
    assert (tmp_path / "data" / "keys" / "n1.key").is_file()
    assert not (tmp_path / "data" / "audit" / "keys").exists()


def test_a_key_left_under_the_audit_directory_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    root = tmp_path / "audit"
    load_or_create_signer(root / "keys" / "n1.key", "audit-n1")  # the layout before issue 14
    with pytest.raises(AuditError) as info:
        WalAuditLog(root, "n1")
    why = str(info.value)
    assert "inside the audit directory" in why and f"mv {root / 'keys' / 'n1.key'}" in why
    assert str(tmp_path / "keys" / "n1.key") in why and "audit.checkpoint_key" in why


async def test_a_configured_key_inside_the_audit_directory_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "audit" / "secret.key"
    load_or_create_signer(key, "audit-gw")
    definition = definition_from(
        {"audit": {"directory": str(tmp_path / "audit"), "checkpoint_key": str(key)}}, env={}
    )
    with pytest.raises(InvalidInput) as info:
        await build_agency(definition)
    assert info.value.field == "audit.checkpoint_key" and "inside the audit directory" in str(info.value)


async def test_verify_without_a_pinned_key_does_not_say_verified(tmp_path: Path, capsys: Any) -> None:
    root = tmp_path / "data" / "audit"
    log = WalAuditLog(root, "n1")
    for _ in range(3):
        await log.append(AuditRecord(event_type="task.submitted", node="n1"))
    vkey = log.vkey
    await log.close()
    assert await asyncio.to_thread(main, ["audit", "verify", str(root)]) == 5
    out = capsys.readouterr().out
    assert "AUTHENTICITY NOT CHECKED" in out and "VERIFIED" not in out
    assert await asyncio.to_thread(main, ["audit", "verify", str(root), "--key", vkey]) == 0
    assert "VERIFIED" in capsys.readouterr().out


# ------------------------------------------------------------------ 9: file permissions


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_token_and_key_files_writable_by_others_are_refused(tmp_path: Path, mode: int) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ops {hash_token('t')} admin\n")
    os.chmod(tokens, mode)
    with pytest.raises(InvalidInput) as info:
        read_token_hashes(tokens)
    assert info.value.field == "auth_tokens" and "group- or world-writable" in str(info.value)
    assert f"chmod go-w {tokens}" in str(info.value)

    worker_token = tmp_path / "worker.token"
    worker_token.write_text("tok\n")
    os.chmod(worker_token, mode)
    with pytest.raises(InvalidInput, match="group- or world-writable") as info:
        read_token(worker_token)
    assert info.value.field == "token_file"

    key = tmp_path / "audit.key"
    load_or_create_signer(key, "audit-x")
    os.chmod(key, mode)
    with pytest.raises(InvalidInput, match="group- or world-writable") as info:
        definition_from({"audit": {"checkpoint_key": str(key)}}, env={})
    assert info.value.field == "audit.checkpoint_key"


def test_private_files_load(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ops {hash_token('t')} admin\n")
    os.chmod(tokens, 0o640)
    assert next(iter(read_token_hashes(tokens).values())).role is Role.ADMIN


# ------------------------------------------------------------------ 10: one name rule


def test_one_name_rule_for_catalog_and_task_ownership(tmp_path: Path) -> None:
    bob = Principal(name="Bob", role=Role.CLIENT)
    assert same_name("Bob", " bob ") and not same_name("", "")
    assert bob.owns("bob")  # catalog names are stored lower-case
    authorize_task(bob, "bob", operation="GetTask", task_id="t1")  # the same rule for tasks
    with pytest.raises(PermissionDenied):
        authorize_task(bob, "bobby", operation="GetTask", task_id="t1")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"Bob {hash_token('a')} client\nbob {hash_token('b')} client\n")
    os.chmod(tokens, 0o600)
    with pytest.raises(InvalidInput, match="differs from 'Bob' only in case"):
        read_token_hashes(tokens)
