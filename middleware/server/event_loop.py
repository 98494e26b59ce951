"""The event loop the gateway runs on: uvloop when installed (the ``fast`` extra), else asyncio.

``run(main())`` is ``asyncio.run`` with uvloop's loop when the ``uvloop`` package can be
imported and ``AGENCY_EVENT_LOOP`` is not ``asyncio``; ``agency serve`` and the benchmarks
use it. Behaviour is the same on both loops (the test suite runs on asyncio's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ENV_VARIABLE", "loop_factory", "loop_name", "run"]

from .settings import EVENT_LOOP_VARIABLE as ENV_VARIABLE
from .settings import event_loop_from_env

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's ``new_event_loop`` if it is installed and not turned off, else None (asyncio's)."""
    if event_loop_from_env() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop ``run`` would use."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop (uvloop's when available)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
