"""Governed capabilities as MCP tools (official ``mcp`` SDK, low-level server): stdio and
Streamable HTTP.

Tools, rebuilt from the catalog on every ``tools/list``:

* one tool per action of the registered contracts (``warranty_claim``, ...): its
  ``inputSchema`` is the input schema of the contract that does it (several contracts with
  different schemas: an ``anyOf`` of them), its ``outputSchema`` the contract's output schema
  when that is an object schema. A call is a governed task routed to that action, its
  arguments the task input.
* ``governed_task``: any request by text, with a goal, steps and input (the whole pipeline,
  e.g. the warranty case).
* ``resume_task``: the answer to a clarification (``answer``) or a human decision
  (``decision``) for a task that stopped for input; or nothing, to continue an interrupted task.
* ``cancel_task``: cancel a task waiting for input or interrupted (``task_id``, ``reason``).

A call whose request carries a progress token (``_meta.progressToken``) gets the task's events
as they happen (the stream gRPC ``WatchTask`` follows) as ``notifications/progress``: ``progress``
the event's seq, ``message`` the event in words (an agent's streamed text as it comes).

A completed task is the tool result (``structuredContent`` the output). Everything else is a
tool error (``isError``) whose text says why and whose structured content is the outcome:
a refusal (rejected), a failure, and a task waiting for input. A clarification (a choice among
options) is first asked through MCP elicitation when the client has it and the connection
has a back channel; otherwise (or declined) the error gives the question, its options and the
task id, to answer with ``resume_task``. The caller's identity on Streamable HTTP is the bearer token (the
gateway's token file, same roles as gRPC); on stdio it is the local user who started the
process. ``_meta["agency/governance"]`` names a goal, session or trace for any tool.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from starlette.applications import Starlette

from ...access import Permission, Principal, authorize, refusal_record
from ...contracts import CapabilityContract
from ...errors import AgencyError, InvalidInput, PermissionDenied, Unauthenticated, Unavailable
from ...pipeline import Agency
from ...refusals import RefusalAggregator
from ...task_events import TaskEvent, describe
from ...tasks import Outcome, TaskState
from ..identity import Identities
from .common import (
    FRESHNESS_TTL,
    GOVERNANCE_META,
    Callers,
    answer_ttl,
    http_source,
    outcome_data,
    outcome_text,
    task_request,
)
from .task_follow import follow_while

__all__ = ["GOVERNANCE_META", "build_mcp_http_app", "build_mcp_server", "serve_stdio"]

log = logging.getLogger("agency.mcp")

GOVERNED_TASK = "governed_task"
RESUME_TASK = "resume_task"
CANCEL_TASK = "cancel_task"
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_.-]")

_GOVERNED_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["text"],
    "properties": {
        "text": {"type": "string", "minLength": 1, "description": "The request."},
        "goal_id": {"type": "string", "description": "A registered goal to verify the result against."},
        "input": {"type": "object", "description": "Structured input for the agents."},
        "steps": {
            "type": "array",
            "description": "Sub-tasks, each routed and verified on its own: {name, action?, tags?, text?}.",
            "items": {"type": "object", "required": ["name"]},
        },
        "constraints": {"type": "object", "description": "Explicit constraints (action, tags ...)."},
    },
    "additionalProperties": False,
}
_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["task_id"],
    "properties": {
        "task_id": {"type": "string", "minLength": 1},
        "answer": {"type": "string", "description": "The id of the chosen option (a clarification)."},
        "input": {"type": "object", "description": "The fields a plan step asked for (missing input)."},
        "decision": {"type": "object", "description": "A human decision: {action, agent?, output?, note?}."},
    },
    "additionalProperties": False,
}


_CANCEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["task_id"],
    "properties": {
        "task_id": {"type": "string", "minLength": 1},
        "reason": {"type": "string", "maxLength": 4000, "description": "Why (kept in the audit log)."},
    },
    "additionalProperties": False,
}


def tool_name(action: str) -> str:
    """The MCP tool name of an action (MCP names allow ``A-Za-z0-9_.-``)."""
    return _TOOL_NAME.sub("_", action)


async def governed_tools(agency: Agency, tenant: str = "") -> tuple[list[types.Tool], dict[str, str]]:
    """The tools of ``agency``'s catalog now, and ``{tool name: action}``: the contracts a task
    of ``tenant`` may be routed to (its own and those shared with it)."""
    by_action: dict[str, list[CapabilityContract]] = {}
    for entry in sorted(await agency.catalog.all(), key=lambda e: e.key):
        if not entry.stale and entry.contract.routable_for(tenant):
            for action in entry.contract.can_do:
                by_action.setdefault(action, []).append(entry.contract)
    tools = [
        types.Tool(
            name=GOVERNED_TASK,
            description="Run any request through the governance pipeline: routed by capability contract, "
            "verified against its goal, audited. Refusals and failures come back as tool errors.",
            input_schema=_GOVERNED_TASK_SCHEMA,
        ),
        types.Tool(
            name=RESUME_TASK,
            description="Answer a task that stopped for input: a clarification (answer = an option id), "
            "missing input (input = the asked fields) or a human handover (decision); or continue an "
            "interrupted task (none of them).",
            input_schema=_RESUME_SCHEMA,
        ),
        types.Tool(
            name=CANCEL_TASK,
            description="Cancel a task waiting for input or interrupted (its owner or an admin); a "
            "finished task is refused naming its state.",
            input_schema=_CANCEL_SCHEMA,
        ),
    ]
    actions: dict[str, str] = {}
    for action, contracts in sorted(by_action.items()):
        name = tool_name(action)
        if name in (GOVERNED_TASK, RESUME_TASK, CANCEL_TASK) or name in actions:
            continue
        actions[name] = action
        schemas = _unique([c.input_schema or {"type": "object"} for c in contracts])
        input_schema = (
            schemas[0]
            if len(schemas) == 1 and schemas[0].get("type") == "object"
            else {"type": "object", "anyOf": schemas}
        )
        outputs = _unique([c.output_schema for c in contracts])
        output_schema = outputs[0] if len(outputs) == 1 and outputs[0].get("type") == "object" else None
        refuses = sorted({a for c in contracts for a in c.cannot_do})
        tools.append(
            types.Tool(
                name=name,
                description=f"Governed capability {action!r}, routed by contract to "
                + ", ".join(c.key for c in contracts)
                + (f" (they refuse: {', '.join(refuses)})" if refuses else "")
                + ". "
                + " ".join(c.description for c in contracts if c.description),
                input_schema=input_schema,
                output_schema=output_schema,
            )
        )
    return tools, actions


def _unique(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for s in schemas:
        seen.setdefault(json.dumps(s, sort_keys=True), s)
    return list(seen.values())


def _result(outcome: Outcome) -> types.CallToolResult:
    data = outcome_data(outcome)
    if outcome.state is TaskState.COMPLETED:
        output = outcome.output
        governance: dict[str, Any] = {"task_id": outcome.task_id, "trace_id": outcome.trace_id}
        ttl = answer_ttl(outcome)
        if ttl is not None:  # a caller in a time-critical domain needs it (docs/semantics.md)
            governance[FRESHNESS_TTL] = ttl
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(output, ensure_ascii=False, default=str))],
            structured_content=output if isinstance(output, dict) else {"output": output},
            meta={GOVERNANCE_META: governance},
        )
    text = outcome_text(outcome)
    if outcome.state is TaskState.INPUT_REQUIRED:
        text += f" (task {outcome.task_id}: answer with the {RESUME_TASK} tool)"
    if outcome.state is TaskState.INTERRUPTED:
        text += f" (task {outcome.task_id}: continue it with {RESUME_TASK}, or {CANCEL_TASK})"
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=data,
        is_error=True,
    )


#: Clarification rounds asked through elicitation within one tool call.
MAX_ELICITATIONS = 3


async def _elicit(
    ctx: ServerRequestContext[Any], agency: Agency, outcome: Outcome, principal: Principal | None
) -> Outcome:
    """Ask a pending clarification through MCP elicitation, where the client has it, and resume.

    Clarifications and conflicts (a choice among offered options) and a plan step's missing
    input (a form of the asked fields) are asked; a human handover, a declined or canceled
    elicitation, or a connection without a back channel (the 2026-07-28 revision has none)
    leaves the task waiting: the tool error says how to answer it with ``resume_task``.
    """
    capability = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    for _ in range(MAX_ELICITATIONS):
        pending = outcome.pending
        kind = pending.get("kind")
        if outcome.state is not TaskState.INPUT_REQUIRED or kind not in (
            "clarification",
            "conflict",
            "missing_input",
        ):
            return outcome
        try:
            if not ctx.session.check_client_capability(capability):
                return outcome
            reply = await ctx.session.elicit_form(
                str(pending.get("question") or "Input required"), _form(pending)
            )
        except Exception as exc:  # no back channel, client error: the task keeps waiting
            log.debug("elicitation not possible for %s: %s", outcome.task_id, exc)
            return outcome
        content = dict(reply.content or {}) if reply.action == "accept" else {}
        if not content:
            return outcome
        if kind == "missing_input":
            outcome = await agency.resume(outcome.task_id, input=content, caller=principal)
        elif content.get("answer"):
            outcome = await agency.resume(outcome.task_id, answer=str(content["answer"]), caller=principal)
        else:
            return outcome
    return outcome


#: JSON Schema types an elicitation form may ask for (MCP: flat objects of primitive fields).
_PRIMITIVE = {"string", "number", "integer", "boolean"}


def _form(pending: dict[str, Any]) -> dict[str, Any]:
    """The elicitation form of a pending question: the choice among its options, or the asked
    fields (each with its type when the contract's schema gives a primitive one)."""
    if pending.get("kind") == "missing_input":
        schemas = pending.get("schemas") or {}
        fields = [str(f) for f in pending.get("fields") or []]
        properties = {}
        for name in fields:
            raw = schemas.get(name)
            given = raw.get("type") if isinstance(raw, dict) else None
            kind = given if isinstance(given, str) and given in _PRIMITIVE else "string"
            properties[name] = {"type": kind, "title": name}
        return {"type": "object", "properties": properties, "required": fields}
    options = pending.get("options") or []
    return {
        "type": "object",
        "properties": {
            "answer": {  # a titled single-select enum (MCP 2025-11-25; enumNames is deprecated)
                "type": "string",
                "title": "Your choice",
                "oneOf": [
                    {"const": str(o.get("id")), "title": str(o.get("label") or o.get("id"))} for o in options
                ],
            }
        },
        "required": ["answer"],
    }


def _error(exc: AgencyError) -> types.CallToolResult:
    problems = [str(p) for p in getattr(exc, "problems", [])]
    return types.CallToolResult(
        content=[types.TextContent(text=f"{exc.reason}: {exc}")],
        structured_content={"error": exc.reason, "message": str(exc), "problems": problems},
        is_error=True,
    )


def build_mcp_server(
    agency: Agency, *, callers: Callers | None = None, local_client: str = "", name: str = "agency-middleware"
) -> Server[Any]:
    """The MCP server of ``agency``'s governed capabilities.

    Args:
        agency: The governance core every call goes through.
        callers: Bearer tokens (Streamable HTTP); None = no tokens checked.
        local_client: The client name recorded for calls without a token (stdio: the local user).
        name: The server name told to clients.
    """
    callers = callers or Callers(None)

    async def principal_of(ctx: ServerRequestContext[Any]) -> Principal | None:
        # the HTTP gate authenticated (and audited) the request already: not audited twice
        headers = getattr(ctx.request, "headers", None)
        quiet = Callers(callers.identities)
        return await quiet.from_header(headers.get("authorization") if headers is not None else None)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal = await principal_of(ctx)
        tools, _ = await governed_tools(agency, principal.tenant if principal is not None else "")
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async def followed(task_id: str, work: Awaitable[Outcome], *, resuming: bool = False) -> Outcome:
            """``work``, with the task's events as progress notifications when the caller asked
            (a resume: those after the task's last event so far)."""
            if (params.meta or {}).get("progress_token") is None:
                return await work
            after = 0
            if resuming:
                try:
                    last = await agency.events.last(task_id)
                    after = last.seq if last is not None else 0
                except Exception:  # following is a courtesy: the resume goes on
                    log.warning("task %s: its events cannot be read; no progress told", task_id)

            async def tell(event: TaskEvent) -> None:
                await ctx.session.report_progress(float(event.seq), None, describe(event))

            return await follow_while(agency, task_id, work, tell, after=after)

        try:
            principal = await principal_of(ctx)
            if principal is not None:
                try:
                    authorize(principal, Permission.CALL, operation=f"MCP/tools/call/{params.name}")
                except PermissionDenied as exc:  # the binding's own check: audited here, as gRPC's
                    await agency.audit.append(refusal_record(exc, node=agency.config.node_id))
                    raise
            client = principal.name if principal is not None else local_client
            arguments = dict(params.arguments or {})
            governance = dict((params.meta or {}).get(GOVERNANCE_META) or {})  # type: ignore[call-overload]
            if params.name == RESUME_TASK:
                decision = arguments.get("decision")
                task_id = str(arguments.get("task_id", ""))
                work = agency.resume(
                    task_id,
                    answer=arguments.get("answer"),
                    input=arguments.get("input"),
                    decision=decision,
                    caller=principal,
                )
                outcome = await followed(task_id, work, resuming=True)
                return _result(await _elicit(ctx, agency, outcome, principal))
            if params.name == CANCEL_TASK:
                outcome = await agency.cancel(
                    str(arguments.get("task_id", "")),
                    reason=str(arguments.get("reason", "")),
                    caller=principal,
                )
                return types.CallToolResult(  # what was asked was done: not a tool error
                    content=[types.TextContent(text=outcome_text(outcome))],
                    structured_content=outcome_data(outcome),
                )
            if params.name == GOVERNED_TASK:
                text = str(arguments.pop("text", ""))
                governance.update(arguments)
                data: dict[str, Any] = {}
            else:
                _, actions = await governed_tools(agency, principal.tenant if principal is not None else "")
                action = actions.get(params.name)
                if action is None:  # a protocol error, not a tool's failure (MCP 2025-11-25: -32602)
                    unknown = InvalidInput.single(
                        "name", f"no governed tool {params.name!r}", what="tools/call"
                    )
                    await agency.record_rejection(unknown, component="mcp")
                    raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
                text = action.replace("_", " ")
                governance.setdefault("skill", action)
                data = arguments
            governance.setdefault("user_id", client or "anonymous")
            request = task_request(
                text, governance, data=data, source=f"mcp:{client or 'anonymous'}", where="arguments"
            )
            tenant = principal.tenant if principal is not None else ""
            outcome = await followed(request.task_id, agency.submit(request, client=client, tenant=tenant))
            return _result(await _elicit(ctx, agency, outcome, principal))
        except (Unauthenticated, Unavailable) as exc:
            return _error(exc)
        except InvalidInput as exc:
            await agency.record_rejection(exc, component="mcp")
            return _error(exc)
        except PermissionDenied as exc:
            # another client's task or session: the core audited the refusal (with the task's
            # ids), as for gRPC; auditing it again here would record one refusal twice
            return _error(exc)
        except AgencyError as exc:  # not found, not waiting ...
            return _error(exc)

    return Server(
        name,
        version="1.0.0",
        instructions="Governed capabilities of Agency Middleware: every call is a routed, verified, "
        "audited task.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


class _BearerGate:
    """ASGI middleware: 401 without a known bearer token (Streamable HTTP)."""

    def __init__(self, app: Any, callers: Callers) -> None:
        self.app, self.callers = app, callers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            try:
                await self.callers.from_header(
                    header,
                    source=http_source(scope),
                    operation=f"MCP {scope['method']} {scope['path']}"[:120],
                )
            except (Unauthenticated, Unavailable) as exc:
                from starlette.responses import JSONResponse

                response = JSONResponse(
                    {"error": "UNAUTHENTICATED", "message": str(exc)},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="agency"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_mcp_http_app(
    agency: Agency,
    *,
    path: str = "/mcp",
    token_hashes: Identities | Mapping[str, Principal] | None = None,
    host: str = "127.0.0.1",
) -> Starlette:
    """The Streamable HTTP application of the MCP server (stateful sessions, SSE responses).

    ``token_hashes``: who each bearer token is (:class:`~middleware.server.identity.Identities`
    or the token file; None = no tokens); requests refused for their token are audited per
    source and minute (:mod:`middleware.refusals`).
    """
    callers = Callers(
        token_hashes, refusals=RefusalAggregator(agency.audit.append, node=agency.config.node_id)
    )
    server = build_mcp_server(agency, callers=callers)
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    app.add_middleware(_BearerGate, callers=callers)
    return app


async def serve_stdio(agency: Agency, *, local_client: str = "") -> None:
    """Serve MCP on this process's stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    server = build_mcp_server(agency, local_client=local_client)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
