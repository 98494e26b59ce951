"""Offline verification of an audit log directory or of a JSON Lines export bundle.

``verify_path`` needs no running gateway and no private key: it re-checks every frame
(CRC-32C, chain, contiguous index), rebuilds the RFC 6962 tree, checks every signed
checkpoint against it (so consecutive checkpoints are consistent), and, for a bundle,
the inclusion and consistency proofs it carries. The verdict names the first bad
record and why.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AuditCorrupted, InvalidInput, NotFound
from .checkpoint import Checkpoint, Verifier, origin_for
from .compression import read_segment
from .keyring import Keyring
from .merkle import MerkleTree, ProofError, leaf_hash, verify_consistency, verify_inclusion
from .segment import (
    EVENT,
    HEADER,
    HEADER_SIZE,
    ChainState,
    SegmentName,
    event_offset,
    find_promised_frame,
    list_segments,
    load_pruned,
    settle_signatures,
)
from .segment_pool import check_segments
from .witness import CosignatureVerifier

__all__ = [
    "BUNDLE_FORMAT",
    "NodeVerdict",
    "Verdict",
    "find_node_dirs",
    "node_of",
    "record_line_prefix",
    "scan_node",
    "verify_path",
]

BUNDLE_FORMAT = "agency-audit-bundle/1"
VKEY_FILE = "checkpoint.vkey"
CHECKPOINT_FILE = "checkpoint"


@dataclass
class NodeVerdict:
    """The result for one node's log.

    Attributes:
        node: The node id.
        source: The directory or bundle it came from.
        events: Events verified.
        checkpoints: Signed checkpoints verified.
        error: Why verification failed ("" when it passed).
        where: The first bad record (segment file and offset, or bundle line).
        warnings: Facts that do not fail verification (a torn tail, unsigned trailing events).
    """

    node: str
    source: str
    events: int = 0
    checkpoints: int = 0
    error: str = ""
    where: str = ""
    warnings: list[str] = field(default_factory=list)
    pruned: int = 0
    state: ChainState | None = field(default=None, repr=False)
    ends: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.error

    def describe(self) -> str:
        """One line for humans."""
        if self.ok:
            counts = f"{self.events} events, {self.checkpoints} signed checkpoints"
            return f"OK   {self.node}: {counts} ({self.source})"
        return f"FAIL {self.node}: {self.error} at {self.where} ({self.source})"


@dataclass
class Verdict:
    """The result for a whole directory (every node) or bundle."""

    nodes: list[NodeVerdict]

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and all(n.ok for n in self.nodes)

    @property
    def first_failure(self) -> NodeVerdict | None:
        return next((n for n in self.nodes if not n.ok), None)


def find_node_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """Node log directories at ``path``: itself if it holds segments, else its sub-directories that do."""
    p = Path(path)
    if not p.exists():
        raise NotFound(f"no audit log at {p}")
    if not p.is_dir():
        raise InvalidInput.single("path", f"{p} is not a directory", what="audit log")
    if any(SegmentName.parse(c.name) for c in p.iterdir()):
        return [p]
    return sorted(
        c for c in p.iterdir() if c.is_dir() and any(SegmentName.parse(x.name) for x in c.iterdir())
    )


def scan_node(
    directory: Path,
    verifier: Verifier | None,
    *,
    trusted: Checkpoint | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    origin: str | None = None,
) -> NodeVerdict:
    """Verify one node's log directory without modifying it (``workers``: see ``check_segments``).

    ``progress(done_bytes, total_bytes)`` is called after each segment; ``origin``: the log
    must be this one (a keyring binds a key to a node id, hence to its origin).
    """
    v = NodeVerdict(node=directory.name, source=str(directory))
    if verifier is None:
        vkey = directory / VKEY_FILE
        if not vkey.exists():
            v.error, v.where = "no verifier key (pass the published key)", str(vkey)
            return v
        verifier = Verifier(vkey.read_text())
    state = ChainState(verifier=verifier, check_records=True, origin=origin)
    v.state = state
    # Read the published checkpoint before the segments: on a live log it may only ever lag them.
    cp_file = directory / CHECKPOINT_FILE
    cp_text = cp_file.read_text() if cp_file.exists() else None
    try:
        pruned, segments = load_pruned(directory, state, list_segments(directory))
        if pruned:
            v.warnings.append(f"events 1..{pruned} removed by retention (their leaf hashes are kept)")
        v.pruned = pruned
        sizes = {p.name: p.stat().st_size for _, p in segments} if progress else {}
        total, done = sum(sizes.values()), 0
        for i, checked in enumerate(check_segments(segments, state, workers=workers)):
            if progress:
                done += sizes.get(checked.path.name, 0)
                progress(done, total)
            path, end, torn = checked.path, checked.end, checked.torn
            last = i == len(segments) - 1
            if checked.unsigned is not None:
                bad = checked.unsigned
                if not last:
                    raise AuditCorrupted(f"{bad.message} in a sealed segment", where=bad.where) from None
                raise AuditCorrupted(_unsigned_text(read_segment(path), bad.offset), where=bad.where)
            if torn is not None:
                if not last:
                    raise AuditCorrupted(f"{torn.message} in a sealed segment", where=torn.where) from None
                data = read_segment(path)
                promised = find_promised_frame(data, torn.offset)
                if promised is not None:
                    raise AuditCorrupted(
                        f"{torn.message}; a later frame (offset {promised}) shows this had been synced",
                        where=torn.where,
                    ) from None
                end = torn.offset
                v.warnings.append(
                    f"torn tail of {len(data) - torn.offset} bytes at {torn.where} ({torn.message}): "
                    "never acknowledged, cut on next open"
                )
            v.ends[path.name] = end
            if not last and not state.sealed:
                raise AuditCorrupted("segment not sealed but not the last one", where=path.name)
        unsigned_from = settle_signatures(state)
        if unsigned_from is not None and segments:
            data = read_segment(segments[-1][1], v.ends.get(segments[-1][1].name))
            at = event_offset(data, unsigned_from)
            raise AuditCorrupted(
                _unsigned_text(data, at or 0, first=unsigned_from, legacy=True),
                where=f"{segments[-1][1].name}@{at}" if at is not None else segments[-1][1].name,
            )
        _check_claims(cp_file, cp_text, state, verifier, trusted)
    except AuditCorrupted as exc:
        v.error, v.where = _split(exc)
    v.events, v.checkpoints = state.size, len(state.checkpoints)
    if v.ok:
        signed = state.checkpoints[-1].size if state.checkpoints else 0
        if signed < state.size:
            v.warnings.append(
                f"{state.size - signed} events after the last signed checkpoint (signed by their "
                "commit frames; the next checkpoint covers them)"
            )
        if not segments:
            v.warnings.append("empty log")
    return v


def _unsigned_text(data: bytes, offset: int, *, first: int = 0, legacy: bool = False) -> str:
    """Why the events from ``offset`` on fail: nothing signed them."""
    count, off = 0, offset
    while off + HEADER_SIZE <= len(data):
        fields = HEADER.unpack_from(data, off)
        if fields[3] == EVENT:
            count += 1
            first = first or fields[6]
        end = off + HEADER_SIZE + fields[1]
        off = end + (-end % 8)
    what = "after the last checkpoint (old format)" if legacy else "that no commit frame announces"
    return (
        f"{count} event(s) from index {first} are not signed by the log's key ({what}): forged, or "
        "cut off before they were acknowledged; a gateway opening the log sets them aside"
    )


def _check_claims(
    cp_file: Path, cp_text: str | None, state: ChainState, verifier: Verifier, trusted: Checkpoint | None
) -> None:
    claims: list[tuple[Checkpoint, str]] = []
    if cp_text is not None:
        claims.append((verifier.verify(cp_text), str(cp_file)))
    if trusted is not None and trusted.origin == state.origin:
        claims.append((trusted, "the trusted checkpoint"))
    for cp, where in claims:
        if cp.size > state.size:
            raise AuditCorrupted(
                f"records missing: a signed checkpoint covers {cp.size} events, the log has {state.size}",
                where=where,
            )
        if cp.root != state.tree.root(cp.size):
            raise AuditCorrupted(
                f"the records do not match the signed checkpoint of size {cp.size}", where=where
            )


def _split(exc: AuditCorrupted) -> tuple[str, str]:
    where = getattr(exc, "where", "")
    msg = exc.message
    suffix = f" at {where}"
    if where and msg.endswith(suffix):
        msg = msg[: -len(suffix)]
    return msg, where


def verify_path(
    path: str | os.PathLike[str],
    *,
    key: str | None = None,
    keyring: Keyring | None = None,
    trusted_checkpoint: str | None = None,
    progress: Callable[[str], Callable[[int, int], None]] | None = None,
    witnessed: Callable[[str], str | None] | None = None,
    witness_key: CosignatureVerifier | None = None,
) -> Verdict:
    """Verify a log directory (one node or a directory of nodes) or a JSON Lines bundle.

    Args:
        path: The directory or bundle file.
        key: The pinned verifier key (``name+id+base64``); default: the key stored with
            each log or in the bundle (which proves integrity only against that key).
        keyring: Pinned keys per node id (instead of ``key``): every node log is checked
            against its own key and origin, and a node of the keyring without a log fails.
        trusted_checkpoint: A checkpoint note obtained out of band; the log must contain it.
        progress: Given a node's name, a ``progress(done_bytes, total_bytes)`` for its log.
        witnessed: Given a log's origin, the latest checkpoint a witness cosigned for it (None:
            none): each log must contain it — a log rolled back behind it fails.
        witness_key: The witness's verifier key (required with ``witnessed``).

    Raises:
        InvalidInput: the path is neither a log directory nor a bundle, or the key is malformed.
    """
    if witnessed is not None and witness_key is None:
        raise InvalidInput.single("witness_key", "required to check a witness's checkpoints", what="verify")
    if key and keyring is not None:
        raise InvalidInput.single("keyring", "give --key or --keyring, not both", what="audit verify")
    verifier = Verifier(key) if key else None
    trusted = None
    if trusted_checkpoint:
        trusted = Checkpoint.parse(trusted_checkpoint)
        signer = verifier or (keyring.get(node_of(trusted.origin)) if keyring else None)
        if signer is not None:
            trusted = signer.verify(trusted_checkpoint)
    p = Path(path)
    if p.is_file():
        verdict = _verify_bundle(p, verifier, trusted, keyring)
    else:
        nodes = find_node_dirs(p)
        if not nodes:
            raise InvalidInput.single("path", f"no audit log segments under {p}", what="audit log")
        verdict = Verdict(
            [
                _scan_pinned(d, verifier, keyring, trusted, progress(d.name) if progress else None)
                for d in nodes
            ]
        )
        _trusted_found(verdict, trusted, [v.state.origin if v.state else None for v in verdict.nodes], p)
        if witnessed is not None and witness_key is not None:
            for v in verdict.nodes:
                if v.ok and v.state is not None and v.state.origin:
                    _check_witnessed(v, witnessed(v.state.origin), witness_key)
    if keyring is not None:
        seen = {n.node for n in verdict.nodes}
        verdict.nodes.extend(
            NodeVerdict(
                node=n, source=str(p), error=f"no log for node {n} (pinned in the keyring)", where=str(p)
            )
            for n in keyring
            if n not in seen
        )
    return verdict


def _check_witnessed(v: NodeVerdict, note: str | None, witness: CosignatureVerifier) -> None:
    """The log must contain the latest checkpoint the witness cosigned for it."""
    state = v.state
    assert state is not None and state.verifier is not None
    if note is None:
        v.warnings.append(f"the witness {witness.name} has cosigned no checkpoint of this log yet")
        return
    where = f"the checkpoint witness {witness.name} cosigned"
    try:
        cp, at = witness.verify(note)
        state.verifier.verify(note)
    except AuditCorrupted as exc:
        v.error, v.where = exc.message, where
        return
    if cp.size > state.size:
        v.error = (
            f"rolled back: witness {witness.name} cosigned this log at size {cp.size} (time {at}), "
            f"the log has {state.size} events"
        )
        v.where = where
    elif cp.root != state.tree.root(cp.size):
        v.error, v.where = (
            f"the records do not match the checkpoint of size {cp.size} the witness cosigned",
            where,
        )
    else:
        v.warnings.append(f"contains the checkpoint of size {cp.size} witness {witness.name} cosigned")


def node_of(origin: str) -> str:
    """The node id in a log's checkpoint origin (``agency-middleware/audit/<node>``)."""
    return origin.rsplit("/", 1)[-1]


