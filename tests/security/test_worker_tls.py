"""Remote workers over TLS and mutual TLS, both ways, with per-agent bearer tokens.

A gateway (real gRPC server on port 0, built from an agency definition as ``agency serve``
builds it) and a worker (``Worker``, or ``agency worker`` in a subprocess) with certificates
from the throwaway PKI: the worker registers through (m)TLS with its own token, the gateway
calls the worker through (m)TLS, and each missing piece fails fast and says which.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from middleware import AgentRequest, FailureType, NotFound
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, worker_pb2, worker_pb2_grpc
from middleware.cli import build_parser, main
from middleware.cli.worker import worker_config
from middleware.errors import InvalidInput, Unauthenticated, Unavailable
from middleware.pipeline import Agency
from middleware.server.bootstrap import build_agency
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.channel import open_channel
from middleware.server.remote_agent import RemoteAgent
from middleware.server.settings import (
    ClientTlsConfig,
    ServerConfig,
    TlsConfig,
    WorkersTlsConfig,
    definition_from,
    hash_token,
)
from middleware.server.worker import Worker

CONTRACT = {"name": "translator", "version": "1.0.0", "can_do": ["translate"], "slo_latency_ms": 3000}
SUBMIT = agency_pb2.SubmitRequest(
    text="hola mundo", constraints_json=json.dumps({"action": "translate"}), input_json='{"text": "hola"}'
)
AGENT_TOKEN = "agt_translator-s3cret"  # the translator agent's own credential
OPS_TOKEN = "ops-cli-token"


async def translate(request: AgentRequest) -> str:
    return f"translated: {request.text}"


@dataclass
class Gateway:
    agency: Agency
    address: str


@pytest.fixture
async def gateway(tmp_path, pki):
    """Start gateways as ``agency serve`` does, from a definition (``server.tls``, ``workers.tls``)."""
    started: list[tuple[Agency, Any]] = []

    async def start(
        *,
        mtls: bool = True,
        tokens: bool = True,
        workers_tls: dict[str, Any] | None = None,
        workers_token: Path | None = None,
    ):
        n = len(started)
        server: dict[str, Any] = {"data_dir": str(tmp_path / f"gw{n}")}
        if mtls:
            server["tls"] = {
                "cert": str(pki.server_cert),
                "key": str(pki.server_key),
                "client_ca": str(pki.ca),
                "require_client_cert": True,
            }
        if tokens:  # per-client credentials: the worker's line names its agent
            token_file = tmp_path / f"tokens{n}"
            token_file.write_text(f"translator {hash_token(AGENT_TOKEN)}\nops {hash_token(OPS_TOKEN)}\n")
            server["auth_tokens"] = str(token_file)
        data: dict[str, Any] = {"server": server, "agency": {"node_id": f"gw{n}"}}
        # what the translator's token may declare (issue 14: granted by an admin)
        data["grants"] = {"translator": {"actions": ["translate"], "endpoints": ["127.0.0.1"]}}
        if workers_tls is not None:
            data["workers"] = {"tls": workers_tls}
        if workers_token is not None:
            data.setdefault("workers", {})["token_file"] = str(workers_token)
        definition = definition_from(data, env={})
        agency = await build_agency(definition)
        srv = build_server(
            agency,
            "127.0.0.1:0",
            tls=definition.server.tls,
            token_hashes=definition.server.token_hashes(),
            grants=definition.grants,
        )
        await srv.start()
        started.append((agency, srv))
        return Gateway(agency, f"127.0.0.1:{srv.port}")

    yield start
    for agency, srv in started:
        await srv.stop(0)
        await agency.close()
        await agency.catalog.close()


def worker_mtls(pki) -> TlsConfig:
    """The worker serves mTLS: only callers with a client certificate from the CA get through.
    Its certificate is issued for its agent's name (the gateway binds workers to their agents)."""
    cert, key = pki.issue("translator")
    return TlsConfig(cert=cert, key=key, client_ca=pki.ca, require_client_cert=True)


