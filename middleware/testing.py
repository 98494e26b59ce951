"""Fakes shipped with the package, so users and tests use the same thing.

``ScriptedAgent`` plays back a script of steps: return a value, hang past any
deadline, or raise. It records every request it receives. ``ScriptedChatModel`` answers
prompts with scripted replies, as a LangChain chat model would (``ainvoke``): the governed
planner's and the LangChain intent judge's stand-in where no model may be called. ``GatedAgent``
is a slow agent without a sleep: it holds each call until released.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .agents import AgentReply, AgentRequest

__all__ = ["GatedAgent", "Hang", "ManualClock", "Raise", "ScriptedAgent", "ScriptedChatModel"]


@dataclass(frozen=True)
class Hang:
    """Never answer (until cancelled by the deadline)."""


@dataclass(frozen=True)
class Raise:
    """Raise ``error``."""

    error: BaseException


class ScriptedAgent:
    """An async agent that plays a script; the last step repeats when the script runs out.

    Each step is a value to return (or an :class:`AgentReply`), a callable (sync or
    async) taking the request and returning one, :class:`Hang` or :class:`Raise`.
    """

    def __init__(self, *steps: Any, name: str = "scripted") -> None:
        if not steps:
            raise ValueError("a scripted agent needs at least one step")
        self._steps = list(steps)
        self.name = name
        self.requests: list[AgentRequest] = []

    @classmethod
    def of(cls, steps: Iterable[Any], name: str = "scripted") -> ScriptedAgent:
        return cls(*steps, name=name)

    @property
    def calls(self) -> int:
        return len(self.requests)

    async def __call__(self, request: AgentRequest) -> Any:
        index = min(len(self.requests), len(self._steps) - 1)
        self.requests.append(request)
        step = self._steps[index]
        if isinstance(step, Hang):
            await asyncio.Event().wait()
        if isinstance(step, Raise):
            raise step.error
        if callable(step) and not isinstance(step, AgentReply):
            fn: Callable[[AgentRequest], Any] = step
            result = fn(request)
            return await result if inspect.isawaitable(result) else result
        return step


@dataclass(frozen=True)
class ChatReply:
    """What a chat model answers: its ``content``."""

    content: str


class ScriptedChatModel:
    """A chat model that answers each prompt with the next scripted reply (the last repeats) and
    keeps every prompt it was given (``prompts``). A definition file can name it as a factory:
    ``planner: {factory: middleware.testing:ScriptedChatModel, args: {replies: [...]}}``.
    """

    def __init__(self, replies: Iterable[str] = ()) -> None:
        self.replies = list(replies) or ['{"refuse": "no scripted reply"}']
        self.prompts: list[str] = []

    async def ainvoke(self, prompt: Any) -> ChatReply:
        index = min(len(self.prompts), len(self.replies) - 1)
        self.prompts.append(str(prompt))
        return ChatReply(self.replies[index])


class GatedAgent:
    """A slow agent, without sleeping: each call waits until :meth:`release`, then answers ``output``.

    ``entered`` is set when a call arrives (a test waits on it, not on time); ``progress``
    lists ``(kind, data)`` reported with :func:`middleware.task_progress.emit_progress` as the
    call starts (told only under a contract with ``stream_progress``).
    """

    def __init__(self, output: Any = None, *, progress: Iterable[tuple[str, Any]] = ()) -> None:
        self.output = output
        self.progress = list(progress)
        self.entered = asyncio.Event()
        self.requests: list[AgentRequest] = []
        self._gate = asyncio.Event()

    @property
    def calls(self) -> int:
        return len(self.requests)

    def release(self) -> None:
        """Let every waiting call (and every later one) answer."""
        self._gate.set()

    async def __call__(self, request: AgentRequest) -> Any:
        from .task_progress import emit_progress

        self.requests.append(request)
        self.entered.set()
        for kind, data in self.progress:
            emit_progress(kind, data)
        await self._gate.wait()
        return self.output


class ManualClock:
    """A clock that only moves when told to: inject it wherever a ``clock`` is taken.

    >>> clock = ManualClock(); clock.advance(31)  # a 30 s lease has now passed
    """

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now
