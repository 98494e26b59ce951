"""Long tasks over gRPC (a real server on port 0): Submit without waiting, WatchTask, ListTasks,
through the public client and raw stubs, with tokens, and a connection cut mid-stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from middleware import Agency, AgentReply, TaskState
from middleware._proto.agency.v1 import agency_pb2, agency_pb2_grpc
from middleware.access import Principal, Role
from middleware.caller_limits import CallerLimits
from middleware.client import AgencyClient, SyncAgencyClient
from middleware.errors import AlreadyExists, InvalidInput, NotFound, PermissionDenied, ResourceExhausted
from middleware.server.credentials import hash_token
from middleware.server.grpc_api import build_server
from middleware.task_events import OUTCOME, PROGRESS, TaskEvent
from middleware.testing import GatedAgent

pytestmark = pytest.mark.timeout(60)

TOKENS = {
    "alice-token": ("alice", Role.CLIENT),
    "bob-token": ("bob", Role.CLIENT),
    "root-token": ("root", Role.ADMIN),
}


def contract(name: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "can_do": [action], "slo_latency_ms": 60_000, **extra}


@contextlib.asynccontextmanager
async def serving(agency: Agency, *, tokens: bool = False, limits: CallerLimits | None = None):
    hashes = {hash_token(t): Principal(name=n, role=r) for t, (n, r) in TOKENS.items()} if tokens else None
    server = build_server(agency, "127.0.0.1:0", token_hashes=hashes, limits=limits)
    await server.start()
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.stop(0)
        await agency.close()


@pytest.fixture
async def slow() -> AsyncIterator[tuple[Agency, GatedAgent, str]]:
    agency = Agency()
    agent = GatedAgent({"answer": 42}, progress=[("token", {"text": "thinking"})])
    await agency.register(contract("slow", "think", stream_progress=True), agent)
    async with serving(agency) as address:
        yield agency, agent, address


async def test_submit_returns_before_the_agent_answers_and_the_stream_shows_each_event_and_the_outcome(slow):
    agency, agent, address = slow
    async with AgencyClient(address) as client:
        accepted = await client.submit("please think", constraints={"action": "think"}, wait=False)
        assert accepted.state is TaskState.SUBMITTED
        await agent.entered.wait()  # running in the gateway, the client's call long returned
        seen: list[TaskEvent] = []
        async for event in client.watch(accepted.task_id):
            seen.append(event)
            if event.type == PROGRESS:
                agent.release()  # answers only once the client saw it at work
    audited = [r for _, r in agency.audit.records() if r.task_id == accepted.task_id]
    assert [e.id for e in seen if e.audit_index] == [r.event_id for r in audited]
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.detail["data"]["text"] for e in seen if e.type == PROGRESS] == ["thinking"]
    last = seen[-1]
    assert last.type == OUTCOME and last.final is not None
    assert last.final.state is TaskState.COMPLETED and last.final.output == {"answer": 42}


async def test_a_submit_without_waiting_is_refused_as_a_waiting_one_is(slow):
    _agency, agent, address = slow
    async with AgencyClient(address) as client:
        with pytest.raises(InvalidInput) as bad:
            await client.submit("", wait=False)
        assert bad.value.field == "text"
        with pytest.raises(NotFound):
            await client.submit("please think", goal_id="GOAL_NOPE", wait=False)
        await client.submit("please think", constraints={"action": "think"}, task_id="task_once", wait=False)
        with pytest.raises(AlreadyExists):
            await client.submit(
                "please think", constraints={"action": "think"}, task_id="task_once", wait=False
            )
        # a refusal by contract is the task's outcome, as for a waiting submit: accepted, then rejected
        refused = await client.submit("predict", constraints={"action": "predict"}, wait=False)
        events = [e async for e in client.watch(refused.task_id)]
        assert events[-1].final is not None and events[-1].final.state is TaskState.REJECTED
        agent.release()


async def test_a_client_whose_stream_breaks_reconnects_after_its_last_event_and_misses_nothing(slow):
    _agency, agent, address = slow
    channel = grpc.aio.insecure_channel(address)
    stub = agency_pb2_grpc.AgencyServiceStub(channel)
    accepted = await stub.Submit(
        agency_pb2.SubmitRequest(
            text="please think", constraints_json='{"action": "think"}', return_immediately=True
        )
    )
    assert accepted.state == "submitted"
    first = []
    call = stub.WatchTask(agency_pb2.WatchTaskRequest(task_id=accepted.task_id))
    async for event in call:
        first.append(event)
        if event.type == "agent.dispatch":
            break
    call.cancel()  # the client goes away mid-task
    agent.release()
    rest = [
        e
        async for e in stub.WatchTask(
            agency_pb2.WatchTaskRequest(task_id=accepted.task_id, after_seq=first[-1].seq)
        )
    ]
    whole = [e async for e in stub.WatchTask(agency_pb2.WatchTaskRequest(task_id=accepted.task_id))]
    assert [e.id for e in first + rest] == [e.id for e in whole]
    assert whole[-1].type == OUTCOME and whole[-1].final.state == "completed"
    assert json.loads(whole[-1].final.output_json) == {"answer": 42}
    await channel.close()


class CuttableProxy:
    """A TCP proxy in front of the gateway whose connections the test can cut (a network failure)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.base_events.Server | None = None
        self.connections = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()

    async def stop(self) -> None:
        self.cut()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def test_the_client_reconnects_by_itself_when_the_connection_is_cut_mid_task(slow):
    agency, agent, address = slow
    proxy = CuttableProxy(int(address.rsplit(":", 1)[1]))
    port = await proxy.start()
    try:
        async with AgencyClient(f"127.0.0.1:{port}") as client:
            accepted = await client.submit("please think", constraints={"action": "think"}, wait=False)
            seen: list[TaskEvent] = []
            async for event in client.watch(accepted.task_id):
                seen.append(event)
                if event.type == PROGRESS:
                    proxy.cut()  # the network fails while the agent works
                    agent.release()
        assert proxy.connections >= 2  # it connected again
        whole = [e async for e in agency.watch(accepted.task_id)]
        assert [e.id for e in seen] == [e.id for e in whole]  # nothing missed, nothing twice
        assert seen[-1].final is not None and seen[-1].final.state is TaskState.COMPLETED
    finally:
        await proxy.stop()


