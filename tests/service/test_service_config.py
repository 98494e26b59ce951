"""The definition file's messaging section, the audit checkpoint key, and who overrides whom.

Precedence: ``agency serve`` flags > ``AGENCY_*`` variables > the definition file > defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from middleware import InvalidInput
from middleware.audit.checkpoint import Signer, load_or_create_signer
from middleware.cli import build_parser, main
from middleware.cli.serve import _overrides
from middleware.messaging import generate_key, public_key_b64
from middleware.server.bootstrap import build_agency, build_post_office
from middleware.server.settings import definition_from, hash_token, load_definition

ROOT = Path(__file__).resolve().parents[2]
ECOMMERCE = ROOT / "examples" / "ecommerce.yaml"


def agent(name: str, token: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "public_key": public_key_b64(generate_key()),
        "token_sha256": hash_token(token or f"token-of-{name}"),
        **extra,
    }


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "agency.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------------- messaging section


def test_the_shipped_file_declares_enforced_flows():
    definition = load_definition(ECOMMERCE, env={})
    flows = definition.messaging.build_flows()
    assert definition.messaging.flows is not None and definition.mailbox_backend == "memory"
    flows.check("customer_service", "warranty_agent")
    assert flows.check("reply_agent", "customer_service").tool.kind == "handoff"
    with pytest.raises(Exception, match="may not message"):
        flows.check("reply_agent", "warranty_agent")


def test_every_messaging_problem_is_listed_by_path(tmp_path):
    data = {
        "server": {"address": "nowhere"},
        "messaging": {
            "agents": [
                agent("desk"),
                agent("archive", receive_only=True),
                agent("desk", token="token-of-desk"),
            ],
            "flows": [
                "desk > ghost",
                "archive > desk",
                {"from": "desk", "to": "archive", "tool": "fax"},
                42,
                "desk",
                "desk > desk",
            ],
        },
    }
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, data), env={})
    problems = {p.field: p.reason for p in info.value.problems}
    assert set(problems) == {
        "server.address",  # the other sections' problems come in the same report
        "messaging.agents[2].name",
        "messaging.agents[2].token_sha256",
        "messaging.flows[0]",
        "messaging.flows[1]",
        "messaging.flows[2].tool",
        "messaging.flows[3]",
        "messaging.flows[4]",
        "messaging.flows[5]",
    }
    assert "ghost" in problems["messaging.flows[0]"]
    assert (
        "archive > desk" in problems["messaging.flows[1]"]
        and "receive-only" in problems["messaging.flows[1]"]
    )
    assert "fax" in problems["messaging.flows[2].tool"]
    assert "cannot message itself" in problems["messaging.flows[5]"]


def test_bad_identities_and_backend_are_named(tmp_path):
    bad = agent("-x", public_key="not base64!", token_sha256="zz")
    data = {"messaging": {"mailboxes": "disk", "agents": [bad]}}
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, data), env={})
    assert {p.field for p in info.value.problems} == {
        "messaging.mailboxes",
        "messaging.agents[0].name",
        "messaging.agents[0].public_key",
        "messaging.agents[0].token_sha256",
    }


def test_config_check_reports_flow_problems_and_summarises_flows(tmp_path, capsys):
    data = {"messaging": {"agents": [agent("a"), agent("b")], "flows": ["a > b", "b > nobody"]}}
    assert main(["config", "check", str(write(tmp_path, data)), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == [
        {"path": "messaging.flows[1]", "problem": "no agent 'nobody' in the communication flows"}
    ]
    data["messaging"]["flows"] = ["a > b"]
    assert main(["config", "check", str(write(tmp_path, data))]) == 0
    assert "2 messaging agents, 1 flow, mailboxes memory" in capsys.readouterr().out


async def test_post_office_enrolls_the_agents_and_enforces_the_flows(tmp_path):
    from middleware.audit import MemoryAuditLog
    from middleware.errors import PermissionDenied
    from middleware.messaging import sign_message
    from middleware.smf import SMFMessage

    keys = {name: generate_key() for name in ("a", "b")}
    data = {
        "messaging": {
            "agents": [
                {"name": n, "public_key": public_key_b64(k), "token_sha256": hash_token(f"t-{n}")}
                for n, k in keys.items()
            ],
            "flows": ["a > b"],
        }
    }
    audit = MemoryAuditLog()
    po = await build_post_office(definition_from(data, env={}), audit=audit)

    def msg(sender: str, receiver: str) -> tuple[SMFMessage, str]:
        m = SMFMessage.parse(
            {
                "sender": sender,
                "receiver": receiver,
                "content": "hi",
                "metadata": {
                    "provenance": {"source": sender, "reliability_score": 1},
                    "freshness_ttl": 60,
                    "confidence_score": 1,
                    "intention_trace": ["GOAL_TEST_001"],
                },
            }
        )
        return m, sign_message(keys[sender], m)

    m, sig = msg("a", "b")
    assert (await po.send("t-a", m, signature=sig)).recipients == ("b",)  # the out-of-band token works
    (got,) = await po.pull("t-b")
    assert got.message.message_id == m.message_id
    m, sig = msg("b", "a")
    with pytest.raises(PermissionDenied):
        await po.send("t-b", m, signature=sig)  # no flow b > a
    enrolled = [r.actors.agent for _, r in audit.records() if r.outcome == "enrolled"]
    assert enrolled == ["a", "b"]


# ---------------------------------------------------------------------- checkpoint key


async def test_the_checkpoint_key_signs_the_audit_log(tmp_path):
    signer = load_or_create_signer(tmp_path / "secrets" / "audit.key", "audit-gw-key")
    definition = definition_from(
        {
            "agency": {"node_id": "gw-1"},
            "audit": {
                "directory": str(tmp_path / "audit"),
                "checkpoint_key": str(tmp_path / "secrets/audit.key"),
            },
        },
        env={},
    )
    agency = await build_agency(definition)
    try:
        assert agency.audit.vkey == signer.vkey  # type: ignore[attr-defined]
    finally:
        await agency.close()
    assert (tmp_path / "audit" / "gw-1" / "checkpoint.vkey").read_text().strip() == signer.vkey
    assert not (tmp_path / "audit" / "keys").exists()  # no default key was made instead


def test_a_missing_or_bad_checkpoint_key_is_refused_naming_the_field(tmp_path, capsys):
    missing = {"audit": {"checkpoint_key": str(tmp_path / "nope.key")}}
    with pytest.raises(InvalidInput) as info:
        definition_from(missing, env={})
    assert info.value.field == "audit.checkpoint_key" and "cannot read" in str(info.value)

    garbage = tmp_path / "garbage.key"
    garbage.write_text("hello\n")
    with pytest.raises(InvalidInput) as info:
        definition_from({"audit": {"checkpoint_key": str(garbage)}}, env={})
    assert info.value.field == "audit.checkpoint_key" and "signer key" in str(info.value)

    # agency serve refuses to start, before binding anything
    path = write(tmp_path, {**missing, "server": {"address": "127.0.0.1:0", "metrics_address": ""}})
    assert main(["serve", "--config", str(path)]) == 2
    assert "audit.checkpoint_key" in capsys.readouterr().err


def test_the_key_file_can_also_come_from_the_environment(tmp_path):
    key = tmp_path / "k"
    key.write_text(Signer("audit-env").skey())
    definition = definition_from({}, env={"AGENCY_CHECKPOINT_KEY": str(key)})
    signer = definition.audit.signer()
    assert signer is not None and signer.name == "audit-env"


# ---------------------------------------------------------------------- precedence


def serve_overrides(*argv: str) -> dict[str, Any]:
    return _overrides(build_parser().parse_args(["serve", *argv]))


def test_flags_beat_env_beat_file_beat_defaults(tmp_path, pki):
    pem = {"cert": pki.server_cert, "key": pki.server_key, "ca": pki.ca}  # checked when read
    path = write(
        tmp_path,
        {
            "server": {
                "address": "127.0.0.1:1001",
                "metrics_address": "127.0.0.1:2001",
                "tracing": "console",
            },
            "agency": {"node_id": "from-file", "deadline_factor": 2},
            "storage": {"backend": "memory", "key_prefix": "file:"},
        },
    )
    env = {
        "AGENCY_ADDRESS": "127.0.0.1:1002",
        "AGENCY_METRICS_ADDRESS": "",  # empty = metrics off, and it still overrides
        "AGENCY_NODE_ID": "from-env",
        "AGENCY_REDIS_URL": "redis://127.0.0.1:6379/4",
        "AGENCY_KEY_PREFIX": "env:",
        "AGENCY_TLS_CERT": str(pem["cert"]),
        "AGENCY_TLS_KEY": str(pem["key"]),
        "AGENCY_AUTH_TOKENS": "",  # empty = unset
    }
    d = load_definition(path, env=env)
    assert d.server.address == "127.0.0.1:1002" and d.server.metrics_address == ""
    assert d.server.tracing == "console"  # the file, where nothing overrides it
    assert d.agency.node_id == "from-env" and d.agency.deadline_factor == 2
    assert (d.storage.backend, d.storage.redis_url, d.storage.key_prefix) == (
        "redis",
        "redis://127.0.0.1:6379/4",
        "env:",
    )
    assert d.server.tls is not None and not d.server.tls.require_client_cert
    assert d.server.auth_tokens is None
    assert d.mailbox_backend == "redis"

    flags = serve_overrides(
        "--address", "127.0.0.1:1003", "--tls-client-ca", str(pem["ca"]), "--tracing", "off"
    )
    d = load_definition(path, env=env, overrides=flags)
    assert d.server.address == "127.0.0.1:1003" and d.server.tracing == "off"
    # the flag adds mTLS to the certificate and key the environment gave
    assert d.server.tls is not None and d.server.tls.require_client_cert
    assert d.server.tls.cert == pem["cert"] and d.server.tls.client_ca == pem["ca"]

    d = load_definition(path, env={})
    assert (d.server.address, d.agency.node_id, d.storage.backend) == (
        "127.0.0.1:1001",
        "from-file",
        "memory",
    )


def test_the_environment_applies_without_a_file_too():
    d = definition_from(None, env={"AGENCY_REDIS_URL": "redis://cache:6379/0", "AGENCY_NODE_ID": "pod-7"})
    assert (d.storage.backend, d.agency.node_id, d.mailbox_backend) == ("redis", "pod-7", "redis")
    d = definition_from(None, env={"AGENCY_REDIS_URL": "redis://cache:6379/0", "AGENCY_STORAGE": "memory"})
    assert d.storage.backend == "memory"  # AGENCY_STORAGE says so explicitly
    d = definition_from(None, env={})
    assert d.server.address == "127.0.0.1:50051" and d.audit_directory == Path("agency-data/audit")


def test_the_audit_directory_follows_the_layer_that_last_names_a_place(tmp_path):
    file_dir = {"audit": {"directory": "/file/audit"}, "server": {"data_dir": "/file/data"}}
    assert definition_from(file_dir, env={}).audit_directory == Path("/file/audit")
    # a data directory from the environment moves the audit log with it
    env = {"AGENCY_DATA_DIR": "/env/data"}
    assert definition_from(file_dir, env=env).audit_directory == Path("/env/data/audit")
    # ... unless the environment names the audit directory itself
    env = {"AGENCY_DATA_DIR": "/env/data", "AGENCY_AUDIT_DIR": "/env/audit"}
    assert definition_from(file_dir, env=env).audit_directory == Path("/env/audit")
    # and a --data-dir flag beats both
    flags = serve_overrides("--data-dir", "/flag/data")
    assert definition_from(file_dir, env=env, overrides=flags).audit_directory == Path("/flag/data/audit")
    # the file alone: data_dir decides when no audit directory is given
    assert definition_from({"server": {"data_dir": "/d"}}, env={}).audit_directory == Path("/d/audit")


def test_serve_help_lists_every_variable_and_the_precedence(capsys):
    from middleware.server.settings import ENV_VARIABLES

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "flags > AGENCY_* environment variables > the definition file > defaults" in text
    for var in ENV_VARIABLES:
        assert var in text
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert all(f"`{var}`" in docs for var in ENV_VARIABLES)


async def test_replicas_on_one_redis_each_register_the_files_agents(tmp_path, redis_client, redis_prefix):
    """A second gateway (or a restarted one) on the same Redis starts with the same file."""
    import os

    url = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    data = yaml.safe_load(ECOMMERCE.read_text())
    data["storage"] = {"backend": "redis", "redis_url": url, "key_prefix": redis_prefix}
    agencies = []
    try:
        for node in ("gw-1", "gw-2"):
            data["agency"]["node_id"] = node
            data["audit"] = {"directory": str(tmp_path / "audit")}
            agencies.append(await build_agency(definition_from(data, env={})))
        entry = await agencies[0].catalog.get("warranty_agent@2.1.0")
        assert entry.revision == 2  # registered by gw-1, re-registered (same contract) by gw-2
    finally:
        for agency in agencies:
            await agency.close()
            await agency.catalog.close()
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


def test_config_check_holds_people_clients_and_agents_to_the_one_name_rule(tmp_path, capsys):
    """Issue 26: console person 'Alice' and token client 'alice' were accepted silently (and
    'Alice' then approved what 'alice' submitted); reserved and look-alike agent names too."""
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {hash_token('tok-alice')} client\nops {hash_token('tok-ops')} admin\n")
    tokens.chmod(0o600)
    person = {"name": "Alice", "roles": ["approver"], "token_sha256": hash_token("person-alice")}
    data = {"server": {"auth_tokens": str(tokens)}, "humans": {"people": [person]}}
    assert main(["config", "check", str(write(tmp_path, data)), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (problem,) = report["problems"]
    assert problem["path"] == "humans.people[0].name" and "'alice'" in problem["problem"]
    data["humans"]["people"][0]["name"] = "a1ice"  # a look-alike is no better
    assert main(["config", "check", str(write(tmp_path, data)), "--format", "json"]) == 1
    capsys.readouterr()
    data["humans"]["people"][0]["name"] = "alice"  # one name, spelled one way: the same human
    assert main(["config", "check", str(write(tmp_path, data))]) == 0
    capsys.readouterr()
    two = [person, {"name": "ALICE", "roles": ["operator"], "token_sha256": hash_token("x")}]
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, {"humans": {"people": two}}), env={})
    assert "looks like people[0]" in str(info.value)
    agents = [agent("billing"), agent("Bi11ing"), agent("human:eve"), agent("Agency:Desk")]
    with pytest.raises(InvalidInput) as info:
        load_definition(write(tmp_path, {"messaging": {"agents": agents}}), env={})
    problems = {p.field: p.reason for p in info.value.problems}
    assert "looks like agents[0]" in problems["messaging.agents[1].name"]
    assert "reserved prefix 'human:'" in problems["messaging.agents[2].name"]
    assert "reserved prefix 'agency:'" in problems["messaging.agents[3].name"]
