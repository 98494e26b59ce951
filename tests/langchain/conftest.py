"""Fixtures for the LangChain adapter tests (helpers live in ``lc_helpers``)."""

from __future__ import annotations

import pytest
from lc_helpers import no_sleep

from middleware import Agency


@pytest.fixture
async def agency():
    a = Agency(sleep=no_sleep)
    yield a
    await a.close()
