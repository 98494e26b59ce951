"""Helpers shared by the messaging tests (the fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from middleware.audit import MemoryAuditLog
from middleware.audit.record import AuditRecord
from middleware.messaging import (
    Clock,
    ManualClock,
    PostOffice,
    PostOfficeConfig,
    SendOptions,
    SubscriptionStore,
    generate_key,
    public_key_b64,
    sign_message,
    system_clock,
)
from middleware.messaging.mailbox import MailboxTransport
from middleware.smf import SMFMessage

T = TypeVar("T")

#: Short on purpose: Redis measures idle time itself, in real milliseconds.
VISIBILITY = 0.05


@dataclass
class Env:
    """A transport plus what tests need around it (clock, audit log)."""

    kind: str
    transport: MailboxTransport
    clock: ManualClock
    audit: MemoryAuditLog = field(default_factory=MemoryAuditLog)
    subscriptions: SubscriptionStore | None = None  #: Redis: shared, as replicas have them

    def office(self, **kwargs: Any) -> PostOffice:
        config = kwargs.pop("config", None) or PostOfficeConfig(visibility_timeout=VISIBILITY)
        kwargs.setdefault("subscriptions", self.subscriptions)
        return PostOffice(self.transport, audit=self.audit, clock=self.clock, config=config, **kwargs)

    async def after_visibility(self, pull: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
        """Let the visibility timeout run out, then ``pull`` until ``done`` (bounded).

        Memory: the injected clock jumps past the timeout. Redis: its idle time is
        real, so poll (every 10 ms, at most 3 s) until the entry is reclaimable.
        """
        if self.kind == "memory":
            self.clock.advance(VISIBILITY + 0.001)
            return await pull()
        deadline = asyncio.get_running_loop().time() + 3.0
        while True:
            result = await pull()
            if done(result) or asyncio.get_running_loop().time() > deadline:
                return result
            await asyncio.sleep(0.01)

    async def pass_visibility(self) -> None:
        """Let the visibility timeout run out once (to check nothing comes back)."""
        if self.kind == "memory":
            self.clock.advance(VISIBILITY + 0.001)
        else:  # Redis idle time is real time: this waits for the timeout itself, not for a task
            await asyncio.sleep(VISIBILITY * 2)

    def events(self, event_type: str) -> list[AuditRecord]:
        return [r for _, r in self.audit.records() if r.event_type == event_type]


@dataclass
class Agent:
    name: str
    token: str
    key: Any
    clock: Clock = system_clock  #: the post office's: messages are created at its "now"

    def message(self, receiver: str, content: Any = "hello", **extra: Any) -> SMFMessage:
        return SMFMessage.parse(
            {
                "sender": self.name,
                "receiver": receiver,
                "content": content,
                "metadata": {
                    "provenance": {"source": self.name, "reliability_score": 0.9},
                    "freshness_ttl": 600,
                    "confidence_score": 0.8,
                    "intention_trace": ["GOAL_MESSAGING_001"],  # required (the minimum viable set)
                },
                "created_at": datetime.fromtimestamp(self.clock(), UTC),
                **extra,
            }
        )

    def sign(self, message: SMFMessage, options: SendOptions | None = None) -> str:
        return sign_message(self.key, message, options)


async def register(office: PostOffice, name: str, description: str = "") -> Agent:
    key = generate_key()
    token = await office.register(name, public_key_b64(key), description=description)
    return Agent(name, token, key, office.clock)
