"""The asyncio client of a gateway: AgencyService, CatalogService, GoalService, AuditService."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from datetime import datetime
from typing import Any, TypeVar

import grpc

from .._proto.agency.v1 import (
    agency_pb2,
    agency_pb2_grpc,
    audit_pb2,
    audit_pb2_grpc,
    catalog_pb2,
    catalog_pb2_grpc,
    goals_pb2,
    goals_pb2_grpc,
)
from ..audit.checkpoint import Verifier
from ..catalog import CatalogEntry, CatalogQuery
from ..contracts import CapabilityContract
from ..errors import AlreadyExists, AuditCorrupted, InvalidInput, Unavailable
from ..goals import GoalAssertion
from ..router import RoutingDecision
from ..server.settings import ClientTlsConfig
from ..smf import new_id
from ..task_events import TaskEvent
from ..task_listing import TaskPage, TaskQuery
from ..tasks import Outcome, TaskState
from .audit import AuditEntry, ConsistencyProof, InclusionProof, SignedCheckpoint
from .types import CatalogChange

__all__ = ["AgencyClient", "AuditClient", "CatalogClient", "GoalClient"]

T = TypeVar("T")


def _json(value: Any, field: str) -> str:
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput.single(field, f"not JSON-serialisable: {exc}", what="request") from None


def _time(value: datetime | str | None) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput.single("since/until", "must carry a timezone", what="export request")
        return value.isoformat()
    return value


class _Calls:
    """Runs calls and maps their failures to the library's errors."""

    def __init__(self, address: str, timeout: float | None) -> None:
        self.address = address
        self.timeout = timeout

    async def unary(self, call: Callable[..., Awaitable[T]], request: Any) -> T:
        from ._errors import error_from_rpc

        try:
            return await call(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, self.address) from None

    async def stream(
        self, call: Callable[..., Any], request: Any, deadline: float | None
    ) -> AsyncGenerator[Any, None]:
        from ._errors import error_from_rpc

        responses = call(request, timeout=deadline)
        try:
            async for item in responses:
                yield item
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc, self.address) from None
        finally:
            responses.cancel()


