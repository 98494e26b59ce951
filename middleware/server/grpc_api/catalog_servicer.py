"""``agency.v1.CatalogService`` over the core catalog."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from ..._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from ...access import Principal, Role, current_caller, current_principal
from ...caller_limits import CallerLimits, CpuBudget, StreamCounter, WriteRateLimiter
from ...catalog import CatalogEntry, CatalogEvent, CatalogWatch
from ...contracts import CapabilityContract
from ...errors import AgencyError, NotFound, PermissionDenied, ResourceExhausted
from ...grants import Grants, check_grant
from ...pipeline import Agency
from ...tenancy import global_reader, sees, split_key, tenant_of
from .convert import contract_from_pb, entry_to_pb, query_from_pb
from .status import rpc, rpc_stream


def event_to_pb(event: CatalogEvent) -> catalog_pb2.CatalogEvent:
    return catalog_pb2.CatalogEvent(
        type=event.type.value,
        key=event.key,
        entry=entry_to_pb(event.entry) if event.entry is not None else None,
        at=event.at.isoformat(),
    )


def _existing(entry: CatalogEntry) -> catalog_pb2.CatalogEvent:
    return catalog_pb2.CatalogEvent(
        type="existing", key=entry.key, entry=entry_to_pb(entry), at=entry.last_heartbeat.isoformat()
    )


def _contract(pb: common_pb2.CapabilityContract) -> tuple[CapabilityContract, float]:
    """The contract in a request, with its schemas checked and compiled (CPU work: run off the
    loop), and the CPU seconds that took this thread (charged to the caller)."""
    started = time.thread_time()
    try:
        contract = contract_from_pb(pb)
        if contract.input_schema:
            contract.compiled_schema("input")
        if contract.output_schema:
            contract.compiled_schema("output")
    except AgencyError as exc:
        exc.details.setdefault("cpu_seconds", time.thread_time() - started)
        raise
    return contract, time.thread_time() - started


class CatalogServicer(catalog_pb2_grpc.CatalogServiceServicer):
    """Catalog reads and writes; an agent's writes must stay within its grant (:mod:`..grants`).

    Args:
        agency: The agency whose catalog is served.
        grants: What each agent identity may declare (checked when tokens are on).
        on_deny: Awaited with each refusal before the call ends (the gateway audits it).
    """

    def __init__(
        self,
        agency: Agency,
        *,
        grants: Grants | None = None,
        on_deny: Callable[[PermissionDenied], Awaitable[None]] | None = None,
        limits: CallerLimits | None = None,
    ) -> None:
        self._agency = agency
        self._grants: Grants = grants or {}
        self._on_deny = on_deny
        self._limits = limits or CallerLimits()
        self._streams = StreamCounter(self._limits.watch_streams)
        self._writes = WriteRateLimiter(
            self._limits.catalog_writes_per_second, self._limits.catalog_write_burst
        )
        self._schema_cpu = CpuBudget(self._limits.schema_cpu_seconds_per_minute)

    async def _compiled(self, pb: common_pb2.CapabilityContract, operation: str) -> CapabilityContract:
        """The request's contract, its schemas compiled off the loop and their CPU time charged to
        the caller (refused first while the caller's budget is spent; admins are not limited)."""
        principal = current_principal()
        caller = principal.name if principal is not None and principal.role is not Role.ADMIN else None
        if caller is not None:
            self._schema_cpu.check(caller, operation=operation)
        try:
            contract, seconds = await asyncio.to_thread(_contract, pb)
        except AgencyError as exc:  # a schema refused half-way still cost what it cost
            if caller is not None:
                self._schema_cpu.charge(caller, float(exc.details.pop("cpu_seconds", 0.0)))
            raise
        if caller is not None:
            self._schema_cpu.charge(caller, seconds)
        return contract

    def _write(self, operation: str) -> None:
        """Spend one catalog write of the caller (admins, and everyone with tokens off, are not
        limited: without tokens there is no caller to count for)."""
        principal = current_principal()
        if principal is not None and principal.role is not Role.ADMIN:
            self._writes.take(principal.name, operation=operation)

    @contextmanager
    def _stream(self) -> Iterator[None]:
        principal = current_principal()
        if principal is None:  # tokens off: no caller to count for
            yield
            return
        with self._streams.holding(principal.name):
            yield

    async def _granted(self, contract: CapabilityContract, operation: str) -> CapabilityContract:
        """The contract in the caller's tenant (set when it names none), within its grant."""
        principal = current_principal()
        try:
            contract = _in_tenant(principal, contract, operation)
            check_grant(principal, contract, self._grants, operation=operation)
        except PermissionDenied as exc:
            if self._on_deny is not None:
                await self._on_deny(exc)
            raise
        return contract

    async def _visible(self, key: str) -> CatalogEntry:
        """The entry ``key`` if the caller may see it (NOT_FOUND otherwise: another tenant's
        agents are not even named)."""
        entry = await self._agency.catalog.get(key)
        if not _sees(current_principal(), entry):
            raise NotFound(f"no capability {key!r}")
        return entry

    @rpc
    async def Register(
        self, request: catalog_pb2.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        self._write("CatalogService/Register")
        contract = await self._compiled(request.contract, "CatalogService/Register")
        contract = await self._granted(contract, "CatalogService/Register")
        entry = await self._agency.register(contract, replace=request.replace, actor=current_caller())
        return entry_to_pb(entry)

    @rpc
    async def Get(
        self, request: catalog_pb2.GetCapabilityRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        return entry_to_pb(await self._visible(request.key))

    @rpc
    async def Query(
        self, request: catalog_pb2.QueryRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.QueryResponse:
        entries = await self._agency.catalog.query(query_from_pb(request))
        caller = current_principal()
        return catalog_pb2.QueryResponse(entries=[entry_to_pb(e) for e in entries if _sees(caller, e)])

    @rpc
    async def Update(
        self, request: catalog_pb2.UpdateRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        self._write("CatalogService/Update")
        contract = await self._compiled(request.contract, "CatalogService/Update")
        contract = await self._granted(contract, "CatalogService/Update")
        await self._visible(contract.key)  # NOT_FOUND unless it exists
        return entry_to_pb(await self._agency.register(contract, replace=True, actor=current_caller()))

    @rpc
    async def Deregister(
        self, request: catalog_pb2.DeregisterRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.DeregisterResponse:
        self._write("CatalogService/Deregister")
        await self._own_tenant(request.key)
        await self._agency.deregister(request.key, actor=current_caller())
        return catalog_pb2.DeregisterResponse()

    @rpc
    async def Heartbeat(
        self, request: catalog_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        self._write("CatalogService/Heartbeat")
        await self._own_tenant(request.key)
        return entry_to_pb(await self._agency.catalog.heartbeat(request.key))

    async def _own_tenant(self, key: str) -> None:
        """A write to ``key`` only within the caller's own tenant (a global admin: any)."""
        principal = current_principal()
        if principal is not None and not global_reader(principal) and split_key(key)[0] != principal.tenant:
            raise NotFound(f"no capability {key!r}")

    @rpc_stream
    async def Watch(
        self, request: catalog_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[catalog_pb2.CatalogEvent]:
        # One caller holds a bounded number of streams, each with a bounded backlog: a
        # consumer that does not read is dropped instead of growing the gateway's memory.
        with self._stream():
            # subscribe first, then list: nothing that happens in between is lost
            async with self._agency.catalog.watch() as events:
                backlog = _Backlog(self._limits.watch_queue, self._limits.watch_backlog_bytes)
                pump = asyncio.create_task(backlog.pump(events))
                waiting: set[asyncio.Future[Any]] = set()
                try:
                    caller = current_principal()
                    if request.include_existing:
                        for entry in await self._agency.catalog.all():
                            backlog.check()
                            if _sees(caller, entry):
                                yield _existing(entry)
                    while True:
                        backlog.check()
                        get = asyncio.ensure_future(backlog.queue.get())
                        dropped = asyncio.ensure_future(backlog.overflowed.wait())
                        waiting = {get, dropped}
                        await asyncio.wait({get, dropped, pump}, return_when=asyncio.FIRST_COMPLETED)
                        dropped.cancel()
                        if not get.done():
                            get.cancel()
                            if pump.done() and not backlog.overflowed.is_set():
                                pump.result()  # the watch ended (or failed): so does the stream
                                while not backlog.queue.empty():
                                    yield backlog.taken(backlog.queue.get_nowait())
                                return
                            continue
                        event = backlog.taken(get.result())
                        if _event_seen(caller, event):
                            yield event
                finally:
                    pending = [f for f in (pump, *waiting) if not f.done()]
                    for f in pending:
                        f.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)


def _sees(principal: Principal | None, entry: CatalogEntry) -> bool:
    """Whether ``principal`` may see ``entry``: its tenant's, one shared with it, or a global reader."""
    contract = entry.contract
    return sees(principal, contract.tenant) or contract.routable_for(tenant_of(principal))


def _event_seen(principal: Principal | None, event: catalog_pb2.CatalogEvent) -> bool:
    if global_reader(principal):
        return True
    if event.HasField("entry"):
        contract = event.entry.contract
        return contract.tenant == tenant_of(principal) or bool(
            {"*", tenant_of(principal)} & set(contract.shared_with)
        )
    return split_key(event.key)[0] == tenant_of(principal)


def _in_tenant(
    principal: Principal | None, contract: CapabilityContract, operation: str
) -> CapabilityContract:
    """``contract`` in the caller's tenant: a caller of a tenant registers into it (the
    contract's tenant is set to it, another is refused); a global admin names any tenant."""
    if principal is None or global_reader(principal):
        return contract
    if not contract.tenant:
        return contract.model_copy(update={"tenant": principal.tenant}) if principal.tenant else contract
    if contract.tenant != principal.tenant:
        raise PermissionDenied(
            f"client {principal.name!r} (role {principal.role.value}) may not {operation} "
            f"{contract.key}: a caller registers only in its own tenant "
            f"({principal.tenant or 'none'})",
            details={
                "client": principal.name,
                "role": principal.role.value,
                "operation": operation,
                "permission": "catalog_write",
                "target": contract.key,
            },
        )
    return contract


class _Backlog:
    """One Watch stream's events not yet sent, bounded in count and in bytes."""

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self.max_events, self.max_bytes = max_events, max_bytes
        self.queue: asyncio.Queue[tuple[catalog_pb2.CatalogEvent, int]] = asyncio.Queue()
        self.bytes = 0
        self.overflowed = asyncio.Event()

    async def pump(self, events: CatalogWatch) -> None:
        """Move a watch's events into the backlog (as the messages to send). On overflow,
        unsubscribe at once: the subscription's own queue would grow while the stream waits."""
        async for event in events:
            message = event_to_pb(event)
            size = message.ByteSize()
            if self.queue.qsize() >= self.max_events or self.bytes + size > self.max_bytes:
                self.overflowed.set()
                await events.aclose()
                return
            self.bytes += size
            self.queue.put_nowait((message, size))

    def taken(self, item: tuple[catalog_pb2.CatalogEvent, int]) -> catalog_pb2.CatalogEvent:
        self.bytes -= item[1]
        return item[0]

    def check(self) -> None:
        if self.overflowed.is_set():
            raise ResourceExhausted(
                f"this Watch stream fell more than {self.max_events} events or {self.max_bytes} bytes "
                "behind (AGENCY_WATCH_QUEUE, AGENCY_WATCH_BACKLOG_BYTES): the consumer reads too "
                "slowly and was dropped; re-read with Query, then watch again",
                retryable=True,
            )
