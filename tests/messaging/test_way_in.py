"""The way in for a new user (issue 19): the quickstart of docs/messaging.md run verbatim, the
shipped example, the public messaging client and the ``agency messaging`` commands."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_processes import free_port
from served_in_thread import ServedInThread

from middleware import Agency
from middleware.audit import MemoryAuditLog
from middleware.cli import main as cli
from middleware.client.messaging import AgentCredentials, MessagingClient
from middleware.errors import (
    InvalidInput,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
)
from middleware.messaging import PostOffice
from middleware.server.bootstrap import build_post_office
from middleware.server.definition import AgencyDefinition
from middleware.server.grpc_api import build_server

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _quickstart() -> str:
    text = (ROOT / "docs" / "messaging.md").read_text()
    assert text.startswith("# Agent-to-agent messaging\n\n## Quickstart\n"), "the doc starts with it"
    block = re.search(r"## Quickstart\n.*?```sh\n(.*?)```", text, re.S)
    assert block, "no sh block in the quickstart"
    return block.group(1)


@pytest.mark.timeout(90)
def test_the_quickstart_of_the_messaging_guide_runs_verbatim(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AGENCY_ADDRESS": f"127.0.0.1:{free_port()}",
        "AGENCY_METRICS_ADDRESS": "",  # several tests at once: no fixed metrics port
    }
    env.pop("AGENCY_AGENTS_DIR", None)
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", _quickstart()],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode()
    assert proc.returncode == 0, text
    assert '"recipients": ["bob"]' in text
    assert '"from": "alice"' in text and '"content": {"task": "review", "pr": 7}' in text
    for name in ("alice", "bob"):  # secrets readable by their owner only
        for suffix in ("key", "token"):
            mode = stat.S_IMODE((tmp_path / "agents" / f"{name}.{suffix}").stat().st_mode)
            assert mode == 0o600
    definition = yaml.safe_load((tmp_path / "messaging.yaml").read_text())
    token = (tmp_path / "agents" / "alice.token").read_text().strip()
    assert token not in (tmp_path / "messaging.yaml").read_text()  # only its hash is there
    assert [a["name"] for a in definition["messaging"]["agents"]] == ["alice", "bob"]


@pytest.mark.timeout(60)
def test_the_messaging_example_runs_as_shipped() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "messaging_quickstart.py")],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "bob got {'task': 'review', 'pr': 7} from alice (params {'priority': 'high'})" in done.stdout
    assert "refused as expected: NOT_FOUND" in done.stdout
    assert "refused as expected: INVALID_INPUT on metadata.freshness_ttl" in done.stdout


# ---------------------------------------------------------------- the client
@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[str, dict[str, AgentCredentials], PostOffice]]:
    creds = {n: AgentCredentials.generate(n) for n in ("alice", "bob", "carol")}
    definition = AgencyDefinition.parse(
        {
            "version": 1,
            "messaging": {
                "agents": [c.enrollment() for c in creds.values()],
                "flows": ["alice > bob", "carol > bob"],
                "rate_limits": {"sender": [{"match": "carol", "rate": 0.01, "burst": 1}]},
                "acl": {"topics": [{"pattern": "billing.*", "publishers": ["alice"], "subscribers": ["*"]}]},
            },
        }
    )
    audit = MemoryAuditLog()
    po = await build_post_office(definition, audit=audit)
    server = build_server(Agency(audit=audit), "127.0.0.1:0", post_office=po)
    await server.start()
    yield f"127.0.0.1:{server.port}", creds, po
    await server.stop(0)


async def test_the_client_sends_pulls_acks_publishes_and_subscribes(gateway: Any) -> None:
    address, creds, po = gateway
    async with (
        MessagingClient(creds["alice"], address) as alice,
        MessagingClient(creds["bob"], address) as bob,
    ):
        sent = await alice.send("bob", {"n": 1}, ttl=120, trigger_turn=True, params={"p": 1.5})
        assert sent.recipients == ("bob",)
        (got,) = await bob.pull(wait=5)
        assert got.message.content == {"n": 1} and got.trigger_turn and got.params == {"p": 1.5}
        assert got.ttl == 120 and got.message.message_id == sent.message_id
        # the receiver can check the sender's signature itself
        assert po.identity.verify(got.message, got.signature, got.options())
        assert await bob.ack([got]) == 1
        assert await bob.pull() == []

        stream = bob.subscribe(["billing.invoice"])
        first = asyncio.ensure_future(stream.__anext__())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not await po.subscribers("billing.invoice"):
            assert loop.time() < deadline, "never subscribed"
            await asyncio.sleep(0.01)
        published = await alice.publish("billing.invoice", {"amount": 10})
        assert published.recipients == ("bob",)
        streamed = await asyncio.wait_for(first, 10)
        assert streamed.kind == "topic" and streamed.topic == "billing.invoice"
        assert await bob.ack([streamed.receipt]) == 1
        await stream.aclose()

        assert (await alice.broadcast("maintenance at 2")).recipients == ("bob", "carol")


async def test_the_client_raises_the_librarys_errors(gateway: Any) -> None:
    address, creds, _ = gateway
    async with (
        MessagingClient(creds["alice"], address) as alice,
        MessagingClient(creds["carol"], address) as carol,
    ):
        with pytest.raises(NotFound):
            await alice.send("nobody", "x")
        with pytest.raises(PermissionDenied):  # no flow bob -> alice... alice -> carol either
            await alice.send("carol", "x")
        with pytest.raises(PermissionDenied):  # the ACL: only alice publishes billing.*
            await carol.publish("billing.invoice", "x")
        with pytest.raises(InvalidInput) as bad:
            await alice.send("bob", "x", freshness_ttl=0)
        assert bad.value.field.endswith("freshness_ttl")
        await carol.send("bob", "one")
        with pytest.raises(ResourceExhausted) as limited:
            await carol.send("bob", "two")
        assert limited.value.details["retry_after_ms"] > 1000
    stranger = AgentCredentials.generate("alice")  # right name, wrong token
    async with MessagingClient(stranger, address) as impostor:
        with pytest.raises(Unauthenticated):
            await impostor.pull()


# ---------------------------------------------------------------- the commands
def test_keygen_refuses_to_overwrite_and_enroll_refuses_duplicates_and_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path / "agents")
    assert cli(["messaging", "keygen", "alice", "--dir", folder]) == 0
    assert "token_sha256" in capsys.readouterr().out
    assert cli(["messaging", "keygen", "alice", "--dir", folder]) == 2
    assert "credentials of 'alice' already exist" in capsys.readouterr().err
    assert cli(["messaging", "keygen", "bad!name", "--dir", folder]) == 2
    assert "not an agent name" in capsys.readouterr().err
    config = tmp_path / "agency.yaml"
    assert cli(["messaging", "enroll", "alice", "--dir", folder, "--config", str(config)]) == 0
    AgencyDefinition.parse(yaml.safe_load(config.read_text()))  # what serve will read
    assert cli(["messaging", "enroll", "alice", "--dir", folder, "--config", str(config)]) == 2
    assert "already has alice" in capsys.readouterr().err
    assert cli(["messaging", "enroll", "ghost", "--dir", folder, "--config", str(config)]) == 3  # not found
    assert "no credentials of 'ghost'" in capsys.readouterr().err
    loaded = AgentCredentials.load(folder, "alice")
    assert loaded.token_sha256 in config.read_text() and loaded.token not in config.read_text()


class _OpenRegistration(ServedInThread):
    """A gateway whose post office lets agents register themselves."""

    async def start(self) -> None:
        self.post_office = PostOffice(registration="open")
        self.server = build_server(Agency(), "127.0.0.1:0", post_office=self.post_office)
        await self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"

    async def stop(self) -> None:
        await self.server.stop(0)


def test_the_cli_registers_an_agent_finds_it_and_it_talks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path / "agents")
    with _OpenRegistration() as gw:
        where = ["--dir", folder, "--address", gw.address]
        args = ["messaging", "register", "translator", "--description", "Translates German", *where]
        assert cli([*args, "--subscribes", "task.translate"]) == 0
        assert "translator: registered (active)" in capsys.readouterr().out
        assert cli(["messaging", "register", "asker", *where]) == 0
        assert cli(["messaging", "register", "asker", *where]) == 2  # its credentials exist already
        capsys.readouterr()
        assert cli(["messaging", "find", "german", "--as", "asker", *where]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert json.loads(line)["name"] == "translator" and json.loads(line)["subscribes"] == [
            "task.translate"
        ]
        assert cli(["messaging", "send", "--as", "asker", "translator", "hallo", *where]) == 0
        capsys.readouterr()
        assert cli(["messaging", "pull", "--as", "translator", "--ack", *where]) == 0
        assert json.loads(capsys.readouterr().out)["content"] == "hallo"


class _Moderated(ServedInThread):
    """A gateway whose post office holds messages with a denied phrase."""

    def __init__(self, creds: dict[str, AgentCredentials]) -> None:
        super().__init__()
        self.creds = creds

    async def start(self) -> None:
        definition = AgencyDefinition.parse(
            {
                "version": 1,
                "messaging": {
                    "agents": [c.enrollment() for c in self.creds.values()],
                    "moderation": {"deny_phrases": ["wire the money"]},
                },
            }
        )
        self.post_office = await build_post_office(definition, audit=MemoryAuditLog())
        self.server = build_server(Agency(), "127.0.0.1:0", post_office=self.post_office)
        await self.server.start()
        self.address = f"127.0.0.1:{self.server.port}"

    async def stop(self) -> None:
        await self.server.stop(0)


def test_a_held_message_is_told_apart_from_one_nobody_subscribed_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: the client and the command dropped ``quarantined``: held looked like no subscribers."""
    folder = tmp_path / "agents"
    creds = {n: AgentCredentials.generate(n) for n in ("alice", "bob")}
    for c in creds.values():
        c.save(folder)
    with _Moderated(creds) as gw:

        async def client_side() -> tuple[Any, Any]:
            async with MessagingClient(creds["alice"], gw.address) as alice:
                held = await alice.send("bob", "please wire the money today")
                nobody = await alice.publish("nobody.listens", "hello")
                return held, nobody

        held, nobody = asyncio.run(client_side())
        assert held.recipients == () and "wire the money" in held.quarantined
        assert nobody.recipients == () and nobody.quarantined == ""
        where = ["--dir", str(folder), "--address", gw.address, "--as", "alice"]
        assert cli(["messaging", "send", *where, "bob", "wire the money now"]) == 1
        out = capsys.readouterr()
        assert "wire the money" in json.loads(out.out)["quarantined"] and "held by moderation" in out.err
        assert cli(["messaging", "send", *where, "--topic", "nobody.listens", "hello"]) == 0
        told = json.loads(capsys.readouterr().out)
        assert told["recipients"] == [] and told["quarantined"] == ""
