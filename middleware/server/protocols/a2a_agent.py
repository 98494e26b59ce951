"""A remote A2A agent behind a contract (official ``a2a-sdk`` client).

The operator registers the agent by its card URL and gives (or confirms) the contract:
what it may do (``can_do``, ``cannot_do``), its schemas and SLO. The gateway fetches the
card, checks it (an A2A binding this gateway speaks, every ``can_do`` offered by one of its
skills — a contract may not claim more than the card does) and pins its SHA-256. Each call:

* the card is fetched again every ``recheck_seconds``; a card whose hash differs from the
  pin is not trusted: the call fails as TOOL_UNAVAILABLE (backups and breakers take over)
  and the contract is flagged for review (``contract.review`` in the audit log) until the
  operator confirms the new card. The contract is never widened from the card.
* the step goes out as one A2A message (text part: the instruction; data part: the step's
  input; ``metadata.agency``: task, step, trace, goal; ``traceparent``), and the task's
  final state comes back as the output or a typed failure:

  ==========================  ===================
  remote outcome              failure type
  ==========================  ===================
  completed                   (the output)
  failed, canceled            TOOL_ERROR
  rejected                    CAPABILITY_MISMATCH
  input-required              CONTEXT_AMBIGUITY
  auth-required               TOOL_UNAVAILABLE
  connection refused, 5xx     TOOL_UNAVAILABLE
  no answer within the SLO    TOOL_TIMEOUT
  JSON-RPC error, other 4xx   TOOL_ERROR
  ==========================  ===================
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import A2AClientError, A2AClientTimeoutError, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers import get_data_parts, get_text_parts
from a2a.types.a2a_pb2 import GetTaskRequest, Message, Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import A2AError

from ...agents import AgentRequest
from ...contracts import CapabilityContract, normalise_label
from ...errors import AgentFailure, InvalidInput, Problem, Unavailable
from ...pipeline import Agency
from .common import definition_hash, flag_for_review, remote_reply

__all__ = ["A2AAgent", "check_card", "fetch_card", "register_a2a_agent"]

_BINDINGS = ("JSONRPC", "HTTP+JSON")
_TERMINAL_FAILURES: dict[int, tuple[str, str]] = {
    TaskState.TASK_STATE_FAILED: ("TOOL_ERROR", "failed"),
    TaskState.TASK_STATE_CANCELED: ("TOOL_ERROR", "was canceled"),
    TaskState.TASK_STATE_REJECTED: ("CAPABILITY_MISMATCH", "refused the task"),
    TaskState.TASK_STATE_INPUT_REQUIRED: ("CONTEXT_AMBIGUITY", "asks for more input"),
    TaskState.TASK_STATE_AUTH_REQUIRED: ("TOOL_UNAVAILABLE", "asks for authentication"),
}


def card_url_of(url: str) -> str:
    """The card's address: ``url`` itself when it names a ``.json``, else the well-known path."""
    url = url.rstrip("/")
    return url if url.endswith(".json") else f"{url}{AGENT_CARD_WELL_KNOWN_PATH}"


async def fetch_card(url: str, *, http: httpx.AsyncClient | None = None) -> tuple[dict[str, Any], str]:
    """The card at ``url`` (a base URL or the card's own) and its SHA-256 (signatures left out).

    Raises:
        Unavailable: the card cannot be fetched (connection refused, HTTP error).
        InvalidInput: it is not a valid Agent Card.
    """
    target = card_url_of(url)
    client = http or httpx.AsyncClient(timeout=10)
    try:
        response = await client.get(target)
        response.raise_for_status()
        card = response.json()
    except httpx.HTTPError as exc:
        raise Unavailable(f"cannot fetch the A2A card at {target}: {exc}") from None
    except ValueError as exc:
        raise InvalidInput.single("card", f"{target} is not JSON: {exc}", what="A2A agent card") from None
    finally:
        if http is None:
            await client.aclose()
    if not isinstance(card, dict):
        raise InvalidInput.single("card", f"{target} is not a JSON object", what="A2A agent card")
    try:
        parse_agent_card(copy.deepcopy(card))
    except Exception as exc:
        raise InvalidInput.single(
            "card", f"{target} is not a valid Agent Card: {exc}", what="A2A agent card"
        ) from None
    return card, definition_hash({k: v for k, v in card.items() if k != "signatures"})


