"""The built-in implementations conform to the Protocols users implement."""

from __future__ import annotations

from middleware import Detectors, MemoryTaskStore, RedisTaskStore, TaskStore
from middleware.detectors import Detector, PolicyClassifier
from middleware.executor import AlertSink, LoggingAlertSink, MemoryAlertSink
from middleware.failures import FailureHandler


def test_builtins_conform(redis_client):
    assert isinstance(MemoryTaskStore(), TaskStore)
    assert isinstance(RedisTaskStore(redis_client), TaskStore)
    assert isinstance(Detectors(), Detector)
    assert isinstance(LoggingAlertSink(), AlertSink) and isinstance(MemoryAlertSink(), AlertSink)
    assert isinstance(lambda text: None, PolicyClassifier)

    from middleware.handlers import builtin_handlers

    assert all(isinstance(h, FailureHandler) for h in builtin_handlers().values())
