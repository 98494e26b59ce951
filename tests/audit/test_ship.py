"""``agency audit ship``: records streamed to a real syslog collector (Debian's rsyslogd, run by
the test with its own configuration), at least once, through collector, gateway and shipper
restarts: nothing lost, duplicates at most a round each and identifiable by node and index."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from middleware.audit.follow import FollowedRecord
from middleware.audit.ship import frame, syslog_message
from middleware.audit.wal import WalAuditLog

from .helpers import SIGNER, open_log, record
from .rsyslog_collector import Rsyslog

pytestmark = pytest.mark.timeout(180)

RFC5424 = re.compile(
    r"^<(\d{1,3})>1 (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z) (\S{1,255}) agency - (\S{1,32}) "
    r'\[agency@32473 node="([^"]+)" index="(\d+)"\] (.*)$',
    re.S,
)


def test_a_record_is_one_rfc5424_message_octet_counted() -> None:
    rec = FollowedRecord("gw-1", 42, 0, record(1, outcome="failure", event_type="failure.event").canonical())
    msg = syslog_message(rec, "cef")
    m = RFC5424.match(msg.decode())
    assert m, msg
    assert int(m.group(1)) == 13 * 8 + 3  # log audit, error (a failure)
    assert (m.group(3), m.group(4), m.group(5), m.group(6)) == ("gw-1", "failure.event", "gw-1", "42")
    assert m.group(7).startswith("CEF:0|Agency|")
    assert frame(msg) == str(len(msg)).encode() + b" " + msg
    ocsf = RFC5424.match(syslog_message(rec, "ocsf").decode())
    assert ocsf and json.loads(ocsf.group(7))["class_uid"] == 6003
    raw = RFC5424.match(syslog_message(rec, "json").decode())
    assert raw and json.loads(raw.group(7))["outcome"] == "failure"


def _agency(*argv: str) -> list[str]:
    return [sys.executable, "-m", "middleware", "audit", *argv]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")}


def _wait(condition: Callable[[], bool], what: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def _append(log: WalAuditLog, start: int, count: int) -> None:
    for b in range(start, start + count, 20):
        await log.append_batch([record(i) for i in range(b, min(b + 20, start + count))])


def test_nothing_is_lost_through_collector_gateway_and_shipper_restarts(tmp_path: Path) -> None:
    root, state, batch = tmp_path / "audit", tmp_path / "ship-state", 25
    collector = Rsyslog(tmp_path / "collector").start()

    def shipper() -> subprocess.Popen[bytes]:
        with open(tmp_path / "ship.log", "ab") as err:  # the child keeps its own descriptor
            return _popen(err)

    def _popen(err: BinaryIO) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                *_agency(
                    "ship", str(root), "--to", f"tcp://127.0.0.1:{collector.port}", "--state", str(state)
                ),
                *("--follow", "--interval", "0.05", "--batch", str(batch), "--key", SIGNER.vkey),
            ],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )

    def got() -> set[int]:
        return {i for _, i in collector.received()}

    log = open_log(root, compress_sealed=True, segment_bytes=16384)
    asyncio.run(_append(log, 0, 150))
    ship = shipper()
    try:
        _wait(lambda: len(got()) >= 100, "the first records at the collector")
        collector.stop()  # the collector goes away mid-stream ...
        asyncio.run(_append(log, 150, 150))
        collector = Rsyslog(tmp_path / "collector", port=collector.port).start()  # ... and comes back
        asyncio.run(log.close())  # the gateway restarts: its last segment sealed (and compressed)
        log = open_log(root, compress_sealed=True, segment_bytes=16384)
        asyncio.run(_append(log, 300, 100))
        _wait(lambda: len(got()) >= 350, "records after the restarts")
        ship.send_signal(signal.SIGTERM)  # the shipper restarts too: its cursor is on disk
        assert ship.wait(timeout=30) == 0
        asyncio.run(_append(log, 400, 100))
        ship = shipper()
        size = log.size
        _wait(lambda: got() >= set(range(1, size + 1)), "every record at the collector")
    finally:
        ship.send_signal(signal.SIGTERM)
        ship.wait(timeout=30)
        asyncio.run(log.close())
        collector.stop()
    received = collector.received()
    assert {i for _, i in received} == set(range(1, size + 1)), "nothing lost"
    dupes = Counter(i for _, i in received)
    twice = [i for i, n in dupes.items() if n > 1]
    assert all(n <= 3 for n in dupes.values())
    assert len(twice) <= 3 * batch, f"at most a round per disruption arrives twice: {len(twice)}"
    lines: dict[int, set[str]] = {}
    for line in collector.lines():
        m = re.search(r'index="(\d+)"\] (.*)$', line)
        if m:
            lines.setdefault(int(m.group(1)), set()).add(m.group(2))
    assert all(len(v) == 1 for v in lines.values()), "a duplicate is the same message, named by its index"


@pytest.mark.parametrize(("tls", "module", "fmt"), [(True, "imtcp", "ocsf"), (False, "imptcp", "json")])
def test_ship_over_tls_and_imptcp_then_nothing_twice(
    tmp_path: Path, tls: bool, module: str, fmt: str
) -> None:
    root, state = tmp_path / "audit", tmp_path / "state"
    log = open_log(root, checkpoint_interval=None)
    asyncio.run(_append(log, 0, 60))
    asyncio.run(log.close())
    collector = Rsyslog(tmp_path / "c", tls=tls, module=module).start()
    try:
        url = f"{'tls' if tls else 'tcp'}://127.0.0.1:{collector.port}"
        argv = _agency(
            "ship", str(root), "--to", url, "--state", str(state), "--format", fmt, "--batch", "16"
        )
        if tls:
            argv += ["--ca", str(collector.ca)]
        done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and "shipped 60 records" in done.stdout, done.stderr
        again = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "shipped 0 records" in again.stdout, again.stderr
    finally:
        collector.stop()
    assert sorted(i for _, i in collector.received()) == list(range(1, 61))
    for line in collector.lines():
        body = json.loads(line.split("] ", 1)[1])
        assert body.get("class_uid") == 6003 if fmt == "ocsf" else body["event_type"] == "agent.step"


def test_an_unreachable_collector_is_an_error_and_moves_no_cursor(tmp_path: Path) -> None:
    root, state = tmp_path / "audit", tmp_path / "state"
    log = open_log(root)
    asyncio.run(_append(log, 0, 5))
    asyncio.run(log.close())
    port = Rsyslog(tmp_path / "unused").port  # nothing listens there
    done = subprocess.run(
        _agency("ship", str(root), "--to", f"tcp://127.0.0.1:{port}", "--state", str(state)),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.returncode == 2
        and "agency: error:" in done.stderr
        and "did not take" in done.stderr
        and "Traceback" not in done.stderr
    )
    assert not (state / "n1.cursor").exists()
