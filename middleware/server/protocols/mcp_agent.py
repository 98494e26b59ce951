"""An MCP server's tool as an agent behind a contract (official ``mcp`` SDK client).

The operator names the server (a Streamable HTTP URL, or a stdio command), the tool and the
contract it serves under. At registration the tool is listed and its definition (name,
description, input and output schemas, annotations) pinned by SHA-256; a definition that
differs from a reviewed pin (``tool_sha256``) is refused. On every call the tool is listed
again in the same session before it is called: a changed definition is caught, not trusted —
the call fails as TOOL_UNAVAILABLE, nothing is sent to the tool, and the contract is flagged
for review (``contract.review`` in the audit log).

The step's input (the SMF content) is the tool's arguments; the result's
``structuredContent`` (else its text, parsed as JSON when it is JSON) is the output. A tool
error (``isError``) and a JSON-RPC error are TOOL_ERROR; a server that cannot be reached
(connection refused, a command that does not start) is TOOL_UNAVAILABLE; no answer within
the contract's SLO is TOOL_TIMEOUT (the pipeline's deadline). One MCP session per server is
kept open and shared by the calls (:class:`_Session`; a stdio server is started once): a call
costs no handshake. A session that fails (the server went away, the connection broke) is
dropped and the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters

from ...agents import AgentRequest
from ...contracts import CapabilityContract
from ...errors import AgentFailure, InvalidInput, Unavailable
from ...pipeline import Agency
from .common import GOVERNANCE_META, definition_hash, flag_for_review, remote_reply

__all__ = ["MCPToolAgent", "describe_tool", "register_mcp_tool", "tool_definition"]

Server = str | list[str]


def _target(server: Server) -> str | StdioServerParameters:
    if isinstance(server, str):
        return server
    if not server:
        raise InvalidInput.single(
            "command", "empty: the stdio server's command is required", what="MCP server"
        )
    return StdioServerParameters(command=server[0], args=list(server[1:]))


def tool_definition(tool: types.Tool) -> dict[str, Any]:
    """What a tool promises (the pinned part of its listing)."""
    dumped = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        k: dumped[k]
        for k in ("name", "description", "inputSchema", "outputSchema", "annotations")
        if k in dumped
    }


def _unreachable(exc: BaseException) -> BaseException | None:
    """The exception in ``exc`` (itself, or one it groups or chains) that says the server could
    not be reached, to name it (not the task group around it); None if there is none."""
    seen: list[BaseException] = [exc]
    while seen:
        e = seen.pop()
        if isinstance(e, OSError | ConnectionError) or type(e).__name__ in ("ConnectError", "ConnectTimeout"):
            return e
        if isinstance(e, BaseExceptionGroup):
            seen.extend(e.exceptions)
        if e.__cause__ is not None:
            seen.append(e.__cause__)
    return None


def _find(exc: BaseException, kind: type[MCPError]) -> MCPError | None:
    """``exc``, or the first exception it groups, that is a ``kind``."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


async def _listed(client: Client, name: str) -> types.Tool | None:
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        for tool in page.tools:
            if tool.name == name:
                return tool
        cursor = page.next_cursor
        if not cursor:
            return None


async def describe_tool(server: Server, name: str) -> tuple[dict[str, Any], str]:
    """Tool ``name`` of ``server`` (its definition) and the definition's SHA-256.

    Raises:
        Unavailable: the server cannot be reached.
        InvalidInput: it has no such tool.
    """
    try:
        async with Client(_target(server)) as client:
            tool = await _listed(client, name)
    except Exception as exc:
        if (cause := _unreachable(exc)) is not None:
            raise Unavailable(f"cannot reach the MCP server {server}: {cause}") from None
        raise
    if tool is None:
        raise InvalidInput.single("tool", f"the MCP server {server} has no tool {name!r}", what="MCP tool")
    definition = tool_definition(tool)
    return definition, definition_hash(definition)


def _output(result: types.CallToolResult) -> Any:
    if result.structured_content is not None:
        return result.structured_content
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    text = "\n".join(texts)
    try:
        return json.loads(text)
    except ValueError:
        return text


class _Session:
    """One MCP client session to a server, kept open for many calls.

    The SDK's client is an async context (anyio task groups): it must be entered and left by one
    task. A task of its own holds it (:meth:`_hold`) until :meth:`close`; calls from any task use
    the session meanwhile (requests are multiplexed by id).
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[Client] | None = None
        self._done = asyncio.Event()
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        """The open session (opened on first use, or after :meth:`drop`)."""
        async with self._lock:
            if self._holder is None or self._holder.done():
                loop = asyncio.get_running_loop()
                self._ready, self._done = loop.create_future(), asyncio.Event()
                self._holder = loop.create_task(self._hold(self._ready, self._done), name="mcp-session")
            ready = self._ready
        assert ready is not None
        return await asyncio.shield(ready)

    async def _hold(self, ready: asyncio.Future[Client], done: asyncio.Event) -> None:
        try:
            async with Client(_target(self.server)) as client:
                ready.set_result(client)
                await done.wait()
        except BaseException as exc:  # could not open, or broke while open: the next call reopens
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def drop(self) -> None:
        """Close the session (after a failure): the next call opens a new one."""
        async with self._lock:
            holder, done = self._holder, self._done
            self._holder = None
        done.set()
        if holder is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(holder, 5)

    close = drop


class MCPToolAgent:
    """The callable of one MCP tool (see the module docstring).

    Args:
        server: Streamable HTTP URL, or the stdio command and its arguments.
        tool: The tool's name.
        contract: The contract it serves under.
        pinned: The reviewed definition's SHA-256.
        on_change: Awaited once when the listed definition no longer matches the pin.
    """

    #: The call goes to another process (a URL, or a stdio command that has no endpoint):
    #: a dispatch to it is always preceded by the dispatch barrier (``Dispatcher``).
    leaves_process = True

    def __init__(
        self,
        server: Server,
        tool: str,
        contract: CapabilityContract,
        *,
        pinned: str,
        on_change: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self.server, self.tool, self.contract, self.pinned = server, tool, contract, pinned
        self._on_change = on_change
        self._flagged = False
        self._session = _Session(server)

    async def aclose(self) -> None:
        """Close the kept session (the agency closes its agents when it closes)."""
        await self._session.close()

    async def __call__(self, request: AgentRequest) -> Any:
        arguments = request.input if isinstance(request.input, dict) else {"input": request.input}
        result: types.CallToolResult | None = None
        try:
            client = await self._session.client()
            listed = await _listed(client, self.tool)
            digest = definition_hash(tool_definition(listed)) if listed is not None else "(missing)"
            if digest == self.pinned:  # a changed tool is not called at all
                result = await client.call_tool(self.tool, arguments)
        except Exception as exc:
            error = _find(exc, MCPError)
            if error is None:  # not the server's answer: the session may be broken, open anew
                await self._session.drop()
            if error is not None:
                raise AgentFailure(
                    "TOOL_ERROR", f"the MCP server answered with an error: {error}", cause=exc
                ) from None
            if (cause := _unreachable(exc)) is not None:
                raise AgentFailure(
                    "TOOL_UNAVAILABLE", f"cannot reach the MCP server: {cause}", cause=exc
                ) from None
            raise
        if result is None:
            await self._changed(digest)
        assert result is not None
        if result.is_error:
            said = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
            raise AgentFailure(
                "TOOL_ERROR", f"tool {self.tool} failed: {said}", context={"mcp_tool": self.tool}
            )
        # the TTL the server offers (a governed Agency server does: _meta "agency/governance"),
        # which an answer in a time-critical domain needs (docs/semantics.md)
        meta = (result.meta or {}).get(GOVERNANCE_META)
        return remote_reply(
            _output(result), meta if isinstance(meta, dict) else None, where=f"_meta.{GOVERNANCE_META}"
        )

    async def _changed(self, digest: str) -> None:
        if not self._flagged and self._on_change is not None:
            self._flagged = True
            await self._on_change(self.pinned, digest)
        raise AgentFailure(
            "TOOL_UNAVAILABLE",
            f"MCP tool {self.tool} definition changed (pinned {self.pinned[:12]}, now "
            f"{digest[:12]}); not trusted until the operator reviews it",
            context={"review": "mcp_tool_changed", "pinned": self.pinned, "seen": digest},
        )


async def register_mcp_tool(
    agency: Agency,
    server: Server,
    tool: str,
    contract: CapabilityContract | dict[str, Any],
    *,
    tool_sha256: str = "",
    where: str = "",
    replace: bool = False,
) -> MCPToolAgent:
    """List ``tool`` on ``server``, pin its definition, and register it under ``contract``.

    A Streamable HTTP URL becomes the contract's ``endpoint``. ``replace`` as for
    :meth:`Agency.register` (``agency serve`` replaces: every replica registers the same).

    Raises:
        Unavailable: the server cannot be reached.
        InvalidInput: no such tool, or not the reviewed definition (``tool_sha256``).
    """
    contract = CapabilityContract.parse(contract, what="MCP tool contract")
    _, digest = await describe_tool(server, tool)
    prefix = f"{where}." if where else ""
    if tool_sha256 and digest != tool_sha256:
        raise InvalidInput.single(
            f"{prefix}tool_sha256",
            f"tool {tool} is not the reviewed definition (pinned {tool_sha256}, now {digest}): "
            "review it with "
            "'agency mcp tool' and update the pin",
            what="MCP tool",
        )
    if isinstance(server, str):
        contract = contract.model_copy(update={"endpoint": server})

    async def changed(pinned: str, seen: str) -> None:
        await flag_for_review(
            agency,
            contract.key,
            rule="mcp_tool_changed",
            detail={
                "server": server if isinstance(server, str) else " ".join(server),
                "tool": tool,
                "pinned": pinned,
                "seen": seen,
            },
        )

    agent = MCPToolAgent(server, tool, contract, pinned=digest, on_change=changed)
    await agency.register(contract, agent, replace=replace)
    return agent
