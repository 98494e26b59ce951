"""A witness (C2SP tlog-witness / tlog-cosignature) co-signs only consistent checkpoints, and a
log rolled back behind what it co-signed is caught — by verify, and by the witness itself."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

import grpc
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from gateway_processes import start_gateway, write_definition

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.audit.checkpoint import Signer, load_or_create_signer
from middleware.audit.merkle import MerkleTree
from middleware.audit.witness import CosignatureVerifier, Cosigner, Witness, load_or_create_cosigner
from middleware.audit.witness_http import COSIGNED_FILE, WitnessClient, Witnessing, WitnessServer
from middleware.cli import main as cli_main
from middleware.errors import AuditCorrupted

from .helpers import SIGNER, open_log, record

ORIGIN = "agency-middleware/audit/n1"


def _tree(n: int) -> MerkleTree:
    tree = MerkleTree()
    tree.extend([hashlib.sha256(b"\x00" + bytes([i])).digest() for i in range(n)])
    return tree


def test_a_cosignature_is_cosignature_v1_as_the_spec_writes_it() -> None:
    cosigner = Cosigner("witness.example/w1")
    cp = SIGNER.sign(ORIGIN, 5, _tree(5).root())
    line = cosigner.cosign(cp, 1679315147)
    assert line.startswith("\u2014 witness.example/w1 ") and line.endswith("\n")
    blob = base64.b64decode(line.split(" ")[-1])
    name, key_id, key = cosigner.vkey.split("+", 2)
    public = base64.b64decode(key)
    assert public[0] == 0x04 and len(blob) == 4 + 8 + 64
    assert blob[:4] == hashlib.sha256(name.encode() + b"\n" + public).digest()[:4] == bytes.fromhex(key_id)
    assert struct.unpack(">Q", blob[4:12])[0] == 1679315147
    message = b"cosignature/v1\ntime 1679315147\n" + cp.body().encode()
    Ed25519PublicKey.from_public_bytes(public[1:]).verify(blob[12:], message)  # raises if not
    got, at = CosignatureVerifier(cosigner.vkey).verify(cp.note + line)
    assert (got.size, at) == (5, 1679315147)
    with pytest.raises(AuditCorrupted, match="not cosigned"):
        CosignatureVerifier(Cosigner("other").vkey).verify(cp.note + line)


def _witness(tmp_path: Path) -> Witness:
    return Witness(tmp_path / "state", Cosigner("w1"), {ORIGIN: SIGNER.verifier()}, clock=lambda: 1000.0)


def test_the_witness_follows_add_checkpoint(tmp_path: Path) -> None:
    w = _witness(tmp_path)
    t = _tree(9)
    cp4, cp9 = SIGNER.sign(ORIGIN, 4, t.root(4)), SIGNER.sign(ORIGIN, 9, t.root(9))
    assert w.add_checkpoint("old 0\n\n" + cp4.note).status == 200
    conflict = w.add_checkpoint("old 0\n\n" + cp9.note)
    assert (conflict.status, conflict.body, conflict.content_type) == (409, "4\n", "text/x.tlog.size")
    bad = [b"\x00" * 32 for _ in t.consistency_proof(4, 9)]
    assert (
        w.add_checkpoint(
            "old 4\n" + "".join(base64.b64encode(h).decode() + "\n" for h in bad) + "\n" + cp9.note
        ).status
        == 422
    )
    proof = "".join(base64.b64encode(h).decode() + "\n" for h in t.consistency_proof(4, 9))
    ok = w.add_checkpoint("old 4\n" + proof + "\n" + cp9.note)
    assert ok.status == 200 and CosignatureVerifier(w.cosigner.vkey).verify(cp9.note + ok.body)[0].size == 9
    assert w.add_checkpoint("old 12\n\n" + cp9.note).status == 400  # old past the checkpoint
    assert w.add_checkpoint("old 0\n\n" + Signer("x").sign("elsewhere", 1, t.root(1)).note).status == 404
    assert w.add_checkpoint("old 9\n\n" + Signer("audit-test").sign(ORIGIN, 9, t.root(9)).note).status == 403
    older = SIGNER.sign(ORIGIN, 3, t.root(3))
    assert w.add_checkpoint("old 9\n\n" + older.note).status == 400  # never backwards
    assert w.add_checkpoint("nonsense").status == 400
    # persisted before the answer: a restarted witness remembers
    again = _witness(tmp_path)
    assert again.add_checkpoint("old 0\n\n" + cp4.note).body == "9\n"


async def test_a_node_rolled_back_is_caught_by_verify_and_by_the_witness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cosigner = load_or_create_cosigner(tmp_path / "witness.key", "agency-witness/test")
    server = WitnessServer(Witness(tmp_path / "state", cosigner, {ORIGIN: SIGNER.verifier()})).start()
    try:
        root = tmp_path / "audit"
        log = open_log(root, checkpoint_interval=None)
        witnessing = Witnessing(log, WitnessClient(server.url))
        await log.append_batch([record(i) for i in range(6)])
        await log.checkpoint()
        assert await witnessing.submit() and witnessing.cosigned == 6
        await log.close()
        old = tmp_path / "old-copy"
        shutil.copytree(root / "n1", old, ignore=shutil.ignore_patterns("LOCK"))

        log = open_log(root, checkpoint_interval=None)
        witnessing = Witnessing(log, WitnessClient(server.url))
        await log.append_batch([record(i) for i in range(6, 20)])
        await log.checkpoint()
        assert await witnessing.submit()  # learns the size the witness holds (409), then proves from it
        assert witnessing.cosigned == log.size
        await log.close()
        assert (root / "n1" / COSIGNED_FILE).read_text().count("\u2014 ") == 2
        args = [
            "audit",
            "verify",
            str(root),
            "--key",
            SIGNER.vkey,
            "--witness",
            server.url,
            "--witness-key",
            cosigner.vkey,
        ]
        assert cli_main(args) == 0
        assert "contains the checkpoint of size" in capsys.readouterr().out

        shutil.rmtree(root / "n1")  # the rollback: the directory as it was earlier
        shutil.copytree(old, root / "n1")
        assert cli_main(args) == 1
        err = capsys.readouterr().err
        assert "rolled back: witness agency-witness/test cosigned this log at size" in err
        state = ["--witness", str(tmp_path / "state")]  # the witness's state directory works too
        assert cli_main(args[:5] + state + args[7:]) == 1

        log = open_log(root, checkpoint_interval=None)  # the rolled-back node carries on ...
        witnessing = Witnessing(log, WitnessClient(server.url))
        await log.append_batch([record(i) for i in range(30)])
        await log.checkpoint()
        assert not await witnessing.submit()  # ... and is never cosigned again
        assert witnessing.refused is not None and witnessing.refused[0] in (409, 422)
        await log.close()
    finally:
        server.close()


async def test_a_gateway_submits_its_checkpoints_to_a_witness_process(tmp_path: Path) -> None:
    """`agency audit witness` and `agency serve` with `audit.witness`: real processes."""
    signer = load_or_create_signer(tmp_path / "gw" / "keys" / "gw.key", "audit-gw")  # the gateway's key
    ring = tmp_path / "fleet.keys"
    ring.write_text(f"gw {signer.vkey}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    witness = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "middleware", "audit", "witness", "--listen", "127.0.0.1:0"),
        *("--state", str(tmp_path / "wstate"), "--signing-key", str(tmp_path / "w.key")),
        *("--keyring", str(ring), "--name", "witness.test/w1"),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert witness.stdout is not None
        line = (await asyncio.wait_for(witness.stdout.readline(), 60)).decode()
        started = re.search(r"on (http://\S+) \(verifier key: (\S+)\)", line)
        assert started, f"the witness did not start: {line!r}"
        url, wkey = started.group(1), started.group(2)
        config = write_definition(
            tmp_path / "agency.json",
            {"server": {"address": "127.0.0.1:0", "metrics_address": ""}, "audit": {"witness": url}},
        )
        gw = await start_gateway(config, "gw", tmp_path)
        cosigned = tmp_path / "gw" / "audit" / "gw" / COSIGNED_FILE
        try:
            async with grpc.aio.insecure_channel(gw.address) as channel:  # something to sign
                await agency_pb2_grpc.AgencyServiceStub(channel).Submit(
                    agency_pb2.SubmitRequest(text="Predict the weather."), timeout=30
                )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if cosigned.exists():
                    break
                await asyncio.sleep(0.05)
            assert cosigned.exists(), gw.output()
        finally:
            assert await gw.stop() == 0, gw.output()
        argv = ["audit", "verify", str(tmp_path / "gw" / "audit"), "--keyring", str(ring)]
        assert await asyncio.to_thread(cli_main, [*argv, "--witness", url, "--witness-key", wkey]) == 0
        note = cosigned.read_text()
        assert CosignatureVerifier(wkey).verify(note)[0].origin == "agency-middleware/audit/gw"
    finally:
        witness.send_signal(signal.SIGTERM)
        await asyncio.wait_for(witness.wait(), 30)
    assert witness.returncode == 0
