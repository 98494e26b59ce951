"""A second ``agency serve`` on a port another gateway holds is refused (exit code 2).

gRPC's default (``SO_REUSEPORT``) let both processes listen and split the clients
between them; sharing a port is now an explicit choice (``--reuse-port`` /
``server.reuse_port: true``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from gateway_processes import start_gateway, write_definition

pytestmark = pytest.mark.timeout(60)


async def _serve(*argv: str, data_dir: Path) -> tuple[int, str]:
    """Run ``agency serve ARGV`` to its end (it must exit by itself); exit code and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        "serve",
        "--metrics-address",
        "",
        "--data-dir",
        str(data_dir),
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError("the second gateway did not exit: it is serving on a taken port") from None
    return proc.returncode or 0, out.decode(errors="replace")


async def test_a_second_gateway_on_a_taken_port_is_refused(tmp_path: Path) -> None:
    config = write_definition(
        tmp_path / "agency.yaml", {"server": {"address": "127.0.0.1:0", "metrics_address": ""}}
    )
    first = await start_gateway(config, "g1", tmp_path)
    try:
        code, output = await _serve("--address", first.address, data_dir=tmp_path / "second")
    finally:
        assert await first.stop() == 0, first.output()
    assert code == 2, output
    assert "serving on" not in output
    assert f"cannot listen on {first.address}: the port is taken" in output, output
    assert "--reuse-port" in output
    assert "Traceback" not in output and "add_port.cc" not in output, output  # no C-core noise


async def test_sharing_a_port_is_an_explicit_choice(tmp_path: Path) -> None:
    shared = {"server": {"address": "127.0.0.1:0", "metrics_address": "", "reuse_port": True}}
    first = await start_gateway(write_definition(tmp_path / "a.yaml", shared), "g1", tmp_path)
    try:
        shared["server"]["address"] = first.address
        second = await start_gateway(write_definition(tmp_path / "b.yaml", shared), "g2", tmp_path)
        assert second.port == first.port
        assert await second.stop() == 0, second.output()
    finally:
        assert await first.stop() == 0, first.output()
