"""The built-in implementations conform to the Protocols users implement."""

from __future__ import annotations

from middleware.detectors import Detector, Detectors, PolicyClassifier
from middleware.executor import AlertSink, LoggingAlertSink, MemoryAlertSink
from middleware.failures import FailureHandler
from middleware.memory_task_leases import MemoryTaskLeases
from middleware.memory_task_store import MemoryTaskStore
from middleware.redis.routing_stats import RedisRoutingStats
from middleware.redis.task_leases import RedisTaskLeases
from middleware.redis.task_store import RedisTaskStore
from middleware.routing_stats import MemoryRoutingStats, RoutingStats
from middleware.task_leases import TaskLeases
from middleware.task_store import TaskStore


def test_builtins_conform(redis_client):
    assert isinstance(MemoryTaskStore(), TaskStore)
    assert isinstance(RedisTaskStore(redis_client), TaskStore)
    assert isinstance(MemoryTaskLeases(), TaskLeases)
    assert isinstance(RedisTaskLeases(redis_client), TaskLeases)
    assert isinstance(MemoryRoutingStats(), RoutingStats)
    assert isinstance(RedisRoutingStats(redis_client), RoutingStats)
    assert isinstance(Detectors(), Detector)
    assert isinstance(LoggingAlertSink(), AlertSink) and isinstance(MemoryAlertSink(), AlertSink)
    assert isinstance(lambda text: None, PolicyClassifier)

    from middleware.handlers import builtin_handlers

    assert all(isinstance(h, FailureHandler) for h in builtin_handlers().values())