def worker_tls_as(pki, name: str) -> TlsConfig:
    """The worker serves TLS with a certificate issued for ``name`` (and 127.0.0.1)."""
    cert, key = pki.issue(name)
    return TlsConfig(cert=cert, key=key)


def to_gateway(pki) -> ClientTlsConfig:
    return ClientTlsConfig(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)


def gateway_to_workers(pki, *, cert: bool = True) -> dict[str, Any]:
    """``workers.tls`` of the definition: the CA of the workers, the gateway's client certificate."""
    tls = {"ca": str(pki.ca)}
    if cert:
        tls |= {"cert": str(pki.client_cert), "key": str(pki.client_key)}
    return tls


async def submit(gw: Gateway, pki) -> agency_pb2.Outcome:
    async with open_channel(gw.address, tls=to_gateway(pki), token=OPS_TOKEN) as channel:
        return await agency_pb2_grpc.AgencyServiceStub(channel).Submit(SUBMIT, timeout=10)


async def test_worker_registers_over_mtls_with_its_token_and_serves_the_gateway_over_mtls(gateway, pki):
    gw = await gateway(workers_tls=gateway_to_workers(pki))
    worker = Worker(
        translate,
        CONTRACT,
        gateway=gw.address,
        gateway_tls=to_gateway(pki),
        token=AGENT_TOKEN,
        tls=worker_mtls(pki),
    )
    async with worker:
        assert worker.scheme == "mTLS"
        entry = await gw.agency.catalog.get("translator@1.0.0")
        assert entry.contract.endpoint == worker.endpoint

        outcome = await asyncio.wait_for(submit(gw, pki), 10)
        assert outcome.state == "completed", outcome.reason
        assert json.loads(outcome.output_json) == "translated: hola mundo"

        # the worker's port really is mTLS: a caller without a client certificate is refused
        async with open_channel(worker.endpoint, tls=ClientTlsConfig(ca=pki.ca)) as anonymous:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await worker_pb2_grpc.AgentWorkerStub(anonymous).Invoke(worker_pb2.InvokeRequest(), timeout=5)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    # deregistered over the same channel on stop
    with pytest.raises(NotFound):
        await gw.agency.catalog.get("translator@1.0.0")


async def test_worker_that_does_not_trust_the_gateways_ca_fails_fast_naming_the_flag(gateway, pki):
    gw = await gateway()
    wrong_ca = ClientTlsConfig(ca=pki.other_ca, cert=pki.client_cert, key=pki.client_key)
    worker = Worker(
        translate, CONTRACT, gateway=gw.address, gateway_tls=wrong_ca, token=AGENT_TOKEN, connect_timeout=60
    )
    # a certificate that does not verify will not verify later: no waiting out connect_timeout
    with pytest.raises(Unavailable) as info:
        await asyncio.wait_for(worker.start(), 10)
    message = str(info.value)
    assert "cannot register translator@1.0.0" in message and "CERTIFICATE_VERIFY_FAILED" in message
    assert "not signed by a CA this client trusts (set --gateway-ca)" in message
    with pytest.raises(NotFound):
        await gw.agency.catalog.get("translator@1.0.0")


@pytest.mark.parametrize(
    ("gateway_tls", "why"),
    [
        (None, "closed a plaintext connection: it probably serves TLS (set --gateway-ca)"),
        (
            "ca only",
            "probably requires a client certificate (mutual TLS: set --gateway-cert and --gateway-key)",
        ),
    ],
)
async def test_worker_without_tls_or_client_certificate_is_told_which_is_missing(
    gateway, pki, gateway_tls, why
):
    gw = await gateway()
    tls = ClientTlsConfig(ca=pki.ca) if gateway_tls else None
    worker = Worker(
        translate, CONTRACT, gateway=gw.address, gateway_tls=tls, token=AGENT_TOKEN, connect_timeout=0.3
    )
    with pytest.raises(Unavailable) as info:
        await asyncio.wait_for(worker.start(), 10)
    assert why in str(info.value)


