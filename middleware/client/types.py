"""Small result types of the client that have no core model."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from .._model import Model
from ..catalog import CatalogEntry

__all__ = ["CatalogChange"]


class CatalogChange(Model):
    """One catalog change from ``catalog.watch()``.

    ``type`` is registered, updated, deregistered, stale, alive, or existing (the initial
    snapshot when ``include_existing`` is set).
    """

    type: str
    key: str
    entry: CatalogEntry | None = Field(default=None, description="Unset for deregistered.")
    at: datetime | None = None
