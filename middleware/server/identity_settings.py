"""The ``identity`` section of an agency definition: bearer tokens from the company's OIDC provider.

Plain settings (no JOSE library imported): the verifier is :mod:`middleware.server.oidc`
(the ``oidc`` extra), loaded only when ``identity.oidc`` is given::

    identity:
      oidc:
        issuer: https://login.example.com/realms/acme     # the token's iss, exactly
        audience: agency-gateway                          # one of the token's aud
        # jwks_uri: https://...                           # default: from the issuer's discovery document
        algorithms: [RS256, ES256]
        clock_skew: 60s                                   # leeway on exp, nbf, iat
        claims: {name: azp, roles: roles, tenant: tenant}
        roles: {agency-admin: admin, agency-auditor: auditor, agency-agent: agent, agency-client: client}
        default_role: client                              # none: a token naming no known role is refused

Static tokens (``server.auth_tokens``) keep working beside it: a bearer token whose SHA-256
is in the token file is that line's client; any other bearer token that is a JWT is
verified against the issuer.
"""

from __future__ import annotations

import re
from datetime import timedelta

from pydantic import Field, field_validator

from .._model import Model
from ..access import Role
from ..audit.retention import parse_age

__all__ = ["ClaimNames", "IdentitySettings", "OidcSettings"]

#: Algorithms a token may be signed with: asymmetric only (never ``none`` or HMAC, whose
#: secret the gateway would have to share with the provider).
ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


def _age(v: object) -> object:
    """``60s``, ``1h``, ``30m`` (or seconds) as the other durations of the definition."""
    return parse_age(v) if isinstance(v, str) else v


def _https_or_local(v: str) -> str:
    v = v.strip().rstrip("/")
    if v and not re.match(r"^https://[^/\s]+|^http://(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(/|$)", v):
        raise ValueError(f"{v!r}: an https URL (plain http only on 127.0.0.1, localhost or [::1])")
    return v


class ClaimNames(Model):
    """Which claims of a token say who the caller is."""

    name: str = Field(
        default="sub",
        description="The caller's client name (sub; azp or client_id for client-credentials tokens; "
        "preferred_username for people).",
    )
    roles: str = Field(
        default="roles",
        description="The claim listing the caller's roles or groups (a list, or a space-separated string); "
        "a dotted path reads nested claims (realm_access.roles).",
    )
    tenant: str = Field(default="", description="The claim naming the caller's tenant (empty: none).")


class OidcSettings(Model):
    """One OIDC issuer whose JWT access tokens the gateway accepts."""

    issuer: str = Field(description="The issuer URL, exactly as in the tokens' iss claim.")
    audience: str = Field(min_length=1, description="The gateway's audience: one of the tokens' aud.")
    jwks_uri: str = Field(
        default="", description="The issuer's JWK Set URL (default: jwks_uri of its discovery document)."
    )
    algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "ES256"], min_length=1, description="Accepted signing algorithms."
    )
    clock_skew: timedelta = Field(
        default=timedelta(seconds=60), description="Leeway on exp, nbf and iat (clocks differ)."
    )
    jwks_max_age: timedelta = Field(
        default=timedelta(hours=1), description="Keys are fetched again after this long (rotation)."
    )
    jwks_min_refresh: timedelta = Field(
        default=timedelta(seconds=30),
        description="A token with an unknown key id fetches the keys again, at most once per this long.",
    )
    claims: ClaimNames = Field(default_factory=ClaimNames)
    roles: dict[str, Role] = Field(
        default_factory=dict, description="Role or group names in the token -> the gateway's role."
    )
    default_role: Role | None = Field(
        default=None, description="The role of a token naming none of ``roles`` (none: it is refused)."
    )

    _issuer = field_validator("issuer")(classmethod(lambda cls, v: _https_or_local(v)))
    _jwks = field_validator("jwks_uri")(classmethod(lambda cls, v: _https_or_local(v)))
    _ages = field_validator("clock_skew", "jwks_max_age", "jwks_min_refresh", mode="before")(
        classmethod(lambda cls, v: _age(v))
    )

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, v: list[str]) -> list[str]:
        bad = [a for a in v if a not in ASYMMETRIC]
        if bad:
            raise ValueError(
                f"{', '.join(bad)}: not accepted (asymmetric only: {', '.join(sorted(ASYMMETRIC))})"
            )
        return v

    @field_validator("clock_skew", "jwks_max_age", "jwks_min_refresh")
    @classmethod
    def _not_negative(cls, v: timedelta) -> timedelta:
        if v < timedelta(0):
            raise ValueError("must not be negative")
        return v


class IdentitySettings(Model):
    """How callers prove who they are, besides the token file."""

    oidc: OidcSettings | None = Field(default=None, description="JWT access tokens of an OIDC issuer.")
