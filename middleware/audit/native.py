"""The audit log's compiled part, or None: which implementation the log runs.

``middleware.audit._native`` (``_native.c``, built by ``setup.py`` when a C compiler and
OpenSSL's headers are there) does the per-record work of a batch -- framing, CRC-32C, the leaf
and chain hashes, the Merkle reduction, checking a segment's event frames -- in C with the GIL
released, byte for byte what the pure-Python code in ``segment.py`` and ``merkle.py`` does.
Those modules use ``NATIVE`` when it is a module and their own Python when it is None: when
the extension was not built, or when ``AGENCY_PURE_PYTHON`` is set to anything but ``""`` or
``"0"`` (no compiled code of ours at all; ``make test`` runs the suite both ways).
"""

from __future__ import annotations

import os
from typing import Protocol

__all__ = ["NATIVE", "PURE_PYTHON_ENV", "Native", "implementation", "pure_python_forced"]

PURE_PYTHON_ENV = "AGENCY_PURE_PYTHON"

_Bytes = bytes | bytearray | memoryview
_Frames = list[tuple[int, int, int, int, int]]
_Batch = tuple[int, int, int, bytes, bytes, bytes, int]  # last, first, n, prev, digest, signature, offset


class Native(Protocol):
    """What ``_native`` provides (``_native.c``; the same in ``_native.pyi``)."""

    HARDWARE_CRC: int

    def crc32c(self, data: _Bytes, value: int = 0, /) -> int: ...

    def crc32c_table(self, data: _Bytes, value: int = 0, /) -> int: ...

    def leaf_hashes(self, payloads: list[bytes], /) -> tuple[bytes, bytes]: ...

    def encode_events(
        self,
        first_index: int,
        synced: int,
        time_ns: int,
        prev: bytes,
        payloads: list[bytes],
        leaves: bytes | None = None,
        version: int = 2,
        /,
    ) -> tuple[bytes, bytes, bytes]: ...

    def reduce(self, hashes: _Bytes, levels: int, /) -> bytes: ...

    def scan_events(
        self,
        buf: _Bytes,
        off: int,
        chain: bytes,
        count: int,
        batch_last: int,
        want_frames: bool,
        records: bool,
        /,
    ) -> tuple[int, bytes, int, bytes, int | None, _Frames | None, _Frames | None]: ...

    def scan_batches(
        self, buf: _Bytes, off: int, chain: bytes, count: int, want_frames: bool, records: bool, /
    ) -> tuple[int, bytes, int, bytes, int | None, _Frames | None, list[_Batch]]: ...

    def record_ok(self, payload: _Bytes, /) -> bool: ...


def pure_python_forced() -> bool:
    """Whether the environment asks for pure Python (``AGENCY_PURE_PYTHON=1``)."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def _load() -> Native | None:
    if pure_python_forced():
        return None
    try:
        from . import _native
    except ImportError:  # not built (no compiler or no OpenSSL headers): pure Python
        return None
    return _native


NATIVE = _load()
"""The compiled module, or None (pure Python)."""


def implementation() -> str:
    """``"native"`` or ``"pure"`` (for benchmarks and ``make test``'s banner)."""
    return "native" if NATIVE is not None else "pure"
