"""Agents talking while they work: send_message, handoff, mailbox posts and child runs.

An agent here is any callable taking one :class:`Turn` and returning its final
output (sync or async). The :class:`Runtime` runs turns and gives each one a
:class:`TurnContext` with the three ways to talk:

- ``send_message`` — a sub-call: the recipient runs a full turn (in the caller's
  thread) and its final output comes back. ``parent_run_id`` chains the call tree.
  At most one message is in flight per (thread, recipient): a second concurrent one
  waits behind the first (FIFO), and the guard is keyed by thread id, so it never
  leaks across threads or sessions.
- ``handoff`` — control transfer: after the current turn the receiver takes over the
  :class:`Conversation` (with a reminder of who it is now, configurable per agent)
  and answers the same user turn; later user turns go to it.
- ``post`` — to the recipient's mailbox through the :class:`PostOffice` (signed,
  audited). ``trigger_turn=False`` only queues: the message is read at the agent's
  next turn boundary. ``trigger_turn=True`` wakes the agent: a turn starts now if it
  is idle; if it is busy the message waits for the end of the current turn, and a
  follow-up turn starts then. An agent never runs two session turns at once.

``spawn`` starts a child run in the background. A completion watcher posts the
child's final state (``completed``, ``errored`` or ``shut_down``) to the parent's
mailbox without waking it (``trigger_turn=False``); the parent may also wait for it.

Every edge used is checked against the :class:`Flows` (``PermissionDenied``,
audited) and every message is an SMF message, validated and audited.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..audit import AuditRecord
from ..audit.record import Actors, AuditEventType
from ..errors import AgencyError, DeadlineExceeded, FailedPrecondition, NotFound
from ..smf import Provenance, SMFMessage, new_id
from ..task_progress import TaskProgress, current_progress
from .conversation import Conversation
from .flows import AgentHandle, Flows, Handoff, SendMessage
from .identity import SendOptions, generate_key, public_key_b64, sign_message
from .post_office import PostOffice, Received

__all__ = ["STREAM_BUFFER", "ChildResult", "ChildRun", "Runtime", "SubAgentEvent", "Turn", "TurnContext"]

#: Events of a streamed ``send_message`` that may wait for a slow reader (then the oldest go).
STREAM_BUFFER = 1000

#: The completion watcher posts as ``runtime.watcher:<id>`` (one per runtime; exempt from the flows).
WATCHER = "runtime.watcher"

AgentFn = Callable[["Turn"], Any]
ChildState = Literal["completed", "errored", "shut_down"]


@dataclass
class Turn:
    """One turn of one agent: what it is asked, what its mailbox held, and how to talk.

    Attributes:
        agent: Who runs the turn.
        run_id: This turn's id; ``parent_run_id`` is the caller's (sub-calls, child runs).
        thread_id: The conversation thread; sub-calls run in their caller's thread.
        input: The user's text, the sub-call message, or the child task (None for a
            turn woken by its mailbox).
        sender: Who sent ``input`` (None for the user).
        inbox: Mailbox messages delivered at this turn boundary (acknowledged when the
            turn ends without raising).
        history: The conversation so far (dicts with ``role``, ``content``, ``agent``).
        ctx: The tools: ``send_message``, ``handoff``, ``post``, ``spawn`` ...
    """

    agent: str
    run_id: str
    parent_run_id: str | None
    thread_id: str
    input: Any
    sender: str | None
    inbox: list[Received]
    history: list[dict[str, Any]]
    ctx: TurnContext
    additional_instructions: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    chain: tuple[str, ...] = ()
    events: Callable[[SubAgentEvent], None] | None = None  #: where ``ctx.emit`` goes (a streaming caller)


@dataclass(frozen=True)
class SubAgentEvent:
    """An intermediate event of an agent answering a ``send_message`` (see
    :meth:`TurnContext.send_message_stream`).

    Attributes:
        agent: Whose turn it came from (the recipient, or an agent *it* asked in turn).
        run_id: That turn's id; ``parent_run_id`` its caller's.
        kind: ``turn_started``, what the agent passed to :meth:`TurnContext.emit`
            (``progress``, ``tool_call``, ``partial`` ...), ``turn_finished``, and last
            ``final`` (``data``: the answer) or ``error`` (``data``: the error's text).
        data: The event's payload.
    """

    agent: str
    run_id: str
    parent_run_id: str | None
    kind: str
    data: Any = None


class _TaskForward:
    """A ``send_message`` sink that also tells a governed task's progress (``subagent`` events:
    who, which run, what kind, its data), then the caller's own sink, if it streams."""

    def __init__(self, progress: TaskProgress, inner: Callable[[SubAgentEvent], None] | None) -> None:
        self.progress, self.inner = progress, inner

    def __call__(self, event: SubAgentEvent) -> None:
        self.told(event)
        if self.inner is not None:
            self.inner(event)

    def told(self, event: SubAgentEvent) -> None:
        self.progress.emit(
            "subagent",
            {
                "agent": event.agent,
                "run_id": event.run_id,
                "parent_run_id": event.parent_run_id,
                "kind": event.kind,
                "data": _jsonable(event.data),
            },
        )


