"""Communication flows: which agent may message which, and with what tool.

A flow is a directed edge "sender may message receiver". Declare them in Python
with handles that belong to one :class:`Flows` container::

    flows = Flows()
    ceo = flows.agent("ceo", "Runs the company")
    dev = flows.agent("dev", "Writes code")
    qa = flows.agent("qa", "Tests releases", receive_only=True)
    ceo > dev > qa                      # two edges: ceo->dev, dev->qa
    flows.connect(ceo, qa, tool=Handoff)

``a > b`` records the edge in the container the handles belong to and returns the
:class:`Edge`, so a chain ``a > b > c`` (Python evaluates ``a > b and b > c``) keeps
every edge without any global or class-level state. Or from config with
:meth:`Flows.from_config`.

Each edge names a tool: :class:`SendMessage` (a sub-call; the default),
:class:`Handoff` (control transfer), or a subclass of ``SendMessage`` with extra
validated parameters (``Params``). :meth:`Flows.tools_for` gives what an LLM sender
sees: one tool per tool class, listing exactly its allowed recipients and their
descriptions; it is computed from the current edges, so it follows every change.
A receive-only agent can never be a sender (refused at set-up); a message outside
the flows is refused by :meth:`Flows.check` with ``PermissionDenied``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, Field, ValidationError

from .._model import Model, problems_from
from ..errors import InvalidInput, NotFound, PermissionDenied, Problem

__all__ = [
    "AgentHandle",
    "Edge",
    "Flows",
    "Handoff",
    "SendMessage",
    "ToolCall",
    "ToolSpec",
]

DEFAULT_REMINDER = "Transfer completed. You are {agent}. Please continue the task."


@dataclass(frozen=True)
class ToolSpec:
    """A tool as an LLM sees it: a name, a description and a JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    kind: str
    recipients: tuple[str, ...]


@dataclass(frozen=True)
class ToolCall:
    """Validated arguments of a messaging tool call."""

    recipient: str
    message: str
    additional_instructions: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)


class _BaseArgs(Model):
    recipient_agent: str = Field(min_length=1)
    message: str = Field(min_length=1, description="What you ask the recipient; be specific and complete.")
    additional_instructions: str = Field(default="", description="Extra context for the recipient.")


class SendMessage:
    """Ask another agent: it runs a full turn and its final output comes back to you.

    Subclass with a nested ``Params`` model to add validated parameters (``priority``,
    ``deadline`` ...); they appear in the tool's schema and are checked on every call.
    """

    name: ClassVar[str] = "send_message"
    kind: ClassVar[str] = "send_message"
    Params: ClassVar[type[BaseModel] | None] = None

    @classmethod
    def specs(cls, sender: AgentHandle, recipients: list[AgentHandle]) -> list[ToolSpec]:
        """The tool(s) ``sender`` sees for these recipients."""
        names = [r.name for r in recipients]
        schema = _BaseArgs.model_json_schema()
        props = dict(schema["properties"])
        props["recipient_agent"] = {"type": "string", "enum": names, "description": "Who to message."}
        required = ["recipient_agent", "message"]
        if cls.Params is not None:
            extra = cls.Params.model_json_schema()
            props.update(extra.get("properties", {}))
            required += list(extra.get("required", []))
        listing = "\n".join(f"- {r.name}: {r.description or '(no description)'}" for r in recipients)
        description = (
            f"{(cls.__doc__ or '').strip().splitlines()[0]}\n"
            "Send one message to one recipient at a time; wait for the answer before sending "
            f"that recipient another.\nRecipients:\n{listing}"
        )
        params = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        return [ToolSpec(cls.name, description, params, cls.kind, tuple(names))]

    @classmethod
    def parse_args(cls, args: Mapping[str, Any], allowed: Iterable[str]) -> ToolCall:
        """Validate a call's arguments (recipient matched case-insensitively).

        Raises:
            InvalidInput: every offending argument, with the allowed recipients named.
        """
        base_keys = set(_BaseArgs.model_fields)
        problems: list[Problem] = []
        try:
            base = _BaseArgs.model_validate({k: v for k, v in args.items() if k in base_keys})
        except ValidationError as exc:
            raise InvalidInput(problems_from(exc), what=f"{cls.name} arguments") from None
        extra = {k: v for k, v in args.items() if k not in base_keys}
        params: dict[str, Any] = {}
        if cls.Params is not None:
            try:
                params = cls.Params.model_validate(extra).model_dump(mode="json")
            except ValidationError as exc:
                problems += problems_from(exc)
        elif extra:
            problems += [Problem(k, "unexpected argument") for k in sorted(extra)]
        allowed_names = list(allowed)
        match = {n.lower(): n for n in allowed_names}.get(base.recipient_agent.lower())
        if match is None:
            problems.append(
                Problem("recipient_agent", f"{base.recipient_agent!r} is not one of {sorted(allowed_names)}")
            )
        if problems:
            raise InvalidInput(problems, what=f"{cls.name} arguments")
        assert match is not None
        return ToolCall(match, base.message, base.additional_instructions, params)


