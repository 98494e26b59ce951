"""A send_message caller receives the recipient's intermediate events as a stream (issue 19,
seed 000): progress, nested sub-calls, then the final answer; errors end the stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from middleware.errors import PermissionDenied
from middleware.messaging import Flows, Runtime, SubAgentEvent, Turn

from .helpers import Env


async def test_the_caller_sees_progress_and_nested_events_before_the_final_answer(env: Env) -> None:
    flows = Flows()
    mgr, analyst_h, db = flows.agent("manager"), flows.agent("analyst"), flows.agent("db")
    _ = mgr > analyst_h > db
    seen: list[SubAgentEvent] = []
    async with Runtime(flows, env.office()) as rt:

        async def manager(turn: Turn) -> Any:
            async for event in turn.ctx.send_message_stream("analyst", "risk of plan B?"):
                seen.append(event)
            return seen[-1].data

        async def analyst(turn: Turn) -> str:
            turn.ctx.emit("progress", {"step": "gathering", "pct": 10})
            rows = await turn.ctx.send_message("db", "SELECT risk")  # its events bubble up too
            turn.ctx.emit("partial", f"rows: {rows}")
            return "low"

        def database(turn: Turn) -> int:
            turn.ctx.emit("tool_call", {"sql": turn.input})
            return 3

        await rt.add_agent(mgr, manager)
        await rt.add_agent(analyst_h, analyst)
        await rt.add_agent(db, database)
        assert await rt.conversation("manager").user_turn("assess") == "low"
    assert [(e.agent, e.kind) for e in seen] == [
        ("analyst", "turn_started"),
        ("analyst", "progress"),
        ("db", "turn_started"),
        ("db", "tool_call"),
        ("db", "turn_finished"),
        ("analyst", "partial"),
        ("analyst", "turn_finished"),
        ("analyst", "final"),
    ]
    analyst_run = seen[0].run_id
    assert seen[2].parent_run_id == analyst_run  # the nested call is the analyst's
    assert seen[1].data == {"step": "gathering", "pct": 10} and seen[-1].data == "low"


async def test_events_arrive_while_the_recipient_is_still_working(env: Env) -> None:
    flows = Flows()
    a, b = flows.agent("a"), flows.agent("b")
    _ = a > b
    release = asyncio.Event()
    got_progress = asyncio.Event()
    async with Runtime(flows, env.office()) as rt:

        async def caller(turn: Turn) -> str:
            async for event in turn.ctx.send_message_stream("b", "work"):
                if event.kind == "progress":
                    got_progress.set()
                    release.set()  # only possible if the event came before b finished
                if event.kind == "final":
                    return str(event.data)
            return "no final"

        async def worker(turn: Turn) -> str:
            turn.ctx.emit("progress", "halfway")
            await asyncio.wait_for(release.wait(), 10)
            return "done"

        await rt.add_agent(a, caller)
        await rt.add_agent(b, worker)
        assert await rt.conversation("a").user_turn("go") == "done"
    assert got_progress.is_set()


async def test_a_failing_recipient_ends_the_stream_with_an_error_event_and_raises(env: Env) -> None:
    flows = Flows()
    a, b, c = flows.agent("a"), flows.agent("b"), flows.agent("c")
    _ = a > b
    kinds: list[str] = []
    async with Runtime(flows, env.office()) as rt:

        async def caller(turn: Turn) -> str:
            with pytest.raises(RuntimeError, match="disk full"):
                async for event in turn.ctx.send_message_stream("b", "work"):
                    kinds.append(event.kind)
            with pytest.raises(PermissionDenied):  # the flows hold for streamed calls too
                async for _ in turn.ctx.send_message_stream("c", "work"):
                    pass
            return "ok"

        def worker(turn: Turn) -> str:
            turn.ctx.emit("progress", 1)
            raise RuntimeError("disk full")

        await rt.add_agent(a, caller)
        await rt.add_agent(b, worker)
        await rt.add_agent(c, lambda turn: "c")
        assert await rt.conversation("a").user_turn("go") == "ok"
    assert kinds == ["turn_started", "progress", "error"]


async def test_emit_without_a_streaming_caller_is_a_no_op(env: Env) -> None:
    flows = Flows()
    a, b = flows.agent("a"), flows.agent("b")
    _ = a > b
    async with Runtime(flows, env.office()) as rt:

        async def caller(turn: Turn) -> Any:
            turn.ctx.emit("progress", "nobody listens")
            return await turn.ctx.send_message("b", "x")

        def worker(turn: Turn) -> str:
            turn.ctx.emit("progress", "nobody listens either")
            return "fine"

        await rt.add_agent(a, caller)
        await rt.add_agent(b, worker)
        assert await rt.conversation("a").user_turn("go") == "fine"
