"""A witness: co-signs a log's checkpoints only when they extend what it saw before.

C2SP ``tlog-witness`` (the ``add-checkpoint`` call) and ``tlog-cosignature`` (cosignature/v1,
Ed25519): a log submits each new checkpoint with an RFC 6962 consistency proof from the size
the witness last cosigned; the witness checks the log's signature (against the key pinned
for that origin), the proof, and that the size never goes back, persists the checkpoint,
and answers a timestamped cosignature line. A log rolled back to an older state can never
be cosigned again, and a verifier that asks the witness for the latest checkpoint it
cosigned (``latest``) finds a rolled-back log missing records — without anybody keeping
checkpoints by hand.

The HTTP service around it is ``witness_http``; this module is the rules and the keys.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..errors import AuditCorrupted, InvalidInput
from ._files import atomic_write
from .checkpoint import Checkpoint, Verifier
from .merkle import ProofError, verify_consistency

__all__ = ["CosignatureVerifier", "Cosigner", "Witness", "WitnessAnswer", "load_or_create_cosigner"]

_ALG_COSIGNATURE = b"\x04"
_DASH = "\u2014 "
MAX_PROOF_LINES = 63


def _key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + _ALG_COSIGNATURE + public).digest()[:4]


def _message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header line, the time line, the checkpoint body."""
    return f"cosignature/v1\ntime {timestamp}\n{body}".encode()


class Cosigner:
    """A witness key (Ed25519) that cosigns checkpoints.

    Args:
        name: The witness name (a schema-less URL, e.g. ``witness.example/w1``; no spaces or '+').
        private_key: The key; a new one when omitted.
    """

    def __init__(self, name: str, private_key: Ed25519PrivateKey | None = None) -> None:
        if not name or any(c.isspace() or c == "+" for c in name):
            raise InvalidInput.single("name", "must be non-empty, without spaces or '+'", what="witness")
        self.name = name
        self._key = private_key or Ed25519PrivateKey.generate()
        self._public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._id = _key_id(name, self._public)

    @property
    def vkey(self) -> str:
        """The witness's verifier key (signature type 0x04): give it to verifiers."""
        return f"{self.name}+{self._id.hex()}+{base64.b64encode(_ALG_COSIGNATURE + self._public).decode()}"

    def cosign(self, checkpoint: Checkpoint, timestamp: int) -> str:
        """The cosignature line (with its newline) of ``checkpoint`` at ``timestamp`` (POSIX seconds)."""
        sig = self._key.sign(_message(checkpoint.body(), timestamp))
        blob = self._id + struct.pack(">Q", timestamp) + sig
        return f"{_DASH}{self.name} {base64.b64encode(blob).decode()}\n"

    def skey(self) -> str:
        seed = self._key.private_bytes_raw()
        return (
            f"PRIVATE+KEY+{self.name}+{self._id.hex()}+{base64.b64encode(_ALG_COSIGNATURE + seed).decode()}"
        )

    @classmethod
    def from_skey(cls, text: str) -> Cosigner:
        """Load a witness key from its private key text.

        Raises:
            InvalidInput: not a witness key.
        """
        try:
            private, plus, name, _, key = text.strip().split("+", 4)
            raw = base64.b64decode(key, validate=True)
            if (private, plus) != ("PRIVATE", "KEY") or raw[:1] != _ALG_COSIGNATURE or len(raw) != 33:
                raise ValueError("not an Ed25519 witness key")
        except ValueError as exc:
            raise InvalidInput.single("key", f"unreadable witness key ({exc})", what="witness") from None
        return cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))


