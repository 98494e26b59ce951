"""Throwaway PKI made at test time (no key is ever committed); the ``pki`` fixture (tests/conftest.py)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    stranger_cert: Path
    stranger_key: Path
    directory: Path | None = None
    ca_key: ec.EllipticCurvePrivateKey | None = None
    ca_cert: x509.Certificate | None = None

    def issue(self, name: str) -> tuple[Path, Path]:
        """A server certificate (and its key) from the CA, issued for ``name`` (its one DNS
        name) at 127.0.0.1: what a worker serving agent ``name`` on this host presents when the
        gateway binds workers to their agents (``workers.tls.verify_agent_identity``)."""
        assert self.directory is not None and self.ca_key is not None and self.ca_cert is not None
        key, cert = _leaf(self.ca_key, self.ca_cert, name, server=True, names=[name])
        return _write(self.directory, f"issued-{name}", key, cert)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca: x509.Certificate,
    cn: str,
    *,
    server: bool,
    names: list[str] | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names or ()]
        alt.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        if names is None:
            alt = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write(directory: Path, name: str, key: ec.EllipticCurvePrivateKey | None, cert: x509.Certificate):
    cert_path = directory / f"{name}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = directory / f"{name}.key"
    if key is not None:
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def make_pki(d: Path) -> Pki:
    """A CA with a server certificate (localhost, 127.0.0.1) and a client certificate, and a
    stranger: another CA and a client certificate it signed. Written to ``d``."""
    ca_key, ca = _ca("agency test CA")
    other_key, other = _ca("some other CA")
    ca_path, _ = _write(d, "ca", None, ca)
    other_path, _ = _write(d, "other-ca", None, other)
    server_cert, server_key = _write(d, "server", *_leaf(ca_key, ca, "gateway", server=True))
    client_cert, client_key = _write(d, "client", *_leaf(ca_key, ca, "worker-1", server=False))
    stranger_cert, stranger_key = _write(d, "stranger", *_leaf(other_key, other, "mallory", server=False))
    return Pki(
        ca_path,
        server_cert,
        server_key,
        client_cert,
        client_key,
        other_path,
        stranger_cert,
        stranger_key,
        directory=d,
        ca_key=ca_key,
        ca_cert=ca,
    )
