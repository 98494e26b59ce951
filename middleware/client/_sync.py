"""The blocking client: the asyncio client run on a private event loop in a background thread.

So it works from plain scripts and from code that already runs an event loop (a notebook).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..catalog import CatalogEntry
from ..contracts import CapabilityContract
from ..goals import GoalAssertion
from ..router import RoutingDecision
from ..server.settings import ClientTlsConfig
from ..task_events import TaskEvent
from ..task_listing import TaskPage
from ..tasks import Outcome, TaskState
from ._async import AgencyClient
from .audit import AuditEntry, ConsistencyProof, InclusionProof, SignedCheckpoint
from .types import CatalogChange

__all__ = ["SyncAgencyClient"]

T = TypeVar("T")


class _Loop:
    """An event loop in a daemon thread; coroutines are run on it and awaited from the caller."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agency-client", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> tuple[bool, T | None]:
            try:
                return True, await anext(stream)
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, item = self.run(step())
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None and not self.loop.is_closed():
                self.run(aclose())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class _SyncCatalog:
    def __init__(self, loop: _Loop, client: AgencyClient) -> None:
        self._loop, self._c = loop, client.catalog

    def register(
        self, contract: CapabilityContract | Mapping[str, Any], *, replace: bool = False
    ) -> CatalogEntry:
        """See :meth:`CatalogClient.register`."""
        return self._loop.run(self._c.register(contract, replace=replace))

    def update(self, contract: CapabilityContract | Mapping[str, Any]) -> CatalogEntry:
        """See :meth:`CatalogClient.update`."""
        return self._loop.run(self._c.update(contract))

    def get(self, key: str) -> CatalogEntry:
        """See :meth:`CatalogClient.get`."""
        return self._loop.run(self._c.get(key))

    def query(
        self,
        *,
        name: str = "",
        action: str = "",
        tags: Sequence[str] = (),
        max_slo_latency_ms: int = 0,
        include_stale: bool = False,
        version_range: str = "",
    ) -> list[CatalogEntry]:
        """See :meth:`CatalogClient.query`."""
        return self._loop.run(
            self._c.query(
                name=name,
                action=action,
                tags=tags,
                max_slo_latency_ms=max_slo_latency_ms,
                include_stale=include_stale,
                version_range=version_range,
            )
        )

    def deregister(self, key: str) -> None:
        """See :meth:`CatalogClient.deregister`."""
        self._loop.run(self._c.deregister(key))

    def heartbeat(self, key: str) -> CatalogEntry:
        """See :meth:`CatalogClient.heartbeat`."""
        return self._loop.run(self._c.heartbeat(key))

    def watch(self, *, include_existing: bool = False) -> Iterator[CatalogChange]:
        """See :meth:`CatalogClient.watch`; close the iterator to stop watching."""
        return self._loop.iterate(self._c.watch(include_existing=include_existing))


class _SyncGoals:
    def __init__(self, loop: _Loop, client: AgencyClient) -> None:
        self._loop, self._c = loop, client.goals

    def register(self, goal: GoalAssertion | Mapping[str, Any], *, replace: bool = False) -> GoalAssertion:
        """See :meth:`GoalClient.register`."""
        return self._loop.run(self._c.register(goal, replace=replace))

    def get(self, goal_id: str) -> GoalAssertion:
        """See :meth:`GoalClient.get`."""
        return self._loop.run(self._c.get(goal_id))


class _SyncAudit:
    def __init__(self, loop: _Loop, client: AgencyClient) -> None:
        self._loop, self._c = loop, client.audit

    def export(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        trace_id: str = "",
        goal_id: str = "",
        agent: str = "",
        event_types: Sequence[str] = (),
    ) -> Iterator[AuditEntry]:
        """See :meth:`AuditClient.export`."""
        return self._loop.iterate(
            self._c.export(
                since=since,
                until=until,
                trace_id=trace_id,
                goal_id=goal_id,
                agent=agent,
                event_types=event_types,
            )
        )

    def latest_checkpoint(self, *, vkey: str | None = None) -> SignedCheckpoint:
        """See :meth:`AuditClient.latest_checkpoint`."""
        return self._loop.run(self._c.latest_checkpoint(vkey=vkey))

    def inclusion_proof(self, index: int, tree_size: int = 0) -> InclusionProof:
        """See :meth:`AuditClient.inclusion_proof`."""
        return self._loop.run(self._c.inclusion_proof(index, tree_size))

    def consistency_proof(self, old_size: int, new_size: int = 0) -> ConsistencyProof:
        """See :meth:`AuditClient.consistency_proof`."""
        return self._loop.run(self._c.consistency_proof(old_size, new_size))

    def prove_included(self, entry: AuditEntry, checkpoint: SignedCheckpoint) -> InclusionProof:
        """See :meth:`AuditClient.prove_included`."""
        return self._loop.run(self._c.prove_included(entry, checkpoint))

    def prove_consistent(self, old: SignedCheckpoint, new: SignedCheckpoint) -> ConsistencyProof:
        """See :meth:`AuditClient.prove_consistent`."""
        return self._loop.run(self._c.prove_consistent(old, new))


class SyncAgencyClient:
    """The blocking twin of :class:`AgencyClient`: same methods, same errors, no ``await``.

    Example::

        with SyncAgencyClient("127.0.0.1:50051") as client:
            outcome = client.submit("I want a replacement", goal_id="GOAL_WARRANTY_001")
            print(outcome.state, outcome.trace_id)

    Args:
        address: ``host:port`` of the gateway, or several (a sequence, or comma-separated):
            calls fail over to the next when one cannot be reached (see :class:`AgencyClient`).
        tls: Verify the gateway with TLS (and present a client certificate for mTLS).
        token: Bearer token sent on every call.
        timeout: Seconds per call (None: no deadline).
    """

    def __init__(
        self,
        address: str | Sequence[str] = "127.0.0.1:50051",
        *,
        tls: ClientTlsConfig | None = None,
        token: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self._loop = _Loop()

        async def make() -> AgencyClient:  # the channel belongs to the client's loop
            return AgencyClient(address, tls=tls, token=token, timeout=timeout)

        try:
            self._client = self._loop.run(make())
        except BaseException:
            self._loop.close()
            raise
        self.address = self._client.address
        self.addresses = self._client.addresses
        self.catalog = _SyncCatalog(self._loop, self._client)
        self.goals = _SyncGoals(self._loop, self._client)
        self.audit = _SyncAudit(self._loop, self._client)

    def __enter__(self) -> SyncAgencyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel and stop the client's thread."""
        if self._loop.loop.is_closed():
            return
        self._loop.run(self._client.close())
        self._loop.close()

    def submit(
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
        """See :meth:`AgencyClient.submit`."""
        return self._loop.run(
            self._client.submit(
                text,
                goal_id=goal_id,
                goal=goal,
                input=input,
                constraints=constraints,
                steps=steps,
                user_id=user_id,
                session_id=session_id,
                trace_id=trace_id,
                task_id=task_id,
                wait=wait,
            )
        )

    def route(self, text: str, constraints: Mapping[str, Any] | None = None) -> RoutingDecision:
        """See :meth:`AgencyClient.route`."""
        return self._loop.run(self._client.route(text, constraints))

    def resume(
        self,
        task_id: str,
        *,
        answer: str | None = None,
        decision: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """See :meth:`AgencyClient.resume`."""
        return self._loop.run(self._client.resume(task_id, answer=answer, decision=decision, input=input))

    def get_task(self, task_id: str) -> Outcome:
        """See :meth:`AgencyClient.get_task`."""
        return self._loop.run(self._client.get_task(task_id))

    def cancel(self, task_id: str, *, reason: str = "") -> Outcome:
        """See :meth:`AgencyClient.cancel`."""
        return self._loop.run(self._client.cancel(task_id, reason=reason))

    def watch(self, task_id: str, *, after: int = 0, reconnect_for: float = 30.0) -> Iterator[TaskEvent]:
        """See :meth:`AgencyClient.watch`; close the iterator to stop following."""
        return self._loop.iterate(self._client.watch(task_id, after=after, reconnect_for=reconnect_for))

    def list_tasks(
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
        """See :meth:`AgencyClient.list_tasks`."""
        return self._loop.run(
            self._client.list_tasks(
                states=states,
                goal_id=goal_id,
                created_after=created_after,
                created_before=created_before,
                page_size=page_size,
                page_token=page_token,
                client=client,
            )
        )
