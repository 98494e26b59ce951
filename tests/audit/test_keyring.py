"""Fleet verification: a keyring binds each node id to its pinned key; one command, a verdict per node."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from middleware.audit.checkpoint import Signer
from middleware.audit.export import export
from middleware.audit.keyring import Keyring
from middleware.audit.verify import verify_path
from middleware.audit.wal import WalAuditLog, WalOptions
from middleware.cli import main as cli_main
from middleware.errors import InvalidInput

from .helpers import record

KEYS = {node: Signer(f"audit-{node}") for node in ("gw-a", "gw-b")}


async def _fleet(root: Path) -> Path:
    for node, signer in KEYS.items():
        log = WalAuditLog(root, node, signer=signer, options=WalOptions(checkpoint_interval=None))
        await log.append_batch([record(i, node=node) for i in range(5)])
        await log.close()
    ring = root.parent / "fleet.keys"
    ring.write_text("".join(f"{node} {s.vkey}  # {node}\n" for node, s in KEYS.items()))
    return ring


async def test_one_command_verifies_a_whole_fleet_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ring = await _fleet(tmp_path / "audit")
    verdict = verify_path(tmp_path / "audit", keyring=Keyring.load(ring))
    assert verdict.ok and [n.node for n in verdict.nodes] == ["gw-a", "gw-b"]
    assert cli_main(["audit", "verify", str(tmp_path / "audit"), "--keyring", str(ring)]) == 0
    out = capsys.readouterr().out
    assert "OK   gw-a" in out and "OK   gw-b" in out and "VERIFIED" in out
    # one --key for a fleet: every other node fails (the keyring is the way)
    assert cli_main(["audit", "verify", str(tmp_path / "audit"), "--key", KEYS["gw-a"].vkey]) == 1


async def test_a_directory_of_vkey_files_is_a_keyring(tmp_path: Path) -> None:
    await _fleet(tmp_path / "audit")
    pinned = tmp_path / "pinned"
    pinned.mkdir()
    for node in KEYS:
        shutil.copy(tmp_path / "audit" / node / "checkpoint.vkey", pinned / f"{node}.vkey")
    assert verify_path(tmp_path / "audit", keyring=Keyring.load(pinned)).ok


async def test_a_node_re_signed_with_another_key_fails_alone(tmp_path: Path) -> None:
    ring = await _fleet(tmp_path / "audit")
    shutil.rmtree(tmp_path / "audit" / "gw-b")
    forger = Signer("audit-gw-b")
    log = WalAuditLog(tmp_path / "audit", "gw-b", signer=forger)
    await log.append(record(1, node="gw-b"))
    await log.close()
    verdict = verify_path(tmp_path / "audit", keyring=Keyring.load(ring))
    by = {n.node: n for n in verdict.nodes}
    assert by["gw-a"].ok and not by["gw-b"].ok and "not signed by the trusted key" in by["gw-b"].error


async def test_a_log_moved_under_another_nodes_id_fails(tmp_path: Path) -> None:
    ring = await _fleet(tmp_path / "audit")
    (tmp_path / "fleet2.keys").write_text(f"gw-a {KEYS['gw-a'].vkey}\ngw-c {KEYS['gw-a'].vkey}\n")
    shutil.copytree(tmp_path / "audit" / "gw-a", tmp_path / "audit" / "gw-c")
    shutil.rmtree(tmp_path / "audit" / "gw-b")
    verdict = verify_path(tmp_path / "audit", keyring=Keyring.load(tmp_path / "fleet2.keys"))
    by = {n.node: n for n in verdict.nodes}
    assert by["gw-a"].ok and not by["gw-c"].ok and "belongs to log" in by["gw-c"].error
    # and a node of the keyring without a log fails too
    missing = verify_path(tmp_path / "audit", keyring=Keyring.load(ring))
    assert any(n.node == "gw-b" and "no log for node gw-b" in n.error for n in missing.nodes)


async def test_export_takes_the_keyring(tmp_path: Path) -> None:
    ring = await _fleet(tmp_path / "audit")
    out = io.BytesIO()
    summary = export(tmp_path / "audit", out, "jsonl", keyring=Keyring.load(ring))
    assert summary.records == 10
    bundle = tmp_path / "b.jsonl"
    bundle.write_bytes(out.getvalue())
    assert verify_path(bundle, keyring=Keyring.load(ring)).ok
    (tmp_path / "one.keys").write_text(f"gw-a {KEYS['gw-a'].vkey}\n")
    with pytest.raises(InvalidInput, match="no key for node"):
        export(tmp_path / "audit", io.BytesIO(), "jsonl", keyring=Keyring.load(tmp_path / "one.keys"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gw-a\n", "expected '<node id> <verifier key>'"),
        ("gw-a nonsense\n", "not a verifier key"),
        ("", "no key"),
    ],
)
def test_a_bad_keyring_is_named(tmp_path: Path, text: str, message: str) -> None:
    ring = tmp_path / "ring"
    ring.write_text(text)
    with pytest.raises(InvalidInput, match=message):
        Keyring.load(ring)
    twice = tmp_path / "twice"
    twice.write_text(f"gw-a {KEYS['gw-a'].vkey}\ngw-a {KEYS['gw-a'].vkey}\n")
    with pytest.raises(InvalidInput, match="given twice"):
        Keyring.load(twice)
