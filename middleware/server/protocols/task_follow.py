"""Run a task's work while telling its events as they come (the A2A and MCP streaming bindings).

The bindings stream the same thing gRPC ``WatchTask`` streams: the task's event log
(:mod:`middleware.task_events`), read after the last event told, while the submit or resume that
drives the task runs. When the work ends, what the task recorded before it returned is told too,
then the work's outcome is returned. Trouble reading the log never touches the task: the events
stop, the work goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ...pipeline import Agency
from ...task_events import TaskEvent
from ...tasks import Outcome

__all__ = ["follow_while"]

log = logging.getLogger("agency.protocols")

#: How long one read of the log waits before the work is checked again.
READ_WAIT_S = 5.0


async def follow_while(
    agency: Agency,
    task_id: str,
    work: Awaitable[Outcome],
    tell: Callable[[TaskEvent], Awaitable[None]],
    *,
    after: int = 0,
) -> Outcome:
    """Run ``work`` (the task's submit or resume) and ``tell`` each event of ``task_id`` after
    ``after`` as it is stored; return ``work``'s outcome (or raise what it raised)."""
    job = asyncio.ensure_future(work)
    following = True
    try:
        while not job.done():
            if not following:
                await asyncio.wait({job})
                break
            reader = asyncio.ensure_future(agency.events.read(task_id, after=after, wait_s=READ_WAIT_S))
            await asyncio.wait({job, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():  # the work ended first: the rest is read below
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                break
            try:
                events = reader.result()
            except Exception as exc:  # the log is down: the task is not, it goes on untold
                log.warning("task %s: its events cannot be read (%s); not streaming them", task_id, exc)
                following = False
                continue
            for event in events:
                await tell(event)
                after = event.seq
        while following:  # what the task recorded before it returned
            try:
                events = await agency.events.read(task_id, after=after)
            except Exception as exc:
                log.warning("task %s: its last events cannot be read (%s)", task_id, exc)
                break
            if not events:
                break
            for event in events:
                await tell(event)
                after = event.seq
        return job.result()
    finally:
        if not job.done():
            job.cancel()
            await asyncio.gather(job, return_exceptions=True)
