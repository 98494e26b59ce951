"""Careless-user edges (issue 27, seventh item): an option's error names the option as typed, a
help text's exit codes are the ones returned, the checkpoint count the docs promise."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from middleware.cli import main
from middleware.cli.exit_codes import NOT_AUTHENTICATED, NOTHING_FOUND


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--data-dir", str(data), "--json"]) == 0
    return data / "audit" / "demo"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--format", "cef", "--cef-max-bytes", "500"], "--cef-max-bytes: must be at least 1024"),
        (["--format", "csv", "--cef-max-bytes", "2000"], "--cef-max-bytes: applies to the cef format only"),
    ],
)
def test_an_option_out_of_range_is_named_as_typed(demo_log, capsys, extra, said):
    assert main(["audit", "export", str(demo_log), *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and "cef_max_bytes" not in err


def test_audit_verify_help_states_the_exit_codes_it_returns(demo_log, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["audit", "verify", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert main(["audit", "verify", str(demo_log)]) == NOT_AUTHENTICATED  # intact, no --key pinned
    assert f"{NOT_AUTHENTICATED} intact, but no --key was pinned" in help_text
    capsys.readouterr()
    assert main(["audit", "verify", str(tmp_path / "nothing-here")]) == NOTHING_FOUND
    assert f"{NOTHING_FOUND} nothing to verify" in help_text
    assert not re.search(r"\b3 intact", help_text)


async def test_checkpoints_count_from_the_previous_one(tmp_path):
    """docs/audit-log.md: a checkpoint comes once checkpoint_every records have come since the
    previous checkpoint, whatever signed it — not at multiples of checkpoint_every."""
    from middleware.audit.checkpoint import Signer
    from middleware.audit.record import AuditRecord
    from middleware.audit.wal import WalAuditLog, WalOptions

    log = WalAuditLog(
        tmp_path,
        "n1",
        signer=Signer("test"),
        options=WalOptions(checkpoint_every=10, checkpoint_interval=None),
    )

    def record(i: int) -> AuditRecord:
        return AuditRecord.model_validate(
            {"event_type": "agent.step", "node": "n1", "outcome": "success", "detail": {"i": i}}
        )

    for i in range(3):
        await log.append(record(i))
    await log.checkpoint()  # signed on demand at 3
    await asyncio.gather(*(log.append(record(i)) for i in range(3, 12)))  # 12 records: 9 since
    assert [cp.size for cp in log.checkpoints()] == [3]
    await log.append(record(12))  # the 10th since the previous checkpoint
    assert [cp.size for cp in log.checkpoints()] == [3, 13]
    await log.close()
