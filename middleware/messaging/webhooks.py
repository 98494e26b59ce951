"""Push delivery: an agent's mailbox POSTed to its webhook instead of being pulled.

An agent with ``webhooks`` in the definition file (``messaging.agents[i].webhooks``) is
notified by push. The gateway consumes the agent's mailbox itself (consumer
``webhook@<node>``; with Redis mailboxes each message goes to one gateway of the deployment)
and POSTs each message to the first webhook whose ``topics`` match (a webhook without
``topics`` takes everything else):

- **Signed body.** The body is the message as JSON (``message_id``, ``sender``, ``receiver``,
  ``kind``, ``topic``, ``content_type``, ``content``, ``params``, ``correlation_id``,
  ``trace_id``, ``created_at``, ``message_hash``, ``signature`` — the sender's own —,
  ``delivery``: the attempt number). Headers: ``Agency-Message-Id``, ``Agency-Timestamp`` (epoch
  seconds) and ``Agency-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the
  webhook's secret>`` (:func:`signature_header`, :func:`verify_signature`).
- **At least once.** A message is acknowledged only after a 2xx answer; a receiver may see it
  twice (retries, a gateway restarting mid-delivery) and dedupes on ``Agency-Message-Id``.
- **Retries** with exponential backoff and full jitter (``initial_backoff`` doubling up to
  ``max_backoff``); after ``max_attempts`` failed attempts the message is dead-lettered
  (``message.dead_lettered``, reason ``webhook <url> failed N attempts: <last error>``).
- **No silent failure.** Every attempt counts in ``agency_webhook_deliveries_total{agent,
  outcome}``; after ``failing_after`` consecutive failures the endpoint is *failing*: one
  ``webhook.failing`` audit record and a WARNING, ``agency_webhook_failing{agent} 1``, and the
  health service reports ``agency.webhooks/<agent>`` NOT_SERVING; the first success after that
  writes ``webhook.recovered`` and clears both.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field, field_validator

from .._model import Model
from ..audit import AuditRecord
from ..audit.record import Actors
from ..errors import InvalidInput, Unavailable
from .post_office import PostOffice, Received

__all__ = [
    "WEBHOOK_FAILING",
    "WEBHOOK_RECOVERED",
    "WebhookDispatcher",
    "WebhookSettings",
    "signature_header",
    "verify_signature",
    "webhook_body",
]

log = logging.getLogger("agency.messaging.webhooks")

#: Audit event: an endpoint failed ``failing_after`` times in a row.
WEBHOOK_FAILING = "webhook.failing"
#: Audit event: a failing endpoint answered 2xx again.
WEBHOOK_RECOVERED = "webhook.recovered"


class WebhookSettings(Model):
    """One webhook of an agent (``messaging.agents[i].webhooks[j]``)."""

    url: str = Field(min_length=8, max_length=2048, description="http(s) URL the messages are POSTed to.")
    secret_file: Path = Field(
        description="File holding the HMAC secret shared with the receiver (signs every body)."
    )
    topics: list[str] = Field(
        default_factory=list,
        description="Only topic messages of these topics (fnmatch patterns); empty: every message "
        "no other webhook of the agent takes.",
    )
    max_attempts: int = Field(default=8, ge=1, le=100, description="Attempts before dead-lettering.")
    initial_backoff: float = Field(default=0.5, gt=0, le=3600, description="Seconds before the 2nd attempt.")
    max_backoff: float = Field(default=60.0, gt=0, le=86400, description="Longest wait between attempts.")
    timeout: float = Field(default=10.0, gt=0, le=300, description="Seconds one POST may take.")
    failing_after: int = Field(
        default=3, ge=1, description="Consecutive failed attempts that make the endpoint 'failing'."
    )
    concurrency: int = Field(default=4, ge=1, le=256, description="POSTs in flight at once.")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return v

    def read_secret(self) -> bytes:
        """The secret's bytes (surrounding whitespace stripped).

        Raises:
            InvalidInput: on ``secret_file`` when it cannot be read or is empty.
        """
        try:
            secret = self.secret_file.read_bytes().strip()
        except OSError as exc:
            raise InvalidInput.single(
                "secret_file", f"cannot read {self.secret_file}: {exc.strerror}"
            ) from None
        if not secret:
            raise InvalidInput.single("secret_file", f"{self.secret_file} is empty")
        return secret

    def takes(self, received: Received) -> bool:
        """Whether this webhook takes ``received`` (a topic filter, or none)."""
        import fnmatch

        if not self.topics:
            return True
        return received.kind == "topic" and any(fnmatch.fnmatchcase(received.topic, t) for t in self.topics)


def webhook_body(received: Received, attempt: int) -> bytes:
    """The JSON body POSTed for ``received`` (compact, keys sorted)."""
    msg = received.message
    return json.dumps(
        {
            "message_id": msg.message_id,
            "sender": msg.sender,
            "receiver": msg.receiver,
            "kind": received.kind,
            "topic": received.topic,
            "content_type": received.content_type,
            "content": msg.content,
            "params": dict(received.params),
            "correlation_id": received.correlation_id,
            "trace_id": msg.trace_id,
            "created_at": msg.created_at.isoformat(),
            "trigger_turn": received.trigger_turn,
            "message_hash": received.message_hash,
            "signature": received.signature,
            "delivery": attempt,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def signature_header(secret: bytes, timestamp: str, body: bytes) -> str:
    """``sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">``: the ``Agency-Signature`` header."""
    mac = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={mac}"


