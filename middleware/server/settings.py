"""Typed configuration. This is the one module that reads environment variables and files.

``AgencyConfig`` holds the knobs of the core; ``ServerConfig`` those of
``agency serve``; ``WorkerConfig`` the security settings of ``agency worker`` (TLS
both ways, its bearer token from a file or ``AGENCY_WORKER_TOKEN``). ``TlsConfig`` and
``ClientTlsConfig`` check their PEM files when parsed. Each field says what it does.
The ``AGENCY_*`` environment variables (:data:`ENV_VARIABLES`) override the agency
definition file and are overridden by command-line flags: :func:`definition_from` /
:func:`load_definition` build the whole definition that way, ``ServerConfig.from_env``
just the server part.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from .._lazy import lazy_exports
from .._model import Model
from ..access import DEFAULT_ROLE, Principal, Role
from ..agency_config import AgencyConfig
from ..errors import InvalidInput

__all__ = [
    "ENV_VARIABLES",
    "WORKER_TOKEN_VARIABLE",
    "AgencyConfig",
    "ClientTlsConfig",
    "ServerConfig",
    "TlsConfig",
    "WorkerConfig",
    "WorkersTlsConfig",
    "env_layer",
    "hash_token",
    "layered",
    "read_signer_key",
    "read_token",
    "read_token_hashes",
]

if TYPE_CHECKING:
    from ..audit.checkpoint import Signer


def _read_pem(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None


def _certificates(path: Path | None) -> Path | None:
    """``path`` if it names a readable file of PEM certificates (raises ValueError saying why not)."""
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    from cryptography import x509

    data = _read_pem(path)
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ValueError(f"{path} holds no PEM certificate") from None
    return path


def _private_key_of(key: Path | None, cert: Path | None) -> Path | None:
    """``key`` if it is a readable, unencrypted PEM private key for the first certificate in
    ``cert`` (``cert`` None: not compared; it failed its own check). Raises ValueError."""
    if key is None:
        return None
    if not key.is_file():
        raise ValueError(f"no such file: {key}")
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = _read_pem(key)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ValueError(f"{key} is encrypted: gRPC needs an unencrypted PEM private key") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"{key} holds no PEM private key") from None
    if cert is not None:
        spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        leaf = x509.load_pem_x509_certificates(_read_pem(cert))[0]
        if private.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
            raise ValueError(f"{key} is not the private key of the certificate {cert}")
    return key


class TlsConfig(Model):
    """TLS for a gRPC server (the gateway, a worker); with ``client_ca`` and
    ``require_client_cert``, mutual TLS.

    Files are checked when the configuration is parsed: a missing or unreadable file, one
    that holds no PEM certificate or key, or a key that does not belong to the certificate
    is refused naming the field. :meth:`read` loads the PEM bytes.
    """

    cert: Path = Field(description="PEM certificate chain of the server.")
    key: Path = Field(description="PEM private key of the server.")
    client_ca: Path | None = Field(default=None, description="PEM CA bundle that signs client certificates.")
    require_client_cert: bool = Field(
        default=False,
        description="Refuse clients without a certificate signed by client_ca (mTLS). Default: true "
        "when client_ca is given (a CA alone would otherwise silently give TLS without client "
        "certificates); an explicit false with a client_ca is logged as a warning.",
    )

    @model_validator(mode="before")
    @classmethod
    def _mtls_when_a_ca_is_given(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("client_ca") and data.get("require_client_cert") is None:
            data = {**data, "require_client_cert": True}
        elif isinstance(data, dict) and data.get("client_ca") and data.get("require_client_cert") is False:
            logging.getLogger("agency.config").warning(
                "tls.client_ca is set but require_client_cert is false: clients without a certificate "
                "are accepted (TLS, not mutual TLS)"
            )
        return data

    @field_validator("cert", "client_ca")
    @classmethod
    def _pem_certificates(cls, v: Path | None) -> Path | None:
        return _certificates(v)

    @field_validator("key")
    @classmethod
    def _key_of_cert(cls, v: Path, info: ValidationInfo) -> Path | None:
        return _private_key_of(v, info.data.get("cert"))

    @model_validator(mode="after")
    def _ca_for_mtls(self) -> TlsConfig:
        if self.require_client_cert and self.client_ca is None:
            raise ValueError("require_client_cert needs client_ca (the CA that signs client certificates)")
        return self

    @property
    def scheme(self) -> str:
        """``TLS`` or ``mTLS``, for start-up lines."""
        return "mTLS" if self.require_client_cert else "TLS"

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        """``(cert_chain, private_key, client_ca)`` as PEM bytes."""
        ca = self.client_ca.read_bytes() if self.client_ca else None
        return self.cert.read_bytes(), self.key.read_bytes(), ca


class ClientTlsConfig(Model):
    """TLS for a gRPC client (a worker or the CLI calling the gateway, the gateway calling its
    workers): the CA to trust, and for mTLS its own certificate and key.

    Files are checked when the configuration is parsed, as for :class:`TlsConfig`.
    """

    ca: Path | None = Field(default=None, description="PEM CA bundle to verify the server (default: system).")
    cert: Path | None = Field(default=None, description="PEM client certificate (mutual TLS).")
    key: Path | None = Field(default=None, description="PEM client private key (mutual TLS).")
    server_name: str = Field(default="", description="Expected server name, if not the address's host.")

    @field_validator("ca", "cert")
    @classmethod
    def _pem_certificates(cls, v: Path | None) -> Path | None:
        return _certificates(v)

    @field_validator("key")
    @classmethod
    def _key_of_cert(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return _private_key_of(v, info.data.get("cert"))

    @model_validator(mode="after")
    def _pair(self) -> ClientTlsConfig:
        if (self.cert is None) != (self.key is None):
            raise ValueError("give both cert and key for a client certificate, or neither")
        return self

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """``(ca, cert_chain, private_key)`` as PEM bytes (None where not configured)."""

        def rd(p: Path | None) -> bytes | None:
            return p.read_bytes() if p else None

        return rd(self.ca), rd(self.cert), rd(self.key)


_CERT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,253}$")


class WorkersTlsConfig(ClientTlsConfig):
    """TLS from the gateway to its remote workers (the definition's ``workers.tls``).

    With ``verify_agent_identity`` (the default) each worker is bound to its agent: the
    gateway calls the worker of agent ``translator`` expecting a certificate issued for the
    name ``translator`` (or ``identities["translator"]``), whatever address the contract
    registered; a worker presenting another name (another agent's certificate) fails the
    handshake, and the attempt is ``TOOL_UNAVAILABLE``.
    """

    verify_agent_identity: bool = Field(
        default=True,
        description="Require each worker's certificate to be issued for its agent's name (or the "
        "name in identities): a worker cannot answer for another agent. false = any certificate "
        "from the CA (for the address called, or server_name) will do.",
    )
    identities: dict[str, str] = Field(
        default_factory=dict,
        description="Agent name -> the name its worker's certificate carries, when it is not the "
        "agent's name (e.g. translator: translator.workers.example.com).",
    )

    @field_validator("identities")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for agent, name in v.items():
            if not _CERT_NAME.match(name):
                raise ValueError(
                    f"identities.{agent}: {name[:64]!r} is not a certificate name "
                    "(letters, digits, '.', '-', '_'; at most 253 characters)"
                )
        return v

    @model_validator(mode="after")
    def _one_name_or_each_its_own(self) -> WorkersTlsConfig:
        if self.verify_agent_identity and self.server_name:
            raise ValueError(
                "server_name gives every worker one name, so no worker would be bound to its agent: "
                "drop it (each worker's certificate then names its agent, or the name in identities), "
                "or set verify_agent_identity: false"
            )
        return self

    def identity(self, agent: str) -> str:
        """The name the certificate of ``agent``'s worker must carry; ``""`` = not checked."""
        if not self.verify_agent_identity:
            return ""
        return self.identities.get(agent, agent)


_HASH = re.compile(r"^[0-9a-f]{64}$")


def hash_token(token: str) -> str:
    """The hex SHA-256 of a bearer token: what the server's token file stores."""
    return hashlib.sha256(token.encode()).hexdigest()


def unsafe_permissions(path: Path) -> str | None:
    """Why a secret file (token file, key) must not be trusted, or None: it is group- or
    world-writable, so anyone on the host could add an admin token or swap the key."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None  # reading it reports the problem
    if mode & 0o022:
        return (
            f"{path} is group- or world-writable (mode {mode & 0o777:04o}): anyone on the host could "
            f"change it; run chmod go-w {path} (0600 or 0640 recommended)"
        )
    return None


def read_token_hashes(path: str | os.PathLike[str]) -> dict[str, Principal]:
    """Read a token file: one ``CLIENT_NAME SHA256_HEX [ROLE]`` per line (``#`` comments).

    ``ROLE`` is ``client``, ``agent``, ``auditor`` or ``admin`` (see :mod:`middleware.access`); a line
    without one gets :data:`~middleware.access.DEFAULT_ROLE` (``role_given`` false).
    Several lines may name one client (token rotation); one token on two lines must mean
    the same client and role; two names that differ only in case are refused. A file that
    is group- or world-writable is refused (anyone on the host could add an admin line).

    Returns ``{hash: principal}``. Raises :class:`InvalidInput` naming each bad line
    (``PATH:LINE``).
    """
    from ..errors import InvalidInput, Problem

    p = Path(path)
    if (why := unsafe_permissions(p)) is not None:
        raise InvalidInput([Problem("auth_tokens", why)], what="token file")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput([Problem("auth_tokens", f"cannot read {p}: {exc.strerror}")]) from None
    except UnicodeDecodeError:
        raise InvalidInput([Problem("auth_tokens", f"{p} is not UTF-8 text")]) from None
    out: dict[str, Principal] = {}
    seen: dict[str, int] = {}
    names: dict[str, str] = {}
    problems = []
    roles = ", ".join(r.value for r in Role)
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) not in (2, 3) or not _HASH.match(parts[1].lower()):
            problems.append(
                Problem(
                    f"{p}:{n}", f"expected 'CLIENT_NAME SHA256_HEX [ROLE]' (64 hex digits; ROLE: {roles})"
                )
            )
            continue
        digest = parts[1].lower()
        if len(parts) == 3:
            try:
                role = Role(parts[2].lower())
            except ValueError:
                problems.append(Problem(f"{p}:{n}", f"unknown role {parts[2]!r} (expected {roles})"))
                continue
            principal = Principal(name=parts[0], role=role)
        else:
            principal = Principal(name=parts[0], role=DEFAULT_ROLE, role_given=False)
        other = names.setdefault(principal.name.strip().casefold(), principal.name)
        if other != principal.name:  # one name rule (access.same_name): Bob and bob are one client
            problems.append(Problem(f"{p}:{n}", f"{principal.name!r} differs from {other!r} only in case"))
            continue
        earlier = out.get(digest)
        if earlier is not None and (earlier.name, earlier.role) != (principal.name, principal.role):
            problems.append(
                Problem(f"{p}:{n}", f"the same token as line {seen[digest]}, for another client or role")
            )
            continue
        seen.setdefault(digest, n)
        out[digest] = principal
    if problems:
        raise InvalidInput(problems, what="token file")
    return out


def read_signer_key(path: Path) -> Signer:
    """The audit checkpoint signer in the key file at ``path`` (``PRIVATE+KEY+...`` text).

    Raises:
        ValueError: saying why (missing, unreadable, not a signer key), for a field validator.
    """
    from ..audit.checkpoint import Signer

    if (why := unsafe_permissions(path)) is not None:
        raise ValueError(why)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read the checkpoint key {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a checkpoint signer key (PRIVATE+KEY+... text)") from None
    try:
        return Signer.from_skey(text)
    except InvalidInput as exc:
        raise ValueError(f"{path}: {exc.problems[0].reason}") from None


class ServerConfig(Model):
    """Settings of ``agency serve``."""

    address: str = Field(default="127.0.0.1:50051", description="host:port the gRPC server listens on.")
    data_dir: Path = Field(default=Path("agency-data"), description="Where the audit log is written.")
    grace_seconds: float = Field(default=5.0, ge=0, description="Drain time on SIGTERM.")
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


def _check_token(token: str) -> str:
    token = token.strip()
    if not token:
        raise ValueError("empty: expected the bearer token itself")
    parts = token.split()
    if len(parts) == 2 and _HASH.match(parts[1].lower()):
        raise ValueError(
            "this is a line of the gateway's token file (CLIENT_NAME SHA256_HEX); "
            "the worker needs the token itself, whose hash is on that line"
        )
    if len(parts) != 1:
        raise ValueError("expected one token (no spaces; one line)")
    return token


def read_token(path: str | os.PathLike[str], *, field: str = "token_file") -> str:
    """The bearer token in the file at ``path`` (the whole file, surrounding whitespace removed).

    Raises:
        InvalidInput: naming ``field`` (unreadable, empty, or not one token).
    """
    p = Path(path)
    if (unsafe := unsafe_permissions(p)) is not None:
        raise InvalidInput.single(field, unsafe, what="token")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InvalidInput.single(field, f"cannot read {p}: {why}", what="token") from None
    try:
        return _check_token(text)
    except ValueError as exc:
        raise InvalidInput.single(field, f"{p}: {exc}", what="token") from None


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
        return None if v is None else SecretStr(_check_token(v.get_secret_value()))

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


# definition_from and load_definition build an AgencyDefinition: they live in .definition (which
# imports this module, not the other way round) and stay importable here, on first use.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {"definition_from": "middleware.server.definition", "load_definition": "middleware.server.definition"},
    [*__all__, "definition_from", "load_definition"],
)
