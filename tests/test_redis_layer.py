"""The Redis implementations of the messaging and people stores live in ``middleware.redis``; the
core modules keep their interfaces and memory versions, name the Redis classes lazily (the same
objects), and importing them does not import redis."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

MOVED = [
    ("middleware.messaging.directory", "RedisDirectory", "middleware.redis.agent_directory"),
    ("middleware.messaging.limits", "RedisBuckets", "middleware.redis.rate_limits"),
    ("middleware.messaging.moderation", "RedisBoard", "middleware.redis.quarantine_board"),
    ("middleware.messaging.subscriptions", "RedisSubscriptions", "middleware.redis.subscriptions"),
    ("middleware.people.store", "RedisEscalationStore", "middleware.redis.escalation_store"),
    ("middleware.messaging", "RedisBuckets", "middleware.redis.rate_limits"),
    ("middleware.messaging", "RedisSubscriptions", "middleware.redis.subscriptions"),
    ("middleware.messaging", "RedisMailbox", "middleware.redis.mailbox"),
    ("middleware.people", "RedisEscalationStore", "middleware.redis.escalation_store"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_a_redis_class_is_defined_in_the_redis_layer_and_still_importable_from_its_old_module(
    old: str, name: str, new: str
) -> None:
    cls = getattr(importlib.import_module(old), name)
    assert cls.__module__ == new
    assert cls is getattr(importlib.import_module(new), name)
    assert name in dir(importlib.import_module(old))


def test_importing_the_messaging_and_people_core_does_not_import_redis() -> None:
    code = (
        "import sys\n"
        "import middleware.messaging, middleware.people\n"
        "import middleware.messaging.directory, middleware.messaging.limits\n"
        "import middleware.messaging.moderation, middleware.messaging.subscriptions\n"
        "import middleware.people.store\n"
        "prefixes = ('redis.', 'middleware.redis')\n"
        "loaded = sorted(m for m in sys.modules if m == 'redis' or m.startswith(prefixes))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