def verify_signature(
    secret: bytes, headers: Mapping[str, str], body: bytes, *, max_age: float = 300.0
) -> bool:
    """What a receiver runs: the signature matches and the timestamp is at most ``max_age`` old."""
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp, signature = lowered.get("agency-timestamp", ""), lowered.get("agency-signature", "")
    try:
        fresh = abs(time.time() - float(timestamp)) <= max_age
    except ValueError:
        return False
    return fresh and hmac.compare_digest(signature, signature_header(secret, timestamp, body))


@dataclass
class _Endpoint:
    agent: str
    settings: WebhookSettings
    secret: bytes
    failures: int = 0  #: consecutive failed attempts
    failing: bool = False
    delivered: int = 0
    dead: int = 0


@dataclass
class _Agent:
    name: str
    endpoints: list[_Endpoint]
    inflight: set[str] = field(default_factory=set)


class WebhookDispatcher:
    """Consumes the mailboxes of agents with webhooks and POSTs their messages.

    Args:
        post_office: Whose mailboxes are consumed (its audit log records failures).
        webhooks: Agent name -> its webhooks (first match wins; see :class:`WebhookSettings`).
        consumer: This gateway's consumer name (``webhook@<node>``).
        client: The HTTP client (default: one owned by the dispatcher).
        on_attempt: Metric hook ``(agent, outcome)``; outcome ``delivered``, ``failed`` or
            ``dead_lettered``.
        on_failing: Hook ``(agent, failing)`` when an endpoint starts or stops failing (the
            health detail); may be a coroutine function.
        poll: Seconds each pull waits for a message.
    """

    def __init__(
        self,
        post_office: PostOffice,
        webhooks: Mapping[str, Sequence[WebhookSettings]],
        *,
        consumer: str = "webhook",
        client: httpx.AsyncClient | None = None,
        on_attempt: Callable[[str, str], None] | None = None,
        on_failing: Callable[[str, bool], Awaitable[None] | None] | None = None,
        poll: float = 1.0,
    ) -> None:
        self.post_office = post_office
        self.consumer = consumer
        self.on_attempt = on_attempt
        self.on_failing = on_failing
        self.poll = poll
        self._client = client or httpx.AsyncClient()
        self._owns_client = client is None
        self._agents = [
            _Agent(agent, [_Endpoint(agent, hook, hook.read_secret()) for hook in hooks])
            for agent, hooks in webhooks.items()
            if hooks
        ]
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    def failing(self) -> dict[str, list[str]]:
        """Agent -> URLs of its endpoints that are failing now (the health detail)."""
        return {
            a.name: [e.settings.url for e in a.endpoints if e.failing]
            for a in self._agents
            if any(e.failing for e in a.endpoints)
        }

    def stats(self) -> dict[str, dict[str, int]]:
        """Per agent: messages ``delivered`` and ``dead_lettered`` by this dispatcher."""
        return {
            a.name: {
                "delivered": sum(e.delivered for e in a.endpoints),
                "dead_lettered": sum(e.dead for e in a.endpoints),
            }
            for a in self._agents
        }

    async def start(self) -> None:
        """Start one consumer loop per agent."""
        for agent in self._agents:
            self._tasks.append(asyncio.create_task(self._run(agent), name=f"webhooks:{agent.name}"))

    async def stop(self) -> None:
        """Stop the loops (messages being delivered are left unacknowledged: redelivered later)."""
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._owns_client:
            await self._client.aclose()

    async def _run(self, agent: _Agent) -> None:
        limit = max(e.settings.concurrency for e in agent.endpoints)
        slots = asyncio.Semaphore(limit)
        running: set[asyncio.Task[None]] = set()
        transient: tuple[type[BaseException], ...] = (
            Unavailable,
            *getattr(self.post_office.transport, "transient_errors", ()),
        )
        delay = 0.0
        while not self._stopping.is_set():
            try:
                got = await self.post_office.pull_as(
                    agent.name, max_messages=limit, wait=self.poll, consumer=self.consumer
                )
            except transient as exc:  # the mailbox backend is down: back off, keep the loop
                if delay == 0.0:
                    log.warning(
                        "webhooks of %r: mailbox unavailable, retrying with backoff: %s", agent.name, exc
                    )
                delay = min(5.0, max(0.05, delay * 2))
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                continue
            delay = 0.0
            for received in got:
                message_id = received.message.message_id
                if message_id in agent.inflight:  # our own retry is still on it (visibility ran out)
                    continue
                await slots.acquire()
                agent.inflight.add(message_id)
                task = asyncio.create_task(self._push_safely(agent, received))
                running.add(task)

                def done(t: asyncio.Task[None], mid: str = message_id) -> None:
                    running.discard(t)
                    agent.inflight.discard(mid)
                    slots.release()

                task.add_done_callback(done)
            if not got and running:  # let deliveries progress before the next pull
                await asyncio.sleep(0)

    def _endpoint(self, agent: _Agent, received: Received) -> _Endpoint | None:
        for endpoint in agent.endpoints:
            if endpoint.settings.takes(received):
                return endpoint
        return None

    async def _push_safely(self, agent: _Agent, received: Received) -> None:
        try:
            await self._push(agent, received)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a backend error on ack / dead-letter: it is redelivered later
            log.warning(
                "webhook delivery of %s to %r left unacknowledged: %s",
                received.message.message_id,
                agent.name,
                exc,
            )

    async def _push(self, agent: _Agent, received: Received) -> None:
        endpoint = self._endpoint(agent, received)
        if endpoint is None:
            await self.post_office.dead_letter_received(
                agent.name, received, "no webhook of the agent takes this message (topics)"
            )
            return
        hook = endpoint.settings
        error = ""
        for attempt in range(1, hook.max_attempts + 1):
            error = await self._post(endpoint, received, attempt)
            if not error:
                endpoint.delivered += 1
                self._count(agent.name, "delivered")
                await self.post_office.ack_as(agent.name, [received.receipt])
                await self._succeeded(endpoint)
                return
            self._count(agent.name, "failed")
            await self._failed(endpoint, error, received)
            if attempt < hook.max_attempts:
                backoff = min(hook.max_backoff, hook.initial_backoff * 2 ** (attempt - 1))
                try:
                    await asyncio.wait_for(self._stopping.wait(), backoff * random.uniform(0.5, 1.0))
                    return  # stopping: leave it unacknowledged (redelivered later)
                except TimeoutError:
                    pass
        endpoint.dead += 1
        self._count(agent.name, "dead_lettered")
        await self.post_office.dead_letter_received(
            agent.name, received, f"webhook {hook.url} failed {hook.max_attempts} attempts: {error}"
        )

    async def _post(self, endpoint: _Endpoint, received: Received, attempt: int) -> str:
        """One attempt; the empty string on 2xx, else what went wrong."""
        body = webhook_body(received, attempt)
        timestamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            "agency-message-id": received.message.message_id,
            "agency-timestamp": timestamp,
            "agency-signature": signature_header(endpoint.secret, timestamp, body),
            "agency-delivery": str(attempt),
        }
        try:
            response = await self._client.post(
                endpoint.settings.url, content=body, headers=headers, timeout=endpoint.settings.timeout
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if 200 <= response.status_code < 300:
            return ""
        return f"HTTP {response.status_code}"

    def _count(self, agent: str, outcome: str) -> None:
        if self.on_attempt is not None:
            self.on_attempt(agent, outcome)

    async def _failed(self, endpoint: _Endpoint, error: str, received: Received) -> None:
        endpoint.failures += 1
        if endpoint.failing or endpoint.failures < endpoint.settings.failing_after:
            return
        endpoint.failing = True
        log.warning(
            "webhook of %r at %s is failing (%d attempts in a row; last: %s)",
            endpoint.agent,
            endpoint.settings.url,
            endpoint.failures,
            error,
        )
        await self._record(endpoint, WEBHOOK_FAILING, "failing", {"last_error": error}, received)
        await self._notify(endpoint.agent, True)

    async def _succeeded(self, endpoint: _Endpoint) -> None:
        failures, endpoint.failures = endpoint.failures, 0
        if not endpoint.failing:
            return
        endpoint.failing = False
        log.warning("webhook of %r at %s answers again", endpoint.agent, endpoint.settings.url)
        await self._record(endpoint, WEBHOOK_RECOVERED, "recovered", {"failed_attempts": failures}, None)
        await self._notify(endpoint.agent, False)

    async def _notify(self, agent: str, failing: bool) -> None:
        if self.on_failing is None:
            return
        result = self.on_failing(agent, failing)
        if result is not None:
            await result

    async def _record(
        self, endpoint: _Endpoint, event: str, outcome: str, detail: dict[str, Any], received: Received | None
    ) -> None:
        await self.post_office.audit.append(
            AuditRecord(
                event_type=event,
                component="messaging",
                actors=Actors(agent=endpoint.agent),
                trace_id=received.message.trace_id if received else "",
                outcome=outcome,
                rule="webhook",
                detail={
                    "url": endpoint.settings.url,
                    "consecutive_failures": endpoint.failures,
                    **({"message_id": received.message.message_id} if received else {}),
                    **detail,
                },
            )
        )
