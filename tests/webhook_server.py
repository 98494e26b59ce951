"""A real local HTTP server for the webhook tests, whose behaviour a test switches: it can be
down (not started), answer 500, answer slowly, or answer 200 (recovered)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class HookServer:
    """A real HTTP server in a thread whose behaviour the test switches: ok, 500, slow."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.mode = "ok"
        self.slow_seconds = 1.0
        self.requests: list[tuple[str, dict[str, str], bytes]] = []  # (mode answered, headers, body)
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                mode = owner.mode
                with owner._lock:
                    owner.requests.append((mode, dict(self.headers.items()), body))
                if mode == "slow":
                    time.sleep(owner.slow_seconds)
                self.send_response(500 if mode == "500" else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def answered(self, mode: str) -> list[tuple[str, dict[str, str], bytes]]:
        with self._lock:
            return [r for r in self.requests if r[0] == mode]
