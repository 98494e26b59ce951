"""Export audit records: JSON Lines bundles (re-verifiable offline), CSV, CEF and OCSF.

Every export first verifies each node's log (``verify.scan_node``) and refuses a bad
one; records of several nodes are merged in time order. The JSON Lines export is a
bundle: a header line, one ``log`` line per node (verifier key, every signed
checkpoint, consistency proofs between them), then one line per record carrying the
exact bytes that were hashed (and, when filtered, an inclusion proof against the
node's latest checkpoint). ``agency audit verify BUNDLE`` checks it without the log.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import functools
import heapq
import io
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import crc32c as _crc32c
import orjson

from ..errors import AuditCorrupted, InvalidInput
from ..ids import id_matches
from .checkpoint import Verifier, origin_for
from .compression import read_segment
from .keyring import Keyring
from .segment import EVENT, HEADER, HEADER_SIZE, SegmentName, crc32c, list_segments
from .verify import BUNDLE_FORMAT, NodeVerdict, find_node_dirs, record_line_prefix, scan_node

__all__ = ["ExportFilter", "ExportFormat", "ExportedRecord", "export", "iter_records"]

PRODUCT, VENDOR, VERSION = "Agency Middleware", "Agency", "0.1.0"
OCSF_VERSION = "1.8.0"


class ExportFormat(StrEnum):
    """Output formats of ``agency audit export``."""

    JSONL = "jsonl"
    CSV = "csv"
    CEF = "cef"
    OCSF = "ocsf"
    FLAT = "jsonl-flat"


@dataclass(frozen=True)
class ExportFilter:
    """Which records to export (all given conditions must hold; empty = everything).

    Attributes:
        since: Records at or after this time (UTC).
        until: Records before this time (UTC).
        trace_id: Only this trace: the full id or a prefix of at least 8 characters
            (case-insensitive, see :mod:`middleware.ids`); ``traces_seen`` tells which matched.
        goal_id: Only this goal.
        agent: Only steps involving this agent.
        event_types: Only these event types.
        tenant: Only records of this tenant (``actors.tenant``; ``""``: records without one);
            None: every tenant's.
    """

    since: datetime | None = None
    until: datetime | None = None
    trace_id: str = ""
    goal_id: str = ""
    agent: str = ""
    event_types: frozenset[str] = frozenset()
    tenant: str | None = None
    #: The trace ids ``trace_id`` (a full id or a prefix) matched so far.
    traces_seen: set[str] = field(default_factory=set, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            t = getattr(self, name)
            if t is not None and t.tzinfo is None:
                raise InvalidInput.single(
                    name, "must carry a timezone (e.g. 2026-01-01T00:00:00Z)", what="filter"
                )
        if self.since and self.until and self.until <= self.since:
            raise InvalidInput.single("until", "must be after since", what="filter")

    @property
    def empty(self) -> bool:
        return not (
            self.since
            or self.until
            or self.trace_id
            or self.goal_id
            or self.agent
            or self.event_types
            or self.tenant is not None
        )

    def matches(self, rec: dict[str, Any]) -> bool:
        """Whether a record (its JSON object) passes the filter."""
        if self.event_types and rec.get("event_type") not in self.event_types:
            return False
        if self.tenant is not None and (rec.get("actors") or {}).get("tenant", "") != self.tenant:
            return False
        if self.trace_id:
            trace = str(rec.get("trace_id") or "")
            if not id_matches(trace, self.trace_id):
                return False
            self.traces_seen.add(trace)
        if self.goal_id and rec.get("goal_id") != self.goal_id:
            return False
        if self.agent and (rec.get("actors") or {}).get("agent") != self.agent:
            return False
        if self.since or self.until:
            t = _parse_time(rec.get("time"))
            if t is None or (self.since and t < self.since) or (self.until and t >= self.until):
                return False
        return True

    def describe(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "trace_id": self.trace_id,
            "goal_id": self.goal_id,
            "agent": self.agent,
            "event_types": sorted(self.event_types),
            **({"tenant": self.tenant} if self.tenant is not None else {}),
        }


def _parse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(slots=True)
class ExportedRecord:
    """One verified record on its way out: where it is and its exact hashed bytes."""

    node: str
    index: int
    time_ns: int
    raw: bytes
    record: dict[str, Any] | None = None

    def obj(self) -> dict[str, Any]:
        return self.record if self.record is not None else json.loads(self.raw)


@dataclass
class ExportSummary:
    """What an export wrote."""

    records: int = 0
    nodes: list[NodeVerdict] = field(default_factory=list)
    #: Records a bundle left out: newer than their log's last checkpoint (signed by their
    #: commit frames, which a bundle does not carry; the next checkpoint covers them).
    left_out: int = 0


Paths = str | Path | Sequence[str | Path]


def _verified_nodes(
    path: Paths,
    key: str | None,
    verify_progress: Callable[[str], Callable[[int, int], None]] | None = None,
    keyring: Keyring | None = None,
) -> list[NodeVerdict]:
    if key and keyring is not None:
        raise InvalidInput.single("keyring", "give --key or --keyring, not both", what="audit export")
    verifier = Verifier(key) if key else None
    paths = [path] if isinstance(path, str | Path) else list(path)
    dirs: list[Path] = []
    for p in paths:
        found = find_node_dirs(p)
        if not found:
            raise InvalidInput.single("path", f"no audit log segments under {p}", what="audit export")
        dirs.extend(found)
    seen: dict[str, Path] = {}
    for d in dirs:  # each replica's log once: two copies of one node would merge as duplicates
        if d.name in seen:
            raise InvalidInput.single(
                "path", f"node {d.name} is both {seen[d.name]} and {d}", what="audit export"
            )
        seen[d.name] = d
    if keyring is not None:
        unpinned = [d.name for d in dirs if keyring.get(d.name) is None]
        if unpinned:
            raise InvalidInput.single(
                "keyring",
                f"no key for node(s) {', '.join(unpinned)} in {keyring.source}",
                what="audit export",
            )
    verdicts = [
        scan_node(
            d,
            keyring.get(d.name) if keyring is not None else verifier,
            progress=verify_progress(d.name) if verify_progress else None,
            origin=origin_for(d.name) if keyring is not None else None,
        )
        for d in dirs
    ]
    for v in verdicts:
        if not v.ok:
            raise AuditCorrupted(f"refusing to export log {v.node}: {v.error}", where=v.where)
    return verdicts


def _node_records(v: NodeVerdict, flt: ExportFilter) -> Iterator[ExportedRecord]:
    """Re-read a verified node log's events up to where verification ended; check each leaf."""
    assert v.state is not None
    tree = v.state.tree
    directory = Path(v.source)
    for name, path in list_segments(directory):
        end = v.ends.get(path.name)
        if end is None:  # not part of the verified log (left over by retention)
            continue
        data = read_segment(path, end)
        yield from _segment_records(v.node, name, data, tree.size, flt)


