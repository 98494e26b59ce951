"""DATA_INCONSISTENCY against everything the task knows: the extracted context (nested), earlier
outputs and the request, at any depth, with the field path named (issue 27, first item)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware import Agency, AgentReply, FailureType, Provenance, TaskState, TaskStep
from middleware.demo import build_demo_agency, demo_config, failing_claim_request
from middleware.facts import facts_of, json_path_of, replace_at
from middleware.testing import ScriptedAgent

from .conftest import build, contract, task

TODAY = date(2026, 12, 1)


def fixed_clock() -> datetime:
    return datetime(2026, 12, 1, 12, tzinfo=UTC)


async def no_sleep(_: float) -> None:
    return None


def _lying_warranty(request):
    """A warranty agent that says the damage was not accidental, whatever it was told."""
    data = request.input
    return AgentReply(
        output={
            "in_warranty": True,
            "eligible": True,
            "purchase_date": data.get("purchase_date", "2026-11-24"),
            "fault_type": "screen_shattered",
            "accidental": False,
            "fee": 0,
            "model": data["device_model"],
        },
        confidence_score=0.96,
        provenance=Provenance(source="warranty_db", reliability_score=0.98),
    )


async def test_a_warranty_agent_contradicting_the_extracted_context_does_not_complete_or_ship():
    agency = await build_demo_agency(Agency(config=demo_config(), sleep=no_sleep, clock=fixed_clock))
    agency.agents.add("warranty_agent@2.1.0", ScriptedAgent(_lying_warranty, name="warranty_agent"))
    outcome = await agency.submit(failing_claim_request("accidental"))  # "我的手机摔了一下…"

    assert outcome.state is TaskState.INPUT_REQUIRED
    assert [s.name for s in outcome.steps] == ["intake", "order", "warranty"]
    assert agency.agents.get("express_shipper@1.0.0").calls == 0  # nothing shipped
    assert agency.agents.get("replacement_shipper@1.0.0").calls == 0
    failure = outcome.failures[-1]
    assert failure.type is FailureType.DATA_INCONSISTENCY
    conflict = failure.context["conflict"]
    assert conflict["fact"] == "accidental" and conflict["path"] == "$.accidental"
    said = [(v["value"], v["path"], v["source"], v["step"]) for v in conflict["values"]]
    assert said == [
        (True, "$.context.accidental", "greeting_agent", "intake"),  # what the intake extracted
        (False, "$.accidental", "warranty_db", "warranty"),
    ]
    assert "$.context.accidental" in failure.detail and "$.accidental" in failure.detail
    # the question and its collaboration plan name the field path
    assert outcome.pending["kind"] == "conflict"
    plan = outcome.pending["plan"]
    assert any("accidental ($.accidental of the answer)" in line for line in plan["verify"])
    labels = [e["label"] for e in plan["evidence"]]
    assert "accidental at $.context.accidental according to greeting_agent" in labels
    assert plan["suggested_reply"].startswith("您好")  # the user wrote Chinese
    await agency.close()


async def test_settling_a_nested_conflict_replaces_the_value_at_its_path():
    first = ScriptedAgent({"order": {"status": "paid", "total": 100}})
    second = ScriptedAgent({"summary": {"order": {"total": 120}}, "note": "x"})
    agency, _, _ = await build([(contract("a", "look"), first), (contract("b", "sum"), second)])
    out = await agency.submit(
        task(steps=[TaskStep(name="one", action="look"), TaskStep(name="two", action="sum")])
    )
    assert out.state is TaskState.INPUT_REQUIRED
    conflict = out.pending["conflict"]
    assert (conflict["fact"], conflict["path"]) == ("total", "$.summary.order.total")
    assert [v["path"] for v in conflict["values"]] == ["$.order.total", "$.summary.order.total"]
    done = await agency.resume(out.task_id, answer="value_1")
    assert done.state is TaskState.COMPLETED
    assert done.output == {"summary": {"order": {"total": 100}}, "note": "x"}


async def test_session_context_is_a_source_too():
    """What a session carried over (no step of this task said it) is checked as well."""
    agency, _, _ = await build(
        [
            (contract("a", "look"), ScriptedAgent({"customer": {"vip": True}})),
            (contract("b", "check"), ScriptedAgent({"vip": False})),
        ]
    )
    first = await agency.submit(task(session_id="s1", steps=[TaskStep(name="crm", action="look")]))
    assert first.state is TaskState.COMPLETED
    later = await agency.submit(task(session_id="s1", steps=[TaskStep(name="check", action="check")]))
    assert later.state is TaskState.INPUT_REQUIRED
    values = later.pending["conflict"]["values"]
    assert [(v["value"], v["source"], v["path"]) for v in values] == [
        (True, "context", "$.crm.customer.vip"),
        (False, "b@1.0.0", "$.vip"),
    ]


async def test_a_contract_declares_which_fields_are_facts():
    """``facts`` narrows the comparison to the fields the contract names."""
    first = ScriptedAgent({"status": "paid", "total": 100})
    second = ScriptedAgent({"status": "shipped", "total": 100})
    agency, _, _ = await build(
        [(contract("a", "look"), first), (contract("b", "ship", facts=["total"]), second)]
    )
    out = await agency.submit(
        task(steps=[TaskStep(name="one", action="look"), TaskStep(name="two", action="ship")])
    )
    assert out.state is TaskState.COMPLETED  # status is not a fact of b: it may change
    third = ScriptedAgent({"status": "shipped", "total": 90})
    agency, _, _ = await build(
        [(contract("a", "look"), first), (contract("b", "ship", facts=["total"]), third)]
    )
    out = await agency.submit(
        task(steps=[TaskStep(name="one", action="look"), TaskStep(name="two", action="ship")])
    )
    assert out.failures[-1].type is FailureType.DATA_INCONSISTENCY
    assert out.pending["conflict"]["fact"] == "total"


def test_facts_at_any_depth_by_name_with_paths():
    value = {
        "a": 1,
        "context": {"accidental": True, "odd key": "x"},
        "items": [{"sku": "A"}],
        "order": {"status": "paid"},
        "shipment": {"status": "sent"},
        "none": None,
    }
    facts = facts_of(value)
    assert {n: f.path for n, f in facts.items()} == {
        "a": "$.a",
        "accidental": "$.context.accidental",
        "odd key": "$.context['odd key']",
        "sku": "$.items[0].sku",
    }  # status is ambiguous within the value (two things share the name): no fact
    assert facts_of({"x": {"y": 1}, "y": 1})["y"].path == "$.y"  # agreeing: the shallowest path kept
    assert facts_of("text") == {} and facts_of([1, 2]) == {}
    assert set(facts_of(value, only={"a", "sku"}, ignore={"sku"})) == {"a"}


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_leaves=20,
    )
)
def test_every_fact_is_found_again_at_its_path(value):
    for fact in facts_of(value).values():
        node = value
        for key in fact.keys:
            node = node[key]
        assert node == fact.value
        assert json_path_of(fact.keys) == fact.path
        assert replace_at(value, fact.keys, "new") != value or fact.value == "new"


def test_replace_at_refuses_a_path_the_value_does_not_have():
    with pytest.raises(KeyError):
        replace_at({"a": {}}, ["a", "b"], 1)


async def test_facts_round_trip_through_grpc_and_the_definition_file(tmp_path):
    import grpc
    import yaml

    from middleware._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
    from middleware.server.bootstrap import build_agency
    from middleware.server.definition import load_definition
    from middleware.server.grpc_api import build_server

    agency = Agency()
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = catalog_pb2_grpc.CatalogServiceStub(channel)
        pb = common_pb2.CapabilityContract(name="w", can_do=["look"], facts=["accidental", " fee "])
        entry = await stub.Register(catalog_pb2.RegisterRequest(contract=pb))
        assert list(entry.contract.facts) == ["accidental", "fee"]
        assert (await agency.catalog.get("w@1.0.0")).contract.facts == ["accidental", "fee"]
        bad = common_pb2.CapabilityContract(name="x", can_do=["look"], facts=[""])
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Register(catalog_pb2.RegisterRequest(contract=bad))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "facts[0]" in refused.value.details()
    finally:
        await channel.close()
        await server.stop(0)
        await agency.close()

    scripted = {"factory": "middleware.testing:ScriptedAgent.of", "args": {"steps": [{"ok": 1}]}}
    agent = {**scripted, "contract": {"name": "w", "can_do": ["look"], "facts": ["accidental"]}}
    path = tmp_path / "agency.yaml"
    path.write_text(yaml.safe_dump({"agents": [agent]}))
    definition = load_definition(path, env={"AGENCY_AUDIT_DIR": str(tmp_path / "audit")})
    served = await build_agency(definition)
    try:
        assert (await served.catalog.get("w@1.0.0")).contract.facts == ["accidental"]
    finally:
        await served.close()
