"""Typed configuration of the server. This is the one module that reads environment variables.

``ServerConfig`` holds the settings of ``agency serve`` (``AgencyConfig``, the knobs of the
core, is re-exported from :mod:`middleware.agency_config`); ``WorkerConfig`` the security
settings of ``agency worker`` (TLS both ways, its bearer token from a file or
``AGENCY_WORKER_TOKEN``). Each field says what it does. The ``AGENCY_*`` environment variables
(:data:`ENV_VARIABLES`) override the agency definition file and are overridden by command-line
flags: :func:`layered` lays them over the file, :func:`definition_from` /
:func:`load_definition` (in :mod:`.definition`) build the whole definition that way,
``ServerConfig.from_env`` just the server part.

The files the settings name are read beside this module and re-exported here: the TLS PEM
files in :mod:`.tls_config` (``TlsConfig``, ``ClientTlsConfig``, ``WorkersTlsConfig``, checked
when parsed), the token files and the checkpoint key in :mod:`.credentials` (``hash_token``,
``read_token_hashes``, ``read_token``, ``read_signer_key``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from .._lazy import lazy_exports
from .._model import Model
from ..access import Principal
from ..agency_config import AgencyConfig
from ..caller_limits import CallerLimits
from ..errors import InvalidInput
from ..schema_guard import SchemaLimits
from .credentials import check_token, hash_token, read_signer_key, read_token, read_token_hashes
from .http_limits import HttpLimits
from .tls_config import ClientTlsConfig, TlsConfig, WorkersTlsConfig

__all__ = [
    "CALLER_LIMIT_VARIABLES",
    "ENV_VARIABLES",
    "EVENT_LOOP_VARIABLE",
    "HTTP_LIMIT_VARIABLES",
    "SCHEMA_LIMIT_VARIABLES",
    "WORKER_TOKEN_VARIABLE",
    "AgencyConfig",
    "ClientTlsConfig",
    "ServerConfig",
    "TlsConfig",
    "WorkerConfig",
    "WorkersTlsConfig",
    "caller_limits_from_env",
    "env_layer",
    "event_loop_from_env",
    "hash_token",
    "http_limits_from_env",
    "layered",
    "read_signer_key",
    "read_token",
    "read_token_hashes",
    "schema_limits_from_env",
]


class ServerConfig(Model):
    """Settings of ``agency serve``."""

    address: str = Field(default="127.0.0.1:50051", description="host:port the gRPC server listens on.")
    data_dir: Path = Field(default=Path("agency-data"), description="Where the audit log is written.")
    grace_seconds: float = Field(
        default=5.0,
        ge=0,
        description="Drain time on SIGTERM: in-flight calls and tasks get this long to finish. Keep it "
        "at least the longest contract SLO (a task's step may take that long).",
    )
    metrics_address: str = Field(
        default="127.0.0.1:9464", description="host:port of the Prometheus /metrics endpoint; empty = off."
    )
    agency: AgencyConfig = Field(default_factory=AgencyConfig)
    tls: TlsConfig | None = Field(
        default=None, description="Serve TLS (mTLS with a client CA); None = plaintext."
    )
    tracing: Literal["off", "console", "otlp"] = Field(
        default="off", description="OpenTelemetry trace export (needs the otel extra)."
    )
    auth_tokens: Path | None = Field(
        default=None,
        description="Token file ('CLIENT_NAME SHA256_HEX [ROLE]' per line, ROLE client | agent | admin, "
        "default agent); set = bearer tokens required.",
    )
    reuse_port: bool = Field(
        default=False,
        description="Share the port with other processes (SO_REUSEPORT: the kernel splits the "
        "connections between them). Off: a port another process holds is refused at start.",
    )

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
        """Defaults, then the ``AGENCY_*`` variables, then ``given`` (e.g. CLI flags).

        Recognised: ``AGENCY_ADDRESS``, ``AGENCY_DATA_DIR``, ``AGENCY_NODE_ID``,
        ``AGENCY_METRICS_ADDRESS``, ``AGENCY_TLS_CERT``, ``AGENCY_TLS_KEY``,
        ``AGENCY_TLS_CLIENT_CA`` (setting it requires client certificates) and
        ``AGENCY_AUTH_TOKENS`` (a token file), ``AGENCY_TRACING`` (off | console | otlp)
        (see :data:`ENV_VARIABLES`). Explicitly given values win over the environment.
        """
        layer = env_layer(os.environ if env is None else env)
        data: dict[str, Any] = dict(layer.get("server", {}))
        if "node_id" in layer.get("agency", {}):
            data["agency"] = {"node_id": layer["agency"]["node_id"]}
        data.update({k: v for k, v in given.items() if v is not None})
        return cls.parse(data, what="server configuration")

    def token_hashes(self) -> dict[str, Principal] | None:
        """``{sha256_hex: principal}`` from ``auth_tokens``, or None when tokens are off."""
        return read_token_hashes(self.auth_tokens) if self.auth_tokens else None


#: Where ``agency worker`` finds its bearer token when no ``--token-file`` is given.
WORKER_TOKEN_VARIABLE = "AGENCY_WORKER_TOKEN"


#: Where ``agency worker`` finds its bearer token when no ``--token-file`` is given.
WORKER_TOKEN_VARIABLE = "AGENCY_WORKER_TOKEN"


class WorkerConfig(Model):
    """Security settings of ``agency worker``: how it reaches the gateway, and how it serves
    the gateway's calls. Its agent, addresses and heartbeat are plain flags."""

    gateway_tls: ClientTlsConfig | None = Field(
        default=None,
        description="TLS to the gateway: the CA that signs the gateway's certificate, and for mTLS "
        "this worker's client certificate and key; None = plaintext.",
    )
    token: SecretStr | None = Field(
        default=None,
        description="This agent's bearer token for the gateway (its line in the gateway's token "
        "file names the agent); None = send none.",
    )
    tls: TlsConfig | None = Field(
        default=None,
        description="Serve AgentWorker over TLS; with client_ca and require_client_cert, only to "
        "callers (the gateway) with a client certificate signed by client_ca (mTLS). None = plaintext.",
    )

    @field_validator("token")
    @classmethod
    def _one_token(cls, v: SecretStr | None) -> SecretStr | None:
        return None if v is None else SecretStr(check_token(v.get_secret_value()))

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        token_file: str | os.PathLike[str] | None = None,
        **given: Any,
    ) -> WorkerConfig:
        """``given`` (e.g. from flags), the token read from ``token_file``, else from
        ``AGENCY_WORKER_TOKEN`` (:data:`WORKER_TOKEN_VARIABLE`; empty = unset).

        Raises:
            InvalidInput: naming each bad field (``token_file`` for the file).
        """
        env = os.environ if env is None else env
        data: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if token_file is not None:
            data["token"] = read_token(token_file)
        elif env.get(WORKER_TOKEN_VARIABLE, "").strip():
            data["token"] = env[WORKER_TOKEN_VARIABLE]
        return cls.parse(data, what="worker configuration")

    def bearer_token(self) -> str | None:
        """The token in clear, to send (never log it)."""
        return None if self.token is None else self.token.get_secret_value()


