"""Counting Redis errors: the hook Redis-backed components call, and the decorator they use.

Every Redis-backed component (task store, catalog, routing statistics, mailboxes) takes
an optional ``on_redis_error`` hook, called with the name of the operation that failed
(``"mailbox.receive"``, ``"task_store.save"`` ...) each time a Redis error escapes one
of its operations. The error then reaches the caller as
:class:`~middleware.errors.BackendUnavailable` (``UNAVAILABLE`` with reason
``BACKEND_UNAVAILABLE`` on the wire; the Redis error is its ``__cause__``). ``agency serve`` passes
:meth:`middleware.server.metrics.Metrics.redis_error`, so the errors show up as
``agency_redis_errors_total{operation=...}``; without a hook nothing is counted.

An error is counted once, by the innermost operation it escapes (a catalog ``all``
that fails inside ``query`` counts as ``catalog.query``).

"A Redis error" is any :data:`REDIS_ERRORS`: redis-py's ``RedisError`` (connection lost,
timeout, ``READONLY``, ``OOM``, ``CLUSTERDOWN``, ``MASTERDOWN`` ...) and the cluster client's
``RedisClusterException``, which is not one (no reachable startup node, slots not covered).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from redis.exceptions import RedisClusterException, RedisError

from ..errors import BackendUnavailable

__all__ = ["REDIS_ERRORS", "RedisErrorHook", "backend_unavailable", "count_redis_error", "redis_operation"]

#: What redis-py raises when Redis cannot do what was asked (see the module docstring).
REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)

#: Called with the failed operation's name, e.g. ``"mailbox.enqueue"``.
RedisErrorHook = Callable[[str], None]

_COUNTED = "_agency_redis_error_counted"


class _Observed(Protocol):
    @property
    def on_redis_error(self) -> RedisErrorHook | None: ...


S = TypeVar("S", bound=_Observed)
P = ParamSpec("P")
R = TypeVar("R")


def count_redis_error(hook: RedisErrorHook | None, operation: str, error: BaseException) -> None:
    """Report ``error`` to ``hook`` as a failure of ``operation``, unless already reported."""
    if hook is None or not isinstance(error, REDIS_ERRORS) or getattr(error, _COUNTED, False):
        return
    setattr(error, _COUNTED, True)
    hook(operation)


def backend_unavailable(operation: str, error: Exception) -> BackendUnavailable:
    """The error a caller sees for a Redis error in ``operation`` (chain it: ``from error``)."""
    return BackendUnavailable(f"redis failed during {operation}: {type(error).__name__}: {error}")


def redis_operation(
    operation: str,
) -> Callable[
    [Callable[Concatenate[S, P], Awaitable[R]]], Callable[Concatenate[S, P], Coroutine[Any, Any, R]]
]:
    """Decorate an async method so Redis errors escaping it reach ``self.on_redis_error``
    and its caller as :class:`BackendUnavailable`."""

    def decorate(
        method: Callable[Concatenate[S, P], Awaitable[R]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
        @functools.wraps(method)
        async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await method(self, *args, **kwargs)
            except REDIS_ERRORS as exc:
                count_redis_error(self.on_redis_error, operation, exc)
                raise backend_unavailable(operation, exc) from exc

        return wrapper

    return decorate
