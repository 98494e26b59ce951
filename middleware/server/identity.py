"""Who a bearer token belongs to, for every transport: the token file, then the OIDC issuer.

:class:`Identities` is the one place a transport asks (the gRPC token interceptor, the A2A
and MCP bindings): a token whose SHA-256 is on a line of the token file is that line's
client (as before); any other token that is a JWT is verified by the OIDC verifier when
``identity.oidc`` is configured (:mod:`middleware.server.oidc`). Either is optional; with
neither, tokens are off and every caller is anonymous (``required`` is false).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from ..access import DEFAULT_ROLE, Principal
from ..errors import Unauthenticated

if TYPE_CHECKING:
    from .identity_settings import OidcSettings

__all__ = ["Identities", "TokenVerifier"]


class TokenVerifier(Protocol):
    """Verifies a JWT (:class:`middleware.server.oidc.OidcVerifier` is one)."""

    async def verify(self, token: str) -> Principal: ...

    async def aclose(self) -> None: ...


class Identities:
    """Static tokens (``{sha256_hex: principal}``) and, optionally, an OIDC verifier.

    Args:
        token_hashes: The token file (None: no static tokens).
        verifier: Verifies JWTs (None: no OIDC).
    """

    def __init__(
        self,
        token_hashes: Mapping[str, Principal | str] | None = None,
        *,
        verifier: TokenVerifier | None = None,
    ) -> None:
        self.static = token_hashes is not None
        self.verifier = verifier
        self._clients = {
            h.lower(): p
            if isinstance(p, Principal)
            else Principal(name=p, role=DEFAULT_ROLE, role_given=False)
            for h, p in (token_hashes or {}).items()
        }

    @classmethod
    def build(
        cls, token_hashes: Mapping[str, Principal | str] | None, oidc: OidcSettings | None
    ) -> Identities:
        """From the token file and ``identity.oidc`` (needs the ``oidc`` extra when given)."""
        verifier = None
        if oidc is not None:
            from .oidc import OidcVerifier

            verifier = OidcVerifier(oidc)
        return cls(token_hashes, verifier=verifier)

    @property
    def required(self) -> bool:
        """Whether callers must present a token (a token file or an issuer is configured)."""
        return self.static or self.verifier is not None

    def principals(self) -> list[Principal]:
        """The token file's clients (for start-up logs)."""
        return list(self._clients.values())

    async def authenticate(self, token: str | None) -> Principal:
        """The principal of a bearer token.

        Raises:
            Unauthenticated: no token, an unknown one, or a JWT the issuer's checks refuse
                (the message says why).
            Unavailable: the issuer's keys cannot be fetched.
        """
        if not token:
            raise Unauthenticated("missing bearer token (send 'authorization: Bearer <token>')")
        principal = self._clients.get(hashlib.sha256(token.encode()).hexdigest())
        if principal is not None:
            return principal
        if self.verifier is not None:
            from .oidc import looks_like_jwt

            if looks_like_jwt(token):
                return await self.verifier.verify(token)
        raise Unauthenticated("unknown bearer token")

    async def aclose(self) -> None:
        if self.verifier is not None:
            await self.verifier.aclose()
