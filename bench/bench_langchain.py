"""What wrapping a LangChain runnable costs, in process and as a remote worker.

    python -m bench.bench_langchain [--calls N]

Prints per-call latency (mean, p50, p95) of the same fake-model chain called five ways:
plain ``ainvoke`` (the baseline), through ``LangChainAgent`` (mapping, input check), the
same with the audit callback on an in-memory log, a whole ``Agency.submit`` in process,
and a whole ``Agency.submit`` dispatched over gRPC to a worker on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from middleware import Agency, AgentRequest, MemoryAuditLog
from middleware.agents import AgentRegistry
from middleware.langchain import wrap_runnable
from middleware.server.grpc_api import build_server
from middleware.server.remote_agent import RemoteAgent
from middleware.server.worker import Worker
from middleware.smf import SMFMessage

CONTRACT = {"name": "faq_agent", "version": "1.0.0", "can_do": ["answer_faq"], "slo_latency_ms": 5000}
TASK = {"text": "q", "input": {"question": "is it covered?"}, "constraints": {"action": "answer_faq"}}


def chain() -> Any:
    prompt = ChatPromptTemplate.from_messages([("system", "{contract}"), ("human", "{question}")])
    return prompt | FakeListChatModel(responses=["Covered for 12 months."]) | StrOutputParser()


async def measure(name: str, call: Callable[[], Awaitable[Any]], calls: int, base: float | None) -> float:
    for _ in range(min(20, calls)):  # warm up
        await call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    mean = statistics.fmean(times)
    p50, p95 = statistics.median(times), statistics.quantiles(times, n=20)[18]
    extra = f"  (+{mean - base:.3f} ms vs baseline)" if base is not None else "  (baseline)"
    print(f"{name:<44} mean {mean:7.3f} ms  p50 {p50:7.3f}  p95 {p95:7.3f}{extra}")
    return mean


async def main(calls: int) -> None:
    runnable = chain()
    plain = wrap_runnable(chain(), CONTRACT)
    audited = wrap_runnable(chain(), CONTRACT, audit=MemoryAuditLog())
    message = SMFMessage.parse(
        {
            "sender": "gateway",
            "receiver": "faq_agent@1.0.0",
            "content": {"question": "is it covered?"},
            "metadata": {
                "provenance": {"source": "user", "reliability_score": 1},
                "freshness_ttl": 60,
                "confidence_score": 1,
                "intention_trace": ["t"],
            },
        }
    )
    request = AgentRequest(message=message, contract=plain.contract, task_id="t", step="main")
    inputs = {"question": "is it covered?", "contract": "You are faq_agent."}

    print(f"{calls} calls each, fake chat model (no network)")
    base = await measure("runnable.ainvoke (baseline)", lambda: runnable.ainvoke(inputs), calls, None)
    await measure("LangChainAgent(request)", lambda: plain(request), calls, base)
    await measure("LangChainAgent(request), audit callback on", lambda: audited(request), calls, base)

    local = Agency()
    await local.register(plain.contract, plain)
    await measure("Agency.submit, in process", lambda: local.submit(TASK), calls, base)
    await local.close()

    gateway = Agency(agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    server = build_server(gateway, "127.0.0.1:0")
    await server.start()
    async with Worker(wrap_runnable(chain(), CONTRACT), gateway=f"127.0.0.1:{server.port}"):
        await measure("Agency.submit, remote worker over gRPC", lambda: gateway.submit(TASK), calls, base)
    await server.stop(0)
    await gateway.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    asyncio.run(main(parser.parse_args().calls))
