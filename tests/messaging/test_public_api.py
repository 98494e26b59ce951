"""The messaging package's public names import, and both transports satisfy the Protocol."""

from __future__ import annotations

from typing import Any

import middleware.messaging as messaging
from middleware.messaging import ManualClock, MemoryMailbox, RedisMailbox
from middleware.messaging.mailbox import MailboxTransport


def test_every_public_name_imports() -> None:
    assert len(set(messaging.__all__)) == len(messaging.__all__)
    for name in messaging.__all__:
        assert getattr(messaging, name) is not None


async def test_builtin_transports_conform_to_the_protocol(redis_client: Any, redis_prefix: str) -> None:
    assert isinstance(MemoryMailbox(clock=ManualClock()), MailboxTransport)
    assert isinstance(RedisMailbox(redis_client, prefix=redis_prefix), MailboxTransport)