async def test_tasks_are_followed_and_listed_by_their_owner_and_an_admin_only():
    agency = Agency()
    await agency.register(contract("quick", "think"), lambda req: {"ok": True})
    async with (
        serving(agency, tokens=True) as address,
        AgencyClient(address, token="alice-token") as alice,
        AgencyClient(address, token="bob-token") as bob,
        AgencyClient(address, token="root-token") as root,
    ):
        mine = await alice.submit("please think", constraints={"action": "think"})
        theirs = await bob.submit("please think", constraints={"action": "think"})
        with pytest.raises(PermissionDenied):
            async for _ in bob.watch(mine.task_id):
                pass
        assert [e async for e in root.watch(mine.task_id)][-1].ends_task
        assert [t.task_id for t in (await alice.list_tasks()).tasks] == [mine.task_id]
        assert [t.task_id for t in (await root.list_tasks()).tasks] == [theirs.task_id, mine.task_id]
        assert [t.task_id for t in (await root.list_tasks(client="alice")).tasks] == [mine.task_id]
        with pytest.raises(PermissionDenied):
            await bob.list_tasks(client="alice")
        summary = (await alice.list_tasks(states=["completed"])).tasks[0]
        assert (
            summary.client == "alice" and summary.text == "please think" and summary.trace_id == mine.trace_id
        )


