"""Communication flows: declaring edges, receive-only agents, the tools a sender sees."""

from __future__ import annotations

from typing import Literal

import pytest

from middleware._model import Model
from middleware.errors import InvalidInput, NotFound, PermissionDenied
from middleware.messaging import Flows, Handoff, SendMessage


class PrioritySendMessage(SendMessage):
    """Ask another agent, with a priority."""

    name = "send_message_with_priority"

    class Params(Model):
        priority: Literal["low", "normal", "high"] = "normal"


def test_chained_operators_declare_every_edge_without_global_state() -> None:
    flows = Flows()
    ceo, dev, qa = flows.agent("ceo", "Runs it"), flows.agent("dev", "Codes"), flows.agent("qa", "Tests")
    ceo > dev > qa  # noqa: B015 - the comparison declares the edges
    assert {(e.sender, e.receiver) for e in flows.edges()} == {("ceo", "dev"), ("dev", "qa")}
    # Another container is untouched: the edges live in the handles' own container.
    other = Flows()
    x, y = other.agent("x"), other.agent("y")
    _ = x > y
    assert len(flows.edges()) == 2 and len(other.edges()) == 1
    # b < a reads "a may message b".
    _ = qa < ceo
    assert flows.edge("ceo", "qa") is not None


def test_a_receive_only_agent_can_never_be_a_sender() -> None:
    flows = Flows()
    boss, log = flows.agent("boss"), flows.agent("log", receive_only=True)
    _ = boss > log
    with pytest.raises(InvalidInput) as err:
        _ = log > boss
    assert err.value.field == "flows[log > boss]" and "receive-only" in err.value.message
    with pytest.raises(InvalidInput):
        Flows.from_config({"agents": [{"name": "a", "receive_only": True}, "b"], "flows": ["a > b"]})


def test_messages_outside_the_flows_are_refused() -> None:
    flows = Flows()
    a, b, c = flows.agent("a"), flows.agent("b"), flows.agent("c")
    _ = a > b
    flows.connect(a, c, tool=Handoff)
    flows.check("a", "b")
    with pytest.raises(PermissionDenied) as err:
        flows.check("b", "a")
    assert err.value.details == {"sender": "b", "receiver": "a", "allowed": []}
    with pytest.raises(PermissionDenied):
        flows.check("a", "c", kind="send_message")  # that edge is a handoff
    flows.check("a", "c", kind="handoff")


def test_each_senders_tool_lists_exactly_its_recipients_and_follows_changes() -> None:
    flows = Flows()
    mgr = flows.agent("manager", "Plans the work")
    analyst = flows.agent("RiskAnalyst", "Assesses risk")
    writer = flows.agent("ReportGenerator", "Writes reports")
    _ = mgr > analyst
    (tool,) = flows.tools_for(mgr)
    assert tool.name == "send_message" and tool.recipients == ("RiskAnalyst",)
    assert tool.parameters["properties"]["recipient_agent"]["enum"] == ["RiskAnalyst"]
    assert "RiskAnalyst: Assesses risk" in tool.description
    assert flows.tools_for(analyst) == []

    _ = mgr > writer
    (tool,) = flows.tools_for(mgr)
    assert tool.parameters["properties"]["recipient_agent"]["enum"] == ["RiskAnalyst", "ReportGenerator"]
    assert "ReportGenerator: Writes reports" in tool.description

    flows.disconnect(mgr, analyst)
    (tool,) = flows.tools_for(mgr)
    assert tool.recipients == ("ReportGenerator",) and "RiskAnalyst" not in tool.description


def test_per_edge_tools_handoff_and_a_custom_subclass_with_validated_params() -> None:
    flows = Flows()
    front, billing, tech = flows.agent("front"), flows.agent("billing", "Money"), flows.agent("tech", "Bugs")
    (front > billing).via(PrioritySendMessage)
    flows.connect(front, tech, tool=Handoff)
    tools = {t.name: t for t in flows.tools_for(front)}
    assert set(tools) == {"send_message_with_priority", "transfer_to_tech"}
    prio = tools["send_message_with_priority"]
    assert prio.parameters["properties"]["priority"]["enum"] == ["low", "normal", "high"]
    assert tools["transfer_to_tech"].kind == "handoff" and "Bugs" in tools["transfer_to_tech"].description

    call = PrioritySendMessage.parse_args(
        {"recipient_agent": "BILLING", "message": "refund", "priority": "high"}, ["billing"]
    )
    assert (call.recipient, call.params) == ("billing", {"priority": "high"})
    with pytest.raises(InvalidInput) as err:
        PrioritySendMessage.parse_args(
            {"recipient_agent": "tech", "message": "x", "priority": "urgent"}, ["billing"]
        )
    assert {p.field for p in err.value.problems} == {"priority", "recipient_agent"}
    with pytest.raises(InvalidInput) as err:
        SendMessage.parse_args(
            {"recipient_agent": "billing", "message": "x", "priority": "high"}, ["billing"]
        )
    assert err.value.field == "priority"


def test_flows_from_config_report_every_problem() -> None:
    flows = Flows.from_config(
        {
            "agents": [{"name": "ceo", "description": "Boss"}, "dev", "qa"],
            "flows": ["ceo > dev > qa", {"from": "ceo", "to": "qa", "tool": "handoff"}],
        }
    )
    assert {(e.sender, e.receiver, e.tool) for e in flows.edges()} == {
        ("ceo", "dev", SendMessage),
        ("dev", "qa", SendMessage),
        ("ceo", "qa", Handoff),
    }
    with pytest.raises(InvalidInput) as err:
        Flows.from_config({"agents": ["a"], "flows": ["a > ghost", {"from": "a", "to": "a", "tool": "fax"}]})
    fields = [p.field for p in err.value.problems]
    assert fields == ["flows[0]", "flows[1].tool"]


def test_unknown_agents_and_foreign_handles_are_refused() -> None:
    flows, other = Flows(), Flows()
    a = flows.agent("a")
    stranger = other.agent("b")
    with pytest.raises(InvalidInput):
        _ = a > stranger
    with pytest.raises(NotFound):
        flows.connect("a", "nobody")
    with pytest.raises(TypeError):
        _ = a > "b"  # type: ignore[operator]