@pytest.mark.parametrize(
    ("token", "why"), [(None, "missing bearer token"), ("guess", "unknown bearer token")]
)
async def test_worker_without_its_token_is_unauthenticated(gateway, pki, token, why):
    gw = await gateway()
    worker = Worker(translate, CONTRACT, gateway=gw.address, gateway_tls=to_gateway(pki), token=token)
    with pytest.raises(Unauthenticated) as info:
        await asyncio.wait_for(worker.start(), 10)
    assert why in str(info.value) and "--token-file" in str(info.value)
    with pytest.raises(NotFound):
        await gw.agency.catalog.get("translator@1.0.0")


@pytest.mark.parametrize(
    ("workers_tls", "worker_tls", "why"),
    [
        (
            "ca only",
            "mtls",
            "probably requires a client certificate (mutual TLS: set workers.tls.cert and .key)",
        ),
        (None, "tls", "closed a plaintext connection: it probably serves TLS (set workers.tls.ca)"),
        ("wrong ca", "tls", "not signed by a CA this client trusts (set workers.tls.ca)"),
    ],
)
async def test_gateway_that_cannot_pass_the_workers_tls_fails_the_task_fast_and_typed(
    gateway, pki, workers_tls, worker_tls, why
):
    settings = {
        None: None,
        "ca only": gateway_to_workers(pki, cert=False),
        "wrong ca": {"ca": str(pki.other_ca)},
    }[workers_tls]
    gw = await gateway(workers_tls=settings)
    served = worker_mtls(pki) if worker_tls == "mtls" else worker_tls_as(pki, "translator")
    async with Worker(
        translate, CONTRACT, gateway=gw.address, gateway_tls=to_gateway(pki), token=AGENT_TOKEN, tls=served
    ):
        started = time.monotonic()
        outcome = await asyncio.wait_for(submit(gw, pki), 10)
        assert time.monotonic() - started < 5  # a refused handshake is not a hang until the deadline
    assert outcome.state != "completed" and outcome.failures, outcome
    first = outcome.failures[0]  # typed: the worker is unavailable to this gateway
    assert first.type == FailureType.TOOL_UNAVAILABLE.value and first.agent == "translator@1.0.0"
    assert "worker 127.0.0.1:" in first.detail and why in first.detail, first.detail


async def test_a_worker_presenting_another_agents_certificate_is_refused_and_audited(gateway, pki):
    """Issue 14 item 5: the gateway binds each remote worker to its agent. The worker of
    ``translator`` serves with a certificate from the right CA, valid for its address, but
    issued for ``mallory``: the handshake fails, the attempt is TOOL_UNAVAILABLE saying why,
    and it is audited."""
    gw = await gateway(workers_tls=gateway_to_workers(pki, cert=False))
    async with Worker(
        translate,
        CONTRACT,
        gateway=gw.address,
        gateway_tls=to_gateway(pki),
        token=AGENT_TOKEN,
        tls=worker_tls_as(pki, "mallory"),
    ):
        outcome = await asyncio.wait_for(submit(gw, pki), 10)
    assert outcome.state != "completed" and outcome.failures, outcome
    first = outcome.failures[0]
    assert first.type == FailureType.TOOL_UNAVAILABLE.value and first.agent == "translator@1.0.0"
    why = "the worker's certificate is not issued for agent 'translator'"
    assert why in first.detail and "workers.tls.verify_agent_identity" in first.detail, first.detail
    audited = [
        r
        for _, r in gw.agency.audit.records()  # type: ignore[attr-defined]
        if r.task_id == outcome.task_id and why in json.dumps(r.detail)
    ]
    assert any(r.event_type == "failure.event" for r in audited), audited