async def test_one_caller_holds_a_bounded_number_of_task_streams():
    agency = Agency()
    agent = GatedAgent({"ok": True})
    await agency.register(contract("slow", "think"), agent)
    async with (
        serving(agency, tokens=True, limits=CallerLimits(watch_streams=1)) as address,
        AgencyClient(address, token="alice-token") as alice,
    ):
        accepted = await alice.submit("please think", constraints={"action": "think"}, wait=False)
        first = alice.watch(accepted.task_id)
        await anext(first)  # one stream held
        with pytest.raises(ResourceExhausted):
            await anext(alice.watch(accepted.task_id))
        agent.release()
        async for _ in first:
            pass
        assert [e async for e in alice.watch(accepted.task_id)][-1].ends_task  # the held one closed


async def test_bad_list_requests_name_their_field():
    agency = Agency()
    async with serving(agency) as address:
        channel = grpc.aio.insecure_channel(address)
        stub = agency_pb2_grpc.AgencyServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListTasks(
                agency_pb2.ListTasksRequest(created_after="yesterday", page_size=1000, states=["asleep"])
            )
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        problems = json.loads(dict(err.value.trailing_metadata())["agency-problems"])
        assert {p["field"] for p in problems} == {"created_after", "page_size", "states[0]"}
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ListTasks(agency_pb2.ListTasksRequest(created_before="2026-01-01T00:00:00"))
        assert dict(err.value.trailing_metadata())["agency-field"] == "created_before"  # no zone
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in stub.WatchTask(agency_pb2.WatchTaskRequest(task_id="task_nope")):
                pass
        assert err.value.code() is grpc.StatusCode.NOT_FOUND
        await channel.close()


def test_the_blocking_client_submits_without_waiting_follows_and_lists():
    from served_in_thread import ServedInThread

    class Gateway(ServedInThread):
        async def start(self) -> None:
            self.agency = Agency()
            self.agent = GatedAgent(AgentReply(output={"answer": 42}))
            await self.agency.register(contract("slow", "think"), self.agent)
            self.server = build_server(self.agency, "127.0.0.1:0")
            await self.server.start()

        async def stop(self) -> None:
            await self.server.stop(0)
            await self.agency.close()

    with Gateway() as gateway, SyncAgencyClient(f"127.0.0.1:{gateway.server.port}") as client:
        accepted = client.submit("please think", constraints={"action": "think"}, wait=False)
        kinds = []
        for event in client.watch(accepted.task_id):
            kinds.append(event.type)
            if event.type == "agent.dispatch":
                gateway.loop.call_soon_threadsafe(gateway.agent.release)
        assert kinds[0] == "task.submitted" and kinds[-1] == OUTCOME
        page = client.list_tasks(states=[TaskState.COMPLETED])
        assert [t.task_id for t in page.tasks] == [accepted.task_id]


async def test_the_client_gives_up_following_when_no_gateway_answers_for_reconnect_for():
    from gateway_processes import free_port

    from middleware.errors import Unavailable

    async with AgencyClient(f"127.0.0.1:{free_port()}") as client:  # nothing listens there
        with pytest.raises(Unavailable):
            async for _ in client.watch("task_x", reconnect_for=0.3):
                pass


async def test_get_task_of_a_running_task_tells_its_live_state_as_the_task_list_does(slow):
    """GetTask and ListTasks agree while a task runs: both say ``dispatched`` once its agent
    works on it (the stored record still says how it was accepted)."""
    _agency, agent, address = slow
    async with AgencyClient(address) as client:
        accepted = await client.submit("please think", constraints={"action": "think"}, wait=False)
        await agent.entered.wait()
        now = await client.get_task(accepted.task_id)
        listed = {row.task_id: row for row in (await client.list_tasks()).tasks}
        assert now.state is TaskState.DISPATCHED
        assert listed[accepted.task_id].state is TaskState.DISPATCHED
        assert now.a2a_state == "TASK_STATE_WORKING"
        agent.release()
        events = [e async for e in client.watch(accepted.task_id)]
        assert events[-1].final is not None
        done = await client.get_task(accepted.task_id)
        assert done.state is TaskState.COMPLETED
