"""The package's public names: sorted, importable, and the Protocols hold for the built-ins."""

from __future__ import annotations

import middleware
from middleware import Catalog, MemoryCatalog
from middleware.audit import AuditLog, FileAuditLog, MemoryAuditLog
from middleware.failures import FailureHandler, FailureType
from middleware.router import ConstraintExtractor, RuleBasedExtractor
from middleware.routing_stats import MemoryRoutingStats, RoutingStats


def test_all_is_sorted_and_importable():
    assert middleware.__all__ == sorted(middleware.__all__)
    for name in middleware.__all__:
        assert getattr(middleware, name) is not None


def test_builtin_implementations_conform_to_their_protocols(tmp_path):
    assert isinstance(MemoryCatalog(), Catalog)
    assert isinstance(MemoryAuditLog(), AuditLog)
    assert isinstance(FileAuditLog(tmp_path), AuditLog)
    assert isinstance(RuleBasedExtractor(), ConstraintExtractor)
    assert isinstance(MemoryRoutingStats(), RoutingStats)


def test_every_failure_type_has_a_builtin_handler_module():
    from middleware.handlers import builtin_handlers

    handlers = builtin_handlers()
    assert set(handlers) == set(FailureType)
    assert all(isinstance(h, FailureHandler) for h in handlers.values())