def _segment_records(
    node: str, name: SegmentName, data: bytes, size: int, flt: ExportFilter
) -> Iterator[ExportedRecord]:
    unpack = HEADER.unpack_from
    off, n = 0, len(data)
    plain = flt.empty
    mv = memoryview(data)
    while off + HEADER_SIZE <= n:
        _, length, crc, typ, _, _, index, _, ts, _ = unpack(data, off)
        end = off + HEADER_SIZE + length
        if typ == EVENT:
            if index > size:
                return
            if crc32c(mv[off + 12 : end]) != crc:  # the file changed since it was verified
                raise AuditCorrupted(
                    f"record {index} changed after verification", where=f"{name.filename}@{off}"
                )
            raw = data[off + HEADER_SIZE : end]
            # orjson to decide the filter (fast; the fields it reads are strings); the record
            # itself is re-parsed exactly by ``obj()`` only by the formats that need it.
            if plain or flt.matches(orjson.loads(raw)):
                yield ExportedRecord(node, index, ts, raw)
        off = end + (-end % 8)


def _plain_bundle_lines(v: NodeVerdict, summary: ExportSummary, progress, total) -> Iterator[bytes]:  # type: ignore[no-untyped-def]
    """Every record line of one node's unfiltered bundle, built straight from the segment bytes.

    The fast path of ``_jsonl`` for one node and no filter: no per-record objects, one
    chunk per 1,000 lines; the same bytes as ``record_line_prefix(...) + raw + b"}\n"``.
    """
    assert v.state is not None
    size = _signed_size(v)
    tail = b'0,"time_ns":0,"record":'
    head = record_line_prefix(v.node, 0, 0, None)[: -len(tail)]  # b'{"kind":"record",...,"index":'
    unpack, crc_of = HEADER.unpack_from, _crc32c.crc32c
    done, tick = 0, 10000  # report progress every 10,000 records, as the generic path does
    for name, path in list_segments(Path(v.source)):
        end_ok = v.ends.get(path.name)
        if end_ok is None:
            continue
        data = read_segment(path, end_ok)
        mv = memoryview(data)
        off, n = 0, len(data)
        chunk: list[bytes] = []
        add = chunk.append
        while off + HEADER_SIZE <= n:
            _, length, crc, typ, _, _, index, _, ts, _ = unpack(data, off)
            end = off + HEADER_SIZE + length
            if typ == EVENT:
                if index > size:
                    break
                if crc_of(mv[off + 12 : end]) != crc:  # the file changed since it was verified
                    raise AuditCorrupted(
                        f"record {index} changed after verification", where=f"{name.filename}@{off}"
                    )
                add(b'%s%d,"time_ns":%d,"record":%s}\n' % (head, index, ts, mv[off + HEADER_SIZE : end]))
                if len(chunk) >= 1000:
                    done += len(chunk)
                    summary.records = done
                    if progress and done >= tick:
                        progress(done, total)
                        tick = done + 10000
                    yield b"".join(chunk)
                    chunk.clear()
            off = end + (-end % 8)
        if chunk:
            done += len(chunk)
            summary.records = done
            yield b"".join(chunk)