def check_card(
    card: dict[str, Any], contract: CapabilityContract, *, where: str = "", card_url: str = ""
) -> None:
    """Check that the card can serve ``contract``: a binding this gateway speaks, every
    ``can_do`` offered by a skill (by its id or one of its tags, compared as labels), and --
    given the ``card_url`` the definition names -- every interface of a binding it speaks on
    that URL's host.

    The definition's ``card_url`` is the admin's choice of host; the card is the remote's. The
    A2A client calls the URL of the card's interface, so a card pointing at another host would
    let the remote agent send the gateway (with the clients' tasks) anywhere.

    Raises:
        InvalidInput: naming each problem (``<where>.contract.can_do[i]`` ...).
    """
    prefix = f"{where}." if where else ""
    problems: list[Problem] = []
    interfaces = [i for i in card.get("supportedInterfaces", []) if isinstance(i, dict)]
    bindings = {i.get("protocolBinding", "") for i in interfaces}
    if not bindings & set(_BINDINGS):
        problems.append(
            Problem(
                f"{prefix}card_url",
                f"the card offers no binding this gateway speaks ({', '.join(_BINDINGS)})",
            )
        )
    host = _host(card_url)
    for n, interface in enumerate(interfaces):
        url = str(interface.get("url", ""))
        if card_url and interface.get("protocolBinding") in _BINDINGS and _host(url) != host:
            problems.append(
                Problem(
                    f"{prefix}card_url",
                    f"the card's supportedInterfaces[{n}].url {url[:200]!r} is not on {host!r}, the host "
                    "of card_url: the gateway calls only the host the definition names (give the "
                    "card_url on the agent's host)",
                )
            )
    offered: set[str] = set()
    for skill in card.get("skills", []):
        if isinstance(skill, dict):
            offered.add(normalise_label(str(skill.get("id", ""))))
            offered.update(normalise_label(str(t)) for t in skill.get("tags", []))
    listed = ", ".join(sorted(offered)) or "none"
    for i, action in enumerate(contract.can_do):
        if action not in offered:
            problems.append(
                Problem(
                    f"{prefix}contract.can_do[{i}]",
                    f"the card offers no skill {action!r} (skills and tags: {listed})",
                )
            )
    if problems:
        raise InvalidInput(problems, what="A2A agent")


