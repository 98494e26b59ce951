"""Signed checkpoints: C2SP tlog-checkpoint bodies in C2SP signed notes, Ed25519.

A checkpoint commits to the whole log at one size::

    agency-middleware/audit/node-a      <- origin
    1042                                <- tree size
    3q2+7w...=                          <- base64 RFC 6962 root
                                        <- blank line, then one line per signature
    — agency-audit-node-a AbCd...=      <- base64(4-byte key id || Ed25519 signature)

Keys use the signed-note text forms: the verifier key ``name+hexid+base64(0x01||pub)``
(safe to publish, pin it out of band) and the signer key
``PRIVATE+KEY+name+hexid+base64(0x01||seed)`` (keep it away from the log).
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..errors import AuditCorrupted, InvalidInput

__all__ = ["Checkpoint", "Signer", "Verifier", "load_or_create_signer", "origin_for"]

_ALG_ED25519 = b"\x01"
_DASH = "\u2014 "


def _key_id(name: str, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + _ALG_ED25519 + public).digest()[:4]


def _check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise InvalidInput.single("key_name", "must be non-empty, without spaces or '+'", what="signer")
    return name


@dataclass(frozen=True)
class Checkpoint:
    """One signed tree head: ``origin``, ``size``, ``root`` and the note text it came from."""

    origin: str
    size: int
    root: bytes
    note: str = ""

    def body(self) -> str:
        """The signed text (C2SP tlog-checkpoint body)."""
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    @classmethod
    def parse(cls, note: str) -> Checkpoint:
        """Parse a signed note; signatures are not checked here (see ``Verifier.verify``).

        Raises:
            AuditCorrupted: the text is not a checkpoint note.
        """
        body, sep, _ = note.partition("\n\n")
        lines = body.split("\n")
        try:
            if not sep or len(lines) < 3:
                raise ValueError("not a signed note")
            origin, size, root = lines[0], int(lines[1]), base64.b64decode(lines[2], validate=True)
            if not origin or size < 0 or len(root) != 32 or str(size) != lines[1]:
                raise ValueError("bad origin, size or root")
        except ValueError as exc:
            raise AuditCorrupted(f"malformed checkpoint ({exc})") from exc
        return cls(origin, size, root, note)


class Verifier:
    """Checks signed notes against one Ed25519 key given as ``name+hexid+base64key``."""

    def __init__(self, vkey: str) -> None:
        try:
            name, key_id, key = vkey.strip().split("+", 2)
            raw = base64.b64decode(key, validate=True)
            if raw[:1] != _ALG_ED25519 or len(raw) != 33:
                raise ValueError("not an Ed25519 key")
            self._public = Ed25519PublicKey.from_public_bytes(raw[1:])
            if bytes.fromhex(key_id) != _key_id(name, raw[1:]):
                raise ValueError("key id does not match the key")
        except ValueError as exc:
            raise InvalidInput.single("key", f"not a verifier key ({exc})", what="checkpoint key") from exc
        self.name = name
        self.key_id = bytes.fromhex(key_id)
        self.vkey = vkey.strip()

    def verify_signature(self, message: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's Ed25519 signature of ``message`` (a commit frame's)."""
        try:
            self._public.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def verify(self, note: str) -> Checkpoint:
        """Parse ``note`` and check that this key signed it.

        Raises:
            AuditCorrupted: malformed, or no valid signature by this key.
        """
        checkpoint = Checkpoint.parse(note)
        body, _, sigs = note.partition("\n\n")
        for line in sigs.splitlines():
            if not line.startswith(_DASH):
                continue
            name, _, b64 = line[len(_DASH) :].rpartition(" ")
            try:
                blob = base64.b64decode(b64, validate=True)
            except ValueError:
                continue
            if name != self.name or blob[:4] != self.key_id:
                continue
            try:
                self._public.verify(blob[4:], (body + "\n").encode())
            except InvalidSignature:
                raise AuditCorrupted(f"checkpoint signature by {self.name} is invalid") from None
            return checkpoint
        raise AuditCorrupted(f"checkpoint is not signed by the trusted key {self.name}")


