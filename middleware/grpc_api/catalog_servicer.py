"""``agency.v1.CatalogService`` over the core catalog."""

from __future__ import annotations

import grpc

from .._proto.agency.v1 import catalog_pb2, catalog_pb2_grpc
from ..pipeline import Agency
from .convert import contract_from_pb, entry_to_pb, query_from_pb
from .status import rpc


class CatalogServicer(catalog_pb2_grpc.CatalogServiceServicer):
    def __init__(self, agency: Agency) -> None:
        self._agency = agency

    @rpc
    async def Register(
        self, request: catalog_pb2.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> catalog_pb2.CatalogEntry:
        contract = contract_from_pb(request.contract)
        entry = await self._agency.register(contract, replace=request.replace)
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
