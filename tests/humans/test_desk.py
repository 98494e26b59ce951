"""The human desk: mailboxes in the post office, routing (compliance without quarantined
content), metrics, the humans section of the definition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from middleware import Agency, AgencyConfig, CapabilityContract, InvalidInput, TaskRequest
from middleware.detectors import DetectorConfig, PolicyRules
from middleware.failures import FailurePolicy, FailureType, ResolutionKind
from middleware.messaging.post_office import PostOffice
from middleware.people import Person
from middleware.people.desk import HumanDesk
from middleware.server.definition import AgencyDefinition
from middleware.server.metrics import Metrics
from middleware.testing import ScriptedAgent

from .cases import TOKENS, people
from .conftest import TOKENS as CORE_TOKENS
from .conftest import refund_agency, refund_request


async def test_each_person_has_a_mailbox_and_escalations_are_posted_there():
    agency, desk, _ = await refund_agency()
    po = PostOffice(audit=agency.audit)
    await desk.attach_post_office(po)
    waiting = await agency.submit(refund_request(30))
    (notice,) = await po.pull(CORE_TOKENS["bob"])  # the approver reads it with their own token
    assert notice.message.receiver == "human:bob"
    assert notice.message.content["task_id"] == waiting.task_id
    assert notice.message.content["kind"] == "approval"
    assert await po.pull(CORE_TOKENS["alice"]) == []  # routed to approvers only


async def test_a_policy_violation_reaches_compliance_without_the_quarantined_content():
    config = AgencyConfig(
        detectors=DetectorConfig(policy=PolicyRules(deny_terms=["secret-plan"])),
        failure_policies={
            FailureType.POLICY_VIOLATION: FailurePolicy(resolution=ResolutionKind.ESCALATE_TO_HUMAN)
        },
    )
    agency = Agency(config=config)
    await agency.register(
        CapabilityContract(name="leaky", can_do=["lookup"], slo_latency_ms=500),
        ScriptedAgent({"answer": "here is the secret-plan: launch at dawn"}),
    )
    reviewer = Person(name="dana", roles=["compliance_officer", "quarantine_reviewer"], token_sha256="d" * 64)
    desk = HumanDesk(agency, [Person.model_validate(p) for p in people()] + [reviewer])
    out = await agency.submit(TaskRequest(text="tell me", constraints={"action": "lookup"}))
    assert out.pending["kind"] == "human_handover"
    carol = desk.people["carol"]
    (esc,) = await desk.inbox(carol)
    assert esc.failure_type == "POLICY_VIOLATION" and esc.routing[0].startswith("carol: route")
    assert "launch at dawn" not in esc.model_dump_json() and esc.pending["redacted"] is True
    assert esc.pending["failure"]["context"].keys() <= {"rule", "output_sha256"}
    assert await desk.inbox(desk.people["alice"]) == []  # operators do not get policy violations
    (full,) = await desk.inbox(reviewer)
    assert "redacted" not in full.pending
    assert "launch at dawn" not in full.model_dump_json()  # the pipeline never stored it anyway


async def test_escalations_waiting_and_time_to_answer_are_measured():
    registry = CollectorRegistry()
    agency, _, _ = await refund_agency()
    desk = HumanDesk(agency, [Person.model_validate(p) for p in people()], metrics=Metrics(registry))
    await agency.submit(refund_request(30))
    assert registry.get_sample_value("agency_escalations_waiting", {"kind": "approval"}) == 1
    (esc,) = await desk.inbox(desk.people["bob"])
    await desk.decide(esc.id, desk.people["bob"], choice="approve")
    assert registry.get_sample_value("agency_escalations_waiting", {"kind": "approval"}) == 0
    assert registry.get_sample_value("agency_human_answer_seconds_count", {"kind": "approval"}) == 1
    assert desk.authenticate(TOKENS["bob"]) is desk.people["bob"]


def test_the_humans_section_is_validated_with_paths():
    ok = AgencyDefinition.from_data(
        {
            "humans": {
                "people": people(),
                "approvals": [{"agent": "refund_executor"}],
                "console": {"address": ":0"},
            }
        }
    )
    assert ok.humans.approvals[0].roles[0].value == "approver"
    with pytest.raises(InvalidInput) as info:
        AgencyDefinition.from_data(
            {
                "humans": {
                    "people": [{"name": "x", "roles": ["wizard"], "token_sha256": "12"}],
                    "approvals": [{"path": "$.amount", "above": 5}, {"agent": "a", "path": "$.amount"}],
                }
            }
        )
    text = str(info.value)
    assert "humans.people[0].roles[0]" in text and "humans.people[0].token_sha256" in text
    assert "humans.approvals[0]" in text and "give at least one of agent, action, goal" in text
    assert "humans.approvals[1]" in text and "path and above go together" in text


async def test_a_quarantined_output_reaches_compliance_who_acknowledge_it():
    config = AgencyConfig(detectors=DetectorConfig(policy=PolicyRules(deny_terms=["secret-plan"])))
    agency = Agency(config=config)
    await agency.register(
        CapabilityContract(name="leaky", can_do=["lookup"], slo_latency_ms=500),
        ScriptedAgent({"answer": "the secret-plan is X"}),
    )
    desk = HumanDesk(agency, [Person.model_validate(p) for p in people()])
    out = await agency.submit(TaskRequest(text="tell me", constraints={"action": "lookup"}))
    assert out.state.value == "failed" and out.pending["kind"] == "quarantine"
    carol, alice = desk.people["carol"], desk.people["alice"]
    (esc,) = await desk.inbox(carol)
    assert esc.kind == "quarantine" and "secret-plan is X" not in esc.model_dump_json()
    assert await desk.inbox(alice) == []
    with pytest.raises(InvalidInput):
        await desk.decide(esc.id, carol, choice="approve")
    assert await desk.decide(esc.id, carol, choice="acknowledge", note="reviewed") is None
    assert await desk.inbox(carol) == []
    assert (await agency.get_task(out.task_id)).state.value == "failed"  # nothing resumed


async def test_a_clarification_answer_must_be_one_of_its_options():
    from middleware import AgentReply

    agency = Agency()
    await agency.register(
        CapabilityContract(name="unsure", can_do=["lookup"], slo_latency_ms=500),
        ScriptedAgent(AgentReply(output={"plan": "probably plan A"}, confidence_score=0.5)),
    )
    desk = HumanDesk(agency, [Person.model_validate(p) for p in people()])
    waiting = await agency.submit(TaskRequest(text="pick a plan", constraints={"action": "lookup"}))
    alice = desk.people["alice"]
    (esc,) = await desk.inbox(alice)
    assert esc.kind == "clarification"
    with pytest.raises(InvalidInput, match="accept, retry"):
        await desk.decide(esc.id, alice, choice="plan Z")
    assert (await agency.get_task(waiting.task_id)).state.value == "input_required"
    done = await desk.decide(esc.id, alice, choice="accept")
    assert done is not None and done.output == {"plan": "probably plan A"}


async def test_a_receive_only_human_ops_agent_also_gets_every_notice():
    from middleware.messaging.identity import generate_key, public_key_b64
    from middleware.server.bootstrap import build_post_office
    from middleware.server.settings import hash_token

    ops = {
        "name": "human_ops",
        "receive_only": True,
        "public_key": public_key_b64(generate_key()),
        "token_sha256": hash_token("ops-token"),
    }
    spec = {
        "messaging": {"agents": [ops], "flows": []},
        "humans": {"people": people(), "approvals": [{"agent": "refund_executor"}], "notify": ["human_ops"]},
    }
    definition = AgencyDefinition.from_data(spec)
    agency, _, _ = await refund_agency(gates=[])
    po = await build_post_office(definition, audit=agency.audit)
    desk = await HumanDesk.from_definition(definition, agency, po)
    assert agency.approvals.gates[0].agent == "refund_executor"  # the definition's gates
    waiting = await agency.submit(refund_request(30))
    (notice,) = await po.pull("ops-token")
    assert notice.message.content["task_id"] == waiting.task_id
    assert len(await po.pull(TOKENS["bob"])) == 1  # and the approver's own mailbox
    assert desk.notify == ["human_ops"]
    bad = AgencyDefinition.from_data({"humans": {"notify": ["nobody"]}})
    with pytest.raises(InvalidInput, match=r"humans\.notify"):
        await HumanDesk.from_definition(bad, agency, await build_post_office(bad, audit=agency.audit))


async def test_a_broken_escalation_store_never_changes_a_tasks_course(caplog):
    from middleware.people import MemoryEscalationStore

    class Broken(MemoryEscalationStore):
        async def note_task(self, summary: dict) -> None:  # type: ignore[type-arg]
            raise ConnectionError("redis is down")

    agency, _, refunds = await refund_agency(gates=[], desk_store=Broken())
    done = await agency.submit(refund_request(30))
    assert done.state.value == "completed" and refunds.calls == 1
    assert "human desk: task_started failed" in caplog.text