async def test_a_worker_certificate_for_the_configured_identity_or_with_the_check_off(gateway, pki):
    # identities: the certificate carries another name than the agent's
    gw = await gateway(
        workers_tls={**gateway_to_workers(pki, cert=False), "identities": {"translator": "tr.workers.test"}}
    )
    async with Worker(
        translate,
        CONTRACT,
        gateway=gw.address,
        gateway_tls=to_gateway(pki),
        token=AGENT_TOKEN,
        tls=worker_tls_as(pki, "tr.workers.test"),
    ):
        outcome = await asyncio.wait_for(submit(gw, pki), 10)
    assert outcome.state == "completed", outcome.reason
    # verify_agent_identity: false -- any certificate of the CA for the address called will do
    gw = await gateway(workers_tls={**gateway_to_workers(pki, cert=False), "verify_agent_identity": False})
    async with Worker(
        translate,
        CONTRACT,
        gateway=gw.address,
        gateway_tls=to_gateway(pki),
        token=AGENT_TOKEN,
        tls=worker_tls_as(pki, "mallory"),
    ):
        outcome = await asyncio.wait_for(submit(gw, pki), 10)
    assert outcome.state == "completed", outcome.reason


def test_workers_tls_identity_settings_are_checked(pki):
    d = definition_from({"workers": {"tls": {"ca": str(pki.ca)}}}, env={})
    assert d.workers.tls is not None and d.workers.tls.verify_agent_identity  # on by default
    assert d.workers.tls.identity("translator") == "translator"
    with pytest.raises(InvalidInput) as info:  # one name for every worker binds none of them
        definition_from({"workers": {"tls": {"ca": str(pki.ca), "server_name": "w.internal"}}}, env={})
    assert info.value.field == "workers.tls" and "verify_agent_identity: false" in str(info.value)
    off = {"ca": str(pki.ca), "server_name": "w.internal", "verify_agent_identity": False}
    assert definition_from({"workers": {"tls": off}}, env={}).workers.tls.identity("translator") == ""
    with pytest.raises(InvalidInput) as info:
        definition_from({"workers": {"tls": {"ca": str(pki.ca), "identities": {"a": "two words"}}}}, env={})
    assert "identities.a" in str(info.value)


async def test_remote_agent_factory_carries_the_tls_settings(pki):
    tls = ClientTlsConfig(ca=pki.ca)
    from middleware.contracts import CapabilityContract

    contract = CapabilityContract.parse({**CONTRACT, "endpoint": "127.0.0.1:1"})
    agent = RemoteAgent.factory(tls=tls)(contract)
    assert agent.tls is tls and agent.endpoint == "127.0.0.1:1" and agent.identity == ""
    assert repr(agent) == "RemoteAgent('127.0.0.1:1', tls)"
    bound = RemoteAgent.factory(tls=WorkersTlsConfig(ca=pki.ca))(contract)
    assert bound.identity == "translator"  # the certificate must name the agent


# ----------------------------------------------------------------------- configuration


def _args(*flags: str):
    return build_parser().parse_args(["worker", "--agent", "x:y", "--gateway", "127.0.0.1:1", *flags])


def test_worker_flags_build_the_security_config(tmp_path, pki):
    token_file = tmp_path / "token"
    token_file.write_text(f"  {AGENT_TOKEN}\n")
    args = _args(
        "--gateway-ca", str(pki.ca), "--gateway-cert", str(pki.client_cert), "--gateway-key",
        str(pki.client_key), "--gateway-server-name", "gateway.internal", "--token-file", str(token_file),
        "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key), "--tls-client-ca", str(pki.ca),
    )  # fmt: skip
    config = worker_config(args, env={"AGENCY_WORKER_TOKEN": "from-env"})
    assert config.gateway_tls == ClientTlsConfig(
        ca=pki.ca, cert=pki.client_cert, key=pki.client_key, server_name="gateway.internal"
    )
    assert config.bearer_token() == AGENT_TOKEN  # the file wins over the environment
    assert AGENT_TOKEN not in repr(config)  # never in logs
    assert config.tls is not None and config.tls.require_client_cert and config.tls.client_ca == pki.ca

    config = worker_config(_args(), env={"AGENCY_WORKER_TOKEN": "from-env"})
    assert config.bearer_token() == "from-env" and config.gateway_tls is None and config.tls is None
    assert worker_config(_args("--gateway-tls"), env={}).gateway_tls == ClientTlsConfig()
    assert worker_config(_args(), env={"AGENCY_WORKER_TOKEN": ""}).token is None