class Handoff(SendMessage):
    """Hand the conversation over: the recipient takes over and answers the user from now on."""

    name: ClassVar[str] = "transfer_to_{recipient}"
    kind: ClassVar[str] = "handoff"

    @classmethod
    def specs(cls, sender: AgentHandle, recipients: list[AgentHandle]) -> list[ToolSpec]:
        out = []
        for r in recipients:
            params = {
                "type": "object",
                "properties": {"recipient_agent": {"type": "string", "enum": [r.name]}},
                "required": ["recipient_agent"],
                "additionalProperties": False,
            }
            description = f"Hand the conversation over to {r.name}: {r.description or '(no description)'}"
            out.append(ToolSpec(cls.tool_name(r.name), description, params, cls.kind, (r.name,)))
        return out

    @classmethod
    def tool_name(cls, recipient: str) -> str:
        return "transfer_to_" + re.sub(r"[^A-Za-z0-9_]", "_", recipient)

    @classmethod
    def parse_args(cls, args: Mapping[str, Any], allowed: Iterable[str]) -> ToolCall:
        filled = {"message": "(handoff)", **args}
        return super().parse_args(filled, allowed)


class AgentHandle:
    """An agent as named in flows. ``a > b`` declares "a may message b" in their container."""

    def __init__(
        self,
        flows: Flows,
        name: str,
        description: str = "",
        *,
        receive_only: bool = False,
        handoff_reminder: str | None = None,
    ) -> None:
        self.flows = flows
        self.name = name
        self.description = description
        self.receive_only = receive_only
        self.handoff_reminder = DEFAULT_REMINDER if handoff_reminder is None else handoff_reminder

    def __gt__(self, other: object) -> Edge:
        if not isinstance(other, AgentHandle):
            raise TypeError(f"cannot declare a flow from {self.name!r} to {other!r}: not an agent handle")
        return self.flows.connect(self, other)

    def __lt__(self, other: object) -> Edge:
        if not isinstance(other, AgentHandle):
            raise TypeError(f"cannot declare a flow from {other!r} to {self.name!r}: not an agent handle")
        return self.flows.connect(other, self)

    def reminder(self) -> str:
        """The system note the agent gets when a conversation is handed over to it."""
        return self.handoff_reminder.format(agent=self.name)

    def __repr__(self) -> str:
        return f"AgentHandle({self.name!r})"


@dataclass(frozen=True)
class Edge:
    """One flow: ``sender`` may message ``receiver`` with ``tool``."""

    sender: str
    receiver: str
    tool: type[SendMessage]
    flows: Flows

    def via(self, tool: type[SendMessage]) -> Edge:
        """Use ``tool`` on this edge (``(a > b).via(Handoff)``); returns the updated edge."""
        return self.flows.connect(self.sender, self.receiver, tool=tool)

    def __repr__(self) -> str:
        return f"Edge({self.sender} > {self.receiver} via {self.tool.__name__})"


