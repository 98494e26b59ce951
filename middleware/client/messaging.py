"""The public Python client of ``agency.v1.MessageService``: an agent's way to talk to others.

An agent has credentials (:class:`AgentCredentials`): its name, its Ed25519 signing key and
its bearer token. ``agency messaging keygen`` makes them (or
:meth:`AgentCredentials.generate`), ``agency messaging enroll`` puts the public half (the
public key and the token's SHA-256) in the gateway's definition file. Then::

    from middleware.client.messaging import AgentCredentials, MessagingClient

    alice = AgentCredentials.load("agents", "alice")
    async with MessagingClient(alice, "127.0.0.1:50051") as client:
        await client.send("bob", {"task": "review", "pr": 7})

    async with MessagingClient(AgentCredentials.load("agents", "bob"), "127.0.0.1:50051") as bob:
        for message in await bob.pull(wait=5):
            print(message.message.sender, message.message.content)
            await bob.ack([message])

Every message is built as an SMF message (provenance, freshness, confidence), signed with
the agent's key over the message and how it travels (kind, topic, TTL, ``trigger_turn``,
params), and sent with the token. Failures raise the library's own errors
(:mod:`middleware.errors`: ``InvalidInput`` naming fields, ``PermissionDenied``,
``ResourceExhausted`` with ``details["retry_after_ms"]``, ``Unavailable`` ...), never raw
gRPC errors.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from .._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from ..errors import (
    AlreadyExists,
    InvalidInput,
    NotFound,
)
from ..messaging.identity import SendOptions, generate_key, public_key_b64, sign_message
from ..messaging.post_office import BROADCAST, Received, SendResult
from ..server.grpc_api.channel import open_channel
from ..server.grpc_api.convert import smf_from_pb, smf_to_pb
from ..server.settings import ClientTlsConfig, hash_token
from ..smf import SMFMessage
from ._errors import error_from_rpc

__all__ = [
    "DEFAULT_ADDRESS",
    "AgentCredentials",
    "AgentInfo",
    "MessagingClient",
    "error_from_rpc",  # the one mapping of failed calls to the library's errors (client package)
    "register_agent",
]

#: Where the client looks for the gateway without an address: ``$AGENCY_ADDRESS`` or this.
DEFAULT_ADDRESS = "127.0.0.1:50051"


@dataclass(frozen=True)
class AgentCredentials:
    """An agent's identity: its name, signing key and bearer token (keep them secret).

    On disk (:meth:`save` / :meth:`load`) they are two files in one directory, readable by
    their owner only: ``NAME.key`` (the Ed25519 private key, PEM PKCS#8) and ``NAME.token``.
    """

    name: str
    token: str = field(repr=False)
    key: Ed25519PrivateKey = field(repr=False)

    @classmethod
    def generate(cls, name: str) -> AgentCredentials:
        """Fresh throwaway credentials: a new key pair and a random token."""
        return cls(name, "agt_" + secrets.token_urlsafe(32), generate_key())

    @property
    def public_key(self) -> str:
        """The raw Ed25519 public key, base64 (what the definition file holds)."""
        return public_key_b64(self.key)

    @property
    def token_sha256(self) -> str:
        """The token's hex SHA-256 (what the definition file holds instead of the token)."""
        return hash_token(self.token)

    def enrollment(self, description: str = "") -> dict[str, str]:
        """The entry for ``messaging.agents`` in the definition file (no secret in it)."""
        entry = {"name": self.name, "public_key": self.public_key, "token_sha256": self.token_sha256}
        if description:
            entry["description"] = description
        return entry

    def save(self, directory: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write ``NAME.key`` and ``NAME.token`` under ``directory`` (mode 0600); returns the key path.

        Raises:
            AlreadyExists: the files exist and ``overwrite`` is false.
        """
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        key_path, token_path = folder / f"{self.name}.key", folder / f"{self.name}.token"
        if not overwrite and (key_path.exists() or token_path.exists()):
            raise AlreadyExists(f"credentials of {self.name!r} already exist in {folder}")
        pem = self.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        for path, data in ((key_path, pem), (token_path, self.token.encode() + b"\n")):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.chmod(path, 0o600)
        return key_path

    @classmethod
    def load(cls, directory: str | os.PathLike[str], name: str) -> AgentCredentials:
        """Read the credentials :meth:`save` wrote.

        Raises:
            NotFound: no such files. InvalidInput: a file that is not what it should be.
        """
        folder = Path(directory)
        key_path, token_path = folder / f"{name}.key", folder / f"{name}.token"
        try:
            pem, token = key_path.read_bytes(), token_path.read_text().strip()
        except FileNotFoundError as exc:
            raise NotFound(
                f"no credentials of {name!r} in {folder} ({exc.filename} is missing): "
                f"make them with 'agency messaging keygen {name} --dir {folder}'"
            ) from None
        try:
            key = load_pem_private_key(pem, password=None)
        except ValueError as exc:
            raise InvalidInput.single(str(key_path), f"not a PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise InvalidInput.single(str(key_path), "not an Ed25519 private key")
        if not token:
            raise InvalidInput.single(str(token_path), "empty token file")
        return cls(name, token, key)


class MessagingClient:
    """One agent's connection to a gateway's ``MessageService``.

    Args:
        credentials: The agent's name, key and token.
        address: ``host:port`` of the gateway; default ``$AGENCY_ADDRESS`` or 127.0.0.1:50051.
        tls: Verify the gateway with TLS (mutual TLS with a client certificate); None = plaintext.
        client_token: The gateway's own client token, when it requires one (``server.auth_tokens``);
            the agent's token then travels in ``agency-token``.
        timeout: Seconds each call may take (a call waits for the gateway to be ready meanwhile).
        channel: Use this channel instead of opening one (not closed by :meth:`close`).
    """

    def __init__(
        self,
        credentials: AgentCredentials,
        address: str | None = None,
        *,
        tls: ClientTlsConfig | None = None,
        client_token: str | None = None,
        timeout: float = 10.0,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        self.credentials = credentials
        self.address = address or os.environ.get("AGENCY_ADDRESS") or DEFAULT_ADDRESS
        self.timeout = timeout
        self._owns_channel = channel is None
        self._channel = channel or open_channel(self.address, tls=tls, token=client_token)
        self._stub = messages_pb2_grpc.MessageServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = (("agency-token", credentials.token),)

    async def __aenter__(self) -> MessagingClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel (if this client opened it)."""
        if self._owns_channel:
            await self._channel.close()

    # ------------------------------------------------------------------ building and signing
    def message(
        self,
        receiver: str,
        content: Any,
        *,
        freshness_ttl: float = 3600.0,
        confidence: float = 1.0,
        source: str | None = None,
        reliability: float = 1.0,
        intention_trace: Sequence[str] = (),
        trace_id: str | None = None,
    ) -> SMFMessage:
        """An SMF message from this agent, created now (``intention_trace`` defaults to
        ``["MESSAGING_<agent>"]``: pass the user's goal ids when the message serves one).

        Raises:
            InvalidInput: naming each bad field.
        """
        data: dict[str, Any] = {
            "sender": self.credentials.name,
            "receiver": receiver,
            "content": content,
            "created_at": datetime.now(UTC),
            "metadata": {
                "provenance": {"source": source or self.credentials.name, "reliability_score": reliability},
                "freshness_ttl": freshness_ttl,
                "confidence_score": confidence,
                # the goal ids it serves (required): by default this agent's conversation
                "intention_trace": list(intention_trace) or [f"MESSAGING_{self.credentials.name}"],
            },
        }
        if trace_id:
            data["trace_id"] = trace_id
        return SMFMessage.parse(data, what="SMF message")

    def sign(self, message: SMFMessage, options: SendOptions | None = None) -> str:
        """This agent's signature over ``message`` and how it travels."""
        return sign_message(self.credentials.key, message, options)

    # ------------------------------------------------------------------ calls
    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=self.timeout, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    async def send(
        self,
        receiver: str,
        content: Any,
        *,
        ttl: float | None = None,
        trigger_turn: bool = False,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        correlation_id: str = "",
        **smf: Any,
    ) -> SendResult:
        """Send ``content`` to ``receiver``'s mailbox (``smf``: see :meth:`message`).

        ``content_type`` tells the receiver how to read the content; ``correlation_id``
        threads a conversation (answer a message with its ``message_id``).

        Raises:
            InvalidInput, NotFound, PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable.
        """
        msg = content if isinstance(content, SMFMessage) else self.message(receiver, content, **smf)
        options = SendOptions(
            ttl=ttl,
            trigger_turn=trigger_turn,
            params=dict(params or {}),
            content_type=content_type,
            correlation_id=correlation_id,
        )
        request = messages_pb2.SendMessageRequest(
            message=smf_to_pb(msg),
            signature=self.sign(msg, options),
            trigger_turn=trigger_turn,
            params_json=json.dumps(dict(params)) if params else "",
            content_type=content_type,
            correlation_id=correlation_id,
        )
        if ttl is not None:
            request.ttl_seconds = ttl
        return _sent(await self._call(self._stub.Send, request))

    async def publish(
        self,
        topic: str,
        content: Any,
        *,
        ttl: float | None = None,
        trigger_turn: bool = False,
        content_type: str = "application/json",
        correlation_id: str = "",
        **smf: Any,
    ) -> SendResult:
        """Publish to ``topic``: a copy to each subscriber (none: ``recipients`` is empty)."""
        msg = self.message(topic, content, **smf)
        options = SendOptions(
            kind="topic",
            topic=topic,
            ttl=ttl,
            trigger_turn=trigger_turn,
            content_type=content_type,
            correlation_id=correlation_id,
        )
        request = messages_pb2.SendMessageRequest(
            message=smf_to_pb(msg),
            signature=self.sign(msg, options),
            topic=topic,
            trigger_turn=trigger_turn,
            content_type=content_type,
            correlation_id=correlation_id,
        )
        if ttl is not None:
            request.ttl_seconds = ttl
        return _sent(await self._call(self._stub.Send, request))

    async def broadcast(
        self,
        content: Any,
        *,
        ttl: float | None = None,
        content_type: str = "application/json",
        correlation_id: str = "",
        **smf: Any,
    ) -> SendResult:
        """A copy to every agent but this one."""
        msg = self.message(BROADCAST, content, **smf)
        options = SendOptions(
            kind="broadcast", ttl=ttl, content_type=content_type, correlation_id=correlation_id
        )
        request = messages_pb2.SendMessageRequest(
            message=smf_to_pb(msg),
            signature=self.sign(msg, options),
            broadcast=True,
            content_type=content_type,
            correlation_id=correlation_id,
        )
        if ttl is not None:
            request.ttl_seconds = ttl
        return _sent(await self._call(self._stub.Send, request))

    async def pull(
        self,
        *,
        max_messages: int = 10,
        wait: float = 0.0,
        consumer: str | None = None,
        message_type: str = "",
    ) -> list[Received]:
        """Up to ``max_messages`` from this agent's mailbox; ``wait`` seconds (<= 60) for one;
        ``message_type`` ``private`` or ``public`` takes only those (the others stay).

        Each must be acknowledged (:meth:`ack`) once processed, else it comes back after the
        gateway's visibility timeout.
        """
        request = messages_pb2.PullRequest(
            max_messages=max_messages, wait_seconds=wait, consumer=consumer or "", message_type=message_type
        )
        saved, self.timeout = self.timeout, self.timeout + wait
        try:
            reply = await self._call(self._stub.Pull, request)
        finally:
            self.timeout = saved
        return [_received(m) for m in reply.messages]

    async def browse(
        self, *, max_messages: int = 10, cursor: str = "", message_type: str = ""
    ) -> tuple[list[Received], str]:
        """Read the mailbox without taking anything (read and unread messages, oldest first);
        returns a page and the cursor of the next one ("" at the end)."""
        request = messages_pb2.PullRequest(
            max_messages=max_messages, include_read=True, cursor=cursor, message_type=message_type
        )
        reply = await self._call(self._stub.Pull, request)
        return [_received(m) for m in reply.messages], reply.next_cursor

    async def ack(self, messages: Sequence[Received | str]) -> int:
        """Acknowledge processed messages (or their receipts); returns how many were pending."""
        receipts = [m if isinstance(m, str) else m.receipt for m in messages]
        reply = await self._call(self._stub.Ack, messages_pb2.AckRequest(receipts=receipts))
        return int(reply.acknowledged)

    async def find_agents(self, capability: str = "", *, topic: str = "") -> list[AgentInfo]:
        """Agents whose name and description contain every word of ``capability`` and, with
        ``topic``, that publish or subscribe to it (with when each was last seen)."""
        request = messages_pb2.FindAgentsRequest(capability=capability, topic=topic)
        reply = await self._call(self._stub.FindAgents, request)
        return [_info(a) for a in reply.agents]

    async def deregister(self) -> bool:
        """Remove this (registered) agent: its token stops working on every gateway."""
        reply = await self._call(self._stub.Deregister, messages_pb2.DeregisterAgentRequest())
        return bool(reply.removed)

    async def subscribe(
        self, topics: Sequence[str] = (), *, batch: int = 10, consumer: str | None = None
    ) -> AsyncIterator[Received]:
        """Subscribe to ``topics`` (may be none), then this agent's mailbox as a stream.

        Streamed messages still need :meth:`ack`. The stream ends when the caller stops
        iterating (or on an error, raised as an ``AgencyError``).
        """
        call = self._stub.Subscribe(
            messages_pb2.SubscribeRequest(topics=list(topics), batch=batch, consumer=consumer or ""),
            metadata=self._metadata,
            wait_for_ready=True,
        )
        try:
            async for pb in call:
                yield _received(pb)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
        finally:
            call.cancel()


@dataclass(frozen=True)
class AgentInfo:
    """An agent as ``FindAgents`` / ``Register`` describe it."""

    name: str
    description: str
    publishes: tuple[str, ...]
    subscribes: tuple[str, ...]
    status: str
    registered_by: str
    last_seen: float | None  #: epoch seconds of its last call (None: never)


def _info(pb: messages_pb2.AgentInfo) -> AgentInfo:
    return AgentInfo(
        pb.name,
        pb.description,
        tuple(pb.publishes),
        tuple(pb.subscribes),
        pb.status,
        pb.registered_by,
        pb.last_seen or None,
    )


async def register_agent(
    name: str,
    address: str | None = None,
    *,
    description: str = "",
    publishes: Sequence[str] = (),
    subscribes: Sequence[str] = (),
    key: Ed25519PrivateKey | None = None,
    tls: ClientTlsConfig | None = None,
    client_token: str | None = None,
    timeout: float = 10.0,  # noqa: ASYNC109 - the gRPC deadline of the call
) -> tuple[AgentCredentials, AgentInfo]:
    """Register an agent with a gateway (``MessageService.Register``; the gateway's
    ``messaging.registration.mode`` must allow it) and return its credentials (a new key pair
    unless ``key`` is given, and the token the gateway issued, shown this once) and its entry.

    Raises:
        FailedPrecondition: registration is closed. PermissionDenied: admin mode without the
            admin role, or a topic the ACLs refuse. AlreadyExists: the name is taken.
            InvalidInput: naming each bad field.
    """
    key = key or generate_key()
    target = address or os.environ.get("AGENCY_ADDRESS") or DEFAULT_ADDRESS
    channel = open_channel(target, tls=tls, token=client_token)
    try:
        stub = messages_pb2_grpc.MessageServiceStub(channel)  # type: ignore[no-untyped-call]
        request = messages_pb2.RegisterAgentRequest(
            name=name,
            description=description,
            public_key=public_key_b64(key),
            publishes=list(publishes),
            subscribes=list(subscribes),
        )
        try:
            reply = await stub.Register(request, timeout=timeout, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None
    finally:
        await channel.close()
    return AgentCredentials(name, reply.token, key), _info(reply.agent)


def _sent(reply: messages_pb2.SendMessageResponse) -> SendResult:
    return SendResult(
        reply.message_id,
        tuple(reply.recipients),
        reply.message_hash,
        reply.trace_link,
        quarantined=reply.quarantined,  # held by moderation: not "no subscribers"
    )


def _received(pb: messages_pb2.ReceivedMessage) -> Received:
    kind = pb.kind if pb.kind in ("direct", "topic", "broadcast") else "direct"
    return Received(
        receipt=pb.receipt,
        message=smf_from_pb(pb.message),
        kind=kind,  # type: ignore[arg-type]
        topic=pb.topic,
        trigger_turn=pb.trigger_turn,
        delivery_count=pb.delivery_count,
        expires_at=pb.expires_at,
        params=json.loads(pb.params_json) if pb.params_json else {},
        signature=pb.signature,
        ttl=pb.ttl_seconds if pb.HasField("ttl_seconds") else None,
        content_type=pb.content_type,
        correlation_id=pb.correlation_id,
        message_hash=pb.message_hash,
    )
