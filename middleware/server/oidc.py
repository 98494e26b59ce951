"""JWT access tokens of an OIDC issuer: keys fetched and rotated, claims checked, roles mapped.

:class:`JwksCache` holds the issuer's JWK Set: fetched on first use (its URL from the
issuer's discovery document unless ``jwks_uri`` is given), fetched again when older than
``jwks_max_age``, and at once when a token names a key id it does not hold (the issuer
rotated its keys) — at most once per ``jwks_min_refresh``, so a flood of tokens with made-up
key ids cannot make the gateway hammer the issuer. Concurrent refreshes share one fetch.
A failed fetch keeps the keys already held.

:class:`OidcVerifier` checks a token (signature by a key of the set, an accepted asymmetric
algorithm, ``iss``, ``aud``, ``exp`` required, ``nbf`` and ``iat`` not in the future, each time
with ``clock_skew`` of leeway, against an injected clock) and maps its claims to a
:class:`~middleware.access.Principal`: the name claim, the role (the most privileged of the
token's roles or groups the definition maps; else ``default_role``; else refused) and the
tenant claim. Every refusal is :class:`~middleware.errors.Unauthenticated` saying why
(``token expired``, ``wrong audience``, ``wrong issuer``, ``unknown key id``, ``bad signature``),
which the transports audit like any refused token. JOSE is done by ``joserfc``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import KeySet

from ..access import Principal, Role
from ..errors import Unauthenticated, Unavailable
from .identity_settings import OidcSettings

__all__ = ["JwksCache", "OidcVerifier", "discover", "looks_like_jwt"]

#: The most privileged role first: a token holding several mapped roles gets the first.
_PRIVILEGE = (Role.ADMIN, Role.AUDITOR, Role.AGENT, Role.CLIENT)

Fetch = Callable[[str], Awaitable[dict[str, Any]]]


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts, the first a JSON header: worth verifying as a JWT."""
    return token.count(".") == 2 and token.startswith("eyJ")