#: The ``AGENCY_*`` environment variables and the definition field each one sets. They
#: override the definition file; command-line flags override them. An empty value counts
#: as unset, except for ``AGENCY_METRICS_ADDRESS`` (empty = no metrics endpoint).
ENV_VARIABLES: dict[str, str] = {
    "AGENCY_ADDRESS": "server.address",
    "AGENCY_METRICS_ADDRESS": "server.metrics_address",
    "AGENCY_DATA_DIR": "server.data_dir",
    "AGENCY_TRACING": "server.tracing",
    "AGENCY_GRACE_SECONDS": "server.grace_seconds",
    "AGENCY_AUTH_TOKENS": "server.auth_tokens",
    "AGENCY_TLS_CERT": "server.tls.cert",
    "AGENCY_TLS_KEY": "server.tls.key",
    "AGENCY_TLS_CLIENT_CA": "server.tls.client_ca",  # and server.tls.require_client_cert: true
    "AGENCY_WORKERS_TLS_CA": "workers.tls.ca",
    "AGENCY_WORKERS_TLS_CERT": "workers.tls.cert",
    "AGENCY_WORKERS_TLS_KEY": "workers.tls.key",
    "AGENCY_WORKERS_TLS_SERVER_NAME": "workers.tls.server_name",
    "AGENCY_WORKERS_TLS_VERIFY_AGENT_IDENTITY": "workers.tls.verify_agent_identity",
    "AGENCY_NODE_ID": "agency.node_id",
    "AGENCY_STORAGE": "storage.backend",
    "AGENCY_REDIS_URL": "storage.redis_url",  # and storage.backend: redis, unless AGENCY_STORAGE says
    "AGENCY_KEY_PREFIX": "storage.key_prefix",
    "AGENCY_AUDIT_DIR": "audit.directory",
    "AGENCY_CHECKPOINT_KEY": "audit.checkpoint_key",
}