def iter_records(
    path: Paths,
    flt: ExportFilter | None = None,
    *,
    key: str | None = None,
    keyring: Keyring | None = None,
    verify_progress: Callable[[str], Callable[[int, int], None]] | None = None,
) -> tuple[list[NodeVerdict], Iterator[ExportedRecord]]:
    """Verify every node log under ``path`` and stream their matching records merged in time order.

    Raises:
        AuditCorrupted: a log fails verification (nothing is exported from a bad log).
    """
    flt = flt or ExportFilter()
    verdicts = _verified_nodes(path, key, verify_progress, keyring)
    streams = [_node_records(v, flt) for v in verdicts]
    merged = streams[0] if len(streams) == 1 else heapq.merge(*streams, key=lambda r: r.time_ns)
    return verdicts, merged


def export(
    path: Paths,
    out: IO[bytes],
    fmt: ExportFormat | str = ExportFormat.JSONL,
    flt: ExportFilter | None = None,
    *,
    key: str | None = None,
    keyring: Keyring | None = None,
    progress: Callable[[int, int], None] | None = None,
    verify_progress: Callable[[str], Callable[[int, int], None]] | None = None,
    cef_max_bytes: int | None = None,
    reveal: Callable[[bytes], bytes] | None = None,
) -> ExportSummary:
    """Verify the log(s) under ``path`` and write the matching records to ``out``.

    Args:
        path: A node log directory or a directory of node logs, or several of them (one
            per gateway's volume, say): their logs are merged in time order.
        out: A binary stream.
        fmt: jsonl (a re-verifiable bundle), jsonl-flat (one record object per line), csv,
            cef (lines of at most ``CEF_MAX_BYTES``) or ocsf (one JSON event per line).
        flt: Which records (default: all).
        key: A pinned verifier key; default: the key stored with each log.
        keyring: Pinned keys per node id (instead of ``key``; see ``keyring.Keyring``).
        progress: Called as ``progress(done, total)`` now and then.
        verify_progress: Given a node's name, a ``progress(done_bytes, total_bytes)`` for
            the verification of its log that comes first.
        cef_max_bytes: The longest CEF line (UTF-8, without its newline), at least
            ``CEF_MIN_BYTES``; default ``CEF_MAX_BYTES`` (1024, what UDP syslog carries; a TCP
            or TLS collector takes more). ``cef`` only.
        reveal: Rewrites each record's bytes before a flat format writes them (sealed personal
            data shown as ``[redacted:...]``, ``[erased]`` or the value: ``shredding.reveal_bytes``);
            never applied to the jsonl bundle, which carries the bytes that were hashed.

    Raises:
        InvalidInput: unknown format or bad path.
        AuditCorrupted: a log fails verification.
    """
    try:
        fmt = ExportFormat(fmt)
    except ValueError:
        raise InvalidInput.single(
            "format", f"must be one of {[f.value for f in ExportFormat]}", what="export"
        ) from None
    if cef_max_bytes is not None:
        if fmt is not ExportFormat.CEF:
            raise InvalidInput.single("cef_max_bytes", "applies to the cef format only", what="export")
        if cef_max_bytes < CEF_MIN_BYTES:
            raise InvalidInput.single(
                "cef_max_bytes",
                f"must be at least {CEF_MIN_BYTES} (the default; raise it for TCP or TLS collectors)",
                what="export",
            )
    flt = flt or ExportFilter()
    verdicts, records = iter_records(path, flt, key=key, keyring=keyring, verify_progress=verify_progress)
    if reveal is not None and fmt is not ExportFormat.JSONL:
        records = (dataclasses.replace(r, raw=reveal(r.raw), record=None) for r in records)
    total = sum(v.events for v in verdicts)
    summary = ExportSummary(nodes=verdicts)
    writer = _WRITERS[fmt]
    if fmt is ExportFormat.CEF:
        writer = functools.partial(_cef, max_bytes=cef_max_bytes or CEF_MAX_BYTES)
    for chunk in writer(verdicts, records, flt, summary, progress, total):
        out.write(chunk)
    if progress:
        progress(total, total)
    return summary


