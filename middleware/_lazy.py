"""Re-exports imported on first use (PEP 562), shared by the packages that re-export names."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["lazy_exports", "type_checking_imports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], names: list[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (name -> module).

    Importing one submodule (``middleware.audit.segment`` in a verification worker, say)
    then does not import every re-exported name's module.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        vars(importlib.import_module(package))[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(names))

    return __getattr__, __dir__


def type_checking_imports(init_file: str) -> dict[str, str]:
    """Name -> relative module of each ``from .x import Name as Name`` under ``if TYPE_CHECKING:``.

    A package writes its public names once, as the imports type checkers read, and drives its
    lazy re-exports from the same lines (the file is parsed, nothing is imported).
    """
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"), init_file)
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.level > 0:
                    module = "." * statement.level + (statement.module or "")
                    for alias in statement.names:
                        exports[alias.asname or alias.name] = module
    return exports
