"""uvloop when installed (the ``fast`` extra), asyncio's loop when asked for."""

from __future__ import annotations

import asyncio

import pytest

from middleware.server import event_loop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV_VARIABLE, raising=False)
    assert event_loop.loop_name() == "uvloop"
    assert event_loop.run(_loop_module()).startswith("uvloop")


def test_asyncio_loop_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV_VARIABLE, "asyncio")
    assert event_loop.loop_name() == "asyncio"
    assert event_loop.run(_loop_module()).startswith("asyncio")
