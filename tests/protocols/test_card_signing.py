"""A2A Agent Card JWS signatures: the gateway's card is signed (checked with the a2a-sdk's own
resolver and verifier), and a remote agent's card is verified against the keys the definition
gives — a bad signature fails like a changed card."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from jwt import PyJWK

from middleware import Agency, FailureType, InvalidInput
from middleware import TaskState as AgencyState
from middleware.server.protocols.a2a_agent import register_a2a_agent
from middleware.server.protocols.a2a_server import build_a2a_app
from middleware.server.protocols.card_signing import CardSigner, load_card_keys
from middleware.server.protocols.common import HttpServer
from middleware.server.protocols.serving import _card_keys

from .test_a2a_agent import CONTRACT, RemoteAgent, quote


class SignedRemote(RemoteAgent):
    """The remote agent, its card signed with ``signer`` (None: unsigned)."""

    def __init__(self, signer: CardSigner | None) -> None:
        super().__init__()
        self.signer = signer

    def card(self) -> AgentCard:
        card = super().card()
        return self.signer.sign(card) if self.signer is not None else card


def jwks_file(tmp_path: Path, signer: CardSigner, name: str = "remote.jwks.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"keys": [signer.public_jwk]}))
    return path


async def test_the_gateways_card_is_signed_and_verifies_with_the_sdks_verifier(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "a2a-card.pem"
    signer = CardSigner.load_or_create(key)
    assert key.stat().st_mode & 0o777 == 0o600
    published = json.loads((tmp_path / "keys" / "a2a-card.jwks.json").read_text())
    assert published["keys"][0]["kid"] == signer.kid and "d" not in published["keys"][0]  # public only
    assert CardSigner.load_or_create(key).kid == signer.kid  # the same key on the next start

    agency = Agency()
    server = HttpServer(None, "127.0.0.1:0", name="a2a")
    server.set_app(build_a2a_app(agency, url=server.url, card_signer=signer))
    await server.start()
    try:
        keys = {k["kid"]: PyJWK(k) for k in published["keys"]}
        verifier = create_signature_verifier(lambda kid, _jku: keys[kid], ["ES256"])
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, server.url).get_agent_card(signature_verifier=verifier)
            assert card.name and len(card.signatures) == 1
            other = CardSigner.load_or_create(tmp_path / "other.pem")
            wrong = {other.kid: PyJWK(other.public_jwk)}
            with pytest.raises(InvalidSignaturesError):
                await A2ACardResolver(http, server.url).get_agent_card(
                    signature_verifier=create_signature_verifier(
                        lambda _kid, _jku: wrong[other.kid], ["ES256"]
                    )
                )
    finally:
        await server.stop()
        await agency.close()


async def test_a_remote_card_signed_with_a_trusted_key_serves(tmp_path: Path) -> None:
    signer = CardSigner.load_or_create(tmp_path / "remote.pem")
    agency = Agency()
    async with SignedRemote(signer) as remote:
        agent = await register_a2a_agent(
            agency,
            remote.url,
            CONTRACT,
            card_keys=load_card_keys(jwks_file(tmp_path, signer)),
            recheck_seconds=0,
        )
        out = await quote(agency)
        await agent.aclose()
    assert out.state is AgencyState.COMPLETED, out.failures


@pytest.mark.parametrize("signed_by", ["nobody", "another key"])
async def test_an_unsigned_or_wrongly_signed_card_is_refused_at_registration(
    tmp_path: Path, signed_by: str
) -> None:
    trusted = CardSigner.load_or_create(tmp_path / "trusted.pem")
    signer = None if signed_by == "nobody" else CardSigner.load_or_create(tmp_path / "other.pem")
    agency = Agency()
    async with SignedRemote(signer) as remote:
        with pytest.raises(InvalidInput) as refused:
            await register_a2a_agent(
                agency,
                remote.url,
                CONTRACT,
                card_keys=load_card_keys(jwks_file(tmp_path, trusted)),
                where="protocols.a2a_agents[0]",
            )
    assert refused.value.field == "protocols.a2a_agents[0].card_keys"
    assert "no signature these keys verify" in str(refused.value)
    with pytest.raises(Exception, match="quote_agent"):  # not registered
        await agency.catalog.get("quote_agent@1.0.0")


async def test_a_card_whose_signature_stops_verifying_fails_like_a_changed_card(tmp_path: Path) -> None:
    signer = CardSigner.load_or_create(tmp_path / "remote.pem")
    agency = Agency()
    async with SignedRemote(signer) as remote:
        agent = await register_a2a_agent(
            agency,
            remote.url,
            CONTRACT,
            card_keys=load_card_keys(jwks_file(tmp_path, signer)),
            recheck_seconds=0,
        )
        assert (await quote(agency)).state is AgencyState.COMPLETED
        remote.signer = CardSigner.load_or_create(tmp_path / "attacker.pem")  # same content, other key
        out = await quote(agency)
        await agent.aclose()
    assert out.state is not AgencyState.COMPLETED
    assert out.failures[0].type is FailureType.TOOL_UNAVAILABLE
    assert "signature does not verify" in out.failures[0].detail
    assert len(remote.executor.seen) == 1  # nothing dispatched to the agent with the bad card
    flagged = [
        (r.outcome, r.rule)
        for _, r in agency.audit.records()
        if r.event_type == "contract.review" and r.actors.agent == "quote_agent@1.0.0"
    ]
    assert flagged == [("flagged", "a2a_card_changed")]


def test_card_keys_are_read_from_a_jwks_a_jwk_or_a_pem_and_bad_files_named(tmp_path: Path) -> None:
    signer = CardSigner.load_or_create(tmp_path / "k.pem")
    one = tmp_path / "one.jwk"
    one.write_text(json.dumps(signer.public_jwk))
    assert load_card_keys(one)["keys"][0]["kid"] == signer.kid
    from cryptography.hazmat.primitives import serialization

    pem = tmp_path / "k.pub.pem"
    public = serialization.load_pem_private_key((tmp_path / "k.pem").read_bytes(), None).public_key()
    pem.write_bytes(
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    assert load_card_keys(pem)["keys"][0]["kid"] == signer.kid
    junk = tmp_path / "junk"
    junk.write_text("hello")
    with pytest.raises(InvalidInput) as bad:
        _card_keys(junk, "protocols.a2a_agents[2].card_keys")
    assert bad.value.field == "protocols.a2a_agents[2].card_keys"
