"""The catalog's behaviour, identical on the memory and the Redis backend."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from middleware.catalog import CatalogEvent, CatalogEventType, CatalogQuery
from middleware.contracts import CapabilityContract
from middleware.errors import AlreadyExists, InvalidInput, NotFound
from middleware.testing import ManualClock

pytestmark = pytest.mark.timeout(20)


def contract(name: str = "agent", version: str = "1.0.0", **kw: Any) -> CapabilityContract:
    kw.setdefault("can_do", ["act"])
    return CapabilityContract(name=name, version=version, **kw)


async def next_event(events: Any) -> CatalogEvent:
    return await asyncio.wait_for(events.__anext__(), timeout=5)


async def test_register_then_get_returns_the_contract_and_its_liveness(make_catalog, clock) -> None:
    catalog = await make_catalog()
    entry = await catalog.register(contract(tags=["finance"], slo_latency_ms=250))
    assert entry.key == "agent@1.0.0" and entry.revision == 1
    got = await catalog.get("agent@1.0.0")
    assert got.contract == entry.contract
    assert got.registered_at == clock.now and got.last_heartbeat == clock.now
    assert got.stale is False
    with pytest.raises(NotFound):
        await catalog.get("agent@9.9.9")


async def test_name_and_version_are_unique_unless_replaced(make_catalog, clock) -> None:
    catalog = await make_catalog()
    first = await catalog.register(contract(description="first"))
    with pytest.raises(AlreadyExists):
        await catalog.register(contract(description="second"))
    assert (await catalog.get(first.key)).contract.description == "first"
    clock.advance(5)
    replaced = await catalog.register(contract(description="second"), replace=True)
    assert replaced.revision == 2
    got = await catalog.get(first.key)
    assert got.contract.description == "second"
    assert got.registered_at == first.registered_at  # still the original registration


async def test_a_bulk_import_validates_everything_first_then_indexes_every_entry(make_catalog) -> None:
    catalog = await make_catalog()
    with pytest.raises(InvalidInput) as err:
        await catalog.register_many([contract("ok"), {"name": "bad", "can_do": []}])
    assert err.value.problems[0].field.startswith("[1].")
    assert await catalog.all() == [] and gc.isenabled()  # the collector runs again after a refusal
    assert await catalog.register_many([contract(f"a{i}", can_do=[f"act{i % 2}"]) for i in range(5)]) == 5
    with pytest.raises(AlreadyExists):
        await catalog.register_many([contract("a0"), contract("new")])
    assert len(await catalog.all()) == 5 and gc.isenabled()
    assert [e.key for e in await catalog.candidates("act1")] == ["a1@1.0.0", "a3@1.0.0"]
    assert (await catalog.get("a4@1.0.0")).revision == 1


async def test_update_replaces_an_existing_contract_and_reindexes_it(make_catalog) -> None:
    catalog = await make_catalog()
    with pytest.raises(NotFound):
        await catalog.update(contract())
    await catalog.register(contract(can_do=["old_action"], tags=["a"]))
    updated = await catalog.update(contract(can_do=["new_action"], tags=["b"]))
    assert updated.revision == 2
    assert await catalog.candidates("old_action") == []
    assert [e.key for e in await catalog.candidates("new_action")] == ["agent@1.0.0"]
    assert await catalog.query(CatalogQuery(tags=["a"])) == []
    assert len(await catalog.query(CatalogQuery(tags=["b"]))) == 1


async def test_a_bad_contract_is_refused_with_every_problem_and_nothing_is_stored(make_catalog) -> None:
    catalog = await make_catalog()
    bad = {
        "name": "Bad Name!",
        "version": "1.0",
        "slo_latency_ms": 0,
        "tags": ["ok", "no spaces?"],
        "can_do": ["pay", "refund"],
        "cannot_do": ["refund"],
        "input_schema": {"type": "not-a-type"},
        "output_schema": {"properties": "nope"},
    }
    with pytest.raises(InvalidInput) as err:
        await catalog.register(bad)  # type: ignore[arg-type]
    fields = {p.field for p in err.value.problems}
    assert {"name", "version", "slo_latency_ms", "cannot_do", "input_schema", "output_schema"} <= fields
    assert any(p.field == "tags" for p in err.value.problems)
    overlap = next(p for p in err.value.problems if p.field == "cannot_do")
    assert "overlap on refund" in overlap.reason
    assert await catalog.all() == []
    assert await catalog.candidates("pay") == []


async def test_tags_and_actions_are_normalised(make_catalog) -> None:
    catalog = await make_catalog()
    entry = await catalog.register(contract(tags=["Real Time", "real-time", "GDPR"], can_do=["Check Order"]))
    assert entry.contract.tags == ["real_time", "gdpr"]
    assert entry.contract.can_do == ["check_order"]
    assert len(await catalog.query(CatalogQuery(tags=["REAL TIME"], action="check order"))) == 1


async def test_several_versions_live_at_once_and_version_ranges_select_them(make_catalog) -> None:
    catalog = await make_catalog()
    for v in ["1.0.0", "1.4.2", "2.0.0-rc.1", "2.0.0", "2.3.1", "3.0.0"]:
        await catalog.register(contract("report", v))

    async def versions(rng: str) -> list[str]:
        return [
            e.contract.version for e in await catalog.query(CatalogQuery(name="report", version_range=rng))
        ]

    assert await versions("") == ["1.0.0", "1.4.2", "2.0.0", "2.0.0-rc.1", "2.3.1", "3.0.0"]
    assert await versions("^1.0") == ["1.0.0", "1.4.2"]
    assert await versions(">=1.4.0 <2.3.1") == ["1.4.2", "2.0.0"]  # no pre-release by accident
    assert await versions(">=2.0.0-rc.0 <2.1") == ["2.0.0", "2.0.0-rc.1"]
    assert await versions("~2.3") == ["2.3.1"]
    assert await versions("1.x || 3.x") == ["1.0.0", "1.4.2", "3.0.0"]
    with pytest.raises(InvalidInput) as err:
        await catalog.query(CatalogQuery.model_construct(version_range="^x.y"))
    assert err.value.field == "version_range"


async def test_query_filters_by_name_action_tags_and_slo(make_catalog) -> None:
    catalog = await make_catalog()
    await catalog.register(
        contract("fast", can_do=["quote"], tags=["finance", "realtime"], slo_latency_ms=100)
    )
    await catalog.register(contract("slow", can_do=["quote"], tags=["finance"], slo_latency_ms=5000))
    await catalog.register(contract("other", can_do=["ship"], tags=["logistics"]))

    async def names(**q: Any) -> list[str]:
        return [e.contract.name for e in await catalog.query(CatalogQuery(**q))]

    assert await names(action="quote") == ["fast", "slow"]
    assert await names(action="quote", tags=["realtime"]) == ["fast"]
    assert await names(action="quote", max_slo_latency_ms=1000) == ["fast"]
    assert await names(name="other") == ["other"]
    assert await names(tags=["finance"]) == ["fast", "slow"]
    assert await names() == ["fast", "other", "slow"]
    assert await names(action="nothing") == []


async def test_candidates_are_the_agents_offering_or_refusing_the_action(make_catalog) -> None:
    catalog = await make_catalog()
    await catalog.register(contract("doer", can_do=["predict"]))
    await catalog.register(contract("refuser", can_do=["calc"], cannot_do=["predict"]))
    await catalog.register(contract("bystander", can_do=["calc"]))
    assert [e.contract.name for e in await catalog.candidates("predict")] == ["doer", "refuser"]
    assert [e.contract.name for e in await catalog.candidates("Predict")] == ["doer", "refuser"]
    assert await catalog.candidates("unknown") == []


async def test_deregister_removes_the_entry_everywhere(make_catalog) -> None:
    catalog = await make_catalog()
    await catalog.register(contract("a", can_do=["x"], tags=["t"]))
    await catalog.register(contract("b", can_do=["x"], tags=["t"]))
    await catalog.deregister("a@1.0.0")
    with pytest.raises(NotFound):
        await catalog.get("a@1.0.0")
    assert [e.contract.name for e in await catalog.candidates("x")] == ["b"]
    assert [e.contract.name for e in await catalog.query(CatalogQuery(tags=["t"]))] == ["b"]
    with pytest.raises(NotFound):
        await catalog.deregister("a@1.0.0")
    await catalog.register(contract("a", can_do=["x"]))  # the key is free again


async def test_an_entry_past_its_lease_is_stale_until_it_heartbeats(make_catalog, clock: ManualClock) -> None:
    catalog = await make_catalog(lease_seconds=30)
    await catalog.register(contract("a"))
    await catalog.register(contract("b"))
    clock.advance(20)
    await catalog.heartbeat("b@1.0.0")
    clock.advance(15)  # a: 35 s since its heartbeat, b: 15 s
    assert (await catalog.get("a@1.0.0")).stale is True
    assert (await catalog.get("b@1.0.0")).stale is False
    assert [e.contract.name for e in await catalog.query(CatalogQuery())] == ["b"]
    listed = {e.contract.name: e.stale for e in await catalog.query(CatalogQuery(include_stale=True))}
    assert listed == {"a": True, "b": False}
    assert {e.contract.name: e.stale for e in await catalog.candidates("act")} == {"a": True, "b": False}

    back = await catalog.heartbeat("a@1.0.0")
    assert back.stale is False and back.last_heartbeat == clock.now
    assert [e.contract.name for e in await catalog.query(CatalogQuery())] == ["a", "b"]
    with pytest.raises(NotFound):
        await catalog.heartbeat("ghost@1.0.0")


async def test_exactly_at_the_lease_an_entry_is_still_live(make_catalog, clock: ManualClock) -> None:
    catalog = await make_catalog(lease_seconds=30)
    await catalog.register(contract())
    clock.advance(30)
    assert (await catalog.get("agent@1.0.0")).stale is False
    clock.advance(0.01)
    assert (await catalog.get("agent@1.0.0")).stale is True


async def test_watch_reports_every_kind_of_change_in_order(make_catalog, clock: ManualClock) -> None:
    catalog = await make_catalog(lease_seconds=30)
    async with catalog.watch() as events:
        await catalog.register(contract("a"))
        await catalog.register(contract("a", description="v2"), replace=True)
        await catalog.register(contract("b"))
        await catalog.deregister("b@1.0.0")
        seen = [await next_event(events) for _ in range(4)]
        assert [(e.type, e.key) for e in seen] == [
            (CatalogEventType.REGISTERED, "a@1.0.0"),
            (CatalogEventType.UPDATED, "a@1.0.0"),
            (CatalogEventType.REGISTERED, "b@1.0.0"),
            (CatalogEventType.DEREGISTERED, "b@1.0.0"),
        ]
        assert seen[1].entry is not None and seen[1].entry.contract.description == "v2"

        clock.advance(31)
        swept = await catalog.sweep()
        assert [(e.type, e.key) for e in swept] == [(CatalogEventType.STALE, "a@1.0.0")]
        stale = await next_event(events)
        assert (stale.type, stale.key) == (CatalogEventType.STALE, "a@1.0.0")
        assert stale.entry is not None and stale.entry.stale is True
        assert await catalog.sweep() == []  # announced once

        await catalog.heartbeat("a@1.0.0")
        alive = await next_event(events)
        assert (alive.type, alive.key) == (CatalogEventType.ALIVE, "a@1.0.0")
        assert alive.entry is not None and alive.entry.stale is False
        await catalog.heartbeat("a@1.0.0")  # not stale: no second "alive"
        await catalog.deregister("a@1.0.0")
        last = await next_event(events)
        assert last.type is CatalogEventType.DEREGISTERED


async def test_an_idle_watch_sweeps_by_itself(make_catalog, clock: ManualClock) -> None:
    catalog = await make_catalog(lease_seconds=30, sweep_interval=0.01)
    await catalog.register(contract())
    clock.advance(60)
    async with catalog.watch() as events:
        event = await next_event(events)  # nobody called sweep(): the watch did
    assert (event.type, event.key) == (CatalogEventType.STALE, "agent@1.0.0")


async def test_a_failed_registration_emits_no_event(make_catalog) -> None:
    catalog = await make_catalog()
    await catalog.register(contract())
    async with catalog.watch() as events:
        with pytest.raises(AlreadyExists):
            await catalog.register(contract())
        with pytest.raises(InvalidInput):
            await catalog.register({"name": "x"})  # type: ignore[arg-type]
        await catalog.register(contract("next"))
        event = await next_event(events)
    assert event.key == "next@1.0.0"
