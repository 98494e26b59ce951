"""``agency catalog`` against a real gateway (gRPC on port 0) and against Redis directly."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from middleware.cli import build_parser
from middleware.cli.catalog import _main
from middleware.errors import AlreadyExists, InvalidInput, NotFound, Unavailable
from middleware.memory_catalog import MemoryCatalog
from middleware.pipeline import Agency
from middleware.redis.keys import catalog as catalog_keys
from middleware.server.grpc_api import build_server

pytestmark = pytest.mark.timeout(30)

CONTRACTS_YAML = """\
contracts:
  - name: near_realtime_report
    version: 1.4.0
    tags: [orders, near_realtime]
    slo_latency_ms: 400
    can_do: [query_metric]
    cannot_do: [issue_refund]
    regions: [shanghai]
    max_data_delay_ms: 300000
  - name: daily_batch_report
    version: 2.0.0
    can_do: [query_metric]
"""


async def run(*argv: str) -> str:
    out = io.StringIO()
    args = build_parser().parse_args(["catalog", *argv])
    assert await _main(args, out) == 0
    return out.getvalue()


@pytest.fixture
async def address() -> AsyncIterator[str]:
    agency = Agency(catalog=MemoryCatalog())
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{server.port}"
    await server.stop(0)
    await agency.close()


async def test_register_list_show_deregister_through_a_gateway(address: str, tmp_path: Path) -> None:
    path = tmp_path / "contracts.yaml"
    path.write_text(CONTRACTS_YAML)
    out = await run("register", str(path), "--address", address)
    assert out.splitlines() == [
        "registered near_realtime_report@1.4.0 (revision 1)",
        "registered daily_batch_report@2.0.0 (revision 1)",
    ]
    listing = await run("list", "--address", address)
    assert "near_realtime_report@1.4.0  live" in listing and listing.endswith("2 capabilities\n")
    assert "daily_batch_report" not in await run("list", "--address", address, "--tag", "orders")
    only_v2 = json.loads(await run("list", "--address", address, "--version-range", "^2", "--json"))
    assert [e["key"] for e in only_v2] == ["daily_batch_report@2.0.0"]

    shown = json.loads(await run("show", "near_realtime_report@1.4.0", "--address", address, "--json"))
    assert shown["contract"]["max_data_delay_ms"] == 300000 and shown["contract"]["regions"] == ["shanghai"]
    assert "cannot_do:\n  - issue_refund" in await run(
        "show", "near_realtime_report@1.4.0", "--address", address
    )

    assert await run("deregister", "daily_batch_report@2.0.0", "--address", address) == (
        "deregistered daily_batch_report@2.0.0\n"
    )
    with pytest.raises(NotFound):
        await run("show", "daily_batch_report@2.0.0", "--address", address)


async def test_a_file_with_a_bad_contract_registers_nothing(address: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps(
            [
                {"name": "good", "can_do": ["a"]},
                {"name": "bad", "can_do": ["a"], "cannot_do": ["a"], "slo_latency_ms": 0},
            ]
        )
    )
    with pytest.raises(InvalidInput) as err:
        await run("register", str(path), "--address", address)
    assert {p.field for p in err.value.problems} == {"[1].cannot_do", "[1].slo_latency_ms"}
    assert (await run("list", "--address", address)).endswith("0 capabilities\n")


async def test_gateway_side_problems_come_back_listed(address: str, tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("name: dup\ncan_do: [a]\n")
    await run("register", str(path), "--address", address)
    with pytest.raises(AlreadyExists):
        await run("register", str(path), "--address", address)
    assert "revision 2" in await run("register", str(path), "--replace", "--address", address)


async def test_the_cli_talks_to_the_shared_redis_catalog_directly(
    tmp_path: Path, redis_client, redis_prefix
) -> None:
    import os

    url = os.environ.get("AGENCY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    path = tmp_path / "contracts.yaml"
    path.write_text(CONTRACTS_YAML)
    where = ["--redis", url, "--prefix", redis_prefix]
    try:
        await run("register", str(path), *where)
        keys = [e["key"] for e in json.loads(await run("list", *where, "--json"))]
        assert keys == ["daily_batch_report@2.0.0", "near_realtime_report@1.4.0"]
        assert await redis_client.exists(
            catalog_keys.entry(redis_prefix + "catalog:", "daily_batch_report@2.0.0")
        )
        watched = [
            json.loads(x)
            for x in (await run("watch", *where, "--include-existing", "--count", "2")).splitlines()
        ]
        assert [(e["type"], e["key"]) for e in watched] == [
            ("existing", "daily_batch_report@2.0.0"),
            ("existing", "near_realtime_report@1.4.0"),
        ]
        beat = json.loads(await run("heartbeat", "daily_batch_report@2.0.0", *where, "--json"))
        assert beat["stale"] is False
        await run("deregister", "daily_batch_report@2.0.0", *where)
        assert "daily_batch_report" not in await run("list", *where)
    finally:
        async for key in redis_client.scan_iter(match=redis_prefix + "*"):
            await redis_client.delete(key)


async def test_an_unreachable_gateway_is_a_clear_error() -> None:
    with pytest.raises(Unavailable, match="is 'agency serve' running"):
        await run("list", "--address", "127.0.0.1:1")