class CatalogClient:
    """``client.catalog``: the capability catalog of the gateway (CatalogService)."""

    def __init__(self, channel: grpc.aio.Channel, calls: _Calls) -> None:
        self._stub = catalog_pb2_grpc.CatalogServiceStub(channel)  # type: ignore[no-untyped-call]
        self._calls = calls

    async def register(
        self, contract: CapabilityContract | Mapping[str, Any], *, replace: bool = False
    ) -> CatalogEntry:
        """Register a contract (validated locally first, every problem named).

        Raises:
            InvalidInput: the contract is invalid.
            AlreadyExists: that name@version is registered and ``replace`` is false.
            PermissionDenied: the token may not register this name.
        """
        from ..server.grpc_api.convert import contract_to_pb, entry_from_pb

        c = contract if isinstance(contract, CapabilityContract) else CapabilityContract.parse(dict(contract))
        request = catalog_pb2.RegisterRequest(contract=contract_to_pb(c), replace=replace)
        return entry_from_pb(await self._calls.unary(self._stub.Register, request))

    async def update(self, contract: CapabilityContract | Mapping[str, Any]) -> CatalogEntry:
        """Replace the contract of an existing name@version.

        Raises:
            NotFound: nothing is registered under that name@version.
        """
        from ..server.grpc_api.convert import contract_to_pb, entry_from_pb

        c = contract if isinstance(contract, CapabilityContract) else CapabilityContract.parse(dict(contract))
        request = catalog_pb2.UpdateRequest(contract=contract_to_pb(c))
        return entry_from_pb(await self._calls.unary(self._stub.Update, request))

    async def get(self, key: str) -> CatalogEntry:
        """The entry of ``name@version``.

        Raises:
            NotFound: no such entry (the message lists the versions of that name, if any).
        """
        from ..server.grpc_api.convert import entry_from_pb

        return entry_from_pb(
            await self._calls.unary(self._stub.Get, catalog_pb2.GetCapabilityRequest(key=key))
        )

    async def query(
        self,
        *,
        name: str = "",
        action: str = "",
        tags: Sequence[str] = (),
        max_slo_latency_ms: int = 0,
        include_stale: bool = False,
        version_range: str = "",
    ) -> list[CatalogEntry]:
        """The entries matching every given criterion (live ones unless ``include_stale``)."""
        from ..server.grpc_api.convert import entry_from_pb

        query = CatalogQuery.parse(
            {
                "name": name,
                "action": action,
                "tags": list(tags),
                "max_slo_latency_ms": max_slo_latency_ms,
                "include_stale": include_stale,
                "version_range": version_range,
            },
            what="catalog query",
        )
        reply = await self._calls.unary(self._stub.Query, catalog_pb2.QueryRequest(**query.model_dump()))
        return [entry_from_pb(e) for e in reply.entries]

    async def deregister(self, key: str) -> None:
        """Remove ``name@version``. Raises NotFound if it is not registered."""
        await self._calls.unary(self._stub.Deregister, catalog_pb2.DeregisterRequest(key=key))

    async def heartbeat(self, key: str) -> CatalogEntry:
        """Renew the lease of ``name@version`` (a stale entry becomes routable again)."""
        from ..server.grpc_api.convert import entry_from_pb

        return entry_from_pb(
            await self._calls.unary(self._stub.Heartbeat, catalog_pb2.HeartbeatRequest(key=key))
        )

    async def watch(self, *, include_existing: bool = False) -> AsyncIterator[CatalogChange]:
        """Catalog changes as they happen (first every current entry if ``include_existing``).

        Runs until the caller stops iterating or the gateway goes away.
        """
        from ..server.grpc_api.convert import entry_from_pb

        request = catalog_pb2.WatchRequest(include_existing=include_existing)
        async for event in self._calls.stream(self._stub.Watch, request, None):
            yield CatalogChange(
                type=event.type,
                key=event.key,
                entry=entry_from_pb(event.entry) if event.HasField("entry") else None,
                at=event.at or None,
            )


class GoalClient:
    """``client.goals``: goal assertions registered on the gateway (GoalService)."""

    def __init__(self, channel: grpc.aio.Channel, calls: _Calls) -> None:
        self._stub = goals_pb2_grpc.GoalServiceStub(channel)  # type: ignore[no-untyped-call]
        self._calls = calls

    async def register(
        self, goal: GoalAssertion | Mapping[str, Any], *, replace: bool = False
    ) -> GoalAssertion:
        """Register a goal assertion (steps may be sentences); returns it normalised.

        Raises:
            InvalidInput: every problem of the goal, by field.
            AlreadyExists: a goal with that id exists and ``replace`` is false.
        """
        data = goal.model_dump(mode="json") if isinstance(goal, GoalAssertion) else dict(goal)
        request = goals_pb2.RegisterGoalRequest(goal_json=_json(data, "goal"), replace=replace)
        reply = await self._calls.unary(self._stub.RegisterGoal, request)
        return GoalAssertion.model_validate_json(reply.goal_json)

    async def get(self, goal_id: str) -> GoalAssertion:
        """The goal registered under ``goal_id``. Raises NotFound if there is none."""
        reply = await self._calls.unary(self._stub.GetGoal, goals_pb2.GetGoalRequest(goal_id=goal_id))
        return GoalAssertion.model_validate_json(reply.goal_json)