def _problems(*flags: str, env: dict[str, str] | None = None) -> dict[str, str]:
    with pytest.raises(InvalidInput) as info:
        worker_config(_args(*flags), env=env or {})
    return {p.field: p.reason for p in info.value.problems}


def test_bad_worker_security_files_are_refused_naming_the_flag(tmp_path, pki):
    missing = str(tmp_path / "missing.crt")
    assert _problems("--gateway-ca", missing) == {"--gateway-ca": f"no such file: {missing}"}
    # a key that is not the certificate's (gRPC would only say "Failed to bind" or fail every handshake)
    problems = _problems("--gateway-cert", str(pki.client_cert), "--gateway-key", str(pki.server_key))
    assert "is not the private key of the certificate" in problems["--gateway-key"]
    problems = _problems("--tls-cert", str(pki.server_cert), "--tls-key", str(pki.client_key))
    assert "is not the private key of the certificate" in problems["--tls-key"]
    # a key where a certificate belongs, a certificate where a key belongs
    problems = _problems("--tls-cert", str(pki.server_key), "--tls-key", str(pki.server_cert))
    assert "holds no PEM certificate" in problems["--tls-cert"]
    assert "holds no PEM private key" in problems["--tls-key"]
    assert "holds no PEM certificate" in _problems("--tls-client-ca", str(pki.client_key))["--tls-client-ca"]
    assert (
        "both cert and key"
        in _problems("--gateway-cert", str(pki.client_cert))["--gateway-cert/--gateway-key"]
    )
    assert "--tls-cert" in _problems("--tls-key", str(pki.server_key))

    empty, hash_line = tmp_path / "empty", tmp_path / "hash-line"
    empty.write_text("\n")
    hash_line.write_text(f"translator {hash_token(AGENT_TOKEN)}\n")
    assert "empty" in _problems("--token-file", str(empty))["--token-file"]
    assert "the worker needs the token itself" in _problems("--token-file", str(hash_line))["--token-file"]
    assert "cannot read" in _problems("--token-file", str(tmp_path))["--token-file"]
    assert "no spaces" in _problems(env={"AGENCY_WORKER_TOKEN": "two words"})["AGENCY_WORKER_TOKEN"]