def load_or_create_cosigner(path: str | os.PathLike[str], name: str) -> Cosigner:
    """The witness key at ``path``, created there (mode 0600) when absent."""
    p = Path(path)
    if p.exists():
        return Cosigner.from_skey(p.read_text())
    cosigner = Cosigner(name)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p.with_name(p.name + ".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(cosigner.skey() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(p.with_name(p.name + ".tmp"), p)
    return cosigner


class CosignatureVerifier:
    """Checks a witness's cosignatures: its verifier key ``name+hexid+base64(0x04||key)``."""

    def __init__(self, vkey: str) -> None:
        try:
            name, key_id, key = vkey.strip().split("+", 2)
            raw = base64.b64decode(key, validate=True)
            if (
                raw[:1] != _ALG_COSIGNATURE
                or len(raw) != 33
                or bytes.fromhex(key_id) != _key_id(name, raw[1:])
            ):
                raise ValueError("not a cosignature/v1 key, or its id does not match")
            self._public = Ed25519PublicKey.from_public_bytes(raw[1:])
        except ValueError as exc:
            raise InvalidInput.single("witness_key", f"not a witness key ({exc})", what="witness") from None
        self.name, self.key_id = name, bytes.fromhex(key_id)

    def verify(self, note: str) -> tuple[Checkpoint, int]:
        """The checkpoint of a cosigned note and the time the witness cosigned it.

        Raises:
            AuditCorrupted: malformed, or no valid cosignature by this witness.
        """
        checkpoint = Checkpoint.parse(note)
        _, _, sigs = note.partition("\n\n")
        for line in sigs.splitlines():
            if not line.startswith(_DASH):
                continue
            name, _, b64 = line[len(_DASH) :].rpartition(" ")
            try:
                blob = base64.b64decode(b64, validate=True)
            except ValueError:
                continue
            if name != self.name or blob[:4] != self.key_id or len(blob) != 76:
                continue
            timestamp = struct.unpack(">Q", blob[4:12])[0]
            try:
                self._public.verify(blob[12:], _message(checkpoint.body(), timestamp))
            except InvalidSignature:
                raise AuditCorrupted(f"the cosignature by witness {self.name} is invalid") from None
            return checkpoint, timestamp
        raise AuditCorrupted(f"the checkpoint is not cosigned by witness {self.name}")


@dataclass(frozen=True)
class WitnessAnswer:
    """An HTTP answer of the witness: status, body, content type."""

    status: int
    body: str
    content_type: str = "text/plain; charset=utf-8"


class Witness:
    """The witness's rules (``add-checkpoint``) and its durable state: one file per log.

    Args:
        state_dir: Where the latest cosigned checkpoint of each log is kept (fsynced before
            the answer: a restarted witness remembers).
        cosigner: The witness key.
        logs: Origin -> the pinned verifier key of that log.
        clock: POSIX seconds (injectable for tests).
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        cosigner: Cosigner,
        logs: dict[str, Verifier],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dir = Path(state_dir)
        self._dir.mkdir(parents=True, exist_ok=True)
        self.cosigner, self._logs, self._clock = cosigner, dict(logs), clock
        self._lock = threading.Lock()  # check-then-persist is atomic (the spec's race)

    def _path(self, origin: str) -> Path:
        return self._dir / (urllib.parse.quote(origin, safe="") + ".checkpoint")

    def latest(self, origin: str) -> str | None:
        """The latest checkpoint this witness cosigned for ``origin`` (a note with both signatures)."""
        path = self._path(origin)
        return path.read_text() if path.exists() else None

    def add_checkpoint(self, body: str) -> WitnessAnswer:
        """Handle one ``add-checkpoint`` request body (C2SP tlog-witness)."""
        head, sep, note = body.partition("\n\n")
        lines = head.split("\n")
        try:
            if not sep or not lines[0].startswith("old "):
                raise ValueError("the body must start with 'old N', proof lines, an empty line")
            old = int(lines[0][4:])
            if old < 0 or str(old) != lines[0][4:]:
                raise ValueError("bad old size")
            proof = [base64.b64decode(x, validate=True) for x in lines[1:]]
            if len(proof) > MAX_PROOF_LINES or any(len(h) != 32 for h in proof):
                raise ValueError("bad consistency proof lines")
            checkpoint = Checkpoint.parse(note)
        except (ValueError, AuditCorrupted) as exc:
            return WitnessAnswer(400, f"bad request: {exc}\n")
        verifier = self._logs.get(checkpoint.origin)
        if verifier is None:
            return WitnessAnswer(404, f"unknown log {checkpoint.origin!r}\n")
        try:
            verifier.verify(note)
        except AuditCorrupted as exc:
            return WitnessAnswer(403, f"{exc}\n")
        if old > checkpoint.size:
            return WitnessAnswer(400, "old size is larger than the checkpoint's\n")
        with self._lock:
            known = self.latest(checkpoint.origin)
            seen = Checkpoint.parse(known) if known else None
            if (seen.size if seen else 0) != old:
                return WitnessAnswer(409, f"{seen.size if seen else 0}\n", "text/x.tlog.size")
            if seen is not None and old == checkpoint.size and seen.root != checkpoint.root:
                return WitnessAnswer(409, f"{seen.size}\n", "text/x.tlog.size")
            if seen is not None and old and old != checkpoint.size:
                try:
                    verify_consistency(old, checkpoint.size, seen.root, checkpoint.root, proof)
                except (ProofError, ValueError) as exc:
                    return WitnessAnswer(422, f"consistency proof from {old} does not verify: {exc}\n")
            elif proof:
                return WitnessAnswer(422, "no consistency proof is expected here\n")
            line = self.cosigner.cosign(checkpoint, int(self._clock()))
            atomic_write(self._path(checkpoint.origin), (note.rstrip("\n") + "\n" + line).encode())
        return WitnessAnswer(200, line)
