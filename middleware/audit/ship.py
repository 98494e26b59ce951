"""Shipping audit records to a SIEM over syslog: RFC 5424 messages, octet-counted (RFC 6587),
over TCP or TLS, at least once, with a durable cursor.

Each record is one RFC 5424 message: ``<PRI>1 TIMESTAMP HOSTNAME agency - MSGID [SD] MSG`` with
facility 13 (log audit), the severity from the record (3 failures, 4 refusals and handovers,
6 the rest), the record's own time, the node as HOSTNAME, the event type as MSGID, the
structured data ``[agency@32473 node="gw-1" index="42"]`` (32473 is the documentation
enterprise number of RFC 5612) and as MSG the record as CEF, OCSF or JSON (the formats of
``agency audit export``). Framing is octet counting: ``<length> <message>``.

Delivery is in *rounds*: open a connection, send up to ``batch`` records, close the sending
side and wait until the collector has read everything and closed its side; only then is the
node's cursor (``<state>/<node>.cursor``: the last index delivered) advanced, durably. A round
that fails — the collector stopped, restarted, unreachable — is sent again whole on the next
connection: nothing is lost, and the duplicates are at most one round, each identifiable by its
``node`` and ``index``. A collector must write what it read before closing the connection (for
rsyslog: a direct main queue, see docs/audit-log.md) for "read" to mean "kept".
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from ..errors import InvalidInput
from ._files import atomic_write
from .checkpoint import Verifier
from .export import ExportedRecord, cef_line, ocsf_event, severity
from .follow import FollowedRecord, LogFollower
from .verify import find_node_dirs

__all__ = ["SHIP_FORMATS", "Cursor", "Shipper", "SyslogTarget", "ship_round", "syslog_message"]

log = logging.getLogger("agency.audit.ship")

SHIP_FORMATS = ("cef", "ocsf", "json")
FACILITY_LOG_AUDIT = 13
SD_ID = "agency@32473"
_SEVERITY = {7: 3, 5: 4, 3: 6}  # CEF severity -> syslog severity (error, warning, informational)


_NOT_PRINTUSASCII = re.compile(r"[^\x21-\x7e]")


def _printable(text: str, limit: int) -> str:
    """PRINTUSASCII (33..126) only, at most ``limit`` characters; '-' if empty."""
    return _NOT_PRINTUSASCII.sub("_", text[:limit]) or "-"


def _sd_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def syslog_message(record: FollowedRecord, fmt: str) -> bytes:
    """One RFC 5424 message for ``record`` with its MSG in ``fmt`` (cef, ocsf, json)."""
    obj = orjson.loads(record.raw)  # parsed once for the header and the MSG
    exported = ExportedRecord(record.node, record.index, record.time_ns, record.raw, obj)
    pri = FACILITY_LOG_AUDIT * 8 + _SEVERITY.get(severity(obj), 6)
    stamp = str(obj.get("time") or "")
    if not stamp.endswith("Z"):
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.time_ns / 1e9))
    if fmt == "cef":
        msg = cef_line(exported, 0)
    elif fmt == "ocsf":
        msg = json.dumps(ocsf_event(exported), separators=(",", ":"), ensure_ascii=False)
    else:
        msg = record.raw.decode()
    sd = f'[{SD_ID} node="{_sd_value(record.node)}" index="{record.index}"]'
    header = (
        f"<{pri}>1 {stamp} {_printable(record.node, 255)} agency - "
        f"{_printable(str(obj.get('event_type', '')), 32)} {sd} "
    )
    return (header + msg).encode()


def frame(message: bytes) -> bytes:
    """RFC 6587 octet counting: the length, a space, the message."""
    return b"%d %s" % (len(message), message)


@dataclass
class SyslogTarget:
    """Where records go: ``tcp://host:port`` or ``tls://host:port`` (``ca``: the CA to trust).

    Raises:
        InvalidInput: another scheme, no port, or a CA file that cannot be read.
    """

    url: str
    ca: str | None = None
    timeout: float = 10.0
    _context: ssl.SSLContext | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("tcp", "tls") or not parts.hostname or not parts.port:
            raise InvalidInput.single(
                "to", f"not tcp://HOST:PORT or tls://HOST:PORT: {self.url!r}", what="ship"
            )
        self.host, self.port, self.tls = parts.hostname, parts.port, parts.scheme == "tls"
        if self.tls:
            try:
                self._context = ssl.create_default_context(cafile=self.ca)
            except (OSError, ssl.SSLError) as exc:
                raise InvalidInput.single("ca", f"cannot use {self.ca}: {exc}", what="ship") from None

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        if self._context is not None:
            return self._context.wrap_socket(sock, server_hostname=self.host)
        return sock


class Cursor:
    """The last index delivered per node, kept in ``<state>/<node>.cursor`` (written atomically)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)

    def get(self, node: str) -> int:
        path = self.dir / f"{node}.cursor"
        if not path.exists():
            return 0
        try:
            return int(json.loads(path.read_text())["index"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput.single("state", f"{path} is not a cursor ({exc})", what="ship") from None

    def set(self, node: str, index: int) -> None:
        atomic_write(self.dir / f"{node}.cursor", json.dumps({"index": index}).encode())


def ship_round(target: SyslogTarget, records: list[FollowedRecord], fmt: str) -> int:
    """Send ``records`` on one connection and wait until the collector has read them all.

    The sending side is closed after the last message (TLS: a close_notify the collector answers
    once it read everything before it; then TCP); the collector reads to that end and closes its
    side: an orderly close means it read every message, a reset or an error means the round did
    not arrive whole.

    Returns:
        How many were delivered (all of ``records``, once this returns).

    Raises:
        OSError: the connection failed before the collector confirmed (nothing counts as delivered).
    """
    payload = b"".join(frame(syslog_message(r, fmt)) for r in records)
    with target.connect() as sock:
        sock.sendall(payload)
        plain = sock.unwrap() if isinstance(sock, ssl.SSLSocket) else sock  # TLS: the peer's close_notify
        with plain:
            plain.shutdown(socket.SHUT_WR)
            while plain.recv(4096):  # the collector closes once it read everything
                pass
    return len(records)


class Shipper:
    """Ships every node log under ``directory`` to ``target``, each record at least once.

    Args:
        directory: An audit directory of node logs (or one node's log directory).
        target: The collector.
        fmt: cef, ocsf or json.
        cursor: Where the last index delivered per node is kept.
        batch: Records per round (the most that can arrive twice after a failed round).
        verifier_for: The pinned key of a node (None: the key stored with its log).
        clock: For lag figures (``time.time_ns``).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        target: SyslogTarget,
        fmt: str,
        cursor: Cursor,
        *,
        batch: int = 1000,
        verifier_for: Callable[[str], Verifier | None] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        if fmt not in SHIP_FORMATS:
            raise InvalidInput.single("format", f"must be one of {list(SHIP_FORMATS)}", what="ship")
        if batch < 1:
            raise InvalidInput.single("batch", "must be at least 1", what="ship")
        self.directory, self.target, self.fmt, self.cursor, self.batch = (
            Path(directory), target, fmt, cursor, batch,
        )  # fmt: skip
        self._verifier_for = verifier_for or (lambda node: None)
        self._clock = clock
        self._followers: dict[str, LogFollower] = {}
        self._pending: dict[str, list[FollowedRecord]] = {}
        self.delivered = 0
        self.lags_ns: list[int] = []  #: append-to-delivery time of each record delivered

    def _poll(self) -> None:
        for node_dir in find_node_dirs(self.directory):
            follower = self._followers.get(node_dir.name)
            if follower is None:
                follower = self._followers[node_dir.name] = LogFollower(
                    node_dir, self._verifier_for(node_dir.name), after=self.cursor.get(node_dir.name)
                )
            self._pending.setdefault(node_dir.name, []).extend(follower.poll())

    def run_once(self) -> int:
        """Ship everything verified so far, round after round; returns how many were delivered.

        Raises:
            OSError: a round failed (the cursor stays: that round is sent again next time).
            AuditCorrupted: a log does not verify (nothing of it past the bad record is shipped).
        """
        self._poll()
        done = 0
        for node, pending in self._pending.items():
            while pending:
                chunk = pending[: self.batch]
                ship_round(self.target, chunk, self.fmt)
                now = self._clock()
                self.lags_ns.extend(now - r.time_ns for r in chunk)
                self.cursor.set(node, chunk[-1].index)
                del pending[: len(chunk)]
                done += len(chunk)
        self.delivered += done
        return done

    def follow(self, stop: threading.Event, *, interval: float = 1.0) -> None:
        """Ship as the logs grow until ``stop`` is set; a failed round is retried after ``interval``."""
        failing = False
        while not stop.is_set():
            try:
                self.run_once()
                if failing:
                    log.warning("shipping to %s works again", self.target.url)
                failing = False
            except OSError as exc:
                if not failing:
                    log.warning(
                        "shipping to %s failed (%s): retrying every %.1f s", self.target.url, exc, interval
                    )
                failing = True
            stop.wait(interval)
