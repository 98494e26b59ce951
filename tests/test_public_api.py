"""The package's public names: few, listed once, sorted, importable, light; the Protocols hold for the
built-ins."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import middleware
from middleware.audit import AuditLog, FileAuditLog, MemoryAuditLog
from middleware.catalog import Catalog
from middleware.failures import FailureHandler, FailureType
from middleware.memory_catalog import MemoryCatalog
from middleware.router import ConstraintExtractor, RuleBasedExtractor
from middleware.routing_stats import MemoryRoutingStats, RoutingStats


def test_all_is_sorted_and_importable():
    assert middleware.__all__ == sorted(middleware.__all__)
    for name in middleware.__all__:
        assert getattr(middleware, name) is not None


def test_the_public_api_is_the_short_list_written_once_in_the_package():
    # One listing (the TYPE_CHECKING imports of middleware/__init__.py) drives the lazy
    # re-exports; a user holds ~30 names in mind, every other name lives in its own module.
    source = Path(middleware.__file__).read_text(encoding="utf-8")
    assert 15 <= len(middleware.__all__) <= 30
    for name in middleware.__all__:
        assert source.count(f" import {name} as {name}\n") == 1, name
    imports = re.findall(r"^    from \.[\w.]* import (\w+) as (\w+)$", source, re.M)
    assert sorted(a for a, b in imports if a == b) == middleware.__all__  # and nothing else re-exported
    assert "_EXPORTS = {" not in source and "__all__ = [" not in source  # no second listing
    assert not hasattr(middleware, "Router")
    assert not hasattr(middleware, "RedisCatalog")


def test_importing_the_package_imports_none_of_its_modules():
    # `import middleware` (and so any `import middleware.x`) stays cheap: the names load on use.
    code = (
        "import sys, middleware\n"
        "print(sorted(m for m in sys.modules if m.startswith('middleware')))\n"
        "middleware.Agency\n"
        "print('middleware.pipeline' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['middleware', 'middleware._lazy']", "True"]


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