def _header(token: str) -> dict[str, Any]:
    first = token.split(".", 1)[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(first + "=" * (-len(first) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise Unauthenticated("malformed JWT: its header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise Unauthenticated("malformed JWT: its header is not a JSON object")
    return header


async def _http_json(url: str, client: httpx.AsyncClient) -> dict[str, Any]:
    try:
        response = await client.get(url)
    except httpx.HTTPError as exc:
        raise Unavailable(f"cannot reach the OIDC issuer at {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise Unavailable(f"the OIDC issuer answered {response.status_code} for {url}")
    try:
        data = response.json()
    except ValueError:
        raise Unavailable(f"the OIDC issuer's {url} is not JSON") from None
    if not isinstance(data, dict):
        raise Unavailable(f"the OIDC issuer's {url} is not a JSON object")
    return data


async def discover(issuer: str, fetch: Fetch) -> dict[str, Any]:
    """The issuer's discovery document (``/.well-known/openid-configuration``), checked to be its own.

    Raises:
        Unavailable: it cannot be fetched, or it names another issuer.
    """
    document = await fetch(f"{issuer}/.well-known/openid-configuration")
    if document.get("issuer") != issuer:
        raise Unavailable(
            f"the discovery document of {issuer} names the issuer {document.get('issuer')!r}: refused"
        )
    return document


class JwksCache:
    """An issuer's signing keys, fetched and refreshed (see the module docstring).

    Args:
        issuer: The issuer URL (for discovery when ``jwks_uri`` is empty).
        jwks_uri: The JWK Set URL, or empty.
        fetch: GETs a URL's JSON (default: httpx); injected in tests.
        clock: Monotonic seconds (injectable).
        max_age: Seconds after which the keys are fetched again.
        min_refresh: Seconds between two fetches for an unknown key id.
    """

    def __init__(
        self,
        issuer: str,
        *,
        jwks_uri: str = "",
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_age: float = 3600.0,
        min_refresh: float = 30.0,
    ) -> None:
        self.issuer = issuer
        self.jwks_uri = jwks_uri
        self._client: httpx.AsyncClient | None = None
        self._fetch = fetch or self._http
        self._clock = clock
        self.max_age = max_age
        self.min_refresh = min_refresh
        self._keys: KeySet | None = None
        self._kids: frozenset[str] = frozenset()
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def _http(self, url: str) -> dict[str, Any]:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=5.0, follow_redirects=False)
        return await _http_json(url, self._client)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def keys_for(self, kid: str) -> KeySet:
        """The key set, holding ``kid`` if the issuer has it.

        Raises:
            Unauthenticated: the issuer holds no key ``kid`` (after a refresh allowed now).
            Unavailable: no keys could be fetched at all.
        """
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= self.max_age
        if stale or (kid not in self._kids and self._may_refresh(now)):
            await self._refresh(since=self._fetched_at)
        if self._keys is None:
            raise Unavailable(f"no signing keys of the OIDC issuer {self.issuer}")
        if kid not in self._kids:
            raise Unauthenticated(f"unknown key id {kid[:64]!r}: the issuer {self.issuer} has no such key")
        return self._keys

    def _may_refresh(self, now: float) -> bool:
        return self._fetched_at is None or now - self._fetched_at >= self.min_refresh

    async def _refresh(self, *, since: float | None) -> None:
        async with self._lock:
            if self._fetched_at != since:  # another caller refreshed while we waited
                return
            try:
                if not self.jwks_uri:
                    document = await discover(self.issuer, self._fetch)
                    uri = document.get("jwks_uri")
                    if not isinstance(uri, str) or not uri:
                        raise Unavailable(f"the discovery document of {self.issuer} has no jwks_uri")
                    self.jwks_uri = uri
                data = await self._fetch(self.jwks_uri)
                keys = KeySet.import_key_set(data)  # type: ignore[arg-type]
            except (Unavailable, JoseError, ValueError, TypeError) as exc:
                self._fetched_at = self._clock()  # the rate limit holds for failures too
                if self._keys is None:
                    raise Unavailable(f"cannot load the OIDC issuer's keys: {exc}") from None
                return  # keep the keys held
            finally:
                self.fetches += 1
            self._keys = keys
            self._kids = frozenset(str(k.kid) for k in keys.keys if k.kid)
            self._fetched_at = self._clock()


class OidcVerifier:
    """Verifies JWT access tokens of one issuer (see the module docstring).

    Args:
        settings: ``identity.oidc`` of the definition.
        keys: The issuer's key cache (default: one built from ``settings``).
        now: Wall-clock seconds since the epoch, for exp/nbf/iat (injectable).
    """

    def __init__(
        self,
        settings: OidcSettings,
        *,
        keys: JwksCache | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.keys = keys or JwksCache(
            settings.issuer,
            jwks_uri=settings.jwks_uri,
            max_age=settings.jwks_max_age.total_seconds(),
            min_refresh=settings.jwks_min_refresh.total_seconds(),
        )
        self._now = now
        self._roles = {name: role for name, role in settings.roles.items()}

    async def verify(self, token: str) -> Principal:
        """The principal of ``token``.

        Raises:
            Unauthenticated: saying why the token is refused.
            Unavailable: the issuer's keys cannot be fetched.
        """
        s = self.settings
        header = _header(token)
        alg = header.get("alg")
        if alg not in s.algorithms:
            raise Unauthenticated(
                f"JWT algorithm {str(alg)[:20]!r} not accepted (accepted: {', '.join(s.algorithms)})"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated("the JWT names no key id (kid)")
        keys = await self.keys_for(kid)
        try:
            decoded = jwt.decode(token, keys, algorithms=s.algorithms)
        except BadSignatureError:
            raise Unauthenticated("bad signature: the JWT is not signed by the issuer's key") from None
        except JoseError as exc:
            raise Unauthenticated(f"malformed JWT: {exc.description or type(exc).__name__}") from None
        claims = decoded.claims
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self._now()),
            leeway=int(s.clock_skew.total_seconds()),
            iss={"essential": True, "value": s.issuer},
            aud={"essential": True, "value": s.audience},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except ExpiredTokenError:
            raise Unauthenticated("token expired (exp is past, beyond the allowed clock skew)") from None
        except MissingClaimError as exc:
            raise Unauthenticated(f"the JWT lacks the claim(s) {exc.description}") from None
        except InvalidClaimError as exc:
            raise Unauthenticated(self._claim_problem(exc, claims)) from None
        return self.principal(claims)

    async def keys_for(self, kid: str) -> KeySet:
        return await self.keys.keys_for(kid)

    def _claim_problem(self, exc: InvalidClaimError, claims: Mapping[str, Any]) -> str:
        claim = exc.claim
        if claim == "iss":
            return f"wrong issuer {str(claims.get('iss'))[:100]!r} (expected {self.settings.issuer!r})"
        if claim == "aud":
            return f"wrong audience {str(claims.get('aud'))[:100]!r} (expected {self.settings.audience!r})"
        if claim in ("nbf", "iat"):
            return f"token not valid yet ({claim} is in the future, beyond the allowed clock skew)"
        return f"invalid claim {claim!r}"

    def principal(self, claims: Mapping[str, Any]) -> Principal:
        """The caller the claims name.

        Raises:
            Unauthenticated: no name, or no role the definition maps and no default role.
        """
        names = self.settings.claims
        name = claims.get(names.name)
        if not isinstance(name, str) or not name.strip():
            raise Unauthenticated(f"the JWT has no {names.name!r} claim naming the caller")
        held = set(_strings(_claim(claims, names.roles)))
        mapped = {self._roles[r] for r in held if r in self._roles}
        role = next((r for r in _PRIVILEGE if r in mapped), self.settings.default_role)
        if role is None:
            raise Unauthenticated(
                f"the JWT of {name[:64]!r} names no role the gateway maps (claim {names.roles!r}; "
                "identity.oidc.roles, or a default_role)"
            )
        tenant = ""
        if names.tenant:
            value = _claim(claims, names.tenant)
            if not isinstance(value, str) or not value.strip():
                raise Unauthenticated(
                    f"the JWT of {name[:64]!r} has no {names.tenant!r} claim naming its tenant"
                )
            tenant = value.strip()
        return Principal(name=name.strip(), role=role, tenant=tenant, via="oidc")

    async def aclose(self) -> None:
        await self.keys.aclose()


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []
