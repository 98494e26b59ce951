"""A LangChain chain behind a contract, offline (a fake chat model): python examples/langchain_agent.py"""

import asyncio

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from middleware import Agency, langchain

prompt = ChatPromptTemplate.from_messages([("system", "{contract}"), ("human", "{question}")])
model = FakeListChatModel(responses=["A cracked screen is covered for 12 months."])  # e.g. ChatOpenAI()
contract = {"name": "warranty_faq", "version": "1.0.0", "can_do": ["answer_faq"], "slo_latency_ms": 2000}
contract |= {"cannot_do": ["issue_refund"], "input_schema": {"type": "object", "required": ["question"]}}
agent = langchain.wrap_runnable(prompt | model | StrOutputParser(), contract)
request = {"text": "Is my cracked screen covered?", "input": {"question": "covered?"}}


async def main() -> None:
    agency = Agency()
    agent.audit = agency.audit  # the chain's LLM calls are audited under the task's trace id
    await agency.register(agent.contract, agent)
    outcome = await agency.submit(request | {"constraints": {"action": "answer_faq"}})
    inner = [r.detail["kind"] for _, r in agency.audit.records() if r.event_type == "agent.step"]
    print(outcome.state.value, "->", outcome.output, "| inner steps audited:", inner)


if __name__ == "__main__":
    asyncio.run(main())
