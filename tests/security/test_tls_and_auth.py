"""TLS, mutual TLS and bearer tokens on a real gRPC server (port 0), with a throwaway PKI."""

from __future__ import annotations

import grpc
import pytest

from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.access import Principal, Role
from middleware.cli import main
from middleware.cli.health import check
from middleware.errors import InvalidInput
from middleware.server.grpc_api import build_server
from middleware.server.grpc_api.channel import open_channel
from middleware.server.settings import ClientTlsConfig, ServerConfig, TlsConfig, hash_token, read_token_hashes

ROUTE = agency_pb2.RouteRequest(text="I need a replacement for my shattered screen")


async def _route(channel: grpc.aio.Channel) -> agency_pb2.RoutingDecision:
    return await agency_pb2_grpc.AgencyServiceStub(channel).Route(ROUTE, timeout=5)


@pytest.fixture
async def serve(demo_agency):
    servers = []

    async def start(**kw):
        server = build_server(demo_agency, "127.0.0.1:0", **kw)
        await server.start()
        servers.append(server)
        return f"127.0.0.1:{server.port}"

    yield start
    for s in servers:
        await s.stop(0)


async def test_tls_serves_clients_that_trust_the_ca_and_refuses_plaintext(serve, pki):
    address = await serve(tls=TlsConfig(cert=pki.server_cert, key=pki.server_key))
    async with open_channel(address, tls=ClientTlsConfig(ca=pki.ca)) as channel:
        assert (await _route(channel)).chosen == "warranty_agent@2.1.0"
    assert await check(address, tls=ClientTlsConfig(ca=pki.ca)) == "SERVING"

    async with open_channel(address) as plain:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _route(plain)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    # a client that does not trust the server's CA refuses the server
    async with open_channel(address, tls=ClientTlsConfig(ca=pki.other_ca)) as distrust:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _route(distrust)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_needs_a_client_certificate_from_the_client_ca(serve, pki):
    tls = TlsConfig(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca, require_client_cert=True)
    address = await serve(tls=tls)

    async with open_channel(address, tls=ClientTlsConfig(ca=pki.ca)) as anonymous:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _route(anonymous)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE

    stranger = ClientTlsConfig(ca=pki.ca, cert=pki.stranger_cert, key=pki.stranger_key)
    async with open_channel(address, tls=stranger) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _route(channel)
        assert info.value.code() is grpc.StatusCode.UNAVAILABLE

    worker = ClientTlsConfig(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    async with open_channel(address, tls=worker) as channel:
        assert (await _route(channel)).chosen == "warranty_agent@2.1.0"
    assert await check(address, tls=worker) == "SERVING"


def _reason(err: grpc.aio.AioRpcError) -> str:
    return dict(err.trailing_metadata() or ()).get("agency-reason", "")


async def test_bearer_tokens_identify_clients_and_unknown_ones_are_unauthenticated(serve, pki):
    address = await serve(token_hashes={hash_token("s3cret-worker"): "worker-1"})

    for token, why in [(None, "missing bearer token"), ("guess", "unknown bearer token")]:
        async with open_channel(address, token=token) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _route(channel)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert _reason(info.value) == "UNAUTHENTICATED"
            assert why in info.value.details()
    async with open_channel(address, token="s3cret-worker") as channel:
        assert (await _route(channel)).chosen == "warranty_agent@2.1.0"
    # probes need no token
    assert await check(address) == "SERVING"


async def test_tokens_over_mutual_tls(serve, pki):
    tls = TlsConfig(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca, require_client_cert=True)
    address = await serve(tls=tls, token_hashes={hash_token("t0k"): "cli"})
    creds = ClientTlsConfig(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    async with open_channel(address, tls=creds, token="wrong") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _route(channel)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    async with open_channel(address, tls=creds, token="t0k") as channel:
        assert not (await _route(channel)).refused


def test_tls_configuration_errors_name_the_field(tmp_path, pki):
    with pytest.raises(InvalidInput) as info:
        ServerConfig.parse({"tls": {"cert": str(tmp_path / "missing.crt"), "key": str(pki.server_key)}})
    assert info.value.field == "tls.cert" and "no such file" in str(info.value)
    with pytest.raises(InvalidInput) as info:
        ServerConfig.parse(
            {"tls": {"cert": str(pki.server_cert), "key": str(pki.server_key), "require_client_cert": True}}
        )
    assert "client_ca" in str(info.value)
    with pytest.raises(InvalidInput) as info:
        ClientTlsConfig.parse({"cert": str(pki.client_cert)})
    assert "both cert and key" in str(info.value)

    env = {
        "AGENCY_TLS_CERT": str(pki.server_cert),
        "AGENCY_TLS_KEY": str(pki.server_key),
        "AGENCY_TLS_CLIENT_CA": str(pki.ca),
    }
    config = ServerConfig.from_env(env)
    assert config.tls is not None and config.tls.require_client_cert


def test_token_file_lists_hashes_and_bad_lines_are_named(tmp_path):
    good = tmp_path / "tokens"
    good.write_text(
        f"# clients\nworker-1 {hash_token('a')}\ncli {hash_token('b')} client  # ops\n"
        f"ops {hash_token('c')} ADMIN\ntranslator {hash_token('d')} agent\ncli {hash_token('e')} client\n"
    )
    expected = {
        hash_token("a"): Principal(name="worker-1", role=Role.AGENT, role_given=False),  # the default
        hash_token("b"): Principal(name="cli", role=Role.CLIENT),
        hash_token("c"): Principal(name="ops", role=Role.ADMIN),
        hash_token("d"): Principal(name="translator", role=Role.AGENT),
        hash_token("e"): Principal(name="cli", role=Role.CLIENT),  # two tokens, one client (rotation)
    }
    assert read_token_hashes(good) == expected
    config = ServerConfig.from_env({"AGENCY_AUTH_TOKENS": str(good)})
    assert config.token_hashes() == expected
    bad = tmp_path / "bad"
    bad.write_text(
        f"worker-1 not-a-hash\n\nonly-a-name\nops {hash_token('a')} root\n"
        f"x {hash_token('b')} agent acme extra\ny {hash_token('c')} agent\nz {hash_token('c')} admin\n"
        f"y {hash_token('c')} agent\n"  # the same line again is harmless
    )
    with pytest.raises(InvalidInput) as info:
        read_token_hashes(bad)
    problems = {p.field: p.reason for p in info.value.problems}
    assert list(problems) == [f"{bad}:1", f"{bad}:3", f"{bad}:4", f"{bad}:5", f"{bad}:7"]
    assert problems[f"{bad}:4"] == "unknown role 'root' (expected client, agent, auditor, admin)"
    assert "'CLIENT_NAME SHA256_HEX [ROLE [TENANT]]'" in problems[f"{bad}:5"]
    assert problems[f"{bad}:7"] == "the same token as line 6, for another client or role"


def test_health_command_exit_status_when_unreachable(capsys):
    assert main(["health", "--address", "127.0.0.1:1", "--timeout", "0.5"]) == 4  # unavailable
    assert "UNREACHABLE" in capsys.readouterr().out


async def test_agency_serve_wires_mtls_tokens_and_tracing(tmp_path, pki, capsys):
    """``serve`` as the CLI runs it: mTLS, a token file and console trace export together."""
    import asyncio
    import socket

    from middleware.cli.serve import serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tokens = tmp_path / "tokens"
    tokens.write_text(f"ops-cli {hash_token('let-me-in')}\n")
    config = ServerConfig.from_env(
        {},
        address=f"127.0.0.1:{port}",
        data_dir=tmp_path / "data",
        metrics_address="",
        tls={
            "cert": pki.server_cert,
            "key": pki.server_key,
            "client_ca": pki.ca,
            "require_client_cert": True,
        },
        auth_tokens=tokens,
        tracing="console",
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, demo=True, stop=stop))
    creds = ClientTlsConfig(ca=pki.ca, cert=pki.client_cert, key=pki.client_key)
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=creds, token="let-me-in") as channel:
            decision = await agency_pb2_grpc.AgencyServiceStub(channel).Route(
                ROUTE, timeout=5, wait_for_ready=True
            )
            assert decision.chosen == "warranty_agent@2.1.0"
            outcome = await agency_pb2_grpc.AgencyServiceStub(channel).Submit(
                agency_pb2.SubmitRequest(text="Predict next quarter's stock price"), timeout=5
            )
        assert await check(f"127.0.0.1:{port}", tls=creds) == "SERVING"
    finally:
        stop.set()
        assert await task == 0
    out = capsys.readouterr().out
    assert "(mTLS; audit log:" in out
    assert '"name": "agency.task"' in out and outcome.trace_id in out
