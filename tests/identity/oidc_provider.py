"""A small but real OIDC provider for the tests, built with the same JOSE library as the gateway.

It serves, over real HTTP on a free port (uvicorn on its own event loop in a thread):

* ``/.well-known/openid-configuration`` (discovery),
* ``/jwks`` (its public keys; every fetch is counted),
* ``/authorize`` (GET: a sign-in form naming the user; POST: a one-time code, redirected back
  with the ``state``), the authorization-code flow with PKCE S256 required,
* ``/token`` (the code and its ``code_verifier`` for an ID token and an access token).

Tests mint access tokens directly (:meth:`OidcProvider.mint`: any claims, key, expiry,
audience, issuer) and rotate keys (:meth:`OidcProvider.rotate`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import uvicorn
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey
from served_in_thread import ServedInThread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

_KIDS = itertools.count(1)


def _new_key(alg: str) -> RSAKey | ECKey:
    kid = f"key-{next(_KIDS)}-{secrets.token_hex(3)}"
    if alg.startswith("ES"):
        return ECKey.generate_key("P-256", parameters={"kid": kid, "alg": alg, "use": "sig"})
    return RSAKey.generate_key(2048, parameters={"kid": kid, "alg": alg, "use": "sig"})


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    nonce: str
    user: str


@dataclass
class OidcProvider(ServedInThread):
    """The provider; use as a context manager (``with OidcProvider() as idp``)."""

    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name -> extra claims of that user's tokens (roles, tenant ...)."""
    clients: dict[str, str] = field(default_factory=dict)
    """client_id -> its one redirect URI (exact match)."""
    alg: str = "RS256"
    now: Any = time.time
    jwks_fetches: int = 0
    codes: dict[str, _Grant] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()
        self.keys: list[RSAKey | ECKey] = [_new_key(self.alg)]
        self.port = 0
        self._server: uvicorn.Server | None = None

    # -- keys and tokens ---------------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def signing_key(self) -> RSAKey | ECKey:
        return self.keys[-1]

    def rotate(self, *, keep_old: bool = True) -> RSAKey | ECKey:
        """A new signing key, published at once; the old one stays published unless ``keep_old`` is false."""
        key = _new_key(self.alg)
        self.keys = [*self.keys, key] if keep_old else [key]
        return key

    def mint(
        self,
        claims: dict[str, Any],
        *,
        audience: str | list[str] = "agency-gateway",
        issuer: str | None = None,
        expires_in: float = 300,
        issued_at: float | None = None,
        key: RSAKey | ECKey | None = None,
        kid: str | None = None,
    ) -> str:
        """A signed JWT with ``iss``, ``aud``, ``iat``, ``exp`` set, and ``claims`` over them."""
        key = key or self.signing_key
        at = self.now() if issued_at is None else issued_at
        body = {
            "iss": self.issuer if issuer is None else issuer,
            "aud": audience,
            "iat": int(at),
            "exp": int(at + expires_in),
            **claims,
        }
        header = {"alg": self.alg, "kid": kid or key.kid}
        return jwt.encode(header, body, key, algorithms=[self.alg])

    # -- HTTP -------------------------------------------------------------------------------------

    def app(self) -> Starlette:
        async def discovery(_: Request) -> Response:
            return JSONResponse(
                {
                    "issuer": self.issuer,
                    "authorization_endpoint": f"{self.issuer}/authorize",
                    "token_endpoint": f"{self.issuer}/token",
                    "jwks_uri": f"{self.issuer}/jwks",
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": [self.alg],
                    "code_challenge_methods_supported": ["S256"],
                    "grant_types_supported": ["authorization_code"],
                }
            )

        async def jwks(_: Request) -> Response:
            self.jwks_fetches += 1
            return JSONResponse({"keys": [k.as_dict(private=False) for k in self.keys]})

        async def authorize_page(request: Request) -> Response:
            q = request.query_params
            problem = self._check_authorize(q)
            if problem:
                return HTMLResponse(f"<p>{html.escape(problem)}</p>", status_code=400)
            hidden = "".join(
                f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">'
                for k, v in q.items()
            )
            return HTMLResponse(
                "<!doctype html><title>Test IdP</title><h1>Test IdP sign-in</h1>"
                f'<form method="post" action="/authorize">{hidden}'
                '<label>User <input name="username" id="username"></label>'
                '<button type="submit" id="login">Sign in</button></form>'
            )

        async def authorize(request: Request) -> Response:
            form = {k: str(v) for k, v in (await request.form()).items()}
            problem = self._check_authorize(form)
            if problem:
                return HTMLResponse(problem, status_code=400)
            user = form.get("username", "")
            if user not in self.users:
                return HTMLResponse("unknown user", status_code=401)
            code = secrets.token_urlsafe(24)
            self.codes[code] = _Grant(
                client_id=form["client_id"],
                redirect_uri=form["redirect_uri"],
                challenge=form["code_challenge"],
                nonce=form.get("nonce", ""),
                user=user,
            )
            back = f"{form['redirect_uri']}?{urlencode({'code': code, 'state': form.get('state', '')})}"
            return RedirectResponse(back, status_code=303)

        async def token(request: Request) -> Response:
            form = {k: str(v) for k, v in (await request.form()).items()}
            grant = self.codes.pop(form.get("code", ""), None)  # one use
            if form.get("grant_type") != "authorization_code" or grant is None:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            if form.get("client_id") != grant.client_id or form.get("redirect_uri") != grant.redirect_uri:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            verifier = form.get("code_verifier", "")
            digest = (
                base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            )
            if not verifier or digest != grant.challenge:
                return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, status_code=400)
            claims = {"sub": grant.user, "preferred_username": grant.user, **self.users[grant.user]}
            id_token = self.mint({**claims, "nonce": grant.nonce}, audience=grant.client_id)
            access = self.mint(claims, audience="agency-gateway")
            return JSONResponse(
                {"access_token": access, "id_token": id_token, "token_type": "Bearer", "expires_in": 300}
            )

        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", discovery),
                Route("/jwks", jwks),
                Route("/authorize", authorize_page, methods=["GET"]),
                Route("/authorize", authorize, methods=["POST"]),
                Route("/token", token, methods=["POST"]),
            ]
        )

    def _check_authorize(self, q: Any) -> str:
        if q.get("response_type") != "code":
            return "response_type must be code"
        client = q.get("client_id", "")
        if client not in self.clients or self.clients[client] != q.get("redirect_uri"):
            return "unknown client or redirect_uri"
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return "PKCE S256 required"
        return ""

    async def start(self) -> None:
        import socket

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._task = self.loop.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await __import__("asyncio").sleep(0.01)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.should_exit = True
        await self._task