BUILTIN_TOOLS: dict[str, type[SendMessage]] = {"send_message": SendMessage, "handoff": Handoff}


class Flows:
    """The agents that may talk, and the directed edges between them (in memory)."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentHandle] = {}
        self._edges: dict[tuple[str, str], Edge] = {}
        self.version = 0  #: bumped on every change, so callers can cache tool lists

    # ------------------------------------------------------------------ set-up
    def agent(
        self,
        name: str,
        description: str = "",
        *,
        receive_only: bool = False,
        handoff_reminder: str | None = None,
    ) -> AgentHandle:
        """Declare (or fetch) an agent; returns its handle for ``>``."""
        if not name or not name.strip():
            raise InvalidInput.single("name", "an agent needs a non-empty name")
        existing = self._agents.get(name)
        if existing is not None:
            return existing
        handle = AgentHandle(
            self, name, description, receive_only=receive_only, handoff_reminder=handoff_reminder
        )
        self._agents[name] = handle
        self.version += 1
        return handle

    def handle(self, agent: AgentHandle | str) -> AgentHandle:
        if isinstance(agent, AgentHandle):
            if agent.flows is not self:
                raise InvalidInput.single("agent", f"{agent.name!r} belongs to another Flows container")
            return agent
        found = self._agents.get(agent)
        if found is None:
            raise NotFound(f"no agent {agent!r} in the communication flows")
        return found

    def connect(
        self, sender: AgentHandle | str, receiver: AgentHandle | str, *, tool: type[SendMessage] = SendMessage
    ) -> Edge:
        """Allow ``sender`` to message ``receiver`` with ``tool`` (replaces the edge's tool).

        Raises:
            InvalidInput: the sender is receive-only, a self-loop, or ``tool`` is not a SendMessage.
        """
        s, r = self.handle(sender), self.handle(receiver)
        where = f"flows[{s.name} > {r.name}]"
        if s.receive_only:
            raise InvalidInput.single(where, f"{s.name!r} is receive-only and can never send messages")
        if s is r:
            raise InvalidInput.single(where, "an agent cannot message itself")
        if not (isinstance(tool, type) and issubclass(tool, SendMessage)):
            raise InvalidInput.single(where, f"tool must be SendMessage, Handoff or a subclass, not {tool!r}")
        edge = Edge(s.name, r.name, tool, self)
        self._edges[(s.name, r.name)] = edge
        self.version += 1
        return edge

    def disconnect(self, sender: AgentHandle | str, receiver: AgentHandle | str) -> None:
        """Remove an edge (no error if absent)."""
        s, r = self.handle(sender), self.handle(receiver)
        if self._edges.pop((s.name, r.name), None) is not None:
            self.version += 1

    @classmethod
    def from_config(
        cls, data: Mapping[str, Any], *, tools: Mapping[str, type[SendMessage]] | None = None
    ) -> Flows:
        """Build flows from config::

            {"agents": [{"name": "ceo", "description": "...", "receive_only": false}, ...],
             "flows": ["ceo > dev > qa", {"from": "ceo", "to": "qa", "tool": "handoff"}]}

        ``tools`` adds named custom tool classes to ``send_message`` and ``handoff``.

        Raises:
            InvalidInput: every problem, with its place in the config.
        """
        known = {**BUILTIN_TOOLS, **(tools or {})}
        flows = cls()
        problems: list[Problem] = []
        for i, spec in enumerate(data.get("agents", [])):
            try:
                if isinstance(spec, str):
                    flows.agent(spec)
                else:
                    flows.agent(
                        spec["name"],
                        spec.get("description", ""),
                        receive_only=bool(spec.get("receive_only", False)),
                        handoff_reminder=spec.get("handoff_reminder"),
                    )
            except (KeyError, TypeError):
                problems.append(Problem(f"agents[{i}]", "needs at least a name"))
            except InvalidInput as exc:
                problems += [Problem(f"agents[{i}].{p.field}", p.reason) for p in exc.problems]
        for i, spec in enumerate(data.get("flows", [])):
            where = f"flows[{i}]"
            try:
                if isinstance(spec, str):
                    names = [part.strip() for part in spec.split(">")]
                    pairs, tool_name = list(itertools.pairwise(names)), "send_message"
                    if len(names) < 2:
                        raise InvalidInput.single(where, "a chain needs at least 'a > b'")
                else:
                    pairs, tool_name = [(spec["from"], spec["to"])], spec.get("tool", "send_message")
                tool = known.get(tool_name)
                if tool is None:
                    raise InvalidInput.single(
                        where + ".tool", f"unknown tool {tool_name!r}; known: {sorted(known)}"
                    )
                for a, b in pairs:
                    try:
                        flows.connect(a, b, tool=tool)
                    except InvalidInput as exc:  # connect names the edge; keep the config's place
                        raise InvalidInput(
                            [Problem(where, f"{a} > {b}: {p.reason}") for p in exc.problems]
                        ) from None
            except (KeyError, TypeError):
                problems.append(Problem(where, "a flow is 'a > b [> c ...]' or {from, to, tool}"))
            except NotFound as exc:
                problems.append(Problem(where, exc.message))
            except InvalidInput as exc:
                problems += exc.problems
        if problems:
            raise InvalidInput(problems, what="communication flows")
        return flows

    # ------------------------------------------------------------------ queries
    def agents(self) -> list[AgentHandle]:
        return list(self._agents.values())

    def edges(self) -> list[Edge]:
        return list(self._edges.values())

    def recipients(self, sender: AgentHandle | str, *, kind: str | None = None) -> list[AgentHandle]:
        """Who ``sender`` may message (optionally only with tools of ``kind``)."""
        s = self.handle(sender)
        return [
            self._agents[e.receiver]
            for (a, _), e in self._edges.items()
            if a == s.name and (kind is None or e.tool.kind == kind)
        ]

    def edge(self, sender: str, receiver: str) -> Edge | None:
        return self._edges.get((sender, receiver))

    def check(self, sender: str, receiver: str, *, kind: str | None = None) -> Edge:
        """The edge allowing ``sender`` to message ``receiver`` (with a tool of ``kind``).

        Raises:
            PermissionDenied: no such flow (``details`` names both ends and the allowed recipients).
        """
        edge = self._edges.get((sender, receiver))
        if edge is None or (kind is not None and edge.tool.kind != kind):
            allowed = (
                sorted(r.name for r in self.recipients(sender, kind=kind)) if sender in self._agents else []
            )
            how = f" by {kind}" if kind else ""
            raise PermissionDenied(
                f"{sender!r} may not message {receiver!r}{how}: no such communication flow "
                f"(allowed: {allowed or 'none'})",
                details={"sender": sender, "receiver": receiver, "allowed": allowed},
            )
        return edge

    def tools_for(self, sender: AgentHandle | str) -> list[ToolSpec]:
        """The messaging tools ``sender`` sees right now: one per tool class, exact recipients."""
        s = self.handle(sender)
        by_tool: dict[type[SendMessage], list[AgentHandle]] = {}
        for (a, b), e in self._edges.items():
            if a == s.name:
                by_tool.setdefault(e.tool, []).append(self._agents[b])
        specs: list[ToolSpec] = []
        for tool, recipients in by_tool.items():
            specs += tool.specs(s, recipients)
        return specs

    def tool(self, sender: AgentHandle | str, tool_name: str) -> tuple[type[SendMessage], list[str]]:
        """The tool class behind ``tool_name`` for ``sender`` and its allowed recipients.

        Raises:
            NotFound: ``sender`` has no such tool.
        """
        for spec in self.tools_for(sender):
            if spec.name == tool_name:
                edge = self._edges[(self.handle(sender).name, spec.recipients[0])]
                return edge.tool, list(spec.recipients)
        raise NotFound(f"agent {self.handle(sender).name!r} has no tool {tool_name!r}")