_Writer = Callable[
    [
        list[NodeVerdict],
        Iterator[ExportedRecord],
        ExportFilter,
        ExportSummary,
        Callable[[int, int], None] | None,
        int,
    ],
    Iterable[bytes],
]


def _counted(
    records: Iterator[ExportedRecord],
    summary: ExportSummary,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> Iterator[ExportedRecord]:
    for i, rec in enumerate(records, start=1):
        summary.records = i
        if progress and i % 10000 == 0:
            progress(i, total)
        yield rec


def _batched(lines: Iterator[bytes], size: int = 1000) -> Iterator[bytes]:
    buf: list[bytes] = []
    for line in lines:
        buf.append(line)
        if len(buf) >= size:
            yield b"".join(buf)
            buf.clear()
    if buf:
        yield b"".join(buf)


def _jsonl(verdicts, records, flt, summary, progress, total):  # type: ignore[no-untyped-def]
    complete = flt.empty
    head = {"kind": "bundle", "format": BUNDLE_FORMAT, "complete": complete, "filter": flt.describe()}
    yield _dumps(head)
    for v in verdicts:
        assert v.state is not None
        cps = v.state.checkpoints
        tree = v.state.tree
        consistency = (
            []
            if complete  # a complete bundle rebuilds the tree: no proofs needed
            else [
                # none from an empty log's checkpoint: nothing to prove (RFC 9162 §2.1.4)
                [base64.b64encode(h).decode() for h in tree.consistency_proof(a.size, b.size)]
                if a.size
                else []
                for a, b in itertools.pairwise(cps)
            ]
        )
        yield _dumps(
            {
                "kind": "log",
                "node": v.node,
                "origin": v.state.origin,
                "vkey": v.state.verifier.vkey if v.state.verifier else "",
                "size": tree.size,
                "checkpoints": [cp.note for cp in cps],
                "consistency": consistency,
            }
        )
        if complete and v.pruned:
            leaves = tree.leaf_hashes(v.pruned)
            yield _dumps(
                {
                    "kind": "pruned",
                    "node": v.node,
                    "size": v.pruned,
                    "leaves": base64.b64encode(leaves).decode(),
                }
            )
    summary.left_out = sum(v.events - _signed_size(v) for v in verdicts)
    if complete and len(verdicts) == 1:
        yield from _plain_bundle_lines(verdicts[0], summary, progress, total)
        return
    signed = {v.node: _signed_size(v) for v in verdicts}
    records = (r for r in records if r.index <= signed[r.node])
    trees = {v.node: v.state for v in verdicts}

    def lines() -> Iterator[bytes]:
        for rec in _counted(records, summary, progress, total):
            proof = None
            if not complete:
                st = trees[rec.node]
                assert st is not None
                final = st.checkpoints[-1].size if st.checkpoints else 0
                if rec.index <= final:
                    proof = [
                        base64.b64encode(h).decode() for h in st.tree.inclusion_proof(rec.index - 1, final)
                    ]
            yield record_line_prefix(rec.node, rec.index, rec.time_ns, proof) + rec.raw + b"}\n"

    yield from _batched(lines())


def _signed_size(v: NodeVerdict) -> int:
    """Events of a node's log its last signed checkpoint covers (what a bundle can prove)."""
    assert v.state is not None
    return v.state.checkpoints[-1].size if v.state.checkpoints else v.pruned


CSV_COLUMNS = [
    "node", "index", "time", "event_type", "outcome", "component", "user", "agent", "session",
    "task_id", "trace_id", "goal_id", "rule", "event_id", "schema_version", "detail",
]  # fmt: skip


#: Leading characters that make a spreadsheet read a cell as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """``value`` safe to open in a spreadsheet: text starting with ``= + - @``, a tab or a
    CR gets a leading single quote (OWASP's rule), so it is shown as text, never run as a
    formula. Other values are unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv(verdicts, records, flt, summary, progress, total):  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)

    def lines() -> Iterator[bytes]:
        yield buf.getvalue().encode()
        for rec in _counted(records, summary, progress, total):
            o = rec.obj()
            actors = o.get("actors") or {}
            buf.seek(0)
            buf.truncate()
            w.writerow(
                [csv_cell(cell) for cell in (
                    rec.node, rec.index, o.get("time", ""), o.get("event_type", ""), o.get("outcome", ""),
                    o.get("component", ""), actors.get("user", ""), actors.get("agent", ""),
                    actors.get("session", ""), o.get("task_id", ""), o.get("trace_id", ""),
                    o.get("goal_id", ""), o.get("rule", ""), o.get("event_id", ""),
                    o.get("schema_version", ""), json.dumps(o.get("detail", {}), sort_keys=True),
                )]
            )  # fmt: skip
            yield buf.getvalue().encode()

    yield from _batched(lines())


def severity(rec: dict[str, Any]) -> int:
    """CEF severity 0-10 of a record, from its outcome and event type."""
    outcome = str(rec.get("outcome", "")).lower()
    etype = str(rec.get("event_type", ""))
    if etype.startswith("failure") or outcome in {"failure", "failed", "error"}:
        return 7
    if outcome in {"rejected", "refused", "escalated"} or etype == "human.handover":
        return 5
    return 3


def cef_header(value: Any) -> str:
    """Escape a CEF header field: backslash and pipe; newlines become spaces."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def cef_ext(value: Any) -> str:
    """Escape a CEF extension value: backslash, equals sign, newlines as \\n."""
    return (
        str(value)
        .replace("\\", "\\\\")
        .replace("=", "\\=")
        .replace("\r\n", "\\n")
        .replace("\n", "\\n")
        .replace("\r", "\\n")
    )


#: A CEF line (UTF-8, without its newline) is at most this long by default: what UDP syslog
#: (RFC 3164) carries. Longer values are cut (see ``cef_line``); the JSON Lines export keeps
#: every record whole.
CEF_MAX_BYTES = 1024
#: The shortest line limit ``export`` takes: the default (the header and the keys that are
#: never cut take ~600 bytes; a limit exists to be raised for TCP or TLS collectors).
CEF_MIN_BYTES = CEF_MAX_BYTES
#: What a cut value ends with.
CEF_CUT = "\u2026[truncated]"
#: The extension values that may be cut, the longest-growing first.
_CEF_CUTTABLE = ("msg", "cs4", "cs3", "cs1", "cs6", "cs5", "cs2", "suser", "deviceFacility", "externalId")


def cef_extensions(rec: ExportedRecord) -> dict[str, Any]:
    """The CEF extension of a record, before escaping; absent values are left out.

    Keys from the ArcSight CEF dictionary: ``rt`` (ms), ``dvchost`` (the node),
    ``deviceFacility`` (the component that wrote the record: gateway, langchain ...),
    ``suser``, ``outcome``, ``externalId`` (the event id), ``cn1`` (the record's index in
    its node log), ``cs1``-``cs6`` with their labels (trace, goal, agent, rule, session,
    task) and ``msg`` (the detail as JSON).
    """
    o = rec.obj()
    actors = o.get("actors") or {}
    t = _parse_time(o.get("time"))
    ext: dict[str, Any] = {
        "rt": int(t.timestamp() * 1000) if t else rec.time_ns // 1_000_000,
        "dvchost": rec.node,
        "deviceFacility": o.get("component", ""),
        "suser": actors.get("user", ""),
        "outcome": o.get("outcome", ""),
        "externalId": o.get("event_id", ""),
        "cn1Label": "index", "cn1": rec.index,
    }  # fmt: skip
    for n, (label, value) in enumerate(
        [
            ("trace_id", o.get("trace_id")),
            ("goal_id", o.get("goal_id")),
            ("agent", actors.get("agent")),
            ("rule", o.get("rule")),
            ("session", actors.get("session")),
            ("task_id", o.get("task_id")),
        ],
        start=1,
    ):
        if value:
            ext[f"cs{n}Label"], ext[f"cs{n}"] = label, value
    detail = o.get("detail")
    if detail:
        ext["msg"] = json.dumps(detail, sort_keys=True, ensure_ascii=False)
    return {k: v for k, v in ext.items() if v not in ("", None)}


def cef_line(rec: ExportedRecord, max_bytes: int = CEF_MAX_BYTES) -> str:
    """One CEF:0 line for a record, at most ``max_bytes`` UTF-8 bytes (0: no limit).

    Policy for long records: the longest extension values (``msg`` first) are cut and end
    with ``…[truncated]``; ``flexString1=<keys cut>`` (label ``truncated``) says which. The
    record's node (``dvchost``) and index (``cn1``) find it whole in the JSON Lines export.
    """
    o = rec.obj()
    etype = o.get("event_type", "")
    head = "|".join(
        cef_header(x)
        for x in ("CEF:0", VENDOR, PRODUCT, VERSION, etype, etype.replace(".", " "), severity(o))
    )
    ext = {k: str(v) for k, v in cef_extensions(rec).items()}

    def render() -> str:
        return head + "|" + " ".join(f"{k}={cef_ext(v)}" for k, v in ext.items())

    line = render()
    if not max_bytes or len(line.encode()) <= max_bytes:
        return line
    cut: list[str] = []
    ext["flexString1Label"], ext["flexString1"] = "truncated", ""
    for key in sorted((k for k in _CEF_CUTTABLE if k in ext), key=lambda k: -len(ext[k])):
        cut.append(key)
        ext["flexString1"] = ",".join(cut)
        excess = len(render().encode()) - max_bytes
        value = ext[key]
        while excess > 0 and value:
            # drop at least the excess in characters (each is >= 1 byte, escapes are longer)
            keep = max(0, len(value) - excess - len(CEF_CUT))
            value = value[:keep]
            ext[key] = value + CEF_CUT
            excess = len(render().encode()) - max_bytes
            if keep == 0:
                break
        if excess <= 0:
            break
    return render()


def _cef(verdicts, records, flt, summary, progress, total, max_bytes=CEF_MAX_BYTES):  # type: ignore[no-untyped-def]
    lines = (cef_line(r, max_bytes) + "\n" for r in _counted(records, summary, progress, total))
    yield from _batched(line.encode() for line in lines)


def _pruned(value: Any) -> Any:
    """``value`` without empty strings, None, and objects or lists left empty by that."""
    if isinstance(value, dict):
        out = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in ("", None, {}, [])}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def ocsf_event(rec: ExportedRecord) -> dict[str, Any]:
    """The record as an OCSF 1.8.0 API Activity event (class 6003, activity Other).

    Absent values are left out (never empty strings). ``actor`` names the user, the
    session and the agent (``app_name``); a record of the gateway itself, with none of
    them, names the product as ``app_name`` (OCSF requires one of them).
    """
    o = rec.obj()
    actors = o.get("actors") or {}
    t = _parse_time(o.get("time"))
    sev = severity(o)
    outcome = str(o.get("outcome", ""))
    failed = sev >= 5
    activity_id = 99
    actor = _pruned(
        {
            "user": {"name": actors.get("user")},
            "session": {"uid": actors.get("session")},
            "app_name": actors.get("agent"),
        }
    ) or {"app_name": PRODUCT}
    event: dict[str, Any] = _pruned(
        {
            "class_uid": 6003,
            "class_name": "API Activity",
            "category_uid": 6,
            "category_name": "Application Activity",
            "activity_id": activity_id,
            "activity_name": o.get("event_type"),
            "type_uid": 6003 * 100 + activity_id,
            "severity_id": 4 if sev >= 7 else 3 if sev >= 5 else 1,
            "time": int(t.timestamp() * 1000) if t else rec.time_ns // 1_000_000,
            "status": "Failure" if failed else "Success",
            "status_id": 2 if failed else 1,
            "status_detail": outcome,
            "message": o.get("event_type"),
            "metadata": {
                "version": OCSF_VERSION,
                "product": {"name": PRODUCT, "vendor_name": VENDOR, "version": VERSION},
                "uid": o.get("event_id"),
                "sequence": rec.index,
                "log_name": rec.node,
                "correlation_uid": o.get("trace_id"),
            },
            "api": {"operation": o.get("event_type") or "unknown", "service": {"name": o.get("component")}},
            "src_endpoint": {"hostname": o.get("node") or rec.node},
            "unmapped": {
                "goal_id": o.get("goal_id"),
                "task_id": o.get("task_id"),
                "rule": o.get("rule"),
                "schema_version": o.get("schema_version"),
                "detail": o.get("detail") or None,
            },
        }
    )
    event["actor"] = actor
    return event


def _ocsf(verdicts, records, flt, summary, progress, total):  # type: ignore[no-untyped-def]
    yield from _batched(_dumps(ocsf_event(r)) for r in _counted(records, summary, progress, total))


def _flat(verdicts, records, flt, summary, progress, total):  # type: ignore[no-untyped-def]
    """One record object per line, no bundle around it: what a SIEM's JSON input reads as is.

    Each line is the record's own JSON object with ``log_node`` and ``log_index`` (where it
    is in which node log) added first; not re-verifiable offline (use jsonl for that).
    """

    def lines() -> Iterator[bytes]:
        for rec in _counted(records, summary, progress, total):
            head = b'{"log_node":%s,"log_index":%d' % (json.dumps(rec.node).encode(), rec.index)
            body = rec.raw.strip()
            yield head + (b"," + body[1:] if body != b"{}" else b"}") + b"\n"

    yield from _batched(lines())


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


_WRITERS: dict[ExportFormat, _Writer] = {
    ExportFormat.JSONL: _jsonl,
    ExportFormat.CSV: _csv,
    ExportFormat.CEF: _cef,
    ExportFormat.OCSF: _ocsf,
    ExportFormat.FLAT: _flat,
}


def utc(dt: datetime) -> datetime:
    """Interpret a naive datetime as UTC (for CLI flags)."""
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