def test_agency_worker_refuses_bad_files_before_starting(tmp_path, pki, capsys):
    code = main(
        ["worker", "--agent", "not_imported:agent", "--gateway", "127.0.0.1:1",
         "--gateway-cert", str(pki.client_cert), "--gateway-key", str(pki.stranger_key)]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "invalid agency worker options: --gateway-key:" in err and "is not the private key" in err


def test_server_tls_refuses_a_key_that_is_not_the_certificates(pki):
    with pytest.raises(InvalidInput) as info:
        ServerConfig.parse({"tls": {"cert": str(pki.server_cert), "key": str(pki.client_key)}})
    assert info.value.field == "tls.key" and "is not the private key" in str(info.value)


def test_workers_tls_comes_from_the_definition_or_the_environment(pki):
    d = definition_from({"workers": {"tls": gateway_to_workers(pki)}}, env={})
    assert d.workers.tls == WorkersTlsConfig(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    env = {
        "AGENCY_WORKERS_TLS_CA": str(pki.ca),
        "AGENCY_WORKERS_TLS_CERT": str(pki.client_cert),
        "AGENCY_WORKERS_TLS_KEY": str(pki.client_key),
        "AGENCY_WORKERS_TLS_SERVER_NAME": "workers.internal",
        "AGENCY_WORKERS_TLS_VERIFY_AGENT_IDENTITY": "false",
    }
    d = definition_from(None, env=env)
    assert d.workers.tls is not None and d.workers.tls.server_name == "workers.internal"
    assert definition_from(None, env={}).workers.tls is None
    with pytest.raises(InvalidInput) as info:
        definition_from({"workers": {"tls": {"ca": str(pki.ca), "key": str(pki.client_key)}}}, env={})
    assert info.value.field == "workers.tls" and "both cert and key" in str(info.value)


# ----------------------------------------------------------------------- the command line


async def test_agency_worker_command_joins_an_mtls_gateway_with_its_token(gateway, pki, tmp_path):
    gw = await gateway(workers_tls=gateway_to_workers(pki))
    (tmp_path / "tls_worker_agents.py").write_text(
        "def translate(request):\n    return 'translated: ' + request.text\n"
    )
    (tmp_path / "contract.json").write_text(json.dumps(CONTRACT))
    (tmp_path / "token").write_text(AGENT_TOKEN + "\n")
    translator_cert, translator_key = pki.issue("translator")  # the worker is bound to its agent
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "middleware", "worker",
        "--agent", "tls_worker_agents:translate", "--contract", str(tmp_path / "contract.json"),
        "--gateway", gw.address, "--heartbeat", "60",
        "--gateway-ca", str(pki.ca), "--gateway-cert", str(pki.client_cert),
        "--gateway-key", str(pki.client_key), "--token-file", str(tmp_path / "token"),
        "--tls-cert", str(translator_cert), "--tls-key", str(translator_key), "--tls-client-ca", str(pki.ca),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("AGENCY_")},  # the file's token
    )  # fmt: skip
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)  # printed once registered
        assert b"registered at" in line, (line, await proc.stderr.read())
        outcome = await submit(gw, pki)
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert outcome.state == "completed", outcome.reason
    assert json.loads(outcome.output_json) == "translated: hola mundo"
    text = line.decode()
    assert "serving on 127.0.0.1:" in text and "(mTLS), registered at" in text and "(mTLS, token)" in text
    assert AGENT_TOKEN not in text + out.decode() + err.decode()
    with pytest.raises(NotFound):  # deregistered on SIGTERM
        await gw.agency.catalog.get("translator@1.0.0")


GATEWAY_TO_WORKERS = "gw-to-workers-s3cret"  # the gateway's credential for its workers


async def test_a_worker_takes_calls_only_from_its_gateway(gateway, pki, tmp_path):
    """Issue 14: anyone who reached a worker's port could Invoke it; with --gateway-token-file
    only the gateway (which sends workers.token_file) gets through."""
    token_file = tmp_path / "workers.token"
    token_file.write_text(GATEWAY_TO_WORKERS + "\n")
    token_file.chmod(0o600)
    gw = await gateway(mtls=False, workers_token=token_file)
    worker = Worker(
        translate, CONTRACT, gateway=gw.address, token=AGENT_TOKEN, gateway_token=GATEWAY_TO_WORKERS
    )
    async with worker:
        async with open_channel(gw.address, token=OPS_TOKEN) as channel:
            outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(SUBMIT, timeout=10)
        assert outcome.state == "completed", outcome.reason
        request = worker_pb2.InvokeRequest(contract_key="translator@1.0.0", text="x", deadline_ms=1000)
        for token in (None, "guessed", AGENT_TOKEN):  # anyone else, even the agent's own token
            async with open_channel(worker.endpoint, token=token) as other:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await worker_pb2_grpc.AgentWorkerStub(other).Invoke(request, timeout=5)
                assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
                assert "only from its gateway" in (info.value.details() or "")
        async with open_channel(worker.endpoint, token=GATEWAY_TO_WORKERS) as gateway_channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:  # past the token, to the servicer
                await worker_pb2_grpc.AgentWorkerStub(gateway_channel).Invoke(request, timeout=5)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # (no SMF message sent)


async def test_the_gateway_without_the_workers_token_is_refused_by_such_a_worker(gateway, pki):
    gw = await gateway(mtls=False)
    worker = Worker(
        translate, CONTRACT, gateway=gw.address, token=AGENT_TOKEN, gateway_token=GATEWAY_TO_WORKERS
    )
    async with worker:
        async with open_channel(gw.address, token=OPS_TOKEN) as channel:
            outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(SUBMIT, timeout=10)
        assert outcome.state != "completed"