@dataclass(frozen=True)
class ChildResult:
    """The final state of a child run."""

    child: str
    run_id: str
    state: ChildState
    output: Any = None
    error: str = ""


class ChildRun:
    """A running child; ``await runtime.wait_child(run)`` or ``runtime.shutdown_child(run)``."""

    def __init__(self, parent: str, child: str, run_id: str, parent_run_id: str | None) -> None:
        self.parent = parent
        self.child = child
        self.run_id = run_id
        self.parent_run_id = parent_run_id
        self.result: ChildResult | None = None
        self.done = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class _Host:
    """One agent in the runtime: its callable, credentials and turn bookkeeping."""

    def __init__(self, handle: AgentHandle, fn: AgentFn, token: str, key: Ed25519PrivateKey) -> None:
        self.handle = handle
        self.name = handle.name
        self.fn = fn
        self.token = token
        self.key = key
        self.turn_lock = asyncio.Lock()  # one session turn at a time
        self.changed = asyncio.Condition()  # notified when the agent may have become idle
        self.wake_requested = False
        self.waking = False  # a wake loop is running (or waiting for the turn boundary)
        self.turns = 0

    def idle(self) -> bool:
        return not self.turn_lock.locked() and not self.waking


class TurnContext:
    """The messaging tools of one turn (what the agent may call)."""

    def __init__(self, runtime: Runtime, turn_agent: str) -> None:
        self._rt = runtime
        self._agent = turn_agent
        self.turn: Turn | None = None
        self.handoff_to: str | None = None

    def tools(self) -> list[Any]:
        """The messaging tools this agent sees now (exact recipients, with descriptions)."""
        return self._rt.flows.tools_for(self._agent)

    async def call_tool(self, tool_name: str, args: Mapping[str, Any]) -> Any:
        """Call a messaging tool as an LLM would: by name, with JSON arguments (validated)."""
        tool, recipients = self._rt.flows.tool(self._agent, tool_name)
        call = tool.parse_args(args, recipients)
        if issubclass(tool, Handoff):
            await self.handoff(call.recipient)
            return f"Transferring to {call.recipient}."
        return await self.send_message(
            call.recipient, call.message, additional_instructions=call.additional_instructions, **call.params
        )

    async def send_message(
        self, recipient: str, message: str, *, additional_instructions: str = "", **params: Any
    ) -> Any:
        """Ask ``recipient``: it runs a full turn; its final output is returned."""
        assert self.turn is not None
        return await self._rt._send_message(
            self.turn, recipient, message, additional_instructions, params, self.turn.events
        )

    async def send_message_stream(
        self, recipient: str, message: str, *, additional_instructions: str = "", **params: Any
    ) -> AsyncIterator[SubAgentEvent]:
        """Ask ``recipient`` and receive its intermediate events as they happen.

        Yields ``turn_started``, every event the recipient (or an agent it asks in turn)
        passes to :meth:`emit`, ``turn_finished``, and last ``final`` with the answer. The
        same rules as :meth:`send_message` apply (flows, one call in flight per thread and
        recipient, no cycles); if the recipient fails, an ``error`` event comes last and the
        error is raised. At most :data:`STREAM_BUFFER` events wait for a slow reader; beyond
        that the oldest are dropped and the ``final`` event's ``data`` is preceded by a
        ``dropped`` event saying how many.
        """
        assert self.turn is not None
        turn = self.turn
        queue: asyncio.Queue[SubAgentEvent] = asyncio.Queue()
        dropped = 0

        def sink(event: SubAgentEvent) -> None:
            nonlocal dropped
            if queue.qsize() >= STREAM_BUFFER:
                queue.get_nowait()
                dropped += 1
            queue.put_nowait(event)

        call = asyncio.ensure_future(
            self._rt._send_message(turn, recipient, message, additional_instructions, params, sink)
        )
        try:
            while not (call.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, call}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            if dropped:
                yield SubAgentEvent(recipient, "", turn.run_id, "dropped", dropped)
            error = call.exception()
            if error is not None:
                yield SubAgentEvent(recipient, "", turn.run_id, "error", str(error))
                raise error
            yield SubAgentEvent(recipient, "", turn.run_id, "final", call.result())
        finally:
            if not call.done():
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call

    def emit(self, kind: str, data: Any = None) -> None:
        """Report an intermediate event (progress, a tool call, a partial answer) to a caller
        streaming this turn (:meth:`send_message_stream`); a no-op when nobody streams it."""
        turn = self.turn
        if turn is not None and turn.events is not None:
            turn.events(SubAgentEvent(turn.agent, turn.run_id, turn.parent_run_id, kind, data))

    async def handoff(self, recipient: str) -> None:
        """Hand the conversation to ``recipient`` once this turn ends."""
        assert self.turn is not None
        await self._rt._check_edge(self.turn, recipient, "handoff")
        self.handoff_to = recipient

    async def post(self, recipient: str, content: Any, *, trigger_turn: bool = False) -> str:
        """Drop ``content`` in ``recipient``'s mailbox (wake it when ``trigger_turn``)."""
        return await self._rt.post(self._agent, recipient, content, trigger_turn=trigger_turn)

    async def spawn(self, child: str, task: Any) -> ChildRun:
        """Start ``child`` on ``task`` in the background; its final state comes to your mailbox."""
        assert self.turn is not None
        return await self._rt.spawn(self._agent, child, task, parent_run_id=self.turn.run_id)

    async def wait_child(self, run: ChildRun, timeout: float | None = None) -> ChildResult:  # noqa: ASYNC109
        return await self._rt.wait_child(run, timeout)


