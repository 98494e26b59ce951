"""Typed configuration. This is the one module that reads environment variables.

``AgencyConfig`` holds the knobs of the core; ``ServerConfig`` those of
``agency serve``. Each field says what it does; ``from_env`` applies the
``AGENCY_*`` environment variables on top of the defaults (or of given values).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from ._model import Model
from .failures import FailurePolicy

__all__ = ["AgencyConfig", "ServerConfig"]


class AgencyConfig(Model):
    """Knobs of the governance core."""

    node_id: str = Field(
        default_factory=socket.gethostname, description="This gateway's name in the audit log."
    )
    deadline_factor: float = Field(
        default=1.0, gt=0, le=100, description="An agent's deadline is its SLO times this factor."
    )
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy, description="Retry/backup knobs.")
    max_backups: int = Field(default=3, ge=0, le=50, description="Backups tried per step before giving up.")


class ServerConfig(Model):
    """Settings of ``agency serve``."""

    address: str = Field(default="127.0.0.1:50051", description="host:port the gRPC server listens on.")
    data_dir: Path = Field(default=Path("agency-data"), description="Where the audit log is written.")
    grace_seconds: float = Field(default=5.0, ge=0, description="Drain time on SIGTERM.")
    agency: AgencyConfig = Field(default_factory=AgencyConfig)
    catalog_url: str = Field(
        default="", description="'' = in-memory catalog; redis://host:port/db = shared with other gateways."
    )
    catalog_prefix: str = Field(default="agency:", description="Redis key prefix of catalog and stats.")
    lease_seconds: float | None = Field(
        default=None, gt=0, description="Heartbeat lease of catalog entries (Redis default 30 s)."
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> ServerConfig:
        """Defaults, then ``given`` (e.g. CLI flags), with ``AGENCY_*`` variables filling gaps.

        Recognised: ``AGENCY_ADDRESS``, ``AGENCY_DATA_DIR``, ``AGENCY_NODE_ID``,
        ``AGENCY_CATALOG_URL``, ``AGENCY_CATALOG_PREFIX``, ``AGENCY_LEASE_SECONDS``.
        Explicitly given values win over the environment.
        """
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        if "AGENCY_ADDRESS" in env:
            data["address"] = env["AGENCY_ADDRESS"]
        if "AGENCY_DATA_DIR" in env:
            data["data_dir"] = env["AGENCY_DATA_DIR"]
        if "AGENCY_NODE_ID" in env:
            data["agency"] = {"node_id": env["AGENCY_NODE_ID"]}
        for var, key in (
            ("AGENCY_CATALOG_URL", "catalog_url"),
            ("AGENCY_CATALOG_PREFIX", "catalog_prefix"),
            ("AGENCY_LEASE_SECONDS", "lease_seconds"),
        ):
            if var in env:
                data[key] = env[var]
        data.update({k: v for k, v in given.items() if v is not None})
        return cls.parse(data, what="server configuration")
