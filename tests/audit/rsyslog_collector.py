"""A real syslog collector for the shipping tests: Debian's rsyslogd with its own configuration.

Each collector listens on a free port of 127.0.0.1 (``imtcp``, optionally TLS through the
``ossl`` driver of rsyslog-openssl, or ``imptcp``), writes every message's structured data
and MSG to a file in its own directory, and runs in the foreground as a child of the test
(stopped by PID). No system-wide configuration is read or touched. The main queue is direct:
a message read is written before the next is read, so a closed connection means written.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

RSYSLOGD = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
_LOOPBACK = ipaddress.ip_address("127.0.0.1")
_INDEX = re.compile(r'\[agency@32473 node="([^"]+)" index="(\d+)"\]')


def have_rsyslog(tls: bool = False) -> bool:
    if not os.path.exists(RSYSLOGD):
        return False
    return not tls or any(Path("/usr/lib").rglob("rsyslog/lmnsd_ossl.so"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 (CA file, certificate, key)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    later = datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test syslog CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


class Rsyslog:
    """One rsyslogd on ``port`` writing to ``directory/out.log``; ``start``/``stop`` by PID."""

    def __init__(self, directory: Path, *, tls: bool = False, module: str = "imtcp", port: int = 0) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.out = self.dir / "out.log"
        self.tls = tls
        self.ca: Path | None = None
        lines = [f'global(workDirectory="{self.dir}"']
        if tls:
            self.ca, cert, key = tls_files(self.dir / "tls")
            lines[0] += (
                f' DefaultNetstreamDriver="ossl" DefaultNetstreamDriverCAFile="{self.ca}"'
                f' DefaultNetstreamDriverCertFile="{cert}" DefaultNetstreamDriverKeyFile="{key}"'
            )
        lines[0] += ")"
        driver = ' StreamDriver.Name="ossl" StreamDriver.Mode="1" StreamDriver.AuthMode="anon"' if tls else ""
        lines += [
            'main_queue(queue.type="Direct")',
            f'module(load="{module}"{driver})',
            'template(name="line" type="string" string="%STRUCTURED-DATA% %msg%\\n")',
            f'ruleset(name="ship") {{ action(type="omfile" file="{self.out}" template="line") }}',
            f'input(type="{module}" port="{self.port}" ruleset="ship")',
        ]
        (self.dir / "rsyslog.conf").write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, within: float = 20) -> Rsyslog:
        with open(self.dir / "rsyslogd.log", "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [RSYSLOGD, "-n", "-f", str(self.dir / "rsyslog.conf"), "-i", str(self.dir / "rsyslogd.pid")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"rsyslogd exited: {(self.dir / 'rsyslogd.log').read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        raise AssertionError("rsyslogd did not listen in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def received(self) -> list[tuple[str, int]]:
        """(node, index) of every message written, in order (duplicates included)."""
        text = self.out.read_text(errors="replace") if self.out.exists() else ""
        return [(m.group(1), int(m.group(2))) for m in _INDEX.finditer(text)]

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").splitlines() if self.out.exists() else []