class Runtime:
    """Runs agents' turns and carries their messages (see the module docstring).

    Args:
        flows: Who may talk to whom, and how.
        post_office: Mailboxes (default: an in-memory one sharing nothing). Its audit log
            is the runtime's audit log.
        inbox_limit: Mailbox messages handed to one turn at most.
    """

    def __init__(
        self, flows: Flows, post_office: PostOffice | None = None, *, inbox_limit: int = 100
    ) -> None:
        self.flows = flows
        self.post_office = post_office or PostOffice()
        self.watcher_name = f"{WATCHER}:{uuid.uuid4().hex[:8]}"
        self.post_office.flows_exempt.add(self.watcher_name)
        # A trigger_turn message for an agent hosted here wakes it, whoever sent it (in
        # process, or a remote client through MessageService on the same post office).
        self.post_office.on_delivered.append(self._delivered)
        self.audit = self.post_office.audit
        self.inbox_limit = inbox_limit
        self._hosts: dict[str, _Host] = {}
        self._guards: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher: tuple[str, Ed25519PrivateKey] | None = None

    # ------------------------------------------------------------------ set-up
    async def add_agent(self, agent: AgentHandle | str, fn: AgentFn) -> None:
        """Run ``agent`` (declared in the flows) with ``fn``; registers it with the post office."""
        handle = self.flows.handle(agent)
        if handle.name in self._hosts:
            raise FailedPrecondition(f"agent {handle.name!r} already runs in this runtime")
        key = generate_key()
        token = await self.post_office.register(
            handle.name, public_key_b64(key), description=handle.description
        )
        self._hosts[handle.name] = _Host(handle, fn, token, key)

    def token(self, agent: str) -> str:
        """The agent's post-office token (for code acting on its behalf)."""
        return self._host(agent).token

    def turns(self, agent: str) -> int:
        """How many session turns ``agent`` has run."""
        return self._host(agent).turns

    def _host(self, agent: str) -> _Host:
        host = self._hosts.get(agent)
        if host is None:
            raise NotFound(f"agent {agent!r} does not run in this runtime")
        return host

    async def _watcher_identity(self) -> tuple[str, Ed25519PrivateKey]:
        if self._watcher is None:
            key = generate_key()
            token = await self.post_office.register(
                self.watcher_name, public_key_b64(key), description="completion watcher"
            )
            self._watcher = (token, key)
        return self._watcher

    # ------------------------------------------------------------------ conversations
    def conversation(self, entry: str, *, thread_id: str | None = None) -> Conversation:
        """A new conversation whose user turns go to ``entry`` (until a handoff)."""
        self._host(entry)
        return Conversation(self, entry, thread_id or new_id("thr"))

    # ------------------------------------------------------------------ running turns
    async def _run(
        self,
        host: _Host,
        *,
        thread_id: str,
        input: Any,
        sender: str | None,
        parent_run_id: str | None,
        history: list[dict[str, Any]],
        inbox: list[Received],
        chain: tuple[str, ...] = (),
        additional_instructions: str = "",
        params: Mapping[str, Any] | None = None,
        events: Callable[[SubAgentEvent], None] | None = None,
    ) -> tuple[Any, TurnContext]:
        ctx = TurnContext(self, host.name)
        turn = Turn(
            agent=host.name,
            run_id=new_id("run"),
            parent_run_id=parent_run_id,
            thread_id=thread_id,
            input=input,
            sender=sender,
            inbox=inbox,
            history=history,
            ctx=ctx,
            additional_instructions=additional_instructions,
            params=dict(params or {}),
            chain=(*chain, host.name),
            events=events,
        )
        ctx.turn = turn
        base = {"run_id": turn.run_id, "parent_run_id": parent_run_id, "thread_id": thread_id}
        if events is not None:
            ctx.emit("turn_started", {"input": _jsonable(input), "sender": sender})
        try:
            result = host.fn(turn)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as exc:
            outcome = "shut_down" if isinstance(exc, asyncio.CancelledError) else "errored"
            await self._audit(AuditEventType.AGENT_TURN, outcome, host.name, {**base, "error": repr(exc)})
            raise
        ctx.emit("turn_finished")
        if inbox:
            await self.post_office.ack(host.token, [r.receipt for r in inbox])
        await self._audit(
            AuditEventType.AGENT_TURN,
            "completed",
            host.name,
            {**base, "inbox": [r.message.message_id for r in inbox]},
        )
        return result, ctx

    async def _read_inbox(self, host: _Host) -> list[Received]:
        """Pull ``host``'s mailbox until empty (at most ``inbox_limit``), each message once.

        A message whose visibility timeout runs out while the inbox is being read comes back
        in a later pull of the same read (at-least-once delivery); it is the same message, so
        it is handed over once, and a pull that brings only such copies ends the read.
        """
        inbox: list[Received] = []
        seen: set[str] = set()
        while len(inbox) < self.inbox_limit:
            got = await self.post_office.pull(
                host.token, max_messages=min(100, self.inbox_limit - len(inbox))
            )
            fresh = [r for r in got if r.message.message_id not in seen]
            if not fresh:
                break
            seen.update(r.message.message_id for r in fresh)
            inbox += fresh
        return inbox

    @asynccontextmanager
    async def _session_turn(self, host: _Host) -> Any:
        """Hold ``host``'s turn lock (one session turn at a time); yields the inbox to hand over."""
        try:
            async with host.turn_lock:
                host.turns += 1
                yield await self._read_inbox(host)
        finally:
            await self._changed(host)

    async def _changed(self, host: _Host) -> None:
        async with host.changed:
            host.changed.notify_all()

    async def wait_idle(self, agent: str, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until ``agent`` runs no session turn and has no wake pending.

        Raises:
            DeadlineExceeded: still busy after ``timeout`` seconds.
        """
        host = self._host(agent)
        try:
            async with asyncio.timeout(timeout), host.changed:
                await host.changed.wait_for(host.idle)
        except TimeoutError:
            raise DeadlineExceeded(f"agent {agent!r} still busy after {timeout:g} s") from None

    async def _wake_loop(self, host: _Host) -> None:
        try:
            while host.wake_requested:
                host.wake_requested = False
                async with host.turn_lock:  # busy? this waits for the turn boundary
                    inbox = await self._read_inbox(host)
                    if not inbox:
                        continue  # another turn already read it
                    host.turns += 1
                    # A failed turn is audited in _run; its unacknowledged messages come back.
                    with contextlib.suppress(Exception):
                        await self._run(
                            host,
                            thread_id=f"mailbox:{host.name}",
                            input=None,
                            sender=None,
                            parent_run_id=None,
                            history=[],
                            inbox=inbox,
                        )
        finally:
            host.waking = False
            if host.wake_requested:  # asked again after the loop's last check
                self.wake(host.name)
            await self._changed(host)

    # ------------------------------------------------------------------ send_message
    async def _check_edge(self, turn: Turn, recipient: str, kind: str) -> None:
        try:
            self.flows.check(turn.agent, recipient, kind=kind)
        except AgencyError as exc:
            await self._audit(
                AuditEventType.MESSAGE_REJECTED,
                "refused",
                turn.agent,
                {"receiver": recipient, "kind": kind, "run_id": turn.run_id, "why": exc.message},
                rule="communication_flows",
            )
            raise

    @asynccontextmanager
    async def _guard(self, key: tuple[str, str]) -> Any:
        """At most one in-flight message per (thread, recipient); later ones queue (FIFO)."""
        lock, users = self._guards.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._guards[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock_now, users_now = self._guards[key]
            if users_now <= 1:
                del self._guards[key]
            else:
                self._guards[key] = (lock_now, users_now - 1)

    def in_flight(self) -> list[tuple[str, str]]:
        """The (thread, recipient) pairs with a send_message in flight or queued."""
        return sorted(self._guards)

    async def _send_message(
        self,
        turn: Turn,
        recipient: str,
        message: str,
        additional_instructions: str,
        params: Mapping[str, Any],
        events: Callable[[SubAgentEvent], None] | None = None,
    ) -> Any:
        await self._check_edge(turn, recipient, "send_message")
        edge = self.flows.edge(turn.agent, recipient)
        assert edge is not None
        tool: type[SendMessage] = edge.tool
        call = tool.parse_args(
            {
                "recipient_agent": recipient,
                "message": message,
                "additional_instructions": additional_instructions,
                **params,
            },
            [recipient],
        )
        if recipient in turn.chain:
            raise FailedPrecondition(
                f"{turn.agent!r} cannot message {recipient!r}: it is already waiting in this call chain "
                f"({' > '.join(turn.chain)})"
            )
        host = self._host(recipient)
        progress = current_progress()
        if progress is not None and not isinstance(events, _TaskForward):
            # inside a governed agent call that streams its progress: the sub-agents' events go
            # to the task's event stream too (and through it to gRPC, A2A and MCP followers)
            events = _TaskForward(progress, events)
        async with self._guard((turn.thread_id, recipient)):
            request = self._smf(turn.agent, recipient, message, turn.thread_id)
            await self._audit_message(request, "send_message", turn.run_id, dict(call.params))
            output, _ = await self._run(
                host,
                thread_id=turn.thread_id,
                input=message,
                sender=turn.agent,
                parent_run_id=turn.run_id,
                history=turn.history,
                inbox=[],
                chain=turn.chain,
                additional_instructions=call.additional_instructions,
                params=call.params,
                events=events,
            )
            reply = self._smf(recipient, turn.agent, _jsonable(output), turn.thread_id)
            await self._audit_message(reply, "send_message.reply", turn.run_id, {})
            if isinstance(events, _TaskForward):
                events.told(SubAgentEvent(recipient, "", turn.run_id, "final", output))
            return output

    def _smf(self, sender: str, receiver: str, content: Any, trace_id: str) -> SMFMessage:
        return SMFMessage.parse(
            {
                "sender": sender,
                "receiver": receiver,
                "content": content if content is not None else "",
                "metadata": {
                    "provenance": Provenance(source=sender, reliability_score=1.0),
                    "freshness_ttl": self.post_office.config.default_ttl,
                    "confidence_score": 1.0,
                    "intention_trace": [f"THREAD_{trace_id[-64:]}"],  # the conversation it serves
                },
                "trace_id": trace_id[-64:],
                # the post office's clock: freshness is checked against it
                "created_at": datetime.fromtimestamp(self.post_office.clock(), UTC),
            },
            what="SMF message",
        )

    async def _audit_message(self, msg: SMFMessage, kind: str, run_id: str, params: dict[str, Any]) -> None:
        await self._audit(
            AuditEventType.MESSAGE_ACCEPTED,
            "accepted",
            msg.sender,
            {
                "message_id": msg.message_id,
                "receiver": msg.receiver,
                "kind": kind,
                "run_id": run_id,
                "params": params,
            },
            trace_id=msg.trace_id,
        )

    # ------------------------------------------------------------------ mailbox posts
    async def post(self, sender: str, recipient: str, content: Any, *, trigger_turn: bool = False) -> str:
        """Post ``content`` from ``sender`` to ``recipient``'s mailbox; returns the message id.

        ``trigger_turn=False`` only queues it (read at the recipient's next turn);
        ``True`` wakes the recipient (now if idle, at its turn boundary if busy).
        """
        sender_host = self._host(sender)
        try:
            self.flows.check(sender, recipient)
        except AgencyError as exc:
            await self._audit(
                AuditEventType.MESSAGE_REJECTED,
                "refused",
                sender,
                {"receiver": recipient, "kind": "post", "why": exc.message},
                rule="communication_flows",
            )
            raise
        self._host(recipient)  # the recipient must run here
        msg = self._smf(sender, recipient, content, new_id("trc"))
        result = await self.post_office.send(
            sender_host.token,
            msg,
            signature=sign_message(sender_host.key, msg, SendOptions(trigger_turn=trigger_turn)),
            trigger_turn=trigger_turn,
        )
        return result.message_id  # a trigger_turn wakes the recipient through _delivered

    def _delivered(self, recipient: str, trigger_turn: bool) -> None:
        if trigger_turn and recipient in self._hosts:
            self.wake(recipient)

    def wake(self, agent: str) -> None:
        """Ask ``agent`` for a turn over its mailbox: now if idle, else at its turn boundary."""
        host = self._host(agent)
        host.wake_requested = True
        if not host.waking:
            host.waking = True
            self._own(self._wake_loop(host))

    # ------------------------------------------------------------------ child runs
    async def spawn(
        self, parent: str, child: str, task: Any, *, parent_run_id: str | None = None
    ) -> ChildRun:
        """Run ``child`` on ``task`` in the background (flow ``parent > child`` required)."""
        self._host(parent)
        host = self._host(child)
        try:
            self.flows.check(parent, child)
        except AgencyError as exc:
            await self._audit(
                AuditEventType.MESSAGE_REJECTED,
                "refused",
                parent,
                {"receiver": child, "kind": "spawn", "why": exc.message},
                rule="communication_flows",
            )
            raise
        run = ChildRun(parent, child, new_id("run"), parent_run_id)
        run.task = self._own(self._child(run, host, task))
        return run

    async def _child(self, run: ChildRun, host: _Host, task: Any) -> None:
        result: ChildResult
        try:
            async with self._session_turn(host) as inbox:
                output, _ = await self._run(
                    host,
                    thread_id=f"child:{run.run_id}",
                    input=task,
                    sender=run.parent,
                    parent_run_id=run.parent_run_id,
                    history=[],
                    inbox=inbox,
                )
            result = ChildResult(run.child, run.run_id, "completed", output=_jsonable(output))
        except asyncio.CancelledError:
            result = ChildResult(run.child, run.run_id, "shut_down", error="shut down before finishing")
            await self._complete(run, result)
            raise
        except Exception as exc:
            result = ChildResult(run.child, run.run_id, "errored", error=f"{type(exc).__name__}: {exc}")
        await self._complete(run, result)

    async def _complete(self, run: ChildRun, result: ChildResult) -> None:
        """The completion watcher: record the final state, tell the parent (without waking it)."""
        run.result = result
        try:
            await self._notify_parent(run, result)
        finally:
            run.done.set()  # after the notice is in the parent's mailbox (or failed to get there)

    async def _notify_parent(self, run: ChildRun, result: ChildResult) -> None:
        token, key = await self._watcher_identity()
        msg = self._smf(
            self.watcher_name,
            run.parent,
            {
                "type": "child_finished",
                "child": result.child,
                "run_id": result.run_id,
                "state": result.state,
                "output": result.output,
                "error": result.error,
            },
            new_id("trc"),
        )
        await self.post_office.send(token, msg, signature=sign_message(key, msg), trigger_turn=False)

    async def wait_child(self, run: ChildRun, timeout: float | None = None) -> ChildResult:  # noqa: ASYNC109
        """Wait for ``run`` to reach a final state.

        Raises:
            DeadlineExceeded: still running after ``timeout`` seconds.
        """
        try:
            await asyncio.wait_for(run.done.wait(), timeout)
        except TimeoutError:
            raise DeadlineExceeded(f"child {run.child!r} ({run.run_id}) still running") from None
        assert run.result is not None
        return run.result

    async def shutdown_child(self, run: ChildRun) -> ChildResult:
        """Stop a child; its final state becomes ``shut_down`` (unless it had already finished)."""
        task = run.task
        while task is not None and not task.done():
            if run.result is None:
                # A library may swallow one cancellation (redis-py can, mid-command): insist,
                # but never once the watcher is posting the final state.
                task.cancel()
            await asyncio.wait({task}, timeout=0.05)
        return await self.wait_child(run)

    # ------------------------------------------------------------------ plumbing
    def _own(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Cancel and await every background task the runtime owns."""
        if self._delivered in self.post_office.on_delivered:
            self.post_office.on_delivered.remove(self._delivered)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _audit(
        self,
        event: AuditEventType,
        outcome: str,
        agent: str,
        detail: dict[str, Any],
        *,
        trace_id: str = "",
        rule: str = "",
    ) -> None:
        await self.audit.append(
            AuditRecord(
                event_type=event,
                component="messaging.runtime",
                actors=Actors(agent=agent),
                trace_id=trace_id,
                outcome=outcome,
                rule=rule,
                detail=detail,
            )
        )


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
