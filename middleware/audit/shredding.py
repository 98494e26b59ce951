"""Crypto-shredding: personal data in the log sealed under a key per subject, erased by
deleting the key.

The hash chain and the Merkle tree make the log immutable, and a subject's right to erasure
asks for the opposite. Both hold when personal data never enters the log in clear: the
personal-data guard (``middleware.guards.audit_guard``) replaces each value it finds in a
record by the value **sealed** (AES-256-GCM) under the key of the record's subject — its user,
else its session:

    [sealed:<data class>:<key id>.<base64url(nonce || ciphertext || tag)>]

The leaf hash covers that text. Erasing the subject (:meth:`SubjectKeyStore.erase`) deletes its
key: every sealed value of the subject becomes unreadable, while no byte of the log changes, so
``verify``, inclusion and consistency proofs, checkpoints and bundles stay valid. Exports show
a sealed value (:func:`reveal`) as the value to a reader allowed to see personal data who holds
the key, as ``[redacted:<class>]`` to anyone else, and as ``[erased]`` once the key is gone.

The key id is the SHA-256 of a fixed label and the subject, cut to 16 hex digits: it names the
key file and travels in sealed values, never the subject itself. Keys live in the key directory
(:class:`FileKeyStore`, ``<data-dir>/keys/subjects/`` by default, beside the audit directory,
never in it) or behind a KMS (anything implementing :class:`SubjectKeyStore`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "ERASED",
    "ERASURE_RECORD",
    "FileKeyStore",
    "MemoryKeyStore",
    "SubjectKeyStore",
    "SubjectSealer",
    "default_subject_key_dir",
    "key_id",
    "reveal",
    "reveal_bytes",
    "subject_of",
]

#: What an export shows for a value whose subject was erased.
ERASED = "[erased]"
#: The audit event type of an erasure.
ERASURE_RECORD = "audit.erased"

_LABEL = b"agency-middleware/subject-key/v1"
_SEALED = re.compile(r"\[sealed:([a-z][a-z0-9_]{0,40}):([0-9a-f]{16})\.([A-Za-z0-9_-]+)\]")
_SEALED_BYTES = re.compile(rb"\[sealed:([a-z][a-z0-9_]{0,40}):([0-9a-f]{16})\.([A-Za-z0-9_-]+)\]")


def default_subject_key_dir(audit_root: str | os.PathLike[str]) -> Path:
    """Where subjects' keys live by default: ``keys/subjects`` beside the audit directory (with
    the checkpoint key), never under it."""
    return Path(os.path.abspath(audit_root)).parent / "keys" / "subjects"


def key_id(subject: str) -> str:
    """The id of ``subject``'s key: names its key file and travels in sealed values."""
    return hashlib.sha256(_LABEL + b"\0" + subject.encode()).hexdigest()[:16]


def subject_of(record: dict[str, Any]) -> str:
    """Whose personal data a record holds: its user, else its session ('' for neither)."""
    actors = record.get("actors") or {}
    return str(actors.get("user") or actors.get("session") or "")


@runtime_checkable
class SubjectKeyStore(Protocol):
    """Where subjects' keys live (a directory, or a KMS behind these three calls)."""

    def key(self, kid: str, *, create: bool) -> bytes | None:
        """The 32-byte key ``kid`` (made when ``create`` and missing); None when there is none."""
        ...

    def erase(self, kid: str) -> bool:
        """Delete key ``kid`` for good; whether there was one."""
        ...


class MemoryKeyStore:
    """Keys in memory (tests, embedding)."""

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}

    def key(self, kid: str, *, create: bool) -> bytes | None:
        if kid not in self._keys and create:
            self._keys[kid] = AESGCM.generate_key(bit_length=256)
        return self._keys.get(kid)

    def erase(self, kid: str) -> bool:
        return self._keys.pop(kid, None) is not None


