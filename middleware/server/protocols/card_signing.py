"""A2A Agent Card signatures (JWS, A2A spec §5.5 "AgentCardSignature"; RFC 7515, RFC 8785).

* **The gateway's card is signed** (:class:`CardSigner`): an ES256 (ECDSA P-256) key from the
  key directory — ``keys/a2a-card.pem`` beside the audit directory, made 0600 on first start —
  or a file the definition names (``protocols.a2a.card_key``). The signature covers the card's
  RFC 8785 canonical JSON without ``signatures``; its protected header names the key
  (``kid``: the RFC 7638 thumbprint). The public key is written beside the private one as a JWK
  Set (``a2a-card.jwks.json``): give it to the clients that verify the card.
* **Remote agents' cards are verified** (:func:`card_verifier`) when the definition gives their
  keys (``protocols.a2a_agents[i].card_keys``: a JWK Set, one JWK, or a PEM public key): a card
  without a signature one of those keys verifies is refused at registration, and on a later
  check it fails like a changed card (``TOOL_UNAVAILABLE``, the contract flagged for review).

Signing and verifying are the a2a-sdk's own helpers (``a2a.utils.signing``, PyJWT).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from a2a.utils.signing import (
    SignatureVerificationError,
    create_agent_card_signer,
    create_signature_verifier,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt import PyJWK
from jwt.algorithms import ECAlgorithm

__all__ = [
    "ALGORITHMS",
    "CardSignatureError",
    "CardSigner",
    "card_verifier",
    "default_card_key_path",
    "load_card_keys",
]

#: Algorithms accepted on remote cards (never "none", never HMAC: no shared secrets).
ALGORITHMS = ["ES256", "ES384", "EdDSA", "RS256", "PS256"]


class CardSignatureError(Exception):
    """A card carries no signature that one of the trusted keys verifies."""


def default_card_key_path(audit_root: str | os.PathLike[str]) -> Path:
    """``keys/a2a-card.pem`` beside the audit directory (with the checkpoint key)."""
    return Path(os.path.abspath(audit_root)).parent / "keys" / "a2a-card.pem"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 thumbprint of an EC public JWK."""
    members = {k: jwk[k] for k in ("crv", "kty", "x", "y")}
    return _b64(hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest())


class CardSigner:
    """Signs the gateway's Agent Card with an ES256 key.

    Args:
        private_pem: The PEM of an EC P-256 private key.
    """

    def __init__(self, private_pem: bytes) -> None:
        key = serialization.load_pem_private_key(private_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
            raise ValueError("the A2A card key must be an EC P-256 private key (ES256)")
        self._key = key
        self.public_jwk: dict[str, Any] = json.loads(ECAlgorithm.to_jwk(key.public_key()))
        self.kid = _thumbprint(self.public_jwk)
        self.public_jwk.update({"kid": self.kid, "alg": "ES256", "use": "sig"})
        self._sign = create_agent_card_signer(
            private_pem, {"kid": self.kid, "alg": "ES256", "jku": None, "typ": "JOSE"}
        )

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str]) -> CardSigner:
        """The key at ``path``, made (0600, its JWK Set beside it) when missing."""
        path = Path(path)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(pem)
        signer = cls(path.read_bytes())
        jwks = path.with_name(path.stem + ".jwks.json")
        jwks.write_text(json.dumps({"keys": [signer.public_jwk]}, indent=2) + "\n")
        return signer

    def sign(self, card: AgentCard) -> AgentCard:
        """``card`` with this key's signature (any earlier signature replaced)."""
        signed = AgentCard()
        signed.CopyFrom(card)
        del signed.signatures[:]
        return self._sign(signed)


def load_card_keys(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JWK Set from ``path``: a JWK Set, one JWK, or a PEM public key.

    Raises:
        ValueError: none of those, or a key PyJWT cannot use.
    """
    data = Path(path).read_bytes()
    if data.lstrip().startswith(b"-----BEGIN"):
        key = serialization.load_pem_public_key(data)
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise ValueError(f"{path}: only EC public keys are read from PEM (give a JWK for others)")
        jwk = json.loads(ECAlgorithm.to_jwk(key))
        return {"keys": [{**jwk, "kid": _thumbprint(jwk)}]}
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{path}: neither a PEM public key nor JSON: {exc}") from None
    keys = doc.get("keys") if isinstance(doc, dict) and "keys" in doc else [doc]
    if not isinstance(keys, list) or not keys or not all(isinstance(k, dict) for k in keys):
        raise ValueError(f"{path}: no JWK in it")
    for k in keys:
        PyJWK(k)  # refuses what it cannot use
    return {"keys": keys}


def card_verifier(jwks: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A check of a fetched card (JSON) against ``jwks``; raises :class:`CardSignatureError`."""
    keys = [PyJWK(k) for k in jwks["keys"]]
    by_kid = {k.key_id: k for k in keys if k.key_id}

    def key_for(kid: str | None, _jku: str | None) -> Any:
        # the protected header's jku is never followed: keys come from the definition only
        if kid is not None and kid in by_kid:
            return by_kid[kid]
        if len(keys) == 1 and not keys[0].key_id:
            return keys[0]
        raise CardSignatureError(f"no trusted key with kid {kid!r}")

    verify = create_signature_verifier(_Provider(key_for), ALGORITHMS)

    def check(card: dict[str, Any]) -> None:
        try:
            verify(parse_agent_card(copy.deepcopy(card)))
        except (SignatureVerificationError, CardSignatureError) as exc:
            raise CardSignatureError(str(exc) or type(exc).__name__) from None

    return check


class _Provider:
    """A key provider whose "unknown kid" is a PyJWT error, so the SDK tries the next signature."""

    def __init__(self, find: Callable[[str | None, str | None], Any]) -> None:
        self._find = find

    def __call__(self, kid: str | None, jku: str | None) -> Any:
        from jwt.exceptions import PyJWKError

        try:
            return self._find(kid, jku)
        except CardSignatureError as exc:
            raise PyJWKError(str(exc)) from None
