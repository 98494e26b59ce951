"""``agency serve --console``: the console in the gateway process, its metrics, a clean stop."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import time
import urllib.request

import httpx


async def test_serve_with_the_console_flag(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        "serve",
        "--demo",
        "--address",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        "--metrics-address",
        "127.0.0.1:0",
        "--console",
        "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any("serving on" in x for x in lines):
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        if not line:
            break
        lines.append(line.decode())
    try:
        text = "".join(lines)
        console = re.search(r"operator console on (http://\S+)", text)
        metrics = re.search(r"metrics on (\S+)", text)
        assert console and metrics, text
        async with httpx.AsyncClient(base_url=console.group(1)) as c:
            assert (await c.get("/healthz")).json() == {"ok": True}
            assert (await c.get("/inbox")).headers["location"] == "/signin"
        exposition = await asyncio.to_thread(
            lambda: urllib.request.urlopen(metrics.group(1), timeout=10).read()
        )
        assert b"agency_escalations_waiting" in exposition and b"agency_human_answer_seconds" in exposition
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, out.decode()
    assert "agency: stopped" in out.decode()