def _scan_pinned(
    directory: Path,
    verifier: Verifier | None,
    keyring: Keyring | None,
    trusted: Checkpoint | None,
    progress: Callable[[int, int], None] | None,
) -> NodeVerdict:
    if keyring is None:
        return scan_node(directory, verifier, trusted=trusted, progress=progress)
    pinned = keyring.get(directory.name)
    if pinned is None:
        return NodeVerdict(
            node=directory.name,
            source=str(directory),
            error=f"no key for node {directory.name} in the keyring {keyring.source}",
            where=str(directory),
        )
    return scan_node(directory, pinned, trusted=trusted, progress=progress, origin=origin_for(directory.name))


def _trusted_found(
    verdict: Verdict, trusted: Checkpoint | None, origins: list[str | None], path: Path
) -> None:
    if trusted is not None and trusted.origin not in origins:
        verdict.nodes.append(
            NodeVerdict(
                node="?",
                source=str(path),
                error=f"no log for the trusted checkpoint's origin {trusted.origin!r}",
                where=str(path),
            )
        )


# ---------------------------------------------------------------------- bundles


def record_line_prefix(node: str, index: int, time_ns: int, proof: list[str] | None) -> bytes:
    """The bytes a bundle record line starts with; the record's exact hashed bytes follow, then ``}``."""
    head = _node_head(node)
    if proof is None:
        return b'%s%d,"time_ns":%d,"record":' % (head, index, time_ns)
    proof_json = json.dumps(proof, separators=(",", ":")).encode()
    return b'%s%d,"time_ns":%d,"proof":%s,"record":' % (head, index, time_ns, proof_json)


