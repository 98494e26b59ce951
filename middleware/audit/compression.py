"""Sealed segments, compressed: ``{seq}-{first}.wal.zst`` holds the same bytes, smaller.

A sealed segment never changes, so once sealed it is rewritten as a zstd frame of its bytes
with each frame's CRC-32C and previous chain hash zeroed — 36 bytes per frame that are
random-looking (so zstd cannot shrink them) yet follow from the content: reading restores
them (the chain from the first frame's ``prev``, kept in front of the stream, the CRC from the
frame). The result is byte for byte the segment that was sealed, so every check — CRC, chain,
indexes, commit signatures, checkpoints, Merkle roots, proofs — runs unchanged on it. Damage
to the compressed file shows as a zstd error or as a restored segment that fails those checks.

Written as ``.zst.tmp`` → fsync → rename → fsync of the directory, then the ``.wal`` goes;
a crash in between leaves both, and the ``.wal`` wins (see ``list_segments``).
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import zstandard

from ..errors import AuditCorrupted
from ._files import fsync_dir

__all__ = ["COMPRESSED_SUFFIX", "LEVEL", "compress_segment", "read_segment", "restore", "stored", "strip"]

COMPRESSED_SUFFIX = ".zst"
LEVEL = 9
"""zstd level: ~9x smaller than the frames on the demo's records at ~40 MB/s on one core,
in a background thread (zstd releases the GIL), once per 64 MB segment."""
_MAGIC = b"AUDZ1\n"
_HEADER = struct.Struct("<IIIBBHQQQ32s")
_HEADER_SIZE = _HEADER.size
_CHAIN = struct.Struct("<BQ32s32s")
_MAX_SEGMENT = 1 << 32


def strip(data: bytes) -> bytes:
    """``data`` with every frame's CRC and previous chain hash zeroed, the first ``prev`` in front."""
    out = bytearray(data)
    prev0 = data[40:72] if len(data) >= _HEADER_SIZE else bytes(32)
    off = 0
    while off + _HEADER_SIZE <= len(data):
        length = struct.unpack_from("<I", data, off + 4)[0]
        end = off + _HEADER_SIZE + length
        if end > len(data):
            break
        out[off + 8 : off + 12] = b"\0\0\0\0"
        out[off + 40 : off + 72] = bytes(32)
        off = end + (-end % 8)
    return _MAGIC + prev0 + bytes(out)


def restore(stripped: bytes) -> bytes:
    """The segment :func:`strip` was given (what cannot be walked is left as it is, to fail checks)."""
    if not stripped.startswith(_MAGIC):
        raise AuditCorrupted("not a compressed audit segment")
    prev = stripped[len(_MAGIC) : len(_MAGIC) + 32]
    data = bytearray(stripped[len(_MAGIC) + 32 :])
    from .segment import crc32c  # the framing's own CRC

    off, sha = 0, hashlib.sha256
    while off + _HEADER_SIZE <= len(data):
        length, typ, index = struct.unpack_from("<I", data, off + 4)[0], data[off + 12], 0
        end = off + _HEADER_SIZE + length
        if end > len(data):
            break
        index = struct.unpack_from("<Q", data, off + 16)[0]
        data[off + 40 : off + 72] = prev
        data[off + 8 : off + 12] = struct.pack("<I", crc32c(bytes(data[off + 12 : end])))
        leaf = sha(b"\x00" + bytes(data[off + _HEADER_SIZE : end])).digest()
        prev = sha(_CHAIN.pack(typ, index, prev, leaf)).digest()
        off = end + (-end % 8)
    return bytes(data)


def stored(path: Path) -> Path:
    """Where the segment written as ``path`` is now: itself, or compressed beside it."""
    if path.exists() or path.name.endswith(COMPRESSED_SUFFIX):
        return path
    return path.with_name(path.name + COMPRESSED_SUFFIX)


def read_segment(path: Path, limit: int | None = None) -> bytes:
    """A segment's bytes, whether it is stored plain or compressed (``limit``: at most that many).

    Raises:
        AuditCorrupted: a compressed segment that does not decompress.
    """
    if not path.name.endswith(COMPRESSED_SUFFIX) and not path.exists():
        path = stored(path)  # compressed meanwhile
    if path.name.endswith(COMPRESSED_SUFFIX):
        try:
            raw = zstandard.ZstdDecompressor().decompress(path.read_bytes(), max_output_size=_MAX_SEGMENT)
        except zstandard.ZstdError as exc:
            raise AuditCorrupted(f"compressed segment unreadable ({exc})", where=path.name) from None
        data = restore(raw)
        return data if limit is None else data[:limit]
    with open(path, "rb") as fh:
        return fh.read() if limit is None else fh.read(limit)


def compress_segment(path: Path, *, level: int = LEVEL) -> Path:
    """Replace the sealed segment ``path`` by ``path.zst`` (durably); returns the new path."""
    data = path.read_bytes()
    packed = zstandard.ZstdCompressor(level=level, write_checksum=True).compress(strip(data))
    final = path.with_name(path.name + COMPRESSED_SUFFIX)
    tmp = final.with_name(final.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(packed)
        fh.flush()
        os.fsync(fh.fileno())
    if restore(zstandard.ZstdDecompressor().decompress(packed)) != data:  # never lose a byte
        tmp.unlink()
        raise AuditCorrupted("compressing the segment would not restore it", where=path.name)
    os.rename(tmp, final)
    fsync_dir(path.parent)
    path.unlink()
    fsync_dir(path.parent)
    return final
