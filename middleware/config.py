"""Typed configuration. This is the one module that reads environment variables and files.

``AgencyConfig`` holds the knobs of the core; ``ServerConfig`` those of
``agency serve``. Each field says what it does; ``from_env`` applies the
``AGENCY_*`` environment variables on top of the defaults (or of given values).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationInfo, field_validator

from ._model import Model
from .circuit_breaker import BreakerConfig
from .detectors import DetectorConfig
from .errors import InvalidInput
from .failure_monitor import MonitorConfig
from .failures import FailurePolicy, FailureType, check_policy

__all__ = ["AgencyConfig", "ServerConfig", "load_definition"]

if TYPE_CHECKING:
    from .definition import AgencyDefinition


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
    failure_policies: dict[FailureType, FailurePolicy] = Field(
        default_factory=dict,
        description="Per failure type: retry caps, backoff, forced resolution (only allowed ones), backup.",
    )
    breaker: BreakerConfig = Field(default_factory=BreakerConfig, description="Per-agent circuit breaker.")
    detectors: DetectorConfig = Field(
        default_factory=DetectorConfig, description="Hedging words, policy rules, compared facts."
    )
    monitor: MonitorConfig = Field(default_factory=MonitorConfig, description="Failure-rate review flags.")

    @field_validator("failure_policies")
    @classmethod
    def _allowed(cls, v: dict[FailureType, FailurePolicy]) -> dict[FailureType, FailurePolicy]:
        for ftype, policy in v.items():
            try:
                check_policy(ftype, policy, field="failure_policies")
            except InvalidInput as exc:  # re-raised as a ValueError so the path is the full one
                raise ValueError(f"{ftype.value}.resolution: {exc.problems[0].reason}") from None
        return v


class ServerConfig(Model):
    """Settings of ``agency serve``."""

    address: str = Field(default="127.0.0.1:50051", description="host:port the gRPC server listens on.")
    data_dir: Path = Field(default=Path("agency-data"), description="Where the audit log is written.")
    grace_seconds: float = Field(default=5.0, ge=0, description="Drain time on SIGTERM.")
    metrics_address: str = Field(
        default="127.0.0.1:9464", description="host:port of the Prometheus /metrics endpoint; empty = off."
    )
    agency: AgencyConfig = Field(default_factory=AgencyConfig)

    @field_validator("address", "metrics_address")
    @classmethod
    def _address(cls, v: str, info: ValidationInfo) -> str:
        if info.field_name == "metrics_address" and not v.strip():
            return ""
        host, sep, port = v.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535 or " " in host:
            raise ValueError(f"{v!r} is not host:port (e.g. 127.0.0.1:50051, [::]:50051, port 0 = any)")
        return v.strip()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **given: Any) -> ServerConfig:
        """Defaults, then ``given`` (e.g. CLI flags), with ``AGENCY_*`` variables filling gaps.

        Recognised: ``AGENCY_ADDRESS``, ``AGENCY_DATA_DIR``, ``AGENCY_NODE_ID``,
        ``AGENCY_METRICS_ADDRESS``.
        Explicitly given values win over the environment.
        """
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        if "AGENCY_ADDRESS" in env:
            data["address"] = env["AGENCY_ADDRESS"]
        if "AGENCY_DATA_DIR" in env:
            data["data_dir"] = env["AGENCY_DATA_DIR"]
        if "AGENCY_METRICS_ADDRESS" in env:
            data["metrics_address"] = env["AGENCY_METRICS_ADDRESS"]
        if "AGENCY_NODE_ID" in env:
            data["agency"] = {"node_id": env["AGENCY_NODE_ID"]}
        data.update({k: v for k, v in given.items() if v is not None})
        return cls.parse(data, what="server configuration")


#: Environment variables that override the definition file: variable -> (section, key).
ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "AGENCY_ADDRESS": ("server", "address"),
    "AGENCY_METRICS_ADDRESS": ("server", "metrics_address"),
    "AGENCY_DATA_DIR": ("server", "data_dir"),
    "AGENCY_NODE_ID": ("agency", "node_id"),
    "AGENCY_REDIS_URL": ("storage", "redis_url"),
    "AGENCY_STORAGE": ("storage", "backend"),
    "AGENCY_AUDIT_DIR": ("audit", "directory"),
}


def load_definition(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> AgencyDefinition:
    """Read and validate an agency definition file (YAML or JSON), env overriding it.

    Raises:
        InvalidInput: listing every problem by path (``agents[2].contract.input_schema: ...``).
    """
    import yaml

    from .definition import AgencyDefinition
    from .errors import InvalidInput, Problem

    env = os.environ if env is None else env
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(
            [Problem("(file)", f"cannot read {source}: {exc.strerror or exc}")], what=source
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        raise InvalidInput(
            [Problem(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")], what=source
        ) from None
    if data is None:
        data = {}
    if isinstance(data, dict):
        for var, (section, key) in ENV_OVERRIDES.items():
            if var in env:
                if not isinstance(data.get(section, {}), dict):
                    continue
                data.setdefault(section, {})[key] = env[var]
        if "AGENCY_REDIS_URL" in env and "AGENCY_STORAGE" not in env:
            data["storage"]["backend"] = "redis"
    return AgencyDefinition.from_data(data, source=source)
