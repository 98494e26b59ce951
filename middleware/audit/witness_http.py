"""The witness over HTTP (C2SP tlog-witness), its client, and a log's submitter.

``WitnessServer`` serves a :class:`~middleware.audit.witness.Witness`: ``POST
<prefix>/add-checkpoint`` as the spec says, plus ``GET <prefix>/checkpoint?origin=O`` (this
project's monitoring call: the latest checkpoint the witness cosigned for a log, both
signatures in it — what ``agency audit verify --witness`` compares each log with).
``WitnessClient`` makes both calls (stdlib ``http.client``). ``Witnessing`` runs in a gateway:
it submits each new checkpoint of its log with a consistency proof from the size the witness
last cosigned, keeps the cosigned note in ``<node>/checkpoint.cosigned``, and reports a
refusal (a log behind, or inconsistent with, what the witness saw: rolled back) at ERROR.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import logging
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from ._files import atomic_write
from .checkpoint import Checkpoint
from .witness import Witness, WitnessAnswer

__all__ = ["COSIGNED_FILE", "WitnessClient", "WitnessServer", "Witnessing"]

log = logging.getLogger("agency.audit.witness")

COSIGNED_FILE = "checkpoint.cosigned"
_MAX_BODY = 64 << 10


class WitnessServer:
    """A threaded HTTP server for ``witness`` on ``host:port`` (0: any free port); ``close`` stops it."""

    def __init__(self, witness: Witness, host: str = "127.0.0.1", port: int = 0) -> None:
        handler = type("_Handler", (_Handler,), {"witness": witness})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="witness-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WitnessServer:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    witness: Witness

    def do_POST(self) -> None:
        if urllib.parse.urlsplit(self.path).path.rstrip("/").endswith("/add-checkpoint"):
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= _MAX_BODY:
                return self._answer(WitnessAnswer(400, "bad request: body missing or too large\n"))
            body = self.rfile.read(length).decode("utf-8", errors="replace")
            return self._answer(self.witness.add_checkpoint(body))
        return self._answer(WitnessAnswer(404, "not found\n"))

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        origin = urllib.parse.parse_qs(url.query).get("origin", [""])[0]
        if url.path.rstrip("/").endswith("/checkpoint") and origin:
            note = self.witness.latest(origin)
            if note is not None:
                return self._answer(WitnessAnswer(200, note))
        return self._answer(WitnessAnswer(404, "no checkpoint cosigned for that log\n"))

    def _answer(self, answer: WitnessAnswer) -> None:
        data = answer.body.encode()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("witness: " + format, *args)


class WitnessClient:
    """Calls a witness at ``url`` (``http://host:port[/prefix]``)."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not a witness URL: {url!r}")
        self._parts, self._timeout = parts, timeout

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
        p = self._parts
        conn_type = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
        conn = conn_type(p.hostname or "", p.port, timeout=self._timeout)
        try:
            conn.request(method, p.path.rstrip("/") + path, body=body)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", errors="replace")
        finally:
            conn.close()

    def add_checkpoint(self, old: int, proof: list[bytes], note: str) -> tuple[int, str]:
        """One ``add-checkpoint`` call; (status, body)."""
        lines = [f"old {old}", *(base64.b64encode(h).decode() for h in proof)]
        return self._request("POST", "/add-checkpoint", ("\n".join(lines) + "\n\n" + note).encode())

    def latest(self, origin: str) -> str | None:
        """The latest checkpoint the witness cosigned for ``origin`` (None: none)."""
        status, body = self._request("GET", "/checkpoint?" + urllib.parse.urlencode({"origin": origin}))
        return body if status == 200 else None


class WitnessedLog(Protocol):
    """What ``Witnessing`` needs of a log (``WalAuditLog`` is one)."""

    node: str

    @property
    def location(self) -> str: ...

    def latest_checkpoint(self) -> Checkpoint | None: ...

    def consistency_proof(self, old_size: int, new_size: int = 0) -> tuple[int, list[bytes]]: ...


class Witnessing:
    """Submits a log's new checkpoints to a witness every ``interval`` seconds, until stopped.

    Args:
        log: The log.
        client: The witness.
        interval: Seconds between looks at the log's latest checkpoint.
        on_refused: Called with the witness's answer when it refuses a checkpoint (a metric).
    """

    def __init__(
        self,
        log: WitnessedLog,
        client: WitnessClient,
        *,
        interval: float = 1.0,
        on_refused: Callable[[int, str], None] | None = None,
    ) -> None:
        self.log, self.client, self.interval, self._on_refused = log, client, interval, on_refused
        self.cosigned = 0  #: the size the witness last cosigned (as far as this gateway knows)
        self.refused: tuple[int, str] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def submit(self) -> bool:
        """Submit the log's latest checkpoint now if the witness has not cosigned it; True if it did."""
        cp = self.log.latest_checkpoint()
        if cp is None or (cp.size <= self.cosigned and self.refused is None):
            return False
        for _ in range(2):  # a first 409 tells the size the witness holds: then once more
            old = self.cosigned
            if old > cp.size:
                return self._refused(409, f"the witness cosigned size {old}; this log has {cp.size}")
            proof = self.log.consistency_proof(old, cp.size)[1] if 0 < old < cp.size else []
            status, body = await asyncio.to_thread(self.client.add_checkpoint, old, proof, cp.note)
            if status == 200:
                self.cosigned, self.refused = cp.size, None
                path = Path(self.log.location) / COSIGNED_FILE
                await asyncio.to_thread(atomic_write, path, (cp.note.rstrip("\n") + "\n" + body).encode())
                return True
            if status == 409 and body.strip().isdigit() and int(body) != old:
                self.cosigned = int(body)
                continue
            return self._refused(status, body.strip())
        return False

    def _refused(self, status: int, why: str) -> bool:
        if self.refused != (status, why):
            log.error(
                "the witness %s refused the checkpoint of audit log %s (%d: %s): the log is not "
                "consistent with what the witness cosigned before (rolled back?)",
                self.client._parts.geturl(),
                self.log.node,
                status,
                why,
            )
        self.refused = (status, why)
        if self._on_refused is not None:
            self._on_refused(status, why)
        return False

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.submit()
            except OSError as exc:  # the witness is away: try again later
                log.warning("witness %s unreachable: %s", self.client._parts.geturl(), exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)

    def start(self) -> None:
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._loop(), name=f"audit-witness-{self.log.node}")

    async def stop(self) -> None:
        """Stop (a submission under way finishes first)."""
        if self._task is not None:
            self._stop.set()
            task, self._task = self._task, None
            await task
