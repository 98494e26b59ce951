"""Credentials the server reads from files: bearer tokens, token files, the checkpoint signer key.

A token file holds one ``CLIENT_NAME SHA256_HEX [ROLE]`` per line (:func:`read_token_hashes`;
:func:`hash_token` makes the hash); a worker's token file holds the token itself
(:func:`read_token`); the audit checkpoint key is ``PRIVATE+KEY+...`` text
(:func:`read_signer_key`). A secret file anyone on the host could write is refused
(:func:`unsafe_permissions`). Which files to read comes from the settings
(:mod:`middleware.server.settings`, the one reader of the environment).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..access import DEFAULT_ROLE, Principal, Role
from ..errors import InvalidInput
from ..tenancy import check_tenant

if TYPE_CHECKING:
    from ..audit.checkpoint import Signer

__all__ = [
    "check_token",
    "hash_token",
    "read_signer_key",
    "read_token",
    "read_token_hashes",
    "unsafe_permissions",
]


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
    """Read a token file: one ``CLIENT_NAME SHA256_HEX [ROLE [TENANT]]`` per line (``#`` comments).

    ``TENANT`` puts the client in a tenant (:mod:`middleware.tenancy`): it sees and routes to
    that tenant's agents only; an admin or auditor line without one is global.

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
        if len(parts) not in (2, 3, 4) or not _HASH.match(parts[1].lower()):
            problems.append(
                Problem(
                    f"{p}:{n}",
                    f"expected 'CLIENT_NAME SHA256_HEX [ROLE [TENANT]]' (64 hex digits; ROLE: {roles})",
                )
            )
            continue
        digest = parts[1].lower()
        if len(parts) >= 3:
            try:
                role = Role(parts[2].lower())
                tenant = check_tenant(parts[3]) if len(parts) == 4 else ""
            except ValueError as exc:
                why = str(exc) if len(parts) == 4 and "tenant" in str(exc) else ""
                problems.append(Problem(f"{p}:{n}", why or f"unknown role {parts[2]!r} (expected {roles})"))
                continue
            principal = Principal(name=parts[0], role=role, tenant=tenant)
        else:
            principal = Principal(name=parts[0], role=DEFAULT_ROLE, role_given=False)
        other = names.setdefault(principal.name.strip().casefold(), principal.name)
        if other != principal.name:  # one name rule (access.same_name): Bob and bob are one client
            problems.append(Problem(f"{p}:{n}", f"{principal.name!r} differs from {other!r} only in case"))
            continue
        earlier = out.get(digest)
        if earlier is not None and (earlier.name, earlier.role, earlier.tenant) != (
            principal.name,
            principal.role,
            principal.tenant,
        ):
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


def check_token(token: str) -> str:
    """``token`` stripped, if it is one bearer token; raises ValueError saying why not."""
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
        return check_token(text)
    except ValueError as exc:
        raise InvalidInput.single(field, f"{p}: {exc}", what="token") from None
