"""``agency audit export|verify|checkpoint|prove``: the audit log, offline."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from . import audit_erase
from ._progress import Progress, add_progress_option, progress_wanted
from ._text import plural
from .exit_codes import CHECK_FAILED, NOT_AUTHENTICATED, NOTHING_FOUND, OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "audit",
        help="export, verify and prove the audit log",
        description="Work with the write-ahead audit log offline: export it, verify it (CRCs, chain, "
        "Merkle roots against signed checkpoints), print checkpoints, produce RFC 9162 proofs.",
    )
    cmds = p.add_subparsers(dest="audit_command", metavar="SUBCOMMAND", required=True)

    def where(c: argparse.ArgumentParser) -> None:
        c.add_argument(
            "path",
            nargs="?",
            type=Path,
            help="a node log directory or an audit directory of node logs "
            "(default: $AGENCY_DATA_DIR/audit or ./agency-data/audit)",
        )
        c.add_argument("--key", help="the published verifier key (text or a file holding it); pin it")
        c.add_argument("--json", action="store_true", help="print JSON instead of text")

    def keyring(c: argparse.ArgumentParser) -> None:
        c.add_argument(
            "--keyring",
            type=Path,
            help="pinned keys of a fleet: a file of '<node id> <verifier key>' lines or a directory of "
            "<node id>.vkey files; every node log is checked against its own key (instead of --key)",
        )

    ex = cmds.add_parser(
        "export",
        help="export records (jsonl bundle, csv, cef, ocsf)",
        description="Verify every node log, then write the matching records merged in time order. "
        "Several paths (one per gateway's audit volume) are merged the same way. "
        "jsonl is a bundle 'agency audit verify' can check without the log. Exit status 3 (with a "
        "warning) when the filters select no record.",
    )
    ex.add_argument(
        "path",
        nargs="*",
        type=Path,
        help="node log directories or audit directories of node logs, one or more "
        "(default: $AGENCY_DATA_DIR/audit or ./agency-data/audit)",
    )
    ex.add_argument("--key", help="the published verifier key (text or a file holding it); pin it")
    keyring(ex)
    ex.add_argument("--format", choices=["jsonl", "jsonl-flat", "csv", "cef", "ocsf"], default="jsonl")
    ex.add_argument(
        "--cef-max-bytes",
        type=int,
        default=None,
        metavar="N",
        help="cef only: the longest line in bytes, longer values cut with a marker (default and "
        "least 1024, what UDP syslog carries; raise it for a TCP or TLS collector)",
    )
    ex.add_argument("--since", help="records at or after this time (ISO 8601; UTC if no zone)")
    ex.add_argument("--until", help="records before this time (ISO 8601; UTC if no zone)")
    ex.add_argument("--trace", default="", help="only this trace id (or its first 8+ characters)")
    ex.add_argument("--goal", default="", help="only this goal id")
    ex.add_argument("--agent", default="", help="only steps involving this agent")
    ex.add_argument("--event-type", action="append", default=[], help="only this event type (repeatable)")
    ex.add_argument(
        "--tenant",
        default=None,
        help="only this tenant's records (actors.tenant; '' for the records without one)",
    )
    ex.add_argument("--output", "-o", type=Path, help="write here (default: stdout)")
    ex.add_argument(
        "--subject-keys",
        type=Path,
        help="personal data sealed in the log (docs/security.md): the subject key directory "
        "(default: keys/subjects beside the audit directory); flat formats show [redacted:<class>], "
        "or [erased] once a subject was erased; the jsonl bundle keeps the sealed bytes",
    )
    ex.add_argument(
        "--reveal-personal-data",
        action="store_true",
        help="show sealed personal data in clear in flat formats (needs the subject keys: an admin's or "
        "an auditor's whose role allows it)",
    )
    add_progress_option(ex)
    ex.set_defaults(handler=_export)

    ve = cmds.add_parser(
        "verify",
        help="verify a log directory or an export bundle",
        description="Check CRCs, the hash chain, contiguous indexes, Merkle roots against every signed "
        "checkpoint and proofs in bundles. Exit status: 0 verified against the pinned --key; 1 a "
        "failure (the first bad record is named); 2 bad arguments; 3 nothing to verify (no log at "
        "the path); 5 intact, but no --key was pinned, so who signed the checkpoints was NOT checked.",
    )
    where(ve)
    keyring(ve)
    add_progress_option(ve)
    ve.add_argument("--checkpoint", type=Path, help="a checkpoint published earlier: the log must contain it")
    ve.add_argument(
        "--witness",
        help="a witness (its URL, or its state directory): every log must contain the latest checkpoint "
        "it cosigned for it, so a log rolled back behind it fails; needs --witness-key",
    )
    ve.add_argument("--witness-key", help="the witness's verifier key (text or a file holding it)")
    ve.set_defaults(handler=_verify)

    cp = cmds.add_parser("checkpoint", help="print the latest signed checkpoint of each node log")
    where(cp)
    cp.set_defaults(handler=_checkpoint)

    pr = cmds.add_parser(
        "prove",
        help="print an inclusion or consistency proof (JSON)",
        description="--index I [--size N]: inclusion proof of record I; --old M [--size N]: consistency "
        "proof from size M. N defaults to the latest checkpoint's size.",
    )
    where(pr)
    pr.add_argument("--node", help="which node's log (needed when there are several)")
    mode = pr.add_mutually_exclusive_group(required=True)
    mode.add_argument("--index", type=int, help="1-based record index")
    mode.add_argument("--old", type=int, help="older tree size")
    pr.add_argument("--size", type=int, default=0, help="tree size to prove against")
    pr.set_defaults(handler=_prove)

    wi = cmds.add_parser(
        "witness",
        help="run a witness that co-signs the gateways' checkpoints (C2SP tlog-witness)",
        description="Serve the C2SP tlog-witness add-checkpoint call over HTTP for the logs of a "
        "keyring: a checkpoint is co-signed (cosignature/v1, Ed25519) only if the log's key signed it "
        "and a consistency proof shows it extends the last one co-signed for that log, so a log "
        "rolled back can never be co-signed again. GET /checkpoint?origin=O gives the latest one "
        "co-signed (what 'agency audit verify --witness' checks each log against). Gateways submit "
        "with audit.witness: URL in their definition file. Runs until SIGTERM or Ctrl-C.",
    )
    wi.add_argument("--listen", default="127.0.0.1:8460", help="host:port (port 0: any free port)")
    wi.add_argument(
        "--state", type=Path, required=True, help="where the latest co-signed checkpoints are kept"
    )
    wi.add_argument(
        "--signing-key",
        type=Path,
        required=True,
        help="the witness's signing key file (created, mode 0600, if absent); keep it away from the state",
    )
    wi.add_argument("--name", default="agency-witness", help="the witness's name in its co-signatures")
    keyring(wi)
    wi.set_defaults(handler=_witness)

    sh = cmds.add_parser(
        "ship",
        help="stream records to a SIEM over syslog (RFC 5424, TCP or TLS), at least once",
        description="Send every verified record of the node logs under PATH to a syslog collector as "
        "RFC 5424 messages, octet-counted (RFC 6587), over TCP or TLS; MSG is the record as CEF, OCSF or "
        "JSON, the structured data [agency@32473 node=... index=...] names it. Records go in rounds: a "
        "round counts as delivered once the collector has read it all and closed the connection, and "
        "only then does the node's cursor under --state move; a failed round is sent again, so nothing "
        "is lost and at most one round (--batch records) arrives twice, identifiable by node and index. "
        "With --follow, keeps shipping as the logs grow (through collector and gateway restarts) until "
        "SIGTERM or Ctrl-C.",
    )
    sh.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="an audit directory of node logs (default: $AGENCY_DATA_DIR/audit or ./agency-data/audit)",
    )
    sh.add_argument("--to", required=True, help="the collector: tcp://HOST:PORT or tls://HOST:PORT")
    sh.add_argument("--ca", type=Path, help="tls: the CA file to check the collector's certificate with")
    sh.add_argument(
        "--format", choices=["cef", "ocsf", "json"], default="cef", help="the MSG of each message"
    )
    sh.add_argument("--state", type=Path, required=True, help="where the cursors (one per node) are kept")
    sh.add_argument("--batch", type=int, default=1000, help="records per round (default 1000)")
    sh.add_argument("--follow", action="store_true", help="keep shipping as the logs grow")
    sh.add_argument("--interval", type=float, default=1.0, help="--follow: seconds between looks and retries")
    sh.add_argument("--key", help="the published verifier key (one node); pin it")
    keyring(sh)
    sh.set_defaults(handler=_ship)

    bk = cmds.add_parser(
        "backup",
        help="copy node logs to a backup directory, never the signing keys",
        description="Copy every node log under SOURCE into DEST/<node>/ while the gateways keep "
        "writing: sealed segments once (a segment the copy has is not copied again), the segment "
        "being written as far as it is, the verifier key and retention's files. Never copied: the "
        "signing keys (keep them in a secret store), the lock, temporary files and the published "
        "checkpoint file. The copy is then verified (--key or --keyring pins the keys); exit 1 if it "
        "does not verify. Restore: docs/operations.md, 'Backup and restore'.",
    )
    bk.add_argument("source", type=Path, help="an audit directory (or one node's log directory)")
    bk.add_argument("dest", type=Path, help="the backup directory (created if needed)")
    bk.add_argument("--key", help="the published verifier key to verify the copy with (one node)")
    keyring(bk)
    bk.set_defaults(handler=_backup)

    rt = cmds.add_parser(
        "retain",
        help="archive or delete old segments of a log no gateway has open",
        description="Apply retention to node logs that no running gateway holds (a gateway applies "
        "its own, see audit.retention in the definition file). Sealed segments whose newest record "
        "is older than --max-age and that a signed checkpoint covers go, oldest first: moved under "
        "--archive DIR/<node>/ or deleted. Their leaf hashes stay, so roots, checkpoints and proofs "
        "of later records still verify, and an audit.retention record in the log says what went. "
        "That record is signed with the log's own checkpoint key.",
    )
    rt.add_argument(
        "path",
        nargs="?",
        type=Path,
        help="a node log directory or an audit directory of node logs "
        "(default: $AGENCY_DATA_DIR/audit or ./agency-data/audit)",
    )
    rt.add_argument("--max-age", required=True, help="segments older than this go: 90d, 12h, 30m, 2w")
    rt.add_argument(
        "--archive", type=Path, help="move the segments under ARCHIVE/<node>/ instead of deleting"
    )
    rt.add_argument("--node", help="only this node's log")
    rt.add_argument(
        "--signing-key",
        type=Path,
        help="the log's checkpoint key file (default: keys/<node>.key beside the audit directory, "
        "where the gateway keeps it)",
    )
    rt.set_defaults(handler=_retain)
    audit_erase.register(cmds)  # agency audit erase SUBJECT (crypto-shredding)


def _default_path(path: Path | None) -> Path:
    if path is not None:
        return path
    from ..server.settings import ServerConfig

    return Path(ServerConfig.from_env().data_dir) / "audit"


def _key(value: str | None) -> str | None:
    if value and Path(value).is_file():
        return Path(value).read_text().strip()
    return value


def _keyring(args: argparse.Namespace) -> Any:
    """The ``--keyring`` given, loaded (None without one)."""
    if getattr(args, "keyring", None) is None:
        return None
    from ..audit.keyring import Keyring

    if getattr(args, "key", None):
        raise InvalidInput.single("keyring", "give --key or --keyring, not both", what="option")
    return Keyring.load(args.keyring)


def _time(value: str | None, field: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput.single(field, f"not an ISO 8601 time: {value!r}", what="option") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _export(args: argparse.Namespace) -> int:
    from ..audit.export import ExportFilter, export

    flt = ExportFilter(
        since=_time(args.since, "since"),
        until=_time(args.until, "until"),
        trace_id=args.trace,
        goal_id=args.goal,
        agent=args.agent,
        event_types=frozenset(args.event_type),
        tenant=args.tenant,
    )
    show = progress_wanted(args)
    progress = Progress("exporting", unit="rec", unit_scale=True) if show else None
    checking = _verify_bars() if show else None
    path = args.path or [_default_path(None)]
    try:
        if args.output:
            try:
                with open(args.output, "wb") as out:
                    summary = export(
                        path,
                        out,
                        args.format,
                        flt,
                        key=_key(args.key),
                        keyring=_keyring(args),
                        progress=progress,
                        verify_progress=checking,
                        cef_max_bytes=args.cef_max_bytes,
                        reveal=_reveal(args, path),
                    )
                _one_trace(flt)
            except BaseException:
                args.output.unlink(missing_ok=True)  # never leave half an export behind
                raise
            print(f"exported {plural(summary.records, 'record')} to {args.output}", file=sys.stderr)
        else:
            summary = export(
                path,
                sys.stdout.buffer,
                args.format,
                flt,
                key=_key(args.key),
                keyring=_keyring(args),
                progress=progress,
                verify_progress=checking,
                cef_max_bytes=args.cef_max_bytes,
                reveal=_reveal(args, path),
            )
            sys.stdout.flush()
            _one_trace(flt)
    finally:
        if progress:
            progress.close()
    if summary.left_out:
        print(
            f"agency: warning: {plural(summary.left_out, 'record')} newer than the last signed checkpoint "
            "left out of the bundle (a checkpoint follows within a second on a live log; export again)",
            file=sys.stderr,
        )
    if summary.records == 0 and not flt.empty:
        print(f"agency: warning: no record matches the filter {_filter_text(flt)}", file=sys.stderr)
        return NOTHING_FOUND
    return 0


def _reveal(args: argparse.Namespace, paths: list[Path]) -> Any:
    """How sealed personal data shows in a flat export (``middleware.audit.shredding``)."""
    from ..audit.shredding import FileKeyStore, default_subject_key_dir, reveal_bytes

    keys = args.subject_keys or default_subject_key_dir(paths[0])
    if args.reveal_personal_data and not keys.is_dir():
        raise InvalidInput.single("subject-keys", f"no subject key directory at {keys}", what="option")
    # no key directory here: sealed values show as redacted (not as erased: their keys may exist elsewhere)
    return reveal_bytes(FileKeyStore(keys) if keys.is_dir() else None, allowed=args.reveal_personal_data)


def _verify_bars() -> Any:
    def bar(node: str) -> Progress:
        return Progress(f"verifying {node}", unit="B", unit_scale=True)

    return bar


def _one_trace(flt: Any) -> None:
    if len(flt.traces_seen) > 1:
        found = sorted(flt.traces_seen)
        raise InvalidInput.single(
            "trace", f"prefix {flt.trace_id!r} matches {len(found)} traces: {found[:5]}", what="option"
        )


def _filter_text(flt: Any) -> str:
    given = {k: v for k, v in flt.describe().items() if v}
    return " ".join(f"{k}={','.join(v) if isinstance(v, list) else v}" for k, v in given.items())


#: ``agency audit verify`` exit codes (see ``exit_codes``; 2 is every command's usage/input error).
EXIT_VERIFIED = OK  # intact and signed by the pinned --key
EXIT_FAILED = CHECK_FAILED  # a record, segment, checkpoint or signature does not verify
EXIT_NOT_AUTHENTICATED = NOT_AUTHENTICATED  # intact, but no --key pinned: who signed it was not checked


def _verify(args: argparse.Namespace) -> int:
    from ..audit.verify import verify_path

    trusted = args.checkpoint.read_text() if args.checkpoint else None
    bars = _verify_bars() if progress_wanted(args) else None
    ring = _keyring(args)
    pinned = bool(args.key) or ring is not None
    witnessed, witness_key = _witness_view(args)
    verdict = verify_path(
        _default_path(args.path),
        key=_key(args.key),
        keyring=ring,
        trusted_checkpoint=trusted,
        progress=bars,
        witnessed=witnessed,
        witness_key=witness_key,
    )
    if args.json:
        bad = verdict.first_failure
        report = {
            "ok": verdict.ok,
            "pinned_key": pinned,
            "nodes": [
                {
                    "node": n.node,
                    "source": n.source,
                    "ok": n.ok,
                    "events": n.events,
                    "checkpoints": n.checkpoints,
                    "error": n.error,
                    "where": n.where,
                    "warnings": n.warnings,
                }
                for n in verdict.nodes
            ],
            "error": (bad.error if bad else "nothing to verify") if not verdict.ok else "",
        }
        report["authenticated"] = verdict.ok and pinned
        print(json.dumps(report, indent=2))
        if not verdict.ok:
            return EXIT_FAILED
        return EXIT_VERIFIED if pinned else EXIT_NOT_AUTHENTICATED
    for node in verdict.nodes:
        print(node.describe())
        for w in node.warnings:
            print(f"     note: {w}")
        if node.ok and node.state is not None:  # a directory's log: the task invariant too
            vkey = node.state.verifier.vkey if node.state.verifier else None
            left = _open_tasks(Path(node.source), vkey)
            if left:
                print(
                    f"     note: {len(left)} task(s) left open (began in the log, never ended): "
                    + ", ".join(left[:20])
                    + (" ..." if len(left) > 20 else "")
                )
    if verdict.ok and not pinned:
        # the chain is intact, but signed by whatever key sits beside it: anyone who could
        # rewrite the log could have re-signed it with a key of their own
        print(
            "INTACT, AUTHENTICITY NOT CHECKED: the checkpoints were checked against the key stored "
            "with the log itself; pass the published verifier key with --key to check who signed them",
        )
        return EXIT_NOT_AUTHENTICATED
    if verdict.ok:
        print("VERIFIED")
        return EXIT_VERIFIED
    bad = verdict.first_failure
    print(f"VERIFICATION FAILED: {bad.error if bad else 'nothing to verify'}", file=sys.stderr)
    if bad and bad.where:
        print(f"  first bad record: {bad.where}", file=sys.stderr)
    return EXIT_FAILED


def _witness(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..audit.checkpoint import origin_for
    from ..audit.witness import Witness, load_or_create_cosigner
    from ..audit.witness_http import WitnessServer

    ring = _keyring(args)
    if ring is None:
        raise InvalidInput.single("keyring", "required: the logs this witness co-signs", what="audit witness")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise InvalidInput.single("listen", f"not host:port: {args.listen!r}", what="audit witness")
    cosigner = load_or_create_cosigner(args.signing_key, args.name)
    witness = Witness(args.state, cosigner, {origin_for(node): ring.get(node) for node in ring})
    server = WitnessServer(witness, host, int(port))
    print(f"agency: witness {cosigner.name} on {server.url} (verifier key: {cosigner.vkey})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    stop.wait()
    server.close()
    return 0


def _ship(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..audit.checkpoint import Verifier
    from ..audit.ship import Cursor, Shipper, SyslogTarget

    if args.interval <= 0:
        raise InvalidInput.single("interval", "must be positive", what="option")
    ring = _keyring(args)
    pinned = Verifier(_key(args.key) or "") if args.key else None
    shipper = Shipper(
        _default_path(args.path),
        SyslogTarget(args.to, ca=str(args.ca) if args.ca else None),
        args.format,
        Cursor(args.state),
        batch=args.batch,
        verifier_for=(lambda node: ring.get(node)) if ring is not None else (lambda node: pinned),
    )
    if not args.follow:
        try:
            shipped = shipper.run_once()
        except OSError as exc:
            from ..errors import Unavailable

            raise Unavailable(f"the collector {args.to} did not take the records: {exc}") from None
        print(f"shipped {plural(shipped, 'record')} to {args.to}")
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"agency: shipping {shipper.directory} to {args.to} ({args.format})", flush=True)
    shipper.follow(stop, interval=args.interval)
    print(f"agency: shipped {plural(shipper.delivered, 'record')}", flush=True)
    return 0


def _backup(args: argparse.Namespace) -> int:
    from ..audit.backup import backup
    from ..audit.verify import verify_path

    ring = _keyring(args)
    if args.dest.resolve() == args.source.resolve() or args.source.resolve() in args.dest.resolve().parents:
        raise InvalidInput.single("dest", "must be outside the audit directory it backs up", what="backup")
    summary = backup(args.source, args.dest)
    print(
        f"copied {plural(len(summary.copied), 'file')} of {plural(len(summary.nodes), 'node log')} "
        f"to {args.dest} ({summary.skipped} sealed segment(s) already there)"
    )
    verdict = verify_path(args.dest, key=_key(args.key), keyring=ring)
    for node in verdict.nodes:
        print(node.describe())
        for w in node.warnings:
            print(f"     note: {w}")
    if not verdict.ok:
        bad = verdict.first_failure
        print(f"VERIFICATION FAILED: {bad.error if bad else 'nothing to verify'}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_VERIFIED


def _witness_view(args: argparse.Namespace) -> tuple[Any, Any]:
    """(origin -> the witness's latest cosigned checkpoint, its key) from --witness/--witness-key."""
    if not args.witness:
        if args.witness_key:
            raise InvalidInput.single("witness-key", "given without --witness", what="option")
        return None, None
    if not args.witness_key:
        raise InvalidInput.single("witness-key", "required with --witness", what="option")
    import urllib.parse

    from ..audit.witness import CosignatureVerifier
    from ..audit.witness_http import WitnessClient

    key = CosignatureVerifier(_key(args.witness_key) or "")
    if Path(args.witness).is_dir():
        state = Path(args.witness)

        def from_dir(origin: str) -> str | None:
            path = state / (urllib.parse.quote(origin, safe="") + ".checkpoint")
            return path.read_text() if path.exists() else None

        return from_dir, key
    try:
        client = WitnessClient(args.witness)
    except ValueError as exc:
        raise InvalidInput.single("witness", str(exc), what="option") from None

    def from_url(origin: str) -> str | None:
        try:
            return client.latest(origin)
        except OSError as exc:
            from ..errors import Unavailable

            raise Unavailable(f"witness {args.witness} unreachable: {exc}") from None

    return from_url, key


def _open_tasks(directory: Path, key: str | None) -> list[str]:
    """Tasks of the node log at ``directory`` that began and did not end (see ``open_tasks``)."""
    from ..audit.open_tasks import open_tasks
    from ..audit.wal_reader import WalLogReader

    if not directory.is_dir():
        return []
    return list(open_tasks(r for _, r in WalLogReader(directory, key=_key(key)).records()))


def _checkpoint(args: argparse.Namespace) -> int:
    from ..audit.verify import find_node_dirs

    dirs = find_node_dirs(_default_path(args.path))
    if not dirs:
        raise InvalidInput.single("path", "no audit log here", what="audit checkpoint")
    if args.json:
        nodes = []
        for d in dirs:
            cp, vkey = d / "checkpoint", d / "checkpoint.vkey"
            nodes.append(
                {
                    "node": d.name,
                    "vkey": vkey.read_text().strip() if vkey.exists() else None,
                    "checkpoint": cp.read_text() if cp.exists() else None,
                }
            )
        print(json.dumps(nodes, indent=2))
        return 0
    for d in dirs:
        cp, vkey = d / "checkpoint", d / "checkpoint.vkey"
        print(f"# node {d.name}  verifier key: {vkey.read_text().strip() if vkey.exists() else '(none)'}")
        print(cp.read_text() if cp.exists() else "(no checkpoint yet)\n")
    return 0


def _prove(args: argparse.Namespace) -> int:
    from ..audit.checkpoint import Verifier
    from ..audit.verify import find_node_dirs, scan_node
    from ..errors import AuditCorrupted

    dirs = find_node_dirs(_default_path(args.path))
    if args.node:
        dirs = [d for d in dirs if d.name == args.node]
    if len(dirs) != 1:
        names = ", ".join(d.name for d in find_node_dirs(_default_path(args.path)))
        raise InvalidInput.single(
            "node", f"choose one log with --node (have: {names or 'none'})", what="prove"
        )
    key = _key(args.key)
    v = scan_node(dirs[0], Verifier(key) if key else None)
    if not v.ok or v.state is None:
        raise AuditCorrupted(f"the log does not verify: {v.error}", where=v.where)
    tree, cps = v.state.tree, v.state.checkpoints
    size = args.size or (cps[-1].size if cps else tree.size)
    if not 0 < size <= tree.size:
        raise InvalidInput.single("size", f"must be 1..{tree.size}", what="prove")

    def b64(hashes: list[bytes]) -> list[str]:
        return [base64.b64encode(h).decode() for h in hashes]

    out: dict[str, Any] = {
        "node": v.node,
        "tree_size": size,
        "root": base64.b64encode(tree.root(size)).decode(),
    }
    signed = next((c for c in cps if c.size == size), None)
    out["checkpoint"] = signed.note if signed else None
    if args.index is not None:
        if not 1 <= args.index <= size:
            raise InvalidInput.single("index", f"must be 1..{size}", what="prove")
        out.update(index=args.index, leaf_hash=b64([tree.leaf(args.index - 1)])[0])
        out["inclusion_proof"] = b64(tree.inclusion_proof(args.index - 1, size))
    else:
        if not 0 < args.old <= size:  # no proof from the empty tree (RFC 9162 §2.1.4)
            raise InvalidInput.single("old", f"must be 1..{size}", what="prove")
        out.update(old_size=args.old, old_root=base64.b64encode(tree.root(args.old)).decode())
        out["consistency_proof"] = b64(tree.consistency_proof(args.old, size))
    print(json.dumps(out, indent=2))
    return 0


def _retain(args: argparse.Namespace) -> int:
    from ..audit.checkpoint import Signer, default_key_path
    from ..audit.retention import parse_age
    from ..audit.verify import find_node_dirs
    from ..audit.wal import WalAuditLog

    try:
        max_age = parse_age(args.max_age)
    except ValueError as exc:
        raise InvalidInput.single("max-age", str(exc), what="option") from None
    dirs = find_node_dirs(_default_path(args.path))
    if args.node:
        dirs = [d for d in dirs if d.name == args.node]
    if not dirs:
        raise InvalidInput.single("path", "no node log here (or none named by --node)", what="audit retain")
    signers = {}
    for d in dirs:  # every key is checked before any log is touched
        key = args.signing_key or default_key_path(d.parent, d.name)
        if not key.is_file():
            raise InvalidInput.single(
                "signing-key", f"no checkpoint key at {key}: pass the log's key", what="audit retain"
            )
        try:
            signers[d] = Signer.from_skey(key.read_text())
        except (InvalidInput, UnicodeDecodeError) as exc:
            raise InvalidInput.single("signing-key", f"{key}: {exc}", what="audit retain") from None

    async def run() -> None:
        for d, signer in signers.items():
            log = WalAuditLog(d.parent, d.name, signer=signer)
            try:
                removed = await log.apply_retention(max_age, archive_dir=args.archive)
            finally:
                await log.close()
            verb = "archived" if args.archive else "deleted"
            print(f"{d.name}: {verb} {len(removed)} segment(s){': ' + ', '.join(removed) if removed else ''}")

    asyncio.run(run())
    return 0
