"""``agency worker`` loading: what it accepts and how it says what is wrong."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from middleware.cli.worker import load_agent
from middleware.errors import InvalidInput
from middleware.langchain import LangChainAgent


@pytest.fixture
def agents_module(tmp_path, monkeypatch):
    (tmp_path / "my_agents.py").write_text(
        textwrap.dedent(
            """
            from langchain_core.runnables import RunnableLambda
            from middleware.langchain import wrap_runnable

            chain = RunnableLambda(lambda x: "ok")
            wrapped = wrap_runnable(chain, {"name": "wrapped", "can_do": ["answer_faq"]})

            def plain(request):
                return "plain"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_agents", None)


def test_a_wrapped_agent_brings_its_contract(agents_module):
    agent, contract = load_agent("my_agents:wrapped")
    assert isinstance(agent, LangChainAgent)
    assert contract.key == "wrapped@1.0.0"


def test_a_bare_runnable_is_wrapped_with_the_contract_file(agents_module):
    path = agents_module / "contract.yaml"
    path.write_text("name: chain_agent\nversion: 2.0.0\ncan_do: [answer_faq]\n")
    agent, contract = load_agent("my_agents:chain", path)
    assert isinstance(agent, LangChainAgent)
    assert agent.contract.key == contract.key == "chain_agent@2.0.0"


def test_a_plain_callable_with_a_json_contract(agents_module):
    path = agents_module / "contract.json"
    path.write_text(json.dumps({"name": "plain_agent", "can_do": ["answer_faq"]}))
    agent, contract = load_agent("my_agents:plain", path)
    assert agent(None) == "plain" and contract["name"] == "plain_agent"


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ("my_agents", "--agent", "is not MODULE:ATTRIBUTE"),
        ("no_such_module_xyz:agent", "--agent", "cannot import 'no_such_module_xyz'"),
        ("my_agents:missing", "--agent", "has no attribute 'missing'"),
        ("my_agents:chain", "--contract", "is a LangChain Runnable: give its contract file"),
        ("my_agents:plain", "--contract", "carries no .contract"),
    ],
)
def test_bad_specs_name_the_flag_and_the_reason(agents_module, spec, field, reason):
    with pytest.raises(InvalidInput) as info:
        load_agent(spec)
    assert info.value.field == field
    assert reason in str(info.value)


def test_a_contract_file_that_does_not_parse(agents_module):
    path = agents_module / "contract.json"
    path.write_text("{not json")
    with pytest.raises(InvalidInput, match="does not parse"):
        load_agent("my_agents:plain", path)