_KEEP_EMPTY = {"AGENCY_METRICS_ADDRESS"}


def env_layer(env: Mapping[str, str]) -> dict[str, Any]:
    """The ``AGENCY_*`` variables of ``env`` as a partial definition (``{section: {key: ...}}``)."""
    layer: dict[str, Any] = {}
    for var, path in ENV_VARIABLES.items():
        value = env.get(var)
        if value is None or (not value and var not in _KEEP_EMPTY):
            continue
        _set_path(layer, path, value)
    if "client_ca" in layer.get("server", {}).get("tls", {}):
        layer["server"]["tls"]["require_client_cert"] = True
    if env.get("AGENCY_REDIS_URL") and not env.get("AGENCY_STORAGE"):
        layer["storage"]["backend"] = "redis"
    return layer


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        data = data.setdefault(key, {})
    data[last] = value


def _merge(base: dict[str, Any], layer: Mapping[str, Any]) -> None:
    """Lay ``layer`` over ``base`` in place: mappings merge key by key, anything else replaces.

    A section of ``base`` that is not a mapping is left alone, so validation reports it.
    """
    for key, value in layer.items():
        if isinstance(value, Mapping):
            current = base.setdefault(key, {})
            if isinstance(current, dict):
                _merge(current, value)
        else:
            base[key] = value