@functools.lru_cache(maxsize=256)
def _node_head(node: str) -> bytes:
    return b'{"kind":"record","node":%s,"index":' % json.dumps(node).encode()


@dataclass
class _BundleNode:
    verdict: NodeVerdict
    verifier: Verifier
    complete: bool
    checkpoints: list[Checkpoint]
    origin: str = ""
    tree: MerkleTree = field(default_factory=MerkleTree)
    last_index: int = 0


def _verify_bundle(
    path: Path, pinned: Verifier | None, trusted: Checkpoint | None, keyring: Keyring | None = None
) -> Verdict:
    nodes: dict[str, _BundleNode] = {}
    order: list[NodeVerdict] = []
    try:
        lines = _lines(path)
        _, first = next(lines, (0, b""))
        head = json.loads(first) if first else {}
        if head.get("kind") != "bundle" or head.get("format") != BUNDLE_FORMAT:
            raise InvalidInput.single(
                "path", f"{path} is not an audit bundle ({BUNDLE_FORMAT})", what="bundle"
            )
    except ValueError as exc:
        raise InvalidInput.single("path", f"{path} is not an audit bundle ({exc})", what="bundle") from None
    complete = bool(head.get("complete"))
    for lineno, line in lines:
        where = f"{path.name}:{lineno}"
        try:
            obj = json.loads(line)
            kind = obj.get("kind")
            if kind == "log":
                key = keyring.get(str(obj["node"])) if keyring is not None else pinned
                bn = _open_bundle_node(obj, key, complete, path, where)
                if keyring is not None and key is None:
                    bn.verdict.error = f"no key for node {obj['node']} in the keyring {keyring.source}"
                    bn.verdict.where = where
                elif keyring is not None and obj.get("origin") != origin_for(str(obj["node"])):
                    bn.verdict.error = (
                        f"log {obj['node']} has the origin of another node: {obj.get('origin')!r}"
                    )
                    bn.verdict.where = where
                nodes[bn.verdict.node] = bn
                order.append(bn.verdict)
                continue
            bn = nodes[obj["node"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            order.append(
                NodeVerdict(node="?", source=str(path), error=f"unreadable line ({exc})", where=where)
            )
            break
        if not bn.verdict.ok:
            continue
        try:
            if kind == "record":
                _bundle_record(bn, obj, line, where)
            elif kind == "pruned":
                _bundle_pruned(bn, obj, where)
            else:
                raise AuditCorrupted(f"unknown line kind {kind!r}", where=where)
        except AuditCorrupted as exc:
            bn.verdict.error, bn.verdict.where = _split(exc)
    for bn in nodes.values():
        if bn.verdict.ok:
            try:
                _finish_bundle_node(bn, trusted if trusted and trusted.origin == bn.origin else None, path)
            except AuditCorrupted as exc:
                bn.verdict.error, bn.verdict.where = _split(exc)
    verdict = Verdict(order)
    _trusted_found(verdict, trusted, [bn.origin for bn in nodes.values()], path)
    return verdict


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            yield lineno, line.rstrip(b"\n")


def _open_bundle_node(
    obj: dict[str, Any], pinned: Verifier | None, complete: bool, path: Path, where: str
) -> _BundleNode:
    verdict = NodeVerdict(node=str(obj["node"]), source=str(path))
    verifier = pinned or Verifier(obj["vkey"])
    cps: list[Checkpoint] = []
    try:
        for note in obj.get("checkpoints", []):
            cp = verifier.verify(note)
            if cp.origin != obj["origin"]:
                raise AuditCorrupted(f"checkpoint for log {cp.origin!r}, not {obj['origin']!r}")
            cps.append(cp)
        for a, b, proof in zip(cps, cps[1:], obj.get("consistency", []), strict=False):
            if a.size == 0:  # an empty log's checkpoint: every tree extends it, nothing to prove
                if proof:
                    raise AuditCorrupted("a consistency proof from the empty tree")
                continue
            verify_consistency(a.size, b.size, a.root, b.root, [base64.b64decode(p) for p in proof])
        if len(cps) > 1 and len(obj.get("consistency", [])) != len(cps) - 1 and not complete:
            raise AuditCorrupted("consistency proofs between checkpoints are missing")
        if any(b.size < a.size for a, b in itertools.pairwise(cps)):
            raise AuditCorrupted("checkpoints go backwards")
    except AuditCorrupted as exc:
        verdict.error, verdict.where = exc.message, where
    except (ProofError, ValueError) as exc:
        verdict.error, verdict.where = f"checkpoints are not consistent ({exc})", where
    verdict.checkpoints = len(cps)
    return _BundleNode(verdict, verifier, complete, cps, origin=str(obj["origin"]))


def _bundle_pruned(bn: _BundleNode, obj: dict[str, Any], where: str) -> None:
    if bn.last_index or not bn.complete:
        raise AuditCorrupted(
            "pruned leaf hashes must come before the records of a complete bundle", where=where
        )
    leaves = base64.b64decode(obj["leaves"])
    size = int(obj["size"])
    if len(leaves) != 32 * size:
        raise AuditCorrupted("pruned leaf hashes do not match the pruned size", where=where)
    bn.tree.extend([leaves[i : i + 32] for i in range(0, len(leaves), 32)])
    bn.last_index = size
    bn.verdict.warnings.append(f"events 1..{size} removed by retention (leaf hashes only)")


def _bundle_record(bn: _BundleNode, obj: dict[str, Any], line: bytes, where: str) -> None:
    index, time_ns = obj["index"], obj["time_ns"]
    proof = obj.get("proof")
    prefix = record_line_prefix(bn.verdict.node, index, time_ns, proof)
    if not (line.startswith(prefix) and line.endswith(b"}")):
        raise AuditCorrupted(f"record {index}: line is not in bundle form", where=where)
    leaf = leaf_hash(line[len(prefix) : -1])
    if bn.complete:
        if index != bn.last_index + 1:
            raise AuditCorrupted(f"record {index} where {bn.last_index + 1} was expected", where=where)
        bn.tree.append(leaf)
    else:
        if index <= bn.last_index:
            raise AuditCorrupted(f"record {index} out of order", where=where)
        if not bn.checkpoints:
            raise AuditCorrupted("no signed checkpoint to prove records against", where=where)
        final = bn.checkpoints[-1]
        if proof is None:
            raise AuditCorrupted(
                f"record {index} is not covered by a signed checkpoint (no inclusion proof)", where=where
            )
        else:
            try:
                verify_inclusion(
                    leaf, index - 1, final.size, [base64.b64decode(p) for p in proof], final.root
                )
            except (ProofError, ValueError) as exc:
                raise AuditCorrupted(f"record {index}: inclusion proof fails ({exc})", where=where) from None
    bn.last_index = index
    bn.verdict.events += 1


def _finish_bundle_node(bn: _BundleNode, trusted: Checkpoint | None, path: Path) -> None:
    here = f"{path.name} (log {bn.verdict.node})"
    claims = list(bn.checkpoints) + ([trusted] if trusted else [])
    if bn.complete:
        prev = 0
        for cp in sorted(claims, key=lambda c: c.size):
            if cp.size > bn.tree.size:
                raise AuditCorrupted(
                    f"records missing: a signed checkpoint covers {cp.size} events, "
                    f"the bundle has {bn.tree.size}",
                    where=here,
                )
            if cp.root != bn.tree.root(cp.size):
                raise AuditCorrupted(
                    f"records {prev + 1}..{cp.size} do not match the signed checkpoint of size {cp.size}: "
                    "one of them was altered",
                    where=f"{here}, records {prev + 1}..{cp.size}",
                )
            prev = cp.size
        signed = bn.checkpoints[-1].size if bn.checkpoints else 0
        if signed < bn.tree.size:
            raise AuditCorrupted(
                f"records {signed + 1}..{bn.tree.size} are not covered by a signed checkpoint",
                where=f"{here}, records {signed + 1}..{bn.tree.size}",
            )
    elif trusted is not None and bn.checkpoints:
        raise AuditCorrupted("a trusted checkpoint can only be checked against a complete bundle", where=here)