def _host(url: str) -> str:
    """The host of ``url`` (lower case; ``""`` when it has none)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def _failure(exc: BaseException, key: str) -> AgentFailure:
    """A client error as a typed failure (connection and 5xx: unavailable; timeouts; other)."""
    cause = exc.__cause__
    if isinstance(exc, A2AClientTimeoutError) or isinstance(cause, httpx.TimeoutException):
        return AgentFailure("TOOL_TIMEOUT", "the A2A call timed out", cause=exc)
    if isinstance(cause, httpx.HTTPStatusError):
        status = cause.response.status_code
        kind = "TOOL_UNAVAILABLE" if status >= 500 or status == 429 else "TOOL_ERROR"
        return AgentFailure(kind, f"HTTP {status} from the A2A agent", cause=exc, context={"status": status})
    if isinstance(cause, httpx.TransportError):
        return AgentFailure("TOOL_UNAVAILABLE", f"cannot reach the A2A agent: {cause}", cause=exc)
    return AgentFailure("TOOL_ERROR", f"the A2A agent answered with an error: {exc}", cause=exc)


class A2AAgent:
    """The callable of a remote A2A agent (see the module docstring).

    Args:
        card_url: The agent's base URL.
        contract: The contract it serves under.
        card: The reviewed card (as fetched), pinned by ``pinned``.
        pinned: The reviewed card's SHA-256.
        recheck_seconds: How often the card is fetched again (0 = before every call).
        on_change: Awaited once when the card no longer matches the pin (the gateway flags
            the contract for review).
        verify: Checks the card's JWS signature (``card_signing.card_verifier``); a card it
            refuses fails like a changed card. None: signatures are not checked.
        clock: Monotonic seconds (injected in tests).
    """

    #: The call goes to another process (the agent's URL): a dispatch to it is always
    #: preceded by the dispatch barrier (``Dispatcher``), whatever its contract declares.
    leaves_process = True

    def __init__(
        self,
        card_url: str,
        contract: CapabilityContract,
        *,
        card: dict[str, Any],
        pinned: str,
        recheck_seconds: float = 30.0,
        on_change: Callable[[str, str], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        verify: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._verify = verify
        self._trusted = True
        self.card_url = card_url.rstrip("/")
        self.contract = contract
        self.pinned = pinned
        self.seen = pinned
        self.recheck_seconds = recheck_seconds
        self._on_change = on_change
        self._clock = clock
        self._checked = clock()
        self._http = httpx.AsyncClient(timeout=max(contract.slo_latency_ms / 1000 * 4, 10.0))
        config = ClientConfig(streaming=False, httpx_client=self._http)
        self._client = ClientFactory(config).create(parse_agent_card(copy.deepcopy(card)))
        self._flagged = False

    async def _check_card(self) -> None:
        now = self._clock()
        if self._trusted and now - self._checked < self.recheck_seconds:
            return
        card, digest = await fetch_card(self.card_url, http=self._http)
        self._checked, self.seen = now, digest
        why, review = "", "a2a_card_changed"
        if digest != self.pinned:
            why = f"its A2A card changed (pinned {self.pinned[:12]}, now {digest[:12]})"
        elif self._verify is not None:
            from .card_signing import CardSignatureError

            try:
                self._verify(card)
            except CardSignatureError as exc:
                why, review = f"its A2A card's signature does not verify ({exc})", "a2a_card_signature"
        self._trusted = not why
        if not why:
            return
        if not self._flagged and self._on_change is not None:
            self._flagged = True
            await self._on_change(
                self.pinned, digest if review == "a2a_card_changed" else f"bad signature: {why}"
            )
        raise AgentFailure(
            "TOOL_UNAVAILABLE",
            f"{why}; not trusted until the operator reviews it",
            context={"review": review, "pinned": self.pinned, "seen": digest},
        )

    async def __call__(self, request: AgentRequest) -> Any:
        key = self.contract.key
        try:
            await self._check_card()
        except Unavailable as exc:
            raise AgentFailure("TOOL_UNAVAILABLE", f"{exc}", cause=exc) from None
        message = Message(
            role=Role.ROLE_USER,
            message_id=uuid.uuid4().hex,
            parts=[Part(text=request.text or request.step)],
        )
        data = request.input
        if isinstance(data, dict) and data:
            from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped]
            from google.protobuf.struct_pb2 import Value  # type: ignore[import-untyped]

            message.parts.append(Part(data=ParseDict(_json_safe(data), Value())))
        meta = {
            "agency": {
                "task_id": request.task_id,
                "step": request.step,
                "trace_id": request.message.trace_id,
                "intention_trace": list(request.message.metadata.intention_trace),
            }
        }
        if request.traceparent:
            meta["traceparent"] = request.traceparent  # type: ignore[assignment]
        message.metadata.update(meta)
        try:
            task = await self._send(message)
            while isinstance(task, Task) and task.status.state in (
                TaskState.TASK_STATE_SUBMITTED,
                TaskState.TASK_STATE_WORKING,
            ):  # the pipeline's deadline bounds this (a Message is an answer: no task to poll)
                await asyncio.sleep(0.05)
                task = await self._client.get_task(GetTaskRequest(id=task.id))
        except (A2AClientError, A2AError) as exc:
            raise _failure(exc, key) from None
        except httpx.HTTPError as exc:
            raise AgentFailure("TOOL_UNAVAILABLE", f"{exc}", cause=exc) from None
        if isinstance(task, Message):
            return remote_reply(_output(list(task.parts)), _meta(task.metadata), where="message.metadata")
        if task is None:
            raise AgentFailure("TOOL_ERROR", "the A2A agent answered with neither a task nor a message")
        state = task.status.state
        if state == TaskState.TASK_STATE_COMPLETED:
            parts = [p for a in task.artifacts for p in a.parts] or list(task.status.message.parts)
            # the TTL the remote offers (artifact metadata "freshness_ttl"), which an answer in a
            # time-critical domain needs (docs/semantics.md)
            if task.artifacts:
                return remote_reply(
                    _output(parts), _meta(task.artifacts[0].metadata), where="artifacts[0].metadata"
                )
            return remote_reply(
                _output(parts), _meta(task.status.message.metadata), where="status.message.metadata"
            )
        kind, what = _TERMINAL_FAILURES.get(state, ("TOOL_ERROR", f"ended as {TaskState.Name(state)}"))
        said = " ".join(get_text_parts(list(task.status.message.parts)))
        raise AgentFailure(
            kind,
            f"the A2A agent {what}" + (f": {said}" if said else ""),
            context={"a2a_task_id": task.id, "a2a_state": TaskState.Name(state)},
        )

    async def _send(self, message: Message) -> Task | Message | None:
        last: Task | Message | None = None
        async for event in self._client.send_message(SendMessageRequest(message=message)):
            if event.HasField("task"):
                last = event.task
            elif event.HasField("message"):
                last = event.message
        return last

    async def aclose(self) -> None:
        await self._client.close()
        await self._http.aclose()


def _json_safe(data: dict[str, Any]) -> dict[str, Any]:
    import json

    safe: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return safe


def _meta(struct: Any) -> dict[str, Any]:
    """A protobuf Struct (metadata) as a dict."""
    from google.protobuf.json_format import MessageToDict

    meta: dict[str, Any] = MessageToDict(struct)
    return meta


def _output(parts: list[Part]) -> Any:
    """The first data part, else the text parts joined."""
    data = get_data_parts(parts)
    if data:
        return data[0]
    return "\n".join(get_text_parts(parts))


async def register_a2a_agent(
    agency: Agency,
    card_url: str,
    contract: CapabilityContract | dict[str, Any],
    *,
    card_sha256: str = "",
    recheck_seconds: float = 30.0,
    where: str = "",
    replace: bool = False,
    card_keys: dict[str, Any] | None = None,
) -> A2AAgent:
    """Fetch, check and pin the card at ``card_url``, and register the agent under ``contract``.

    Declared in the definition (``protocols.a2a_agents``), the agent is the admin's: its
    ``card_url`` needs no grant (grants bound what *agent tokens* declare about themselves).
    What the remote declares is held to that choice: its card may not claim more actions than
    its skills, nor send the gateway's calls to another host (see :func:`check_card`).

    The contract's ``endpoint`` becomes ``card_url`` (where the agent is). ``replace`` as for
    :meth:`Agency.register` (``agency serve`` replaces: every replica registers the same).

    ``card_keys`` (a JWK Set): the card must carry a JWS signature one of them verifies, now
    and at every later check (``card_signing``).

    Raises:
        Unavailable: the card cannot be fetched.
        InvalidInput: the card is not the reviewed one (``card_sha256``), its signature does not
            verify against ``card_keys``, or it does not offer what the contract claims.
    """
    contract = CapabilityContract.parse(contract, what="A2A agent contract")
    card, digest = await fetch_card(card_url)
    prefix = f"{where}." if where else ""
    if card_sha256 and digest != card_sha256:
        raise InvalidInput.single(
            f"{prefix}card_sha256",
            f"the card at {card_url} is not the reviewed one (pinned {card_sha256}, now {digest}): review it "
            "with 'agency a2a card URL' and update the pin",
            what="A2A agent",
        )
    verify = None
    if card_keys is not None:
        from .card_signing import CardSignatureError, card_verifier

        verify = card_verifier(card_keys)
        try:
            verify(card)
        except CardSignatureError as exc:
            raise InvalidInput.single(
                f"{prefix}card_keys",
                f"the card at {card_url} carries no signature these keys verify: {exc}",
                what="A2A agent",
            ) from None
    check_card(card, contract, where=where, card_url=card_url)
    contract = contract.model_copy(update={"endpoint": card_url.rstrip("/")})

    async def changed(pinned: str, seen: str) -> None:
        await flag_for_review(
            agency,
            contract.key,
            rule="a2a_card_changed",
            detail={"card_url": card_url, "pinned": pinned, "seen": seen},
        )

    agent = A2AAgent(
        card_url,
        contract,
        card=card,
        pinned=digest,
        recheck_seconds=recheck_seconds,
        on_change=changed,
        verify=verify,
    )
    await agency.register(contract, agent, replace=replace)
    return agent
