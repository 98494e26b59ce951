"""The agency definition file: one YAML document describing a whole deployment.

It names the agents (in-process factories by import path, or remote workers by
endpoint) with their contracts, the goals, the failure policy, the storage
backend, the audit log and the server's listen addresses. ``load_definition``
(in ``config.py``, the one module that reads files and the environment) parses the
file; :class:`AgencyDefinition` validates it and reports *every* problem by path,
such as ``agents[2].contract.input_schema: not a valid JSON Schema ...``.

Example (``examples/ecommerce.yaml`` is the reference scenario)::

    server: {address: 127.0.0.1:50051, metrics_address: 127.0.0.1:9464}
    storage: {backend: memory}
    audit: {directory: agency-data/audit}
    agents:
      - factory: middleware.demo:demo_agent
        args: {name: warranty_agent}
        contract: {name: warranty_agent, version: 2.1.0, can_do: [warranty_claim], ...}
      - contract: {name: remote_agent, can_do: [translate], endpoint: 10.0.0.7:50061}
    goals:
      - {id: GOAL_WARRANTY_001, description: ..., verification_steps: [...]}
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ._model import Model
from .agents import AgentCallable
from .config import AgencyConfig, ServerConfig
from .contracts import CapabilityContract
from .errors import InvalidInput, Problem
from .goals import GoalAssertion

__all__ = ["AgencyDefinition", "AgentDefinition", "AuditSettings", "StorageSettings", "resolve_import"]


def resolve_import(path: str) -> Any:
    """``package.module:attribute`` -> the attribute (raises ValueError saying what is missing)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{path!r} is not an import path of the form package.module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


class AgentDefinition(Model):
    """One agent: its contract plus where it runs."""

    contract: CapabilityContract
    factory: str = Field(default="", description="module:attribute called with ``args`` to build the agent.")
    agent: str = Field(default="", description="module:attribute of a ready agent callable.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for ``factory``.")

    @field_validator("factory", "agent")
    @classmethod
    def _importable(cls, v: str) -> str:
        if v:
            target = resolve_import(v)
            if not callable(target):
                raise ValueError(f"{v!r} is not callable")
        return v

    @model_validator(mode="after")
    def _where(self) -> AgentDefinition:
        given = [bool(self.factory), bool(self.agent), bool(self.contract.endpoint)]
        if sum(given) != 1:
            raise ValueError("give exactly one of factory, agent, or contract.endpoint (a remote worker)")
        return self

    def build(self) -> AgentCallable | None:
        """The in-process agent callable, or None for a remote worker."""
        if self.factory:
            built: AgentCallable = resolve_import(self.factory)(**self.args)
            return built
        if self.agent:
            agent: AgentCallable = resolve_import(self.agent)
            return agent
        return None


class StorageSettings(Model):
    """Where shared state lives: in memory (one gateway) or Redis (replicas)."""

    backend: Literal["memory", "redis"] = "memory"
    redis_url: str = Field(default="", description="redis://host:port/db, required for backend redis.")
    key_prefix: str = Field(
        default="agency:", description="Namespace of every Redis key; replicas sharing state use the same."
    )
    lease_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Catalog heartbeat lease (default: 30 s on Redis, none in memory).",
    )

    @model_validator(mode="after")
    def _url(self) -> StorageSettings:
        if self.backend == "redis" and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url: backend redis needs a redis:// (or rediss://, unix://) URL")
        return self


class AuditSettings(Model):
    directory: Path = Field(default=Path("agency-data/audit"), description="Audit log directory.")
    checkpoint_key: Path | None = Field(default=None, description="Ed25519 private key for checkpoints.")


class AgencyDefinition(Model):
    """A whole deployment, as read from the definition file."""

    version: Literal[1] = 1
    server: ServerConfig = Field(default_factory=ServerConfig)
    agency: AgencyConfig = Field(default_factory=AgencyConfig)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    agents: list[AgentDefinition] = Field(default_factory=list)
    goals: list[GoalAssertion] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> AgencyDefinition:
        problems = []
        first: dict[str, int] = {}
        for i, a in enumerate(self.agents):
            if first.setdefault(a.contract.key, i) != i:
                problems.append(
                    Problem(
                        f"agents[{i}].contract",
                        f"{a.contract.key} is already agents[{first[a.contract.key]}]",
                    )
                )
        goal_at: dict[str, int] = {}
        for i, g in enumerate(self.goals):
            if goal_at.setdefault(g.id, i) != i:
                problems.append(Problem(f"goals[{i}].id", f"{g.id} is already goals[{goal_at[g.id]}]"))
        if problems:
            # Not a ValueError: pydantic would fold it into one message; we keep the paths.
            raise InvalidInput(problems, what="definition")
        return self

    @classmethod
    def from_data(cls, data: Any, *, source: str = "definition") -> AgencyDefinition:
        if not isinstance(data, dict):
            raise InvalidInput(
                [Problem("(root)", "the definition must be a mapping (YAML object)")], what=source
            )
        return cls.parse(data, what=source)
