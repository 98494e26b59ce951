"""The governed planner: a LangChain chat model (a fake one here: no network) proposes a plan for a
request no goal's plan covers; the gateway checks it before anything runs, audits it, and turns
a plan it refuses into a clarification or a handover, never a guess."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from middleware import Agency, FailureType, TaskState
from middleware.planner import LangChainPlanner
from middleware.testing import ScriptedAgent
from middleware.timeline import build_timelines, render_text


async def no_sleep(_: float) -> None:
    return None


class Recorded:
    """LangChain's fake chat model, keeping the prompts it was given."""

    def __init__(self, *replies: Any) -> None:
        self.model = FakeListChatModel(
            responses=[r if isinstance(r, str) else json.dumps(r) for r in replies]
        )
        self.prompts: list[str] = []

    async def ainvoke(self, prompt: str) -> Any:
        self.prompts.append(prompt)
        return await self.model.ainvoke(prompt)


WEATHER_PLAN = {
    "plan": {
        "steps": [
            {
                "name": "weather",
                "action": "weather_lookup",
                "input": {"city": ["request.city", "context.city"]},
            },
            {"name": "summary", "action": "summarize", "input": {"facts": "steps.weather"}},
        ]
    }
}


async def planned_agency(model: Recorded, *, max_steps: int = 64) -> tuple[Agency, dict[str, ScriptedAgent]]:
    from middleware import AgencyConfig
    from middleware.limits import TaskLimits

    agents = {
        "weather": ScriptedAgent(lambda r: {"city": r.input["city"], "sky": "clear"}),
        "summary": ScriptedAgent(
            lambda r: {"summary": f"{r.input['facts']['sky']} in {r.input['facts']['city']}"}
        ),
        "calc": ScriptedAgent({"value": 1}),
    }
    agency = Agency(
        sleep=no_sleep,
        planner=LangChainPlanner(model),
        config=AgencyConfig(limits=TaskLimits(max_steps_per_task=max_steps)),
    )
    await agency.register(
        {
            "name": "weather",
            "can_do": ["weather_lookup"],
            "input_schema": {
                "type": "object",
                "required": ["city"],
                "properties": {"city": {"type": "string"}},
            },
        },
        agents["weather"],
    )
    await agency.register(
        {
            "name": "summarizer",
            "can_do": ["summarize"],
            "input_schema": {"type": "object", "required": ["facts"]},
        },
        agents["summary"],
    )
    await agency.register(
        {"name": "calc", "can_do": ["compound_interest"], "cannot_do": ["stock_prediction"]}, agents["calc"]
    )
    return agency, agents


def plan_records(agency: Agency, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r.event_type, r.detail)
        for _, r in agency.audit.records()
        if r.task_id == task_id and r.event_type.startswith("plan.")
    ]


async def test_a_proposed_plan_is_checked_audited_and_run():
    model = Recorded(WEATHER_PLAN)
    agency, _agents = await planned_agency(model)
    outcome = await agency.submit({"text": "how is the weather, in a word?", "input": {"city": "Lyon"}})
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.output == {"summary": "clear in Lyon"}
    assert [s.name for s in outcome.steps] == ["plan", "weather", "summary"]
    assert outcome.plan["source"] == "planner"
    [(proposed, p), (accepted, a)] = plan_records(agency, outcome.task_id)
    assert (proposed, accepted) == ("plan.proposed", "plan.accepted")
    assert p["plan"] == WEATHER_PLAN["plan"] and p["planner"] == "langchain"
    assert [s["name"] for s in a["steps"]] == ["plan", "weather", "summary"]
    # the model was shown the catalog's actions, never one a contract refuses
    prompt = model.prompts[0]
    assert "weather_lookup" in prompt and '"required_inputs": ["city"]' in prompt
    assert "stock_prediction" not in prompt and "how is the weather" in prompt