class FileKeyStore:
    """One key file per subject (``<kid>.key``, 0600) in ``directory``, kept in memory once read."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._cache: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def _path(self, kid: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{16}", kid):
            raise ValueError(f"not a subject key id: {kid!r}")
        return self.directory / f"{kid}.key"

    def key(self, kid: str, *, create: bool) -> bytes | None:
        cached = self._cache.get(kid)
        if cached is not None:
            return cached
        path = self._path(kid)
        with self._lock:
            try:
                key = path.read_bytes()
            except FileNotFoundError:
                if not create:
                    return None
                key = AESGCM.generate_key(bit_length=256)
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = path.with_suffix(".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.write(fd, key)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
                _fsync_dir(self.directory)
            if len(key) != 32:
                raise ValueError(f"{path}: a subject key is 32 bytes, this file holds {len(key)}")
            self._cache[kid] = key
            return key

    def erase(self, kid: str) -> bool:
        path = self._path(kid)
        with self._lock:
            self._cache.pop(kid, None)
            try:
                with open(path, "r+b") as fh:  # overwrite first: the bytes do not linger in the file's blocks
                    fh.write(b"\0" * 32)
                    fh.flush()
                    os.fsync(fh.fileno())
                path.unlink()
            except FileNotFoundError:
                return False
            _fsync_dir(self.directory)
            return True


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))


class SubjectSealer:
    """Seals personal data under the key of each record's subject.

    A record with no subject (no user, no session) has no key to seal under: its finds are
    redacted instead (``[redacted:<class>]``).
    """

    def __init__(self, store: SubjectKeyStore) -> None:
        self.store = store

    def seal(self, subject: str, data_class: str, value: str) -> str:
        kid = key_id(subject)
        key = self.store.key(kid, create=True)
        assert key is not None
        nonce = os.urandom(12)
        sealed = AESGCM(key).encrypt(nonce, value.encode(), f"{kid}:{data_class}".encode())
        return f"[sealed:{data_class}:{kid}.{_b64(nonce + sealed)}]"

    def replacer(self, record: dict[str, Any]) -> Callable[[str, str], str]:
        """How the finds of ``record`` are replaced (the audit guard's ``replacer``)."""
        subject = subject_of(record)
        if not subject:
            return lambda data_class, _value: f"[redacted:{data_class}]"
        return lambda data_class, value: self.seal(subject, data_class, value)


def _open(store: SubjectKeyStore | None, allowed: bool, data_class: str, kid: str, blob: str) -> str:
    if store is None:
        return f"[redacted:{data_class}]"
    key = store.key(kid, create=False)
    if key is None:
        return ERASED
    if not allowed:
        return f"[redacted:{data_class}]"
    try:
        raw = _unb64(blob)
        return AESGCM(key).decrypt(raw[:12], raw[12:], f"{kid}:{data_class}".encode()).decode()
    except (InvalidTag, ValueError, binascii.Error):
        return f"[unreadable:{data_class}]"


def reveal(text: str, store: SubjectKeyStore | None, *, allowed: bool) -> str:
    """``text`` with each sealed value shown as the value (``allowed`` and the key is there),
    ``[erased]`` (the key is gone) or ``[redacted:<class>]`` (not allowed, or no key store)."""
    if "[sealed:" not in text:
        return text
    return _SEALED.sub(lambda m: _open(store, allowed, m.group(1), m.group(2), m.group(3)), text)


def reveal_bytes(store: SubjectKeyStore | None, *, allowed: bool) -> Callable[[bytes], bytes]:
    """:func:`reveal` over a record's JSON bytes (an export's hook): each value is written as
    the inside of a JSON string, so the record stays valid JSON."""

    def sub(m: re.Match[bytes]) -> bytes:
        value = _open(store, allowed, m.group(1).decode(), m.group(2).decode(), m.group(3).decode())
        return json.dumps(value, ensure_ascii=False)[1:-1].encode()

    def hook(raw: bytes) -> bytes:
        return _SEALED_BYTES.sub(sub, raw) if b"[sealed:" in raw else raw

    return hook