class Signer:
    """Signs checkpoints with an Ed25519 key.

    Args:
        name: The key name shown in signatures (no spaces, no '+').
        private_key: The key; a new one is generated when omitted.
    """

    def __init__(self, name: str, private_key: Ed25519PrivateKey | None = None) -> None:
        self.name = _check_name(name)
        self._key = private_key or Ed25519PrivateKey.generate()
        self._public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._id = _key_id(name, self._public)

    @property
    def vkey(self) -> str:
        """The verifier key text to publish and pin."""
        return f"{self.name}+{self._id.hex()}+{base64.b64encode(_ALG_ED25519 + self._public).decode()}"

    def verifier(self) -> Verifier:
        """A verifier for this signer's key."""
        return Verifier(self.vkey)

    def sign(self, origin: str, size: int, root: bytes) -> Checkpoint:
        """Sign the checkpoint (origin, size, root) and return it with its note text."""
        cp = Checkpoint(origin, size, root)
        body = cp.body()
        sig = self._key.sign(body.encode())
        line = f"{_DASH}{self.name} {base64.b64encode(self._id + sig).decode()}\n"
        return Checkpoint(origin, size, root, body + "\n" + line)

    def sign_bytes(self, message: bytes) -> bytes:
        """The Ed25519 signature of ``message`` (a commit frame signs its batch this way)."""
        return self._key.sign(message)

    def skey(self) -> str:
        """The private key text (store it with mode 0600, away from the log)."""
        seed = self._key.private_bytes_raw()
        return f"PRIVATE+KEY+{self.name}+{self._id.hex()}+{base64.b64encode(_ALG_ED25519 + seed).decode()}"

    @classmethod
    def from_skey(cls, skey: str) -> Signer:
        """Load a signer from its private key text.

        Raises:
            InvalidInput: the text is not an Ed25519 signer key.
        """
        try:
            private, plus, name, _, key = skey.strip().split("+", 4)
            raw = base64.b64decode(key, validate=True)
            if (private, plus) != ("PRIVATE", "KEY") or raw[:1] != _ALG_ED25519 or len(raw) != 33:
                raise ValueError("not an Ed25519 signer key")
        except ValueError as exc:
            raise InvalidInput.single("key", f"unreadable signer key ({exc})", what="checkpoint key") from exc
        return cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))


def origin_for(node: str) -> str:
    """The checkpoint origin line of a node's log."""
    return f"agency-middleware/audit/{node}"


def default_key_path(root: str | os.PathLike[str], node: str) -> Path:
    """Where a log's checkpoint key lives by default: ``keys/<node>.key`` *beside* the audit
    directory ``root`` (``<data_dir>/keys`` for ``<data_dir>/audit``), never under it: whoever
    can copy or rewrite the audit directory must not also get the key that signs it."""
    return Path(os.path.abspath(root)).parent / "keys" / f"{node}.key"


def legacy_key_path(root: str | os.PathLike[str], node: str) -> Path:
    """Where releases before issue 14 kept the key: under the audit directory (refused now)."""
    return Path(root) / "keys" / f"{node}.key"


def key_inside(key: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether the key file ``key`` is inside the audit directory ``root`` (links resolved)."""
    k, r = Path(os.path.realpath(key)), Path(os.path.realpath(root))
    return k == r or r in k.parents


def misplaced_key_message(root: str | os.PathLike[str], node: str) -> str:
    """What an operator must do about a key found under the audit directory."""
    old, new = legacy_key_path(root, node), default_key_path(root, node)
    return (
        f"the checkpoint key {old} is inside the audit directory it signs: anyone who can copy or "
        f"rewrite the log could re-sign it. Move it out (mkdir -p {new.parent} && mv {old} {new}; "
        f"chmod 600 {new}), or set audit.checkpoint_key to a secrets path outside {root}, then start again"
    )


def load_or_create_signer(path: str | os.PathLike[str], name: str) -> Signer:
    """Load the signer key at ``path``, or create it there (mode 0600) if absent."""
    p = Path(path)
    if p.exists():
        return Signer.from_skey(p.read_text())
    signer = Signer(name)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(signer.skey() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)
    return signer
