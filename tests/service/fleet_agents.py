"""Agents the fleet tests' workers and gateways import by path (``fleet_agents:...``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from middleware import AgentRequest


async def work(request: AgentRequest) -> Any:
    """Answers at once, naming the process that did the work."""
    return {"done": True, "pid": os.getpid()}


async def slow(request: AgentRequest) -> Any:
    """Takes ``input.ms`` milliseconds (default 50): calls are in flight when a process is killed."""
    await asyncio.sleep(float(request.input.get("ms", 50)) / 1000)
    return {"done": True, "pid": os.getpid()}