@pytest.mark.parametrize(
    ("proposal", "why"),
    [
        (
            {"plan": {"steps": [{"name": "guess", "action": "stock_prediction"}]}},
            "proposal.steps[0].action: the contracts of calc@1.0.0 say they cannot do stock_prediction",
        ),
        (
            {
                "plan": {
                    "steps": [{"name": "w", "action": "weather_lookup", "input": {"town": "request.city"}}]
                }
            },
            "proposal.steps[0].input.city: weather@1.0.0 requires 'city'; the step's input does not map it",
        ),
        (
            {"plan": {"steps": [{"name": "w", "action": "fly_to_the_moon"}]}},
            "proposal.steps[0].action: no live contract can do fly_to_the_moon",
        ),
        (
            {
                "plan": {
                    "steps": [
                        {"name": "a", "action": "summarize"},
                        {"name": "b", "action": "summarize", "after": []},
                    ]
                }
            },
            "proposal: steps[0]: 'a' leads nowhere",
        ),
        ("the weather is nice", "plan: the planner's reply is not JSON"),
        ({"refuse": "I cannot help with that"}, "plan: I cannot help with that"),
    ],
)
async def test_a_plan_the_gateway_refuses_goes_to_a_person_and_runs_nothing(proposal, why):
    agency, agents = await planned_agency(Recorded(proposal))
    outcome = await agency.submit({"text": "do the thing", "input": {"city": "Lyon"}})
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert outcome.pending["kind"] == "human_handover"
    assert [f.type for f in outcome.failures] == [FailureType.CONTEXT_AMBIGUITY]
    refused = dict(plan_records(agency, outcome.task_id))["plan.refused"]
    assert any(p.startswith(why) for p in refused["problems"]), refused["problems"]
    assert sum(a.calls for a in agents.values()) == 0  # nothing ran: never a guess


async def test_the_planner_may_ask_and_the_answer_goes_back_to_it():
    question = {
        "question": "Which city do you mean?",
        "options": [
            {"id": "lyon", "label": "Lyon", "value": "Lyon"},
            {"id": "rome", "label": "Rome", "value": "Rome"},
        ],
    }
    then = {
        "plan": {
            "steps": [
                {"name": "weather", "action": "weather_lookup", "input": {"city": {"value": "Rome"}}},
                {"name": "summary", "action": "summarize", "input": {"facts": "steps.weather"}},
            ]
        }
    }
    model = Recorded(question, then)
    agency, _ = await planned_agency(model)
    outcome = await agency.submit({"text": "weather in the city of the pope?"})
    assert outcome.state is TaskState.INPUT_REQUIRED
    assert (
        outcome.pending["kind"] == "clarification"
        and outcome.pending["question"] == "Which city do you mean?"
    )
    resumed = await agency.resume(outcome.task_id, answer="rome")
    assert resumed.state is TaskState.COMPLETED, resumed.reason
    assert resumed.output == {"summary": "clear in Rome"}
    assert '"answer": "Rome"' in model.prompts[1]  # the user's answer was in the second prompt


async def test_a_plan_stays_within_the_goals_scope_stages_and_the_task_limits():
    model = Recorded(
        {"plan": {"steps": [{"name": "calc", "action": "compound_interest"}]}},
    )
    agency, _ = await planned_agency(model, max_steps=2)
    agency.register_goal(
        {
            "id": "GOAL_WEATHER_001",
            "description": "tell the weather",
            "intention_scope": {"actions": ["weather_lookup", "summarize"]},
            "stages": [{"name": "facts", "step": "weather", "verification_steps": ["$.sky exists"]}],
            "verification_steps": ["$.summary exists"],
        }
    )
    outcome = await agency.submit({"text": "weather?", "goal_id": "GOAL_WEATHER_001"})
    assert outcome.state is TaskState.INPUT_REQUIRED
    problems = dict(plan_records(agency, outcome.task_id))["plan.refused"]["problems"]
    assert "proposal.steps[0].action: compound_interest is outside the goal's intention scope" in problems
    assert (
        "proposal.steps: stage 'facts' is bound to step 'weather', which the plan does not have" in problems
    )
    # the planner was offered only the actions in the goal's scope
    assert "compound_interest" not in model.prompts[0] and "weather_lookup" in model.prompts[0]
    # too many steps for the task limits
    agency2, _ = await planned_agency(Recorded(WEATHER_PLAN), max_steps=2)
    outcome = await agency2.submit({"text": "weather?", "input": {"city": "Lyon"}})
    problems = dict(plan_records(agency2, outcome.task_id))["plan.refused"]["problems"]
    assert "proposal.steps: 3 steps, more than limits.max_steps_per_task (2)" in problems


