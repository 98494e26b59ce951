"""User-registered custom checks: named, sync or async, each with its own timeout.

A check is called as ``check(output, **args)`` (``args`` come from the step) and
returns ``True``/``False``, a ``(passed, reason)`` pair, or a :class:`CheckResult`.
Sync checks run in a worker thread so their timeout is enforced without blocking
the event loop (a sync check that ignores its timeout keeps its thread busy until
it returns; prefer async checks for I/O).

Example::

    checks = CheckRegistry()

    @checks.register("has_license", timeout_seconds=2)
    async def has_license(output, source_field="sources"):
        return all(await registry.is_licensed(s) for s in output[source_field])
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import AlreadyExists, InvalidInput, NotFound

__all__ = ["CheckFunction", "CheckRegistry", "CheckResult", "RegisteredCheck"]

CheckFunction = Callable[..., Any]
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")


@dataclass(frozen=True)
class CheckResult:
    """What a custom check may return to say more than yes/no."""

    passed: bool
    actual: Any = None
    reason: str = ""


@dataclass(frozen=True)
class RegisteredCheck:
    """A check as registered: its function, whether it is async, and its timeout."""

    name: str
    fn: CheckFunction
    is_async: bool
    timeout_seconds: float
    description: str = ""


def _is_async(fn: CheckFunction) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


class CheckRegistry:
    """The custom checks goals may name (``{"kind": "custom", "name": ...}``).

    Args:
        default_timeout_seconds: Timeout of checks registered without their own.
    """

    def __init__(self, *, default_timeout_seconds: float = 5.0) -> None:
        if not default_timeout_seconds > 0:
            raise InvalidInput.single("default_timeout_seconds", "must be > 0")
        self.default_timeout_seconds = default_timeout_seconds
        self._checks: dict[str, RegisteredCheck] = {}

    def register(
        self,
        name: str,
        fn: CheckFunction | None = None,
        *,
        timeout_seconds: float | None = None,
        description: str = "",
        replace: bool = False,
    ) -> Any:
        """Register ``fn`` under ``name``; without ``fn``, return a decorator.

        Raises:
            InvalidInput: a bad name, a non-callable, or a timeout that is not > 0.
            AlreadyExists: ``name`` is taken and ``replace`` is false.
        """
        if fn is None:

            def decorator(f: CheckFunction) -> CheckFunction:
                self.register(
                    name, f, timeout_seconds=timeout_seconds, description=description, replace=replace
                )
                return f

            return decorator
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidInput.single(
                "name", "check names use letters, digits, _ . : - and start with a letter or _"
            )
        if not callable(fn):
            raise InvalidInput.single("fn", "a check must be callable as fn(output, **args)")
        timeout = self.default_timeout_seconds if timeout_seconds is None else timeout_seconds
        if not (isinstance(timeout, (int, float)) and 0 < timeout <= 3600):
            raise InvalidInput.single("timeout_seconds", "must be > 0 and <= 3600")
        if name in self._checks and not replace:
            raise AlreadyExists(f"a check named {name!r} is already registered")
        self._checks[name] = RegisteredCheck(name, fn, _is_async(fn), float(timeout), description)
        return fn

    def unregister(self, name: str) -> None:
        self._checks.pop(name, None)

    def get(self, name: str) -> RegisteredCheck:
        """The check registered as ``name``.

        Raises:
            NotFound: no such check.
        """
        try:
            return self._checks[name]
        except KeyError:
            raise NotFound(f"no custom check named {name!r} is registered") from None

    def __contains__(self, name: object) -> bool:
        return name in self._checks

    def names(self) -> list[str]:
        return sorted(self._checks)
