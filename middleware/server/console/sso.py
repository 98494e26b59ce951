"""The console's single sign-on: the OIDC authorization-code flow with PKCE (S256).

``GET /signin/oidc`` draws a state, a nonce and a PKCE code verifier, keeps them in a short
signed cookie (``agency_sso``: HttpOnly, SameSite=Lax so that it comes back on the provider's
redirect, path ``/oidc``, 10 minutes) and sends the browser to the provider's authorization
endpoint with the S256 challenge. ``GET /oidc/callback`` checks the state against the
cookie, redeems the code at the token endpoint with the verifier (and the client secret of a
confidential client), verifies the ID token (signature by the issuer's keys, fetched and
rotated like the gateway's, ``iss``, ``aud`` = the client id, ``exp``/``iat`` with the clock
skew, the ``nonce``) and signs in the person its ``username_claim`` names. The provider's
tokens are never kept: the console session holds the person's name, as with token sign-in.
Every refusal is audited (``human.decision`` / ``refused``, as a refused token sign-in).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from itsdangerous import BadSignature, URLSafeTimedSerializer
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)

from ...errors import InvalidInput, Unauthenticated, Unavailable
from ...people.model import ConsoleOidcSettings
from ..oidc import JwksCache, discover

__all__ = ["COOKIE", "ConsoleSso", "SignInRefused"]

#: The cookie that carries the flow's state, nonce and code verifier to the callback.
COOKIE = "agency_sso"
_COOKIE_SECONDS = 600


class SignInRefused(Exception):
    """The provider's answer is refused; ``why`` says what was wrong (audited, shown)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class ConsoleSso:
    """The flow for one console (see the module docstring).

    Args:
        settings: ``humans.console.oidc``.
        secret: The console's session secret (signs the flow cookie).
        now: Wall-clock seconds (injectable).
    """

    def __init__(
        self, settings: ConsoleOidcSettings, *, secret: str, now: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self._cookies = URLSafeTimedSerializer(secret, salt="agency-console-sso")
        self._now = now
        self._client: httpx.AsyncClient | None = None
        self.keys = JwksCache(settings.issuer, fetch=self._json)
        self._endpoints: dict[str, Any] | None = None
        self._secret: str | None = None
        if settings.client_secret_file:
            try:
                self._secret = Path(settings.client_secret_file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise InvalidInput.single(
                    "humans.console.oidc.client_secret_file",
                    f"cannot read {settings.client_secret_file}: {exc.strerror}",
                ) from None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=10.0, follow_redirects=False)
        return self._client

    async def _json(self, url: str) -> dict[str, Any]:
        from ..oidc import _http_json

        return await _http_json(url, self._http())

    async def _discovery(self) -> dict[str, Any]:
        if self._endpoints is None:
            self._endpoints = await discover(self.settings.issuer, self._json)
        return self._endpoints

    def redirect_url(self, console_url: str) -> str:
        return self.settings.redirect_url or f"{console_url.rstrip('/')}/oidc/callback"

    async def start(self, console_url: str) -> tuple[str, str]:
        """``(the provider's authorization URL, the flow cookie's value)``.

        Raises:
            Unavailable: the provider's discovery document cannot be had.
        """
        endpoint = (await self._discovery()).get("authorization_endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise Unavailable(
                f"the discovery document of {self.settings.issuer} has no authorization_endpoint"
            )
        state, nonce, verifier = (secrets.token_urlsafe(24) for _ in range(3))
        query = {
            "response_type": "code",
            "client_id": self.settings.client_id,
            "redirect_uri": self.redirect_url(console_url),
            "scope": " ".join(self.settings.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": _challenge(verifier),
            "code_challenge_method": "S256",
        }
        cookie = self._cookies.dumps({"state": state, "nonce": nonce, "verifier": verifier})
        return f"{endpoint}?{urlencode(query)}", cookie

    async def finish(self, *, console_url: str, params: dict[str, str], cookie: str | None) -> str:
        """The name of the person the provider signed in.

        Raises:
            SignInRefused: a state that is not this browser's, an error from the provider, a
                refused code, an ID token that does not verify (the reason says which).
            Unavailable: the provider cannot be reached.
        """
        if params.get("error"):
            raise SignInRefused(f"the provider refused: {params['error'][:100]}")
        try:
            flow = self._cookies.loads(cookie or "", max_age=_COOKIE_SECONDS)
        except BadSignature:
            raise SignInRefused(
                "no sign-in was started in this browser (or it is over 10 minutes old)"
            ) from None
        if not secrets.compare_digest(str(flow.get("state", "")), params.get("state", "")):
            raise SignInRefused("the state does not match the sign-in this browser started")
        code = params.get("code", "")
        if not code:
            raise SignInRefused("the provider sent no code")
        token_endpoint = (await self._discovery()).get("token_endpoint")
        if not isinstance(token_endpoint, str) or not token_endpoint:
            raise Unavailable(f"the discovery document of {self.settings.issuer} has no token_endpoint")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_url(console_url),
            "client_id": self.settings.client_id,
            "code_verifier": str(flow["verifier"]),
        }
        if self._secret:
            form["client_secret"] = self._secret
        try:
            response = await self._http().post(token_endpoint, data=form)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach the token endpoint: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise SignInRefused(f"the token endpoint refused the code ({response.status_code})")
        id_token = (
            response.json().get("id_token")
            if response.headers.get("content-type", "").startswith("application/json")
            else None
        )
        if not isinstance(id_token, str):
            raise SignInRefused("the token endpoint sent no ID token")
        claims = await self._verify(id_token, nonce=str(flow["nonce"]))
        name = claims.get(self.settings.username_claim)
        if not isinstance(name, str) or not name:
            raise SignInRefused(f"the ID token has no {self.settings.username_claim!r} claim")
        return name

    async def _verify(self, id_token: str, *, nonce: str) -> dict[str, Any]:
        from ..oidc import _header

        s = self.settings
        try:
            header = _header(id_token)
        except Unauthenticated as exc:
            raise SignInRefused(exc.message) from None
        if header.get("alg") not in s.algorithms:
            raise SignInRefused(f"ID token algorithm {str(header.get('alg'))[:20]!r} not accepted")
        try:
            keys = await self.keys.keys_for(str(header.get("kid", "")))
        except Unauthenticated as exc:
            raise SignInRefused(exc.message) from None
        try:
            claims = jwt.decode(id_token, keys, algorithms=s.algorithms).claims
            jwt.JWTClaimsRegistry(
                now=lambda: int(self._now()),
                leeway=int(s.clock_skew_seconds),
                iss={"essential": True, "value": s.issuer},
                aud={"essential": True, "value": s.client_id},
                exp={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(claims)
        except BadSignatureError:
            raise SignInRefused("the ID token's signature is not the issuer's") from None
        except ExpiredTokenError:
            raise SignInRefused("the ID token expired") from None
        except (InvalidClaimError, MissingClaimError) as exc:
            raise SignInRefused(f"the ID token's {exc.description}") from None
        except JoseError as exc:
            raise SignInRefused(f"malformed ID token: {exc.description or type(exc).__name__}") from None
        return dict(claims)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
