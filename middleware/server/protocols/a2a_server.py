"""The gateway as an A2A server (official ``a2a-sdk``): every A2A message is a governed task.

One Agent Card for the gateway, at ``/.well-known/agent-card.json``: its skills are the
actions of the registered contracts (rebuilt from the catalog on every fetch), because the
gateway, not the client, chooses the agent — a card per capability would let a client pick
an agent and skip the router. Bindings: JSON-RPC at ``/a2a/jsonrpc`` and HTTP+JSON under
``/a2a/rest`` (both from the SDK's Starlette routes).

A message becomes a :class:`~middleware.tasks.TaskRequest`: its text parts are the request
text, its data parts the structured input, and ``metadata.agency`` (the governance extension,
:data:`GOVERNANCE_EXTENSION`) names the goal, steps, constraints, skill, session and trace;
a W3C ``traceparent`` in the metadata continues the caller's trace. The provenance source is
``a2a:<client>``. The task runs through :meth:`Agency.submit` under the A2A task id, and its
state maps onto the A2A states: completed (the output as an artifact), input-required (a
clarification or a human handover: the packet as a data part), rejected (a refusal),
failed, canceled. A follow-up message on an input-required task resumes it
(:meth:`Agency.resume`): a data part ``{"answer": ID}``, ``{"input": {...}}`` (the fields a plan
step asked for) or ``{"decision": {...}}``, or the option id (or the one asked field's value)
as text. A message with only the user's words runs the plan of the goal the intake agent
anchors (docs/semantics.md, "Plans"). ``SendStreamingMessage`` streams the task's events
(the stream gRPC ``WatchTask`` follows) as ``working`` status updates before the final one, and
``SubscribeToTask`` follows a running task from any replica (:mod:`.a2a_stream`).

Callers authenticate with the A2A security scheme ``bearer`` (HTTP bearer), checked against
the gateway's token file: the same clients and roles as gRPC. Everything is audited by the
pipeline as for any task, under the client's name.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any

from a2a.auth.user import User
from a2a.helpers import get_data_parts, get_message_text, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    HTTPAuthSecurityScheme,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ...access import Permission, Principal, authorize
from ...errors import AgencyError, InvalidInput, NotFound, PermissionDenied, Unauthenticated, Unavailable
from ...pipeline import Agency
from ...refusals import RefusalAggregator
from ...task_events import OUTCOME, TaskEvent
from ...tasks import Outcome
from ...tasks import TaskState as AgencyState
from ..identity import Identities
from .a2a_stream import StatusStream
from .card_signing import CardSigner
from .common import (
    FRESHNESS_TTL,
    Callers,
    answer_ttl,
    http_source,
    outcome_data,
    outcome_text,
    task_request,
)
from .task_follow import follow_while

__all__ = [
    "GOVERNANCE_EXTENSION",
    "JSONRPC_PATH",
    "REST_PATH",
    "GovernedExecutor",
    "build_a2a_app",
    "gateway_card",
]

log = logging.getLogger("agency.a2a")

#: The extension a client uses to name goals, steps and constraints (``metadata.agency``).
GOVERNANCE_EXTENSION = "urn:agency-middleware:a2a:governance:v1"
JSONRPC_PATH = "/a2a/jsonrpc"
REST_PATH = "/a2a/rest"
_PRINCIPAL = "agency.principal"

_STATE: dict[AgencyState, Any] = {  # A2A TaskState values
    AgencyState.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    AgencyState.INPUT_REQUIRED: TaskState.TASK_STATE_INPUT_REQUIRED,
    AgencyState.INTERRUPTED: TaskState.TASK_STATE_INPUT_REQUIRED,  # resume (a follow-up) or cancel
    AgencyState.REJECTED: TaskState.TASK_STATE_REJECTED,
    AgencyState.FAILED: TaskState.TASK_STATE_FAILED,
    AgencyState.CANCELED: TaskState.TASK_STATE_CANCELED,
}
#: A2A states of a task waiting for input (another door may answer it).
_WAITING = (TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED)
#: States a task may still take a message in.
_OPEN = (*_WAITING, TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


async def gateway_card(agency: Agency, url: str, *, auth: bool, name: str = "Agency Middleware") -> AgentCard:
    """The gateway's Agent Card: one skill per action of the registered contracts.

    Args:
        agency: Whose catalog the skills come from (stale contracts are left out).
        url: The gateway's A2A base URL (``http://host:port``).
        auth: Whether callers must send a bearer token (declared as the ``bearer`` scheme).
        name: The card's name.
    """
    actions: dict[str, dict[str, Any]] = {}
    for entry in sorted(await agency.catalog.all(), key=lambda e: e.key):
        # the card is public: a tenant's agents are never listed on it (only those without a
        # tenant, and those shared with every tenant)
        if entry.stale or not entry.contract.routable_for(""):
            continue
        contract = entry.contract
        for action in contract.can_do:
            skill = actions.setdefault(action, {"contracts": [], "tags": set()})
            about = f" ({contract.description})" if contract.description else ""
            skill["contracts"].append(f"{contract.key}{about}")
            skill["tags"].update(contract.tags)
    skills = [
        AgentSkill(
            id=action,
            name=action,
            description=f"Routed by contract to: {'; '.join(info['contracts'])}",
            tags=sorted(info["tags"]) or [action],
            input_modes=["text/plain", "application/json"],
            output_modes=["application/json", "text/plain"],
        )
        for action, info in sorted(actions.items())
    ]
    return _card(url, [_ANY_SKILL, *skills], auth=auth, name=name)


#: The skill every card has: a request that names none is routed from its text.
_ANY_SKILL = AgentSkill(
    id="governed_task",
    name="governed_task",
    description="Any request: the router picks the capability from the text (or metadata.agency.skill, "
    "goal_id, steps) and refuses what no contract allows.",
    tags=["governance"],
    input_modes=["text/plain", "application/json"],
    output_modes=["application/json", "text/plain"],
)


def _card(url: str, skills: list[AgentSkill], *, auth: bool, name: str = "Agency Middleware") -> AgentCard:
    card = AgentCard(
        name=name,
        description="Governance gateway: every message is a task routed by capability contract, "
        "checked against its goal, handled by typed failure semantics and audited. Name a skill, "
        f"a goal or steps in metadata.agency ({GOVERNANCE_EXTENSION}).",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{url}{JSONRPC_PATH}", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=f"{url}{REST_PATH}", protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extensions=[
                AgentExtension(
                    uri=GOVERNANCE_EXTENSION,
                    description="metadata.agency: goal_id, goal, steps, input, constraints, skill, "
                    "user_id, session_id, trace_id, freshness_ttl, confidence_score, reliability_score",
                    required=False,
                )
            ],
        ),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["application/json", "text/plain"],
        skills=skills,
    )
    if auth:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="the gateway's client tokens (same as gRPC)"
                )
            )
        )
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


class _Caller(User):
    """The authenticated client, as the SDK sees it (its task store scopes tasks by it)."""

    def __init__(self, principal: Principal | None) -> None:
        self.principal = principal

    @property
    def is_authenticated(self) -> bool:
        return self.principal is not None

    @property
    def user_name(self) -> str:
        # the SDK's task store scopes tasks by this name: a tenant's client of the same name as
        # another tenant's is another user
        p = self.principal
        if p is None:
            return ""
        return f"{p.tenant}/{p.name}" if p.tenant else p.name


class _ContextBuilder(DefaultServerCallContextBuilder):
    def build_user(self, request: Request) -> User:
        return _Caller(request.scope.get(_PRINCIPAL))


class _BearerGate:
    """ASGI middleware: a known bearer token on every request but the Agent Card's (401)."""

    def __init__(self, app: ASGIApp, callers: Callers) -> None:
        self.app, self.callers = app, callers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == AGENT_CARD_WELL_KNOWN_PATH:
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        try:
            scope[_PRINCIPAL] = await self.callers.from_header(
                header, source=http_source(scope), operation=f"A2A {scope['method']} {scope['path']}"[:120]
            )
        except (Unauthenticated, Unavailable) as exc:
            response = JSONResponse(
                {"error": "UNAUTHENTICATED", "message": str(exc)},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="agency"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _StrictParams:
    """ASGI middleware: a JSON-RPC request's ``params`` must be exactly what its method takes.

    The SDK parses params leniently (unknown fields dropped, an unknown enum value read as
    "unspecified": ``ListTasks`` with a bad ``status`` listed every task). A2A 1.0 §3.3.2 asks
    servers to validate all input, so the params are parsed strictly here first and a problem is
    answered ``-32602`` (invalid params) naming it, before the SDK sees the request.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != JSONRPC_PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []  # bounded by the listener's body limit (http_guard.limit_body)
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        problem, request_id = _params_problem(body)
        if problem:
            error = InvalidParamsError(message=f"Invalid params: {problem}")
            response = JSONResponse(
                {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": error.message}}
            )
            await response(scope, receive, send)
            return
        replay = [{"type": "http.request", "body": body, "more_body": False}]

        async def replayed() -> Any:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)


def _params_problem(body: bytes) -> tuple[str, Any]:
    """What is wrong with a JSON-RPC request's params (``""``: nothing, or not for us to say --
    malformed JSON-RPC is the SDK's to answer), and the request's id."""
    from google.protobuf.json_format import ParseDict, ParseError  # type: ignore[import-untyped]

    try:
        request = json.loads(body)
    except ValueError:
        return "", None
    if not isinstance(request, dict):
        return "", None
    model = JsonRpcDispatcher.METHOD_TO_MODEL.get(str(request.get("method", "")))
    params = request.get("params", {})
    if model is None or not isinstance(params, dict):
        return "", request.get("id")
    try:
        ParseDict(params, model(), ignore_unknown_fields=False)
    except ParseError as exc:
        return str(exc)[:500], request.get("id")
    return "", request.get("id")


def _principal(context: RequestContext | ServerCallContext) -> Principal | None:
    call = context.call_context if isinstance(context, RequestContext) else context
    user = call.user
    return user.principal if isinstance(user, _Caller) else None


class GovernedExecutor(AgentExecutor):
    """Runs each A2A request through the governance pipeline (see the module docstring)."""

    def __init__(self, agency: Agency) -> None:
        self.agency = agency

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id or "", context.context_id or ""
        if message is None or not task_id:
            raise InvalidParamsError(message="message: required")
        principal = _principal(context)
        current = context.current_task
        if current is not None and current.status.state not in _OPEN:
            # finished here or elsewhere (the store follows the governed task): no more messages
            raise UnsupportedOperationError(
                message=f"task {task_id} is in terminal state {TaskState.Name(current.status.state)}: it "
                "takes no more messages"
            )
        if current is not None:  # a follow-up: the task's own context
            context_id = current.context_id
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            await self._submit(context, message, principal, event_queue, updater)
        else:
            await self._resume(context, message, principal, updater)

    async def _submit(
        self,
        context: RequestContext,
        message: Message,
        principal: Principal | None,
        event_queue: EventQueue,
        updater: TaskUpdater,
    ) -> None:
        task_id = context.task_id or ""
        try:
            if principal is not None:  # any known token may submit (as gRPC Submit)
                authorize(principal, Permission.CALL, operation="A2A/SendMessage")
            request = _request(message, context.metadata, principal, task_id)
            if request.goal_id:
                self.agency.get_goal(request.goal_id)  # NotFound before the task exists
        except NotFound as exc:
            raise InvalidParamsError(message=f"metadata.agency.goal_id: {exc}") from None
        except InvalidInput as exc:
            await self.agency.record_rejection(exc, component="a2a")
            raise InvalidParamsError(
                message=str(exc), data={"problems": [str(p) for p in exc.problems]}
            ) from None
        except PermissionDenied as exc:
            raise InvalidParamsError(message=str(exc)) from None
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context.context_id or "",
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message],
            )
        )
        client = principal.name if principal is not None else ""
        tenant = principal.tenant if principal is not None else ""
        stream = StatusStream(task_id, updater.context_id)
        outcome = await self._follow(
            task_id, self.agency.submit(request, client=client, tenant=tenant), stream, event_queue
        )
        if outcome is not None:
            await _report(outcome, updater, stream.carried())

    async def _resume(
        self, context: RequestContext, message: Message, principal: Principal | None, updater: TaskUpdater
    ) -> None:
        task_id = context.task_id or ""
        answer, decision, given = _answer(message)
        stream = StatusStream(task_id, updater.context_id)
        outcome = await self._follow(
            task_id,
            self.agency.resume(task_id, answer=answer, decision=decision, input=given, caller=principal),
            stream,
            updater.event_queue,
            updater,
            after=await _last_seq(self.agency, task_id),
        )
        if outcome is not None:
            await _report(outcome, updater, stream.carried())

    async def _follow(
        self,
        task_id: str,
        work: Awaitable[Outcome],
        stream: StatusStream,
        queue: EventQueue,
        updater: TaskUpdater | None = None,
        *,
        after: int = 0,
    ) -> Outcome | None:
        """Run ``work`` and stream the task's events (after ``after``) as status updates.

        A refused resume (an answer that is not an option, another client's task) leaves
        the task waiting: it is told as input-required again, with the reason.
        """
        updater = updater or TaskUpdater(queue, task_id, stream.context_id)

        async def tell(event: TaskEvent) -> None:
            update = stream.update(event) if event.type != OUTCOME else None
            if update is not None:
                await queue.enqueue_event(update)

        try:
            outcome = await follow_while(self.agency, task_id, work, tell, after=after)
        except (InvalidInput, PermissionDenied) as exc:
            try:
                current = await self.agency.tasks.get(task_id)
            except NotFound:  # refused before the task existed (a submit)
                raise InvalidParamsError(message=str(exc)) from None
            if current.state is AgencyState.INPUT_REQUIRED:
                pending = current.outcome()
                text = f"Not accepted: {exc}. {outcome_text(pending)}"
                await updater.requires_input(
                    updater.new_agent_message([new_text_part(text), new_data_part(outcome_data(pending))])
                )
                return None
            raise InvalidParamsError(message=str(exc)) from None
        except NotFound as exc:  # a goal named in metadata that is not registered
            raise InvalidParamsError(message=str(exc)) from None
        except AgencyError as exc:  # e.g. the task is not waiting (another resume won)
            raise InvalidParamsError(message=str(exc)) from None
        return outcome

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel a task waiting for input or interrupted (the handler refuses running ones
        before this)."""
        task_id = context.task_id or ""
        outcome = await self.agency.cancel(task_id, reason="canceled through A2A", caller=_principal(context))
        updater = TaskUpdater(event_queue, task_id, context.context_id or "")
        await _report(outcome, updater)


async def _last_seq(agency: Agency, task_id: str) -> int:
    """The seq of the task's last event before a resume (0: none, or the log cannot say)."""
    try:
        last = await agency.events.last(task_id)
    except Exception:  # following is a courtesy: the resume goes on
        return 0
    return last.seq if last is not None else 0


def _name(context: RequestContext) -> str:
    p = _principal(context)
    return p.name if p is not None else "a2a client"


def _request(message: Message, metadata: dict[str, Any], principal: Principal | None, task_id: str) -> Any:
    """The task request for a new A2A message (``metadata`` is the request's, then the message's)."""
    meta = {**_struct(message), **metadata}
    governance = meta.get("agency") or {}
    if not isinstance(governance, dict):
        raise InvalidInput.single("metadata.agency", "must be an object", what="A2A message")
    governance = dict(governance)
    traceparent = str(meta.get("traceparent", ""))
    if traceparent and "trace_id" not in governance:
        parts = traceparent.split("-")
        if len(parts) != 4 or len(parts[1]) != 32:
            raise InvalidInput.single("metadata.traceparent", "not a W3C traceparent", what="A2A message")
        governance["trace_id"] = parts[1]
    data: dict[str, Any] = {}
    for i, item in enumerate(get_data_parts(list(message.parts))):
        if not isinstance(item, dict):
            raise InvalidInput.single(f"message.parts[{i}].data", "must be an object", what="A2A message")
        data.update(item)
    text = get_message_text(message, " ").strip()
    if not text:
        raise InvalidInput.single(
            "message.parts", "no text part: the request text is required", what="A2A message"
        )
    client = principal.name if principal is not None else "anonymous"
    governance.setdefault("user_id", client)
    return task_request(
        text, governance, data=data, source=f"a2a:{client}", where="metadata.agency", task_id=task_id
    )


def _struct(message: Message) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    meta: dict[str, Any] = MessageToDict(message.metadata)
    return meta


def _answer(message: Message) -> tuple[str | None, dict[str, Any] | None, dict[str, Any] | None]:
    """The answer (option id, or an asked field's value), human decision or asked input a
    follow-up message carries."""
    for item in get_data_parts(list(message.parts)):
        if isinstance(item, dict) and "decision" in item:
            return None, dict(item["decision"]), None
        if isinstance(item, dict) and isinstance(item.get("input"), dict):
            return None, None, dict(item["input"])
        if isinstance(item, dict) and "answer" in item:
            return str(item["answer"]), None, None
    return get_message_text(message, " ").strip() or None, None, None


async def _report(
    outcome: Outcome, updater: TaskUpdater, carried: list[dict[str, Any]] | None = None
) -> None:
    """The final (or waiting) A2A status of ``outcome``; a completed output as an artifact.
    ``carried``: the task's events not told yet (``agency_events``)."""
    data = outcome_data(outcome)
    if outcome.state is AgencyState.COMPLETED:
        output = outcome.output
        meta: dict[str, Any] = {"trace_id": outcome.trace_id, "goal_id": outcome.goal_id}
        ttl = answer_ttl(outcome)
        if ttl is not None:  # a caller in a time-critical domain needs it (docs/semantics.md)
            meta[FRESHNESS_TTL] = ttl
        await updater.add_artifact(
            [new_data_part(output) if output is not None else new_text_part("")],
            name="output",
            metadata=meta,
        )
    parts: list[Part] = [new_text_part(outcome_text(outcome)), new_data_part(data)]
    status: dict[str, Any] = {"agency_state": outcome.state.value, "trace_id": outcome.trace_id}
    if carried:
        status["agency_events"] = carried
    await updater.update_status(
        _STATE[outcome.state], message=updater.new_agent_message(parts), metadata=status
    )


class _SyncedTaskStore(TaskStore):
    """The SDK's task store, kept in step with the governed task ("one id in both worlds").

    A task waiting for input can be answered elsewhere -- gRPC ``Resume`` on any replica, MCP
    ``resume_task``, the operator console -- and only this binding's executor writes the A2A
    store. So whenever an A2A task that waits is read (``GetTask``, ``ListTasks``, a follow-up
    message), the governed task is looked up, and if it has moved on to a final state the A2A
    task takes it, with its output as the artifact, before it is returned: it no longer waits
    forever, and a follow-up to a finished task is refused as for any finished task.
    """

    def __init__(self, agency: Agency, inner: TaskStore) -> None:
        self._agency, self._inner = agency, inner

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self._inner.save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        task = await self._inner.get(task_id, context)
        return await self._synced(task, context) if task is not None else None

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        page = await self._inner.list(params, context)
        for i, task in enumerate(page.tasks):
            fresh = await self._synced(task, context)
            if fresh is not task:
                page.tasks[i].CopyFrom(fresh)
        if params.status and any(t.status.state != params.status for t in page.tasks):
            return await self._inner.list(params, context)  # a task that moved on left the filter
        return page

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._inner.delete(task_id, context)

    async def _synced(self, task: Task, context: ServerCallContext) -> Task:
        if task.status.state not in _WAITING:
            return task
        try:
            run = await self._agency.tasks.get(task.id)
        except NotFound:
            return task
        if not run.state.terminal:
            return task
        outcome = run.outcome()
        fresh = Task()
        fresh.CopyFrom(task)
        if outcome.state is AgencyState.COMPLETED and not any(a.name == "output" for a in task.artifacts):
            fresh.artifacts.append(_output_artifact(outcome))
        fresh.status.CopyFrom(
            TaskStatus(
                state=_STATE[outcome.state],
                message=Message(
                    role=Role.ROLE_AGENT,
                    message_id=uuid.uuid4().hex,
                    task_id=task.id,
                    context_id=task.context_id,
                    parts=[new_text_part(outcome_text(outcome)), new_data_part(outcome_data(outcome))],
                ),
            )
        )
        fresh.status.timestamp.GetCurrentTime()
        await self._inner.save(fresh, context)
        return fresh


def _output_artifact(outcome: Outcome) -> Artifact:
    """A completed outcome's output as the A2A artifact ``output`` (with trace, goal and TTL)."""
    output = outcome.output
    meta: dict[str, Any] = {"trace_id": outcome.trace_id, "goal_id": outcome.goal_id}
    ttl = answer_ttl(outcome)
    if ttl is not None:  # a caller in a time-critical domain needs it (docs/semantics.md)
        meta[FRESHNESS_TTL] = ttl
    artifact = Artifact(
        artifact_id=uuid.uuid4().hex,
        name="output",
        parts=[new_data_part(output) if output is not None else new_text_part("")],
    )
    artifact.metadata.update(meta)
    return artifact


class _GovernedHandler(DefaultRequestHandler):
    """The SDK's handler, but a running task is not cancelable (only a waiting or interrupted
    one is): the pipeline has no safe point to stop a step an agent is running. A governed task
    this gateway's A2A store does not hold (it came through a gateway that died, and was taken
    over here) is canceled in the pipeline and answered from its outcome."""

    def __init__(self, agency: Agency, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._agency = agency

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        try:
            outcome = await self._agency.get_task(params.id, caller=_principal(context))
        except (NotFound, PermissionDenied):
            task: Task | None = await super().on_cancel_task(params, context)  # the SDK's not-found
            return task
        if not outcome.state.terminal and outcome.state not in _CANCELABLE:
            raise TaskNotCancelableError(
                message=f"task {params.id} is {outcome.state.value}: only a task waiting for input or "
                "interrupted can be canceled (a running step is not interrupted)"
            )
        if outcome.state.terminal or await self.task_store.get(params.id, context) is not None:
            canceled: Task | None = await super().on_cancel_task(params, context)
            return canceled
        outcome = await self._agency.cancel(
            params.id, reason="canceled through A2A", caller=_principal(context)
        )
        text = outcome_text(outcome)
        return Task(
            id=outcome.task_id,
            context_id=outcome.task_id,
            status=TaskStatus(
                state=_STATE[outcome.state],
                message=Message(
                    role=Role.ROLE_AGENT,
                    message_id=outcome.task_id + ":canceled",
                    parts=[new_text_part(text), new_data_part(outcome_data(outcome))],
                ),
            ),
        )

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any, None]:
        """Follow a running task from now on, on any replica: the task (first), then its events
        as status updates, until it waits for input or ends (the final status, its artifact)."""
        principal = _principal(context)
        try:
            outcome = await self._agency.get_task(params.id, caller=principal)
        except (NotFound, PermissionDenied):
            raise TaskNotFoundError from None
        if outcome.state.terminal:
            raise UnsupportedOperationError(
                message=f"task {params.id} is {outcome.state.value}: it has ended"
            )
        known = await self.task_store.get(params.id, context)  # this replica's A2A record, if any
        context_id = str(getattr(known, "context_id", "") or params.id)
        last = await self._agency.events.last(params.id)  # where it is now (the store: where it last stopped)
        after = last.seq if last is not None else 0
        now = AgencyState(last.state) if last is not None and last.state else outcome.state
        yield Task(id=params.id, context_id=context_id, status=TaskStatus(state=_a2a(now)))
        stream = StatusStream(params.id, context_id)
        async for event in self._agency.watch(params.id, after=after, caller=principal):
            if event.type != OUTCOME:
                update = stream.update(event)
                if update is not None:
                    yield update
                continue
            final = event.final or await self._agency.get_task(params.id, caller=principal)
            told = _Collected()
            await _report(final, TaskUpdater(told, params.id, context_id), stream.carried())
            for update in told.events:
                yield update
            return  # a wait for input ends an A2A stream, as an end does


#: Governed states an A2A cancel ends (a running step has no safe point to stop).
_CANCELABLE = frozenset({AgencyState.INPUT_REQUIRED, AgencyState.INTERRUPTED})


class _Collected(EventQueue):
    """What a TaskUpdater enqueues, kept in order (the final updates of a subscription)."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def enqueue_event(self, event: Any) -> None:
        self.events.append(event)


def _a2a(state: AgencyState) -> Any:
    """The A2A state of a task in ``state`` (working for the pipeline's working states)."""
    if state is AgencyState.SUBMITTED:
        return TaskState.TASK_STATE_SUBMITTED
    return _STATE.get(state, TaskState.TASK_STATE_WORKING)


def build_a2a_app(
    agency: Agency,
    *,
    url: str,
    token_hashes: Identities | Mapping[str, Principal] | None = None,
    card_signer: CardSigner | None = None,
) -> Starlette:
    """The A2A application of ``agency``: Agent Card, JSON-RPC and HTTP+JSON bindings.

    Args:
        agency: The governance core every message goes through.
        url: The base URL clients reach it at (written into the card).
        token_hashes: Who each bearer token is: the gateway's
            :class:`~middleware.server.identity.Identities` (token file, OIDC issuer) or its token
            file (``ServerConfig.token_hashes()``); None = no tokens required. Requests refused
            for their token are audited per source and minute (:mod:`middleware.refusals`).
        card_signer: Signs the card served (JWS, ``card_signing``); None = unsigned.
    """
    callers = Callers(
        token_hashes, refusals=RefusalAggregator(agency.audit.append, node=agency.config.node_id)
    )
    base = _card(url, [_ANY_SKILL], auth=callers.required)  # what the handler checks: capabilities
    handler = _GovernedHandler(
        agency,
        agent_executor=GovernedExecutor(agency),
        task_store=_SyncedTaskStore(agency, InMemoryTaskStore()),
        agent_card=base,
    )

    async def current_card(_: AgentCard) -> AgentCard:
        card = await gateway_card(agency, url, auth=callers.required)
        return card_signer.sign(card) if card_signer is not None else card

    builder = _ContextBuilder()
    routes = [
        *create_agent_card_routes(base, card_modifier=current_card),
        *create_jsonrpc_routes(handler, JSONRPC_PATH, context_builder=builder),
        *create_rest_routes(handler, context_builder=builder, path_prefix=REST_PATH),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_StrictParams)  # inside the bearer gate: only known callers are parsed
    app.add_middleware(_BearerGate, callers=callers)
    return app
