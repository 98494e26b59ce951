"""A wrapped LangChain agent served by a worker, registered at and called through a real gRPC gateway."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from lc_helpers import contract, no_sleep

from middleware import (
    Agency,
    AgentRequest,
    FailureType,
    MemoryAuditLog,
    NotFound,
    ResolutionKind,
    TaskState,
)
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc, catalog_pb2, catalog_pb2_grpc
from middleware.agents import AgentRegistry
from middleware.audit.wal_reader import WalLogReader
from middleware.errors import AgentFailure, InvalidInput, Unavailable
from middleware.langchain import wrap_runnable
from middleware.server.grpc_api import build_server
from middleware.server.remote_agent import RemoteAgent
from middleware.server.worker import Worker

ROOT = Path(__file__).resolve().parents[2]


def faq_chain(answer: str) -> Any:
    prompt = ChatPromptTemplate.from_messages([("system", "{contract}"), ("human", "{question}")])
    return prompt | FakeListChatModel(responses=[answer]) | StrOutputParser()


@pytest.fixture
async def gateway():
    agency = Agency(sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    server = build_server(agency, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield agency, f"127.0.0.1:{server.port}", channel
    await channel.close()
    await server.stop(0)
    await agency.close()


async def test_worker_registers_serves_through_the_gateway_and_deregisters(gateway, tmp_path):
    agency, address, channel = gateway
    worker_audit = MemoryAuditLog()
    agent = wrap_runnable(
        faq_chain("Covered for 12 months."),
        contract("faq_agent", "answer_faq", input_schema={"type": "object", "required": ["question"]}),
        audit=worker_audit,
    )
    beating = asyncio.Event()
    worker = Worker(
        agent, gateway=address, heartbeat_interval=0.05, on_heartbeat=lambda n: n >= 2 and beating.set()
    )
    await worker.start()
    try:
        entry = await agency.catalog.get("faq_agent@1.0.0")
        assert entry.contract.endpoint == worker.endpoint == f"127.0.0.1:{worker.port}"
        assert "faq_agent@1.0.0" not in agency.agents  # no in-process callable: it is remote

        stub = agency_pb2_grpc.AgencyServiceStub(channel)
        outcome = await stub.Submit(
            agency_pb2.SubmitRequest(
                text="is my screen covered?",
                input_json=json.dumps({"question": "covered?"}),
                constraints_json=json.dumps({"action": "answer_faq"}),
            )
        )
        assert outcome.state == "completed", outcome.reason
        assert json.loads(outcome.output_json) == "Covered for 12 months."
        result = next(
            r
            for _, r in agency.audit.records()
            if r.event_type == "agent.result" and r.trace_id == outcome.trace_id
        )
        assert result.detail["message"]["metadata"]["provenance"]["source"].startswith("faq_agent@1.0.0")
        # the worker audited the chain's LLM call under the gateway's trace id
        inner = [r for _, r in worker_audit.records() if r.event_type == "agent.step"]
        assert {r.trace_id for r in inner} == {outcome.trace_id}
        assert "llm" in {r.detail["kind"] for r in inner}

        before = entry.last_heartbeat
        await asyncio.wait_for(beating.wait(), timeout=10)
        assert (await agency.catalog.get("faq_agent@1.0.0")).last_heartbeat > before
    finally:
        await worker.stop()
    with pytest.raises(NotFound):
        await agency.catalog.get("faq_agent@1.0.0")


async def test_remote_deadline_gives_tool_timeout_then_the_backup_answers(gateway):
    agency, address, _ = gateway
    release = asyncio.Event()

    async def hang(_: Any) -> str:
        await release.wait()
        return "too late"

    slow = wrap_runnable(RunnableLambda(hang), contract("slow_agent", "answer_faq", slo=60))
    backup = wrap_runnable(faq_chain("backup answer"), contract("backup_agent", "answer_faq", slo=3000))
    async with Worker(slow, gateway=address) as w1, Worker(backup, gateway=address) as w2:
        assert w1.endpoint != w2.endpoint
        outcome = await agency.submit(
            {"text": "q", "input": {"question": "q"}, "constraints": {"action": "answer_faq"}}
        )
        release.set()
    assert outcome.state is TaskState.COMPLETED
    assert outcome.output == "backup answer"
    assert [f.type for f in outcome.failures] == [FailureType.TOOL_TIMEOUT] * 3
    assert outcome.resolutions[-1].kind is ResolutionKind.USE_BACKUP
    assert outcome.steps[0].agent == "backup_agent@1.0.0"


async def test_remote_typed_failures_come_back_typed(gateway):
    agency, address, _ = gateway

    def explode(_: Any) -> str:
        raise ValueError("remote boom")

    agency.failures.policy.max_retries = 0
    bad = wrap_runnable(RunnableLambda(explode), contract("bad_agent", "answer_faq"))
    async with Worker(bad, gateway=address):
        outcome = await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    assert outcome.failures[0].type is FailureType.TOOL_ERROR
    assert "ValueError: remote boom" in outcome.failures[0].detail
    assert outcome.failures[0].context["cause"] == "ValueError"


async def test_unreachable_worker_is_tool_unavailable(gateway):
    agency, _, _ = gateway
    # registered with an endpoint where nothing listens (a worker that died without deregistering)
    await agency.register({**contract("ghost_agent", "answer_faq"), "endpoint": "127.0.0.1:1"})
    outcome = await agency.submit({"text": "q", "constraints": {"action": "answer_faq"}})
    assert outcome.failures[0].type is FailureType.TOOL_UNAVAILABLE
    assert "127.0.0.1:1" in outcome.failures[0].detail


async def test_remote_agent_maps_status_codes(gateway):
    agency, address, _ = gateway
    agent = wrap_runnable(faq_chain("x"), contract("faq_agent", "answer_faq"))
    async with Worker(agent, gateway=address) as worker:
        entry = await agency.catalog.get("faq_agent@1.0.0")
        other = entry.contract.model_copy(update={"name": "other_agent"})
        from middleware.smf import SMFMessage

        message = SMFMessage.parse(
            {
                "sender": "gateway",
                "receiver": "other_agent@1.0.0",
                "content": {"question": "q"},
                "metadata": {
                    "provenance": {"source": "user", "reliability_score": 1},
                    "freshness_ttl": 60,
                    "confidence_score": 1,
                    "intention_trace": ["GOAL_TEST_001"],
                },
            }
        )
        remote = RemoteAgent(worker.endpoint)
        try:
            with pytest.raises(Unavailable, match=r"does not serve 'other_agent@1\.0\.0'"):
                await remote(AgentRequest(message=message, contract=other, task_id="t", step="s"))
            reply = await remote(
                AgentRequest(
                    message=message, contract=entry.contract, task_id="t", step="s", deadline_ms=2000
                )
            )
            assert reply.output == "x" and reply.confidence_score == 0.8
        finally:
            await remote.aclose()


def test_worker_needs_a_contract():
    with pytest.raises(InvalidInput, match="contract"):
        Worker(lambda request: "x", gateway="127.0.0.1:1")


async def test_worker_start_fails_clearly_when_the_gateway_is_unreachable():
    agent = wrap_runnable(faq_chain("x"), contract("faq_agent", "answer_faq"))
    worker = Worker(agent, gateway="127.0.0.1:1", connect_timeout=0.3)
    with pytest.raises(Unavailable, match=r"cannot register faq_agent@1\.0\.0 at gateway 127\.0\.0\.1:1"):
        await worker.start()


async def test_worker_waits_for_a_gateway_that_starts_after_it():
    from gateway_processes import free_port

    port = free_port()
    agent = wrap_runnable(faq_chain("x"), contract("faq_agent", "answer_faq"))
    worker = Worker(agent, gateway=f"127.0.0.1:{port}", connect_timeout=30)
    starting = asyncio.create_task(worker.start())
    # refused connections are retried (the gateway may be starting), not reported at once
    done, _ = await asyncio.wait({starting}, timeout=0.3)
    assert not done
    agency = Agency(sleep=no_sleep, agents=AgentRegistry(remote_factory=RemoteAgent.factory()))
    server = build_server(agency, f"127.0.0.1:{port}")
    await server.start()
    try:
        await asyncio.wait_for(starting, 15)  # the channel's reconnect backoff, then registered
        assert (await agency.catalog.get("faq_agent@1.0.0")).contract.endpoint == worker.endpoint
        await worker.stop()
    finally:
        if not starting.done():
            starting.cancel()
        await server.stop(0)
        await agency.close()


def test_agent_failure_refuses_unknown_failure_types():
    with pytest.raises(InvalidInput, match="unknown failure type"):
        AgentFailure("NOT_A_TYPE", "x")


async def test_agency_worker_cli_registers_serves_and_deregisters_on_sigterm(gateway, tmp_path):
    agency, address, channel = gateway
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "middleware",
        "worker",
        "--agent",
        "examples.langchain_agent:agent",
        "--gateway",
        address,
        "--heartbeat",
        "0.2",
        "--audit-dir",
        str(tmp_path / "worker-audit"),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    catalog = catalog_pb2_grpc.CatalogServiceStub(channel)
    try:
        # a fresh interpreter importing langchain-core: poll the catalog (cross-process), bounded
        deadline = time.monotonic() + 30
        registered = None
        while registered is None and time.monotonic() < deadline and proc.returncode is None:
            try:
                registered = await catalog.Get(catalog_pb2.GetCapabilityRequest(key="warranty_faq@1.0.0"))
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.05)
        assert registered is not None, "the worker did not register within 30 s"
        assert registered.contract.endpoint.startswith("127.0.0.1:")
        outcome = await agency.submit(
            {"text": "covered?", "input": {"question": "covered?"}, "constraints": {"action": "answer_faq"}}
        )
        assert outcome.output == "A cracked screen is covered for 12 months."
        proc.send_signal(signal.SIGTERM)
        out_bytes, err_bytes = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out, err = out_bytes.decode(), err_bytes.decode()
    assert proc.returncode == 0, err
    assert "registered at" in out and "deregistered and stopped" in out
    with pytest.raises(NotFound):
        await agency.catalog.get("warranty_faq@1.0.0")
    # the worker's own audit log holds the chain's inner steps under the gateway's trace id
    reader = WalLogReader(tmp_path / "worker-audit")  # the same verifiable log as the gateway's
    inner = [r for _, r in reader.records() if r.event_type == "agent.step"]
    assert {r.detail["kind"] for r in inner} == {"llm", "runnable"}
    assert {r.trace_id for r in inner} == {outcome.trace_id}


async def test_a_reply_keeps_its_smf_metadata_across_the_wire(gateway):
    from datetime import UTC, datetime

    from middleware import AgentReply, Provenance

    produced = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    async def agent(request: AgentRequest) -> AgentReply:
        return AgentReply(
            output={"price": 100},
            confidence_score=0.65,
            provenance=Provenance(source="pricing_db", reliability_score=0.9),
            freshness_ttl=30,
            created_at=produced,
            intention_trace=["GOAL_A"],
        )

    agency, address, _ = gateway
    async with Worker(agent, contract("price_agent", "quote"), gateway=address) as worker:
        entry = await agency.catalog.get("price_agent@1.0.0")
        from middleware.smf import SMFMessage

        message = SMFMessage.parse(
            {
                "sender": "gateway",
                "receiver": "price_agent@1.0.0",
                "content": {},
                "metadata": {
                    "provenance": {"source": "user", "reliability_score": 1},
                    "freshness_ttl": 60,
                    "confidence_score": 1,
                    "intention_trace": ["GOAL_TEST_001"],
                },
            }
        )
        remote = RemoteAgent(worker.endpoint)
        try:
            reply = await remote(
                AgentRequest(message=message, contract=entry.contract, task_id="t", step="s")
            )
        finally:
            await remote.aclose()
    assert reply == AgentReply(
        output={"price": 100},
        confidence_score=0.65,
        provenance=Provenance(source="pricing_db", reliability_score=0.9),
        freshness_ttl=30,
        created_at=produced,
        intention_trace=["GOAL_A"],
    )
