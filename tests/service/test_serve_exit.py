"""A stopped gateway exits, even when something it loaded left a thread running."""

from __future__ import annotations

from pathlib import Path

from gateway_processes import start_gateway, write_definition

from middleware.audit.verify import verify_path

HERE = Path(__file__).parent


async def test_sigterm_ends_the_process_even_with_a_thread_left_running(tmp_path: Path) -> None:
    definition = {
        "server": {"address": "127.0.0.1:0", "metrics_address": ""},
        "agents": [
            {"agent": "hung_thread_agents:steady", "contract": {"name": "steady", "can_do": ["work"]}}
        ],
    }
    config = write_definition(tmp_path / "agency.yaml", definition)
    gateway = await start_gateway(config, "g1", tmp_path, pythonpath=[HERE])
    code = await gateway.stop(within=60)  # killed (-9) after 60 s if the exit hangs
    output = gateway.output()
    assert code == 0, output
    assert "agency: stopped" in output and "still not exited 10 s after stopping" in output
    assert verify_path(tmp_path / "g1" / "audit").ok  # closed and sealed before the forced exit
