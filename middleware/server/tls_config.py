"""TLS settings of the server's gRPC ports and channels: which PEM files, checked when parsed.

:class:`TlsConfig` (a server: the gateway, a worker; mTLS with a client CA),
:class:`ClientTlsConfig` (a client of the gateway, or the gateway calling its workers) and
:class:`WorkersTlsConfig` (the definition's ``workers.tls``: each worker bound to its agent's
name). A missing or unreadable file, one with no PEM certificate or key, or a key that is not the
certificate's is refused naming the field. The credentials are built from them in
:mod:`middleware.server.grpc_api.tls` and :mod:`~middleware.server.grpc_api.channel`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .._model import Model

__all__ = ["ClientTlsConfig", "TlsConfig", "WorkersTlsConfig"]


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
