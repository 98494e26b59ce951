"""``agency.v1.AuditService`` over the gateway's write-ahead audit log."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import grpc

from ..._proto.agency.v1 import audit_pb2, audit_pb2_grpc
from ...access import current_principal
from ...audit.checkpoint import Checkpoint
from ...audit.export import ExportedRecord, ExportFilter, iter_records
from ...audit.wal import WalAuditLog
from ...errors import FailedPrecondition, InvalidInput, NotFound
from ...pipeline import Agency
from .status import rpc, rpc_stream

__all__ = ["AuditServicer", "filter_from_pb"]

_CHUNK = 500


def _wal(audit: Any) -> WalAuditLog:
    """The WalAuditLog behind the agency's audit log (wrappers expose it as ``inner``)."""
    seen = 0
    while not isinstance(audit, WalAuditLog):
        audit = getattr(audit, "inner", None)
        seen += 1
        if audit is None or seen > 8:
            raise FailedPrecondition("this gateway's audit log is not a write-ahead log: no export or proofs")
    return audit


def _time(value: str, field: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput.single(field, "not an RFC 3339 time", what="export request") from None
    if t.tzinfo is None:
        raise InvalidInput.single(field, "must carry a timezone", what="export request")
    return t


def filter_from_pb(req: audit_pb2.ExportRequest) -> ExportFilter:
    """The export filter of a request (InvalidInput naming the field on bad times)."""
    return ExportFilter(
        since=_time(req.since, "since"),
        until=_time(req.until, "until"),
        trace_id=req.trace_id,
        goal_id=req.goal_id,
        agent=req.agent,
        event_types=frozenset(req.event_types),
        tenant=req.tenant if req.HasField("tenant") else None,
    )


def _checkpoint_pb(log: WalAuditLog, cp: Checkpoint) -> audit_pb2.SignedCheckpoint:
    return audit_pb2.SignedCheckpoint(
        node=log.node, origin=cp.origin, size=cp.size, root=cp.root, note=cp.note, vkey=log.vkey
    )


class AuditServicer(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, agency: Agency) -> None:
        self._agency = agency

    @rpc_stream
    async def Export(
        self, request: audit_pb2.ExportRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[audit_pb2.AuditEntry]:
        log = _wal(self._agency.audit)
        flt = filter_from_pb(request)
        caller = current_principal()
        if caller is not None and caller.tenant:  # a tenant's auditor reads its tenant's records only
            flt = dataclasses.replace(flt, tenant=caller.tenant)
        if self._agency.policy is not None:  # policies as code: may this caller export this?
            what = {
                "trace_id": flt.trace_id or "",
                "goal_id": flt.goal_id or "",
                "agent": flt.agent or "",
                "event_types": sorted(flt.event_types or ()),
            }
            await self._agency.policy.export(self._agency.audit, node=self._agency.config.node_id, what=what)
        _, records = await asyncio.to_thread(iter_records, log.root_dir, flt)
        while chunk := await asyncio.to_thread(_take, records, _CHUNK):
            for r in chunk:
                yield audit_pb2.AuditEntry(node=r.node, index=r.index, time_ns=r.time_ns, record=r.raw)

    @rpc
    async def LatestCheckpoint(
        self, request: audit_pb2.LatestCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> audit_pb2.SignedCheckpoint:
        log = _wal(self._agency.audit)
        cp = log.latest_checkpoint()
        if cp is None:
            raise NotFound("no checkpoint has been signed yet")
        return _checkpoint_pb(log, cp)

    @rpc
    async def InclusionProof(
        self, request: audit_pb2.InclusionProofRequest, context: grpc.aio.ServicerContext
    ) -> audit_pb2.InclusionProofResponse:
        size, leaf, proof = _wal(self._agency.audit).inclusion_proof(request.index, request.tree_size)
        return audit_pb2.InclusionProofResponse(
            index=request.index, tree_size=size, leaf_hash=leaf, proof=proof
        )

    @rpc
    async def ConsistencyProof(
        self, request: audit_pb2.ConsistencyProofRequest, context: grpc.aio.ServicerContext
    ) -> audit_pb2.ConsistencyProofResponse:
        new, proof = _wal(self._agency.audit).consistency_proof(request.old_size, request.new_size)
        return audit_pb2.ConsistencyProofResponse(old_size=request.old_size, new_size=new, proof=proof)


def _take(it: Iterator[ExportedRecord], n: int) -> list[ExportedRecord]:
    out: list[ExportedRecord] = []
    for r in it:
        out.append(r)
        if len(out) >= n:
            break
    return out
