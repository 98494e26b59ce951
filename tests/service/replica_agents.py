"""Agents the two-gateway test's definition file names by import path (``replica_agents:...``).

The gateways are separate processes, so these live in a module they can import
(the test puts this directory on their ``PYTHONPATH``).
"""

from __future__ import annotations

from typing import Any

from middleware import AgentReply, AgentRequest


async def unsure(request: AgentRequest) -> AgentReply:
    """Hedges ("probably", low confidence): the task stops for a clarification."""
    return AgentReply(output={"plan": "probably plan A"}, confidence_score=0.4)


async def flaky(request: AgentRequest) -> Any:
    """Always fails (TOOL_ERROR), so its success rate drops wherever it is dispatched."""
    raise RuntimeError("flaky is down")


async def steady(request: AgentRequest) -> Any:
    """Always answers."""
    return {"done": True}


async def held(request: AgentRequest) -> Any:
    """Stays in flight until the test pushes to the Redis list its input names."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(request.input["redis_url"])
    try:
        await client.blpop([request.input["release"]], timeout=20)
    finally:
        await client.aclose()
    return {"released": True}


async def held_talking(request: AgentRequest) -> Any:
    """Says it is waiting (progress, under a contract with ``stream_progress``), then stays in
    flight until the test pushes to the Redis list its input names."""
    import redis.asyncio as aioredis

    from middleware.task_progress import emit_progress

    emit_progress("token", {"text": "waiting for "})
    emit_progress("token", {"text": "the release"})
    client = aioredis.Redis.from_url(request.input["redis_url"])
    try:
        released = await client.blpop([request.input["release"]], timeout=30)
    finally:
        await client.aclose()
    return {"released": released is not None}
