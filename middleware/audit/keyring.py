"""Pinned verifier keys of a fleet: each node id bound to the one key its log must be signed by.

A keyring is a file of lines ``<node id> <verifier key>`` (``#`` comments and blank lines
ignored), or a directory of ``<node id>.vkey`` files each holding one key (what
``agency audit checkpoint --json`` prints per node, or each log's ``checkpoint.vkey``, copied
somewhere the operators cannot rewrite). ``agency audit verify --keyring`` checks every node
log against its own key and the log's origin against its node id, and fails for a node of
the keyring whose log is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import InvalidInput
from .checkpoint import Verifier

__all__ = ["Keyring"]


class Keyring:
    """Node id -> the verifier its log's checkpoints and commit frames must be signed by."""

    def __init__(self, keys: dict[str, Verifier], *, source: str = "") -> None:
        self._keys = dict(keys)
        self.source = source

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Keyring:
        """Read a keyring file or directory.

        Raises:
            InvalidInput: no such file or directory, a line that is not ``node key``, a key that
                is not a verifier key, or a node given twice (naming the file and line).
        """
        p = Path(path)
        entries: list[tuple[str, str, str]] = []  # node, key text, where
        if p.is_dir():
            for f in sorted(p.glob("*.vkey")):
                entries.append((f.name[: -len(".vkey")], f.read_text(), str(f)))
        elif p.is_file():
            for n, line in enumerate(p.read_text().splitlines(), start=1):
                text = line.split("#", 1)[0].strip()
                if not text:
                    continue
                parts = text.split()
                if len(parts) != 2:
                    raise InvalidInput.single(
                        "keyring", f"{p}:{n}: expected '<node id> <verifier key>'", what="keyring"
                    )
                entries.append((parts[0], parts[1], f"{p}:{n}"))
        else:
            raise InvalidInput.single("keyring", f"{p} is neither a file nor a directory", what="keyring")
        keys: dict[str, Verifier] = {}
        for node, text, where in entries:
            if node in keys:
                raise InvalidInput.single("keyring", f"{where}: node {node!r} is given twice", what="keyring")
            try:
                keys[node] = Verifier(text)
            except InvalidInput as exc:
                raise InvalidInput.single("keyring", f"{where}: {exc}", what="keyring") from None
        if not keys:
            raise InvalidInput.single("keyring", f"{p} holds no key", what="keyring")
        return cls(keys, source=str(p))

    def get(self, node: str) -> Verifier | None:
        """The key pinned for ``node`` (None: the keyring has none)."""
        return self._keys.get(node)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._keys))

    def __len__(self) -> int:
        return len(self._keys)