async def test_a_person_may_write_the_plan_the_planner_could_not_and_it_is_checked_too():
    agency, agents = await planned_agency(Recorded({"refuse": "no idea"}))
    outcome = await agency.submit({"text": "weather please", "input": {"city": "Oslo"}})
    assert outcome.pending["kind"] == "human_handover"
    bad = await agency.resume(
        outcome.task_id,
        decision={
            "action": "provide_output",
            "output": {"plan": [{"name": "x", "action": "stock_prediction"}]},
            "by": "ops",
        },
    )
    assert bad.state is TaskState.INPUT_REQUIRED and agents["calc"].calls == 0  # refused again
    done = await agency.resume(
        outcome.task_id, decision={"action": "provide_output", "output": WEATHER_PLAN, "by": "ops"}
    )
    assert done.state is TaskState.COMPLETED, done.reason
    assert done.output == {"summary": "clear in Oslo"}
    assert done.plan["source"] == "person:human:ops"


async def test_trace_show_tells_what_the_planner_proposed_and_why_it_was_refused():
    agency, _ = await planned_agency(
        Recorded({"plan": {"steps": [{"name": "guess", "action": "stock_prediction"}]}})
    )
    outcome = await agency.submit({"text": "will ACME rise?"})
    [timeline] = build_timelines([r for _, r in agency.audit.records() if r.task_id == outcome.task_id])
    text = render_text(timeline)
    assert "planner langchain proposed 1 steps: guess" in text
    assert "plan refused (1 problems)" in text
    assert "the contracts of calc@1.0.0 say they cannot do stock_prediction" in text


async def test_the_definition_file_names_the_planners_model(tmp_path):
    from middleware import InvalidInput
    from middleware.server.bootstrap import build_agency
    from middleware.server.definition import definition_from

    reply = json.dumps({"plan": {"steps": [{"name": "calc", "action": "compound_interest"}]}})
    data = {
        "agents": [
            {
                "factory": "middleware.demo:demo_agent",
                "args": {"name": "financial_calculator"},
                "contract": {
                    "name": "financial_calculator",
                    "can_do": ["compound_interest"],
                    "tags": ["finance"],
                },
            }
        ],
        "planner": {"factory": "middleware.testing:ScriptedChatModel", "args": {"replies": [reply]}},
    }
    agency = await build_agency(definition_from(data, env={"AGENCY_AUDIT_DIR": str(tmp_path)}))
    try:
        outcome = await agency.submit({"text": "how much interest?"})
    finally:
        await agency.close()
    assert outcome.state is TaskState.COMPLETED, outcome.reason
    assert outcome.plan["source"] == "planner" and outcome.output == {"monthly_payment": 0.0}
    with pytest.raises(InvalidInput) as refused:
        definition_from({"planner": {"factory": "middleware.testing:NoSuchModel"}})
    assert refused.value.problems[0].field == "planner.factory"


async def test_with_the_personal_data_guard_on_the_model_is_told_no_personal_data():
    from middleware import AgencyConfig

    model = Recorded(WEATHER_PLAN)
    agency, _ = await planned_agency(model)
    guarded = Agency(
        sleep=no_sleep,
        planner=LangChainPlanner(model),
        config=AgencyConfig.model_validate({"guards": {"personal_data": {"enabled": True}}}),
        catalog=agency.catalog,
        agents=agency.agents,
    )
    await guarded.submit(
        {
            "text": "weather for alice@example.com please",
            "input": {"city": "Lyon", "mail": "alice@example.com"},
        }
    )
    assert model.prompts, "the planner was asked"
    assert "alice@example.com" not in model.prompts[0]
    assert "[redacted:email]" in model.prompts[0] and "Lyon" in model.prompts[0]