class AuditClient:
    """``client.audit``: the gateway's audit log (AuditService), proofs checked on this side."""

    def __init__(self, channel: grpc.aio.Channel, calls: _Calls) -> None:
        self._stub = audit_pb2_grpc.AuditServiceStub(channel)  # type: ignore[no-untyped-call]
        self._calls = calls

    async def export(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        trace_id: str = "",
        goal_id: str = "",
        agent: str = "",
        event_types: Sequence[str] = (),
    ) -> AsyncIterator[AuditEntry]:
        """Verified records (the server verifies each log first), merged across nodes in time order.

        Raises:
            InvalidInput: a bad time, naming ``since`` or ``until``.
            AuditCorrupted: a log on the server does not verify.
        """
        request = audit_pb2.ExportRequest(
            since=_time(since),
            until=_time(until),
            trace_id=trace_id,
            goal_id=goal_id,
            agent=agent,
            event_types=list(event_types),
        )
        async for e in self._calls.stream(self._stub.Export, request, self._calls.timeout):
            yield AuditEntry(node=e.node, index=e.index, time_ns=e.time_ns, record=bytes(e.record))

    async def latest_checkpoint(self, *, vkey: str | None = None) -> SignedCheckpoint:
        """The newest signed checkpoint, its signature checked here.

        Args:
            vkey: The verifier key you pinned (published out of band). Without it the
                signature is checked against the key the server sends, which proves only
                that the note is well formed: pin the key.

        Raises:
            AuditCorrupted: the signature does not verify, or the note and the reply disagree.
            NotFound: no checkpoint has been signed yet.
        """
        pb = await self._calls.unary(self._stub.LatestCheckpoint, audit_pb2.LatestCheckpointRequest())
        checkpoint = Verifier(vkey or pb.vkey).verify(pb.note)
        if (checkpoint.size, checkpoint.root, checkpoint.origin) != (pb.size, bytes(pb.root), pb.origin):
            raise AuditCorrupted("the signed note and the checkpoint fields of the reply disagree")
        return SignedCheckpoint(node=pb.node, checkpoint=checkpoint, vkey=pb.vkey, pinned=vkey is not None)

    async def inclusion_proof(self, index: int, tree_size: int = 0) -> InclusionProof:
        """The server's inclusion proof of record ``index`` (1-based) in the tree of ``tree_size``
        (0: the latest checkpoint's size). Check it with :meth:`InclusionProof.verify`."""
        request = audit_pb2.InclusionProofRequest(index=index, tree_size=tree_size)
        pb = await self._calls.unary(self._stub.InclusionProof, request)
        return InclusionProof(
            index=pb.index, tree_size=pb.tree_size, leaf_hash=bytes(pb.leaf_hash), proof=list(pb.proof)
        )

    async def consistency_proof(self, old_size: int, new_size: int = 0) -> ConsistencyProof:
        """The server's proof that the tree of ``new_size`` extends the one of ``old_size``."""
        request = audit_pb2.ConsistencyProofRequest(old_size=old_size, new_size=new_size)
        pb = await self._calls.unary(self._stub.ConsistencyProof, request)
        return ConsistencyProof(old_size=pb.old_size, new_size=pb.new_size, proof=list(pb.proof))

    async def prove_included(self, entry: AuditEntry, checkpoint: SignedCheckpoint) -> InclusionProof:
        """Fetch and check, here, that ``entry`` is in the log ``checkpoint`` signs.

        Raises:
            AuditCorrupted: the proof does not verify (the record or the log was changed).
            InvalidInput: the entry is of another node, or beyond the checkpoint.
        """
        if entry.node != checkpoint.node:
            raise InvalidInput.single(
                "entry.node", f"is {entry.node}, the checkpoint is of {checkpoint.node}"
            )
        if entry.index > checkpoint.size:
            raise InvalidInput.single(
                "entry.index", f"{entry.index} is beyond the checkpoint ({checkpoint.size})"
            )
        proof = await self.inclusion_proof(entry.index, checkpoint.size)
        proof.verify(entry.record, checkpoint)
        return proof

    async def prove_consistent(self, old: SignedCheckpoint, new: SignedCheckpoint) -> ConsistencyProof:
        """Fetch and check, here, that the log of ``new`` extends the log of ``old`` (nothing rewritten).

        Raises:
            AuditCorrupted: the proof does not verify.
        """
        proof = await self.consistency_proof(old.size, new.size)
        proof.verify(old, new)
        return proof