def layered(
    data: Any,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """``data`` (the file) with ``env`` (``AGENCY_*``, default the process environment) then
    ``overrides`` merged over it, each layer winning over the ones before it; a layer that moves
    the data directory without naming an audit directory moves the audit log with it."""
    merged: Any = {} if data is None else copy.deepcopy(data)
    if isinstance(merged, dict):
        for layer in (env_layer(os.environ if env is None else env), overrides or {}):
            moves_data = "data_dir" in layer.get("server", {}) and "directory" not in layer.get("audit", {})
            if moves_data and isinstance(merged.get("audit"), dict):
                merged["audit"].pop("directory", None)
            _merge(merged, layer)
    return merged


#: Per-caller limits (:class:`CallerLimits` field -> variable; docs/operations.md, Security).
CALLER_LIMIT_VARIABLES = {
    "watch_queue": "AGENCY_WATCH_QUEUE",
    "watch_backlog_bytes": "AGENCY_WATCH_BACKLOG_BYTES",
    "watch_streams": "AGENCY_WATCH_STREAMS_PER_CALLER",
    "catalog_writes_per_second": "AGENCY_CATALOG_WRITES_PER_SECOND",
    "catalog_write_burst": "AGENCY_CATALOG_WRITE_BURST",
    "schema_cpu_seconds_per_minute": "AGENCY_SCHEMA_CPU_SECONDS_PER_MINUTE",
}
#: Bounds on registered schemas (:class:`SchemaLimits` field -> variable).
SCHEMA_LIMIT_VARIABLES = {
    "max_bytes": "AGENCY_MAX_SCHEMA_BYTES",
    "max_nodes": "AGENCY_MAX_SCHEMA_NODES",
    "max_depth": "AGENCY_MAX_SCHEMA_DEPTH",
}
#: Limits of every HTTP listener (:class:`HttpLimits` field -> variable; docs/operations.md, Security).
HTTP_LIMIT_VARIABLES = {
    "header_timeout": "AGENCY_HTTP_HEADER_TIMEOUT",
    "body_timeout": "AGENCY_HTTP_BODY_TIMEOUT",
    "idle_timeout": "AGENCY_HTTP_IDLE_TIMEOUT",
    "max_connections": "AGENCY_HTTP_MAX_CONNECTIONS",
    "max_connections_per_source": "AGENCY_HTTP_MAX_CONNECTIONS_PER_SOURCE",
    "max_body_bytes": "AGENCY_HTTP_MAX_BODY_BYTES",
    "fd_reserve": "AGENCY_FD_RESERVE",
}
#: ``asyncio`` turns uvloop off (:mod:`.event_loop`).
EVENT_LOOP_VARIABLE = "AGENCY_EVENT_LOOP"


def _numbers_from_env(
    variables: Mapping[str, str], env: Mapping[str, str] | None, *, floats: frozenset[str] = frozenset()
) -> dict[str, Any]:
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    for field, var in variables.items():
        if env.get(var, "").strip():
            try:
                data[field] = float(env[var]) if field in floats else int(env[var])
            except ValueError:
                kind = "a positive number" if field in floats else "a positive integer"
                raise InvalidInput.single(var, f"must be {kind}", what="limits") from None
    return data


def caller_limits_from_env(env: Mapping[str, str] | None = None) -> CallerLimits:
    """The per-caller limits from :data:`CALLER_LIMIT_VARIABLES` (default the process environment).

    Raises:
        InvalidInput: naming the variable whose value is not a positive number.
    """
    floats = frozenset({"catalog_writes_per_second", "schema_cpu_seconds_per_minute"})
    data = _numbers_from_env(CALLER_LIMIT_VARIABLES, env, floats=floats)
    return CallerLimits.parse(data, what="limits")


def schema_limits_from_env(env: Mapping[str, str] | None = None) -> SchemaLimits:
    """The schema bounds from :data:`SCHEMA_LIMIT_VARIABLES` (default the process environment).

    Raises:
        InvalidInput: naming the variable whose value is not a positive integer.
    """
    return SchemaLimits.parse(_numbers_from_env(SCHEMA_LIMIT_VARIABLES, env), what="schema limits")


def http_limits_from_env(env: Mapping[str, str] | None = None) -> HttpLimits:
    """The HTTP listeners' limits from :data:`HTTP_LIMIT_VARIABLES` (default the process environment).

    Raises:
        InvalidInput: naming the variable whose value is not a positive number.
    """
    floats = frozenset({"header_timeout", "body_timeout", "idle_timeout"})
    data = _numbers_from_env(HTTP_LIMIT_VARIABLES, env, floats=floats)
    try:
        return HttpLimits.parse(data, what="HTTP limits")
    except InvalidInput as exc:  # name the variable, not the field
        field = exc.problems[0].field.split(".")[0] if exc.problems else ""
        var = HTTP_LIMIT_VARIABLES.get(field, field)
        raise InvalidInput.single(var, exc.problems[0].reason, what="HTTP limits") from None


def event_loop_from_env(env: Mapping[str, str] | None = None) -> str:
    """``asyncio`` when :data:`EVENT_LOOP_VARIABLE` asks for it, else ``auto`` (uvloop if installed)."""
    env = os.environ if env is None else env
    return "asyncio" if env.get(EVENT_LOOP_VARIABLE, "").strip().lower() == "asyncio" else "auto"


# definition_from and load_definition build an AgencyDefinition: they live in .definition (which
# imports this module, not the other way round) and stay importable here, on first use.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {"definition_from": "middleware.server.definition", "load_definition": "middleware.server.definition"},
    [*__all__, "definition_from", "load_definition"],
)
