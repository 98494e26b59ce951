"""A background loop's errors: one ERROR line per outage, a relapse right after it is the same one."""

from __future__ import annotations

import logging

import pytest

from middleware.background import LoopErrors


def test_one_error_line_per_outage_and_a_relapse_within_settle_is_the_same_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    counted: list[str] = []
    errors = LoopErrors("keepalive", on_error=counted.append, settle=10.0, clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger="agency.background")

    def lines(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == level]

    assert errors.failed(ConnectionError("refused")) == pytest.approx(0.1)
    assert errors.failed(ConnectionError("refused")) == pytest.approx(0.2)  # backed off, not logged
    errors.succeeded()
    now[0] += 1.0  # a pooled connection from before the outage fails on its first use
    errors.failed(ConnectionError("closed by server"))
    errors.succeeded()
    assert lines(logging.ERROR) == [
        "keepalive failed: refused (ConnectionError; retrying with backoff, logged again when it recovers)"
    ]
    assert any("again within 10s of recovering" in m for m in lines(logging.WARNING))
    now[0] += 30.0  # long after: a new outage
    errors.failed(TimeoutError("timed out"))
    assert len(lines(logging.ERROR)) == 2
    assert counted == ["keepalive"] * 4 and errors.total == 4