class AgencyClient:
    """An asyncio client of a gateway, raising the library's errors (``middleware.errors``).

    Example::

        async with AgencyClient("127.0.0.1:50051") as client:
            outcome = await client.submit("I want a replacement", goal_id="GOAL_WARRANTY_001")
            decision = await client.route("predict the stock price")
            entries = await client.catalog.query(action="ship_replacement")

    Services: :meth:`submit`, :meth:`route`, :meth:`resume`, :meth:`get_task`, :meth:`cancel`,
    :meth:`watch`, :meth:`list_tasks` (AgencyService),
    ``catalog`` (:class:`CatalogClient`), ``goals`` (:class:`GoalClient`), ``audit``
    (:class:`AuditClient`). A failed call raises the :class:`~middleware.errors.AgencyError`
    the server raised (``INVALID_ARGUMENT`` is :class:`~middleware.errors.InvalidInput` with
    every problem, ``NOT_FOUND`` :class:`~middleware.errors.NotFound` ...); a gateway that does
    not answer is :class:`~middleware.errors.Unavailable`.

    Several gateways (a fleet sharing Redis): give their addresses (a list, or ``"a:1,b:2"``);
    calls go to one of them, and when it cannot be reached (killed, restarting, NOT_SERVING)
    the same call goes to the next (see :mod:`middleware.server.grpc_api.failover`).

    Args:
        address: ``host:port`` of the gateway, or several (a sequence, or comma-separated).
        tls: Verify the gateway with TLS (and present a client certificate for mTLS).
        token: Bearer token sent on every call.
        timeout: Seconds per call (None: no deadline; a task may run long).
        channel: Use this grpc.aio channel instead of opening one (then not closed by :meth:`close`).
    """

    def __init__(
        self,
        address: str | Sequence[str] = "127.0.0.1:50051",
        *,
        tls: ClientTlsConfig | None = None,
        token: str | None = None,
        timeout: float | None = None,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        from ..server.grpc_api.failover import gateway_channel, split_addresses

        self.addresses = split_addresses(address) if channel is None else [str(address)]
        self.address = ",".join(self.addresses)
        self._owns = channel is None
        self._channel = channel or gateway_channel(self.addresses, tls=tls, token=token)
        self._calls = _Calls(self.address, timeout)
        self._stub = agency_pb2_grpc.AgencyServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self.catalog = CatalogClient(self._channel, self._calls)
        self.goals = GoalClient(self._channel, self._calls)
        self.audit = AuditClient(self._channel, self._calls)

    async def __aenter__(self) -> AgencyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel (if this client opened it)."""
        if self._owns:
            await self._channel.close()

    async def submit(
        self,
        text: str,
        *,
        goal_id: str = "",
        goal: GoalAssertion | Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        constraints: Mapping[str, Any] | None = None,
        steps: Sequence[Mapping[str, Any]] = (),
        user_id: str = "",
        session_id: str = "",
        trace_id: str = "",
        task_id: str = "",
        wait: bool = True,
    ) -> Outcome:
        """Submit a task and wait for its outcome (``wait=False``: only until it is accepted).

        Args:
            text: The request in words.
            goal_id: A registered goal to verify (or ``goal``: an inline goal assertion).
            goal: An inline goal assertion.
            input: Structured input for the agents.
            constraints: Explicit constraints (merged over those extracted from ``text``).
            steps: Several steps in order, each ``{"name", "action", "tags", "text", "input"}``.
            user_id: Who asks (default ``anonymous``).
            session_id: The user's session.
            trace_id: Join an existing trace (default: new, or the caller's OTel trace).
            task_id: Choose the task id (default: generated here, so that a task whose
                gateway went away during the call can be found again).
            wait: ``False``: answer as soon as the gateway accepted the task and made it durable
                (state ``submitted``, its ``task_id`` and ``trace_id``); the gateway runs it on.
                Follow it with :meth:`watch`, read it with :meth:`get_task`.

        Returns:
            The task's outcome: a refusal or a failure is an outcome (``state``), not an error.

        Raises:
            InvalidInput: a bad field, named (``text``, ``steps[1].input`` ...).
            NotFound: ``goal_id`` is not registered.
            Unavailable: no gateway answered, or the connection broke during the call;
                ``details["task_id"]`` names the task: :meth:`get_task` finds it if a gateway
                received it (it runs on, or is taken over and ``interrupted`` if its gateway died).
        """
        task_id = task_id or new_id("task")
        goal_data = goal.model_dump(mode="json") if isinstance(goal, GoalAssertion) else goal
        pb_steps = []
        for i, step in enumerate(steps):
            unknown = set(step) - {"name", "action", "tags", "text", "input"}
            if unknown:
                raise InvalidInput.single(f"steps[{i}]", f"unknown keys {sorted(unknown)}", what="task")
            pb_steps.append(
                agency_pb2.TaskStep(
                    name=str(step.get("name", "")),
                    action=str(step.get("action", "")),
                    tags=list(step.get("tags", ())),
                    text=str(step.get("text", "")),
                    input_json=_json(step.get("input"), f"steps[{i}].input"),
                )
            )
        request = agency_pb2.SubmitRequest(
            task_id=task_id,
            text=text,
            goal_json=_json(goal_data, "goal"),
            goal_id=goal_id,
            input_json=_json(input, "input"),
            constraints_json=_json(constraints, "constraints"),
            steps=pb_steps,
            user_id=user_id,
            session_id=session_id,
            trace_id=trace_id,
            return_immediately=not wait,
        )
        from ..server.grpc_api.convert import outcome_from_pb
        from ..server.grpc_api.failover import resends

        with resends() as resent:
            try:
                return outcome_from_pb(await self._calls.unary(self._stub.Submit, request))
            except AlreadyExists:
                if not resent:  # a task of that id was there before this call
                    raise
                raise Unavailable(
                    f"the connection to the gateway broke during the submit of task {task_id}, and "
                    f"{resent[-1]} already has it: the first gateway took it (it finishes it, or if it died "
                    f"another takes it over and marks it interrupted): get_task({task_id!r}) finds it",
                    details={"task_id": task_id},
                ) from None
            except Unavailable as exc:
                raise type(exc)(
                    f"{exc.message} (task {task_id}: get_task({task_id!r}) finds it if a gateway got it)",
                    details={**exc.details, "task_id": task_id},
                ) from None

    async def route(self, text: str, constraints: Mapping[str, Any] | None = None) -> RoutingDecision:
        """Ask the router, without running anything: who would get ``text``, and why.

        A refusal is a decision with ``refused`` true and the rejections, not an error.
        """
        from ..server.grpc_api.convert import decision_from_pb

        request = agency_pb2.RouteRequest(text=text, constraints_json=_json(constraints, "constraints"))
        return decision_from_pb(await self._calls.unary(self._stub.Route, request))

    async def resume(
        self,
        task_id: str,
        *,
        answer: str | None = None,
        decision: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """Resume a task waiting for input (``state == "input_required"``) or ``interrupted``
        (no answer: it goes on where it was cut off; its step in flight runs again only if the
        agent's contract allows it, else decide ``provide_output``, ``abort`` or ``cancel``).

        Args:
            task_id: The task.
            answer: The chosen option id of a clarification or conflict (or the value of the
                one field a ``missing_input`` question asks for); or
            input: The fields a ``missing_input`` question asks for, ``{"device_model": ...}``; or
            decision: A human handover decision,
                ``{"action": "retry|use_agent|provide_output|abort|cancel", ...}``.

        Raises:
            NotFound: no such task.
            FailedPrecondition: the task is not waiting for input.
            PermissionDenied: the task belongs to another client.
        """
        from ..server.grpc_api.convert import outcome_from_pb

        request = agency_pb2.ResumeRequest(
            task_id=task_id,
            answer=answer or "",
            decision_json=_json(decision, "decision"),
            input_json=_json(input, "input"),
        )
        return outcome_from_pb(await self._calls.unary(self._stub.Resume, request))

    async def cancel(self, task_id: str, *, reason: str = "") -> Outcome:
        """Cancel a task waiting for input (``input_required``, ``auth_required``) or
        ``interrupted``; canceling a canceled task again returns its outcome.

        Raises:
            NotFound: no such task.
            FailedPrecondition: the task has finished (``details["state"]``), or is running.
            PermissionDenied: the task belongs to another client (owner or admin only).
        """
        from ..server.grpc_api.convert import outcome_from_pb

        request = agency_pb2.CancelRequest(task_id=task_id, reason=reason)
        return outcome_from_pb(await self._calls.unary(self._stub.Cancel, request))

    async def get_task(self, task_id: str) -> Outcome:
        """The task's current outcome (any state). Raises NotFound if there is no such task."""
        from ..server.grpc_api.convert import outcome_from_pb

        reply = await self._calls.unary(self._stub.GetTask, agency_pb2.GetTaskRequest(task_id=task_id))
        return outcome_from_pb(reply)

    async def watch(
        self, task_id: str, *, after: int = 0, reconnect_for: float = 30.0
    ) -> AsyncIterator[TaskEvent]:
        """Follow a task: its events as they happen (from the start, or after ``after``), until
        it ends; the last is its ``task.outcome`` with ``final``, the task's outcome.

        A broken stream (the gateway restarted, a replica went away, the network) is opened
        again after the last event received, so nothing is missed or repeated; it gives up when
        no gateway answers for ``reconnect_for`` seconds (0: never reconnect).

        Args:
            task_id: The task (a no-wait :meth:`submit` returns it).
            after: The ``seq`` of the last event already seen (0: from the start).
            reconnect_for: Seconds to keep trying to reconnect before raising ``Unavailable``.

        Raises:
            NotFound: no such task. PermissionDenied: another client's task.
            Unavailable: no gateway answered for ``reconnect_for`` seconds.
        """
        from ..server.grpc_api.convert_tasks import event_from_pb

        backoff, failing_since = 0.05, None
        while True:
            request = agency_pb2.WatchTaskRequest(task_id=task_id, after_seq=after)
            try:
                async with aclosing(self._calls.stream(self._stub.WatchTask, request, None)) as stream:
                    async for pb in stream:
                        event = event_from_pb(pb)
                        backoff, failing_since = 0.05, None
                        after = max(after, event.seq)
                        yield event
                        if event.ends_task:
                            return
                return  # the gateway ended the stream (the task ended)
            except Unavailable:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since >= reconnect_for:
                    raise
            await asyncio.sleep(backoff)  # a gateway coming back, or the channel trying another
            backoff = min(backoff * 2, 2.0)

    async def list_tasks(
        self,
        *,
        states: Sequence[TaskState | str] = (),
        goal_id: str = "",
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        page_size: int = 50,
        page_token: str = "",
        client: str = "",
    ) -> TaskPage:
        """One page of the caller's tasks (an admin: everyone's), newest first.

        Args:
            states: Any of these states (empty: all).
            goal_id: Tasks of this goal.
            created_after: Created at or after (a datetime with a zone, or RFC 3339 text).
            created_before: Created before.
            page_size: Rows per page (1..500).
            page_token: ``next_page_token`` of the page before ("" = the first page).
            client: An admin: only this client's tasks.

        Returns:
            A :class:`~middleware.task_listing.TaskPage`; go on while ``next_page_token`` is set
            (a page may hold fewer rows than asked and still go on).

        Raises:
            InvalidInput: a bad filter, named (checked here first).
            PermissionDenied: ``client`` names another client and the caller is no admin.
        """
        from ..server.grpc_api.convert_tasks import page_from_pb, query_to_pb

        query = TaskQuery.parse(
            {
                "client": client or None,
                "states": list(states),
                "goal_id": goal_id,
                "created_after": created_after,
                "created_before": created_before,
                "page_size": page_size,
                "page_token": page_token,
            },
            what="task list",
        )
        for field in ("created_after", "created_before"):
            when = getattr(query, field)
            if when is not None and when.tzinfo is None:
                raise InvalidInput.single(field, "must carry a time zone", what="task list")
        return page_from_pb(await self._calls.unary(self._stub.ListTasks, query_to_pb(query)))
