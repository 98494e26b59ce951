"""Smaller findings of issue 14: CSV export cannot carry formulas (item 8), and a client CA
means mutual TLS unless said otherwise (item 12)."""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any

import pytest

from middleware.audit import Actors, AuditRecord, WalAuditLog
from middleware.audit.export import csv_cell, export
from middleware.server.settings import TlsConfig

EVIL = {
    "task_id": "=cmd|' /C calc'!A0",
    "user": '=HYPERLINK("http://evil","x")',
    "session": "@SUM(1+1)*cmd|' /C calc'!A0",
    "agent": "+1+cmd",
    "rule": "-2+3",
    "goal_id": "\tTAB",
    "trace_id": "\rCR",
}


async def test_csv_export_neutralises_formula_cells(tmp_path: Path) -> None:
    log = WalAuditLog(tmp_path / "audit", "n1")
    await log.append(
        AuditRecord(
            event_type="task.submitted",
            node="n1",
            task_id=EVIL["task_id"],
            goal_id=EVIL["goal_id"],
            rule=EVIL["rule"],
            actors=Actors(user=EVIL["user"], session=EVIL["session"], agent=EVIL["agent"]),
        )
    )
    await log.close()
    out = io.BytesIO()
    export(tmp_path / "audit", out, "csv")
    rows = list(csv.DictReader(io.StringIO(out.getvalue().decode())))
    row = rows[-1]
    for column in ("task_id", "user", "session", "agent", "rule", "goal_id"):
        assert row[column] == "'" + EVIL[column], column
    for cells in rows:
        for value in cells.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), value


@pytest.mark.parametrize(
    ("value", "shown"), [("=1", "'=1"), ("plain", "plain"), (7, 7), ("", ""), ("a=b", "a=b")]
)
def test_csv_cell(value: Any, shown: Any) -> None:
    assert csv_cell(value) == shown


def test_a_client_ca_means_mutual_tls_unless_said_otherwise(pki: Any, caplog: Any) -> None:
    base = {"cert": pki.server_cert, "key": pki.server_key, "client_ca": pki.ca}
    assert TlsConfig.parse(base).require_client_cert is True
    assert TlsConfig.parse(base).scheme == "mTLS"
    with caplog.at_level(logging.WARNING, logger="agency.config"):
        optional = TlsConfig.parse({**base, "require_client_cert": False})
    assert optional.require_client_cert is False
    assert "require_client_cert is false" in caplog.text
    plain = TlsConfig.parse({"cert": pki.server_cert, "key": pki.server_key})
    assert plain.require_client_cert is False and plain.scheme == "TLS"
