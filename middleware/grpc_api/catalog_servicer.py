"""``agency.v1.CatalogService`` over the core catalog."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from .._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from ..access import current_caller, current_principal
from ..catalog import CatalogEntry, CatalogEvent
from ..contracts import CapabilityContract
from ..errors import PermissionDenied
from ..grants import Grants, check_grant
from ..pipeline import Agency
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


def _contract(pb: common_pb2.CapabilityContract) -> CapabilityContract:
    """The contract in a request, with its schemas checked and compiled (CPU work: run off the loop)."""
    contract = contract_from_pb(pb)
    if contract.input_schema:
        contract.compiled_schema("input")
    if contract.output_schema:
        contract.compiled_schema("output")
    return contract


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
    ) -> None:
        self._agency = agency
        self._grants: Grants = grants or {}
        self._on_deny = on_deny

    async def _granted(self, contract: CapabilityContract, operation: str) -> None:
        try:
            check_grant(current_principal(), contract, self._grants, operation=operation)
        except PermissionDenied as exc:
            if self._on_deny is not None:
                await self._on_deny(exc)
            raise

    @rpc
    async def Register(
        self, request: catalog_pb2.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        contract = await asyncio.to_thread(_contract, request.contract)
        await self._granted(contract, "CatalogService/Register")
        entry = await self._agency.register(contract, replace=request.replace, actor=current_caller())
        return entry_to_pb(entry)

    @rpc
    async def Get(
        self, request: catalog_pb2.GetCapabilityRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        return entry_to_pb(await self._agency.catalog.get(request.key))

    @rpc
    async def Query(
        self, request: catalog_pb2.QueryRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.QueryResponse:
        entries = await self._agency.catalog.query(query_from_pb(request))
        return catalog_pb2.QueryResponse(entries=[entry_to_pb(e) for e in entries])

    @rpc
    async def Update(
        self, request: catalog_pb2.UpdateRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        contract = await asyncio.to_thread(_contract, request.contract)
        await self._granted(contract, "CatalogService/Update")
        await self._agency.catalog.get(contract.key)  # NOT_FOUND unless it exists
        return entry_to_pb(await self._agency.register(contract, replace=True, actor=current_caller()))

    @rpc
    async def Deregister(
        self, request: catalog_pb2.DeregisterRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.DeregisterResponse:
        await self._agency.deregister(request.key, actor=current_caller())
        return catalog_pb2.DeregisterResponse()

    @rpc
    async def Heartbeat(
        self, request: catalog_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        return entry_to_pb(await self._agency.catalog.heartbeat(request.key))

    @rpc_stream
    async def Watch(
        self, request: catalog_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[catalog_pb2.CatalogEvent]:
        # subscribe first, then list: nothing that happens in between is lost
        async with self._agency.catalog.watch() as events:
            if request.include_existing:
                for entry in await self._agency.catalog.all():
                    yield _existing(entry)
            async for event in events:
                yield event_to_pb(event)
