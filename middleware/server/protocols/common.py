"""What the A2A and MCP bindings share: callers from bearer tokens, task requests built from
protocol metadata, outcomes told as text, definition pins, and an in-process HTTP server.

The bindings are transports: like ``middleware.server.grpc_api`` they translate, authenticate and
then call :class:`middleware.Agency`; governance stays in the core.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
from collections.abc import Mapping
from typing import Any

import uvicorn

from ...access import Principal
from ...agents import MAX_FRESHNESS_TTL, AgentReply
from ...errors import AgentFailure, InvalidInput, Unauthenticated, Unavailable
from ...pipeline import Agency
from ...refusals import RefusalAggregator
from ...smf import utcnow
from ...tasks import Outcome, TaskRequest, TaskState
from ..http_guard import ConnectionGuard, limit_body, uvicorn_options
from ..http_limits import HttpLimits
from ..identity import Identities

__all__ = [
    "FRESHNESS_TTL",
    "GOVERNANCE_META",
    "REQUEST_FIELDS",
    "Callers",
    "HttpServer",
    "answer_ttl",
    "definition_hash",
    "flag_for_review",
    "http_source",
    "outcome_data",
    "outcome_text",
    "remote_reply",
    "task_request",
]

#: The MCP ``_meta`` key under which a caller names goal, session, trace (keys of
#: ``REQUEST_FIELDS``) and a governed result carries its task, trace and TTL.
GOVERNANCE_META = "agency/governance"

#: The key under which an answer's remaining freshness (seconds) travels: A2A artifact
#: metadata, MCP ``_meta["agency/governance"]``.
FRESHNESS_TTL = "freshness_ttl"

#: The task request fields a protocol caller may set (through A2A metadata or MCP ``_meta``).
REQUEST_FIELDS = frozenset(
    {
        "goal_id",
        "goal",
        "input",
        "constraints",
        "steps",
        "user_id",
        "session_id",
        "trace_id",
        "task_id",
        "freshness_ttl",
        "confidence_score",
        "reliability_score",
        "skill",
    }
)


def definition_hash(definition: Mapping[str, Any]) -> str:
    """SHA-256 of a definition (an Agent Card, an MCP tool) as canonical JSON: sorted keys,
    no whitespace. Two definitions that say the same thing hash the same."""
    body = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


class Callers:
    """Who a bearer token belongs to: the same token file, OIDC issuer and roles as the gRPC gateway.

    Args:
        token_hashes: :class:`~middleware.server.identity.Identities`, or ``{sha256_hex_of_token:
            principal}`` (see :meth:`middleware.server.settings.ServerConfig.token_hashes`); None =
            tokens off, every caller is anonymous.
        refusals: Audits the requests refused for their token, per source and interval, as the
            gRPC gateway does (:mod:`middleware.refusals`); None = not audited.
    """

    def __init__(
        self,
        token_hashes: Identities | Mapping[str, Principal | str] | None,
        *,
        refusals: RefusalAggregator | None = None,
    ) -> None:
        self.identities = token_hashes if isinstance(token_hashes, Identities) else Identities(token_hashes)
        self.required = self.identities.required
        self.refusals = refusals

    async def from_header(
        self, authorization: str | None, *, source: str = "", operation: str = ""
    ) -> Principal | None:
        """The principal of an ``Authorization: Bearer <token>`` header (None: tokens off).

        Raises:
            Unauthenticated: tokens are required and the header is missing, unknown, or a JWT
                the issuer's checks refuse (audited when ``refusals`` is set).
            Unavailable: the issuer's keys cannot be fetched (audited the same way).
        """
        if not self.required:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("missing bearer token (send 'Authorization: Bearer <token>')")
            return await self.identities.authenticate(token.strip())
        except (Unauthenticated, Unavailable) as exc:
            if self.refusals is not None:
                await self.refusals.refused(source or "unknown", operation, exc)
            raise


def http_source(scope: Mapping[str, Any]) -> str:
    """The source of an ASGI request for the refusal records: its client address without the port."""
    client = scope.get("client")
    return f"http:{client[0]}" if client else "http:unknown"


def task_request(
    text: str,
    governance: Mapping[str, Any],
    *,
    data: Mapping[str, Any] | None,
    source: str,
    where: str,
    task_id: str = "",
) -> TaskRequest:
    """The task request for a protocol message.

    Args:
        text: The request text (the message's text parts).
        governance: What the caller says about the task (``where`` names it in errors):
            keys of :data:`REQUEST_FIELDS`; ``skill`` is the action asked for.
        data: Structured input from the message (merged under ``governance["input"]``).
        source: The provenance source (``a2a:<client>``, ``mcp:<client>``).
        where: How the caller names ``governance`` (e.g. ``metadata.agency``).
        task_id: The protocol's task id, if it has one (A2A), used as the task's id.

    Raises:
        InvalidInput: unknown keys or a request that does not validate, naming each field.
    """
    unknown = sorted(set(governance) - REQUEST_FIELDS)
    if unknown:
        raise InvalidInput.single(
            f"{where}.{unknown[0]}",
            f"unknown key; known: {', '.join(sorted(REQUEST_FIELDS))}",
            what="task request",
        )
    fields = dict(governance)
    constraints = dict(fields.pop("constraints", None) or {})
    skill = fields.pop("skill", None)
    if skill:
        constraints.setdefault("action", skill)
    reliability = fields.pop("reliability_score", 1.0)
    given_input = fields.pop("input", None) or {}
    if not isinstance(given_input, Mapping):
        raise InvalidInput.single(f"{where}.input", "must be an object", what="task request")
    request: dict[str, Any] = {
        **fields,
        "text": text,
        "input": {**(data or {}), **given_input},
        "constraints": constraints,
        "provenance": {"source": source, "reliability_score": reliability},
    }
    if task_id:
        request["task_id"] = task_id
    return TaskRequest.parse(request, what=f"task request ({where})")


def outcome_text(outcome: Outcome) -> str:
    """What happened, in one paragraph a chat client can show."""
    state = outcome.state
    if state is TaskState.COMPLETED:
        verdict = outcome.goal_verdict
        goal = f" Goal {outcome.goal_id} verified." if verdict is not None and verdict.passed else ""
        return f"Completed.{goal}"
    if state is TaskState.INPUT_REQUIRED:
        pending = outcome.pending
        if pending.get("kind") == "human_handover":
            return f"Waiting for a human decision: {outcome.reason or pending.get('reason', '')}".strip()
        if pending.get("kind") == "missing_input":
            fields = ", ".join(str(f) for f in pending.get("fields") or [])
            return f"{pending.get('question', 'Input required.')} (answer with: {fields})".strip()
        options = ", ".join(f"{o.get('id')} ({o.get('label', '')})" for o in pending.get("options", []))
        return f"{pending.get('question', 'Input required.')} Answer with one of: {options}".strip()
    if state is TaskState.INTERRUPTED:
        return f"Interrupted: {outcome.reason}".strip()
    if state is TaskState.REJECTED:
        return f"Refused: {outcome.reason}"
    if state is TaskState.CANCELED:
        return f"Canceled: {outcome.reason}" if outcome.reason else "Canceled."
    return f"Failed: {outcome.reason}" if outcome.reason else "Failed."


def outcome_data(outcome: Outcome) -> dict[str, Any]:
    """The outcome as JSON-safe data (the fields a protocol client needs to act on it)."""
    dumped = outcome.model_dump(mode="json")
    keep = (
        "task_id",
        "trace_id",
        "state",
        "a2a_state",
        "output",
        "goal_id",
        "goal_verdict",
        "failed_stage",
        "reason",
        "pending",
        "routing",
        "audit_index",
    )
    data = {k: dumped[k] for k in keep}
    data["failures"] = [
        {"type": f["type"], "step": f["step"], "agent": f["agent"], "detail": f["detail"]}
        for f in dumped["failures"]
    ]
    return data


def answer_ttl(outcome: Outcome) -> float | None:
    """Seconds the completed output stays fresh from now (its step's TTL), or None (no expiry).

    A caller in a time-critical domain (finance, logistics) needs it: an answer there without
    a TTL is refused (docs/semantics.md)."""
    done = [s for s in outcome.steps if s.status == "completed"]
    if not done or done[-1].fresh_until is None:
        return None
    return max(0.0, (done[-1].fresh_until - utcnow()).total_seconds())


def remote_reply(output: Any, meta: Mapping[str, Any] | None, *, where: str) -> Any:
    """A remote agent's answer as an SMF reply: ``output`` with the TTL the remote offers in
    ``meta`` (``freshness_ttl``, seconds), or ``output`` alone when it offers none.

    Raises:
        AgentFailure: SCHEMA_VIOLATION naming ``where``.freshness_ttl when the TTL is not a
            number of seconds from 0 to ten years.
    """
    ttl = (meta or {}).get(FRESHNESS_TTL)
    if ttl is None:
        return output
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not 0 <= ttl <= MAX_FRESHNESS_TTL
        or ttl != ttl  # NaN
    ):
        raise AgentFailure(
            "SCHEMA_VIOLATION",
            f"{where}.{FRESHNESS_TTL}: must be seconds from 0 to {MAX_FRESHNESS_TTL:.0f}, not {ttl!r}",
            context={"field": f"{where}.{FRESHNESS_TTL}"},
        )
    return AgentReply(output=output, freshness_ttl=float(ttl))


class HttpServer:
    """An ASGI app served by uvicorn on this event loop, on a socket bound up front (so port
    0 gives a known port before the first request), bounded by ``limits`` (connections per
    source and in total, header and body deadlines, body size: :mod:`..http_guard`).

    Args:
        app: The ASGI application (or None: given later with :meth:`set_app`).
        address: ``host:port``.
        name: What it is, for errors and logs.
        limits: The listener's limits (default: :class:`HttpLimits` defaults).
    """

    def __init__(self, app: Any, address: str, *, name: str, limits: HttpLimits | None = None) -> None:
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]")
        self.name = name
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP
        # (proto 0 left Nagle on: ~40 ms per HTTP response against delayed ACKs)
        self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self._socket.bind((self.host, int(port)))
        except OSError as exc:
            self._socket.close()
            from ...errors import Unavailable

            raise Unavailable(f"cannot serve {name} on {address}: {exc}") from None
        self.port: int = self._socket.getsockname()[1]
        self.app = app
        self.limits = limits or HttpLimits()
        self.guard = ConnectionGuard(self.limits)
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    def set_app(self, app: Any) -> None:
        """Serve ``app`` (an app that needs this server's URL is built after the bind)."""
        self.app = app

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Serve in the background; returns once uvicorn has started (or raises its error)."""
        config = uvicorn.Config(
            limit_body(self.app, self.limits.max_body_bytes),
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
            **uvicorn_options(self.guard),
        )
        self._server = server = uvicorn.Server(config)
        self._task = asyncio.create_task(server.serve(sockets=[self._socket]))
        while not server.started:  # uvicorn has no started event: a bounded poll
            if self._task.done():
                self._task.result()
                raise RuntimeError(f"{self.name} stopped while starting")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        """Stop serving (in-flight requests get uvicorn's graceful shutdown)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._socket.close()


async def flag_for_review(agency: Agency, agent: str, *, rule: str, detail: dict[str, Any]) -> None:
    """Audit that ``agent``'s definition changed under its contract: the contract is flagged
    for review (``contract.review``, outcome ``flagged``), and nothing is widened."""
    from ...audit import AuditRecord
    from ...audit.record import AuditEventType

    await agency.audit.append(
        AuditRecord.model_validate(
            {
                "event_type": AuditEventType.CONTRACT_REVIEW.value,
                "node": agency.config.node_id,
                "component": "protocols",
                "actors": {"agent": agent},
                "rule": rule,
                "outcome": "flagged",
                "detail": detail,
            }
        )
    )
