"""``agency.v1.MessageService`` over the core post office (a thin adapter).

The caller's agent token travels in the metadata (``authorization: Bearer <token>``
or ``agency-token``); the post office authenticates it, and audits a refused token
per source (the peer's address, named here with :func:`~middleware.refusals.calling_from`)
and interval. Errors map to status codes only through :mod:`.status`.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from ..._proto.agency.v1 import messages_pb2, messages_pb2_grpc
from ...access import current_principal
from ...errors import InvalidInput, Problem
from ...messaging.directory import AgentRecord
from ...messaging.identity import check_topic
from ...messaging.post_office import Envelope, PostOffice, Received
from ...refusals import calling_from, source_of
from ...tenancy import global_reader, tenant_of
from .convert import dumps, loads, smf_from_pb, smf_to_pb
from .status import rpc, rpc_stream

__all__ = ["MessageServicer", "add_message_service", "smf_from_pb", "smf_to_pb"]

_R = TypeVar("_R")
_S = TypeVar("_S")
_Q = TypeVar("_Q")

#: How long one Subscribe round waits for a message before looking again.
SUBSCRIBE_POLL_SECONDS = 1.0


def received_to_pb(r: Received) -> messages_pb2.ReceivedMessage:
    return messages_pb2.ReceivedMessage(
        receipt=r.receipt,
        message=smf_to_pb(r.message),
        kind=r.kind,
        topic=r.topic,
        trigger_turn=r.trigger_turn,
        delivery_count=r.delivery_count,
        expires_at=r.expires_at,
        params_json=dumps(dict(r.params)) if r.params else "",
        signature=r.signature,
        ttl_seconds=r.ttl,
        content_type=r.content_type,
        correlation_id=r.correlation_id,
        message_hash=r.message_hash,
    )


def token_from(context: grpc.aio.ServicerContext) -> str | None:
    """The agent token in the call's metadata, if any: ``agency-token`` when present (the
    ``authorization`` header then carries the gateway's client token), else the bearer token."""
    bearer = None
    for key, value in context.invocation_metadata() or ():
        if key == "agency-token" and isinstance(value, str):
            return value.strip()
        if key == "authorization" and isinstance(value, str) and value.lower().startswith("bearer "):
            bearer = bearer or value[7:].strip()
    return bearer


def _sourced(
    method: Callable[[_S, _Q, grpc.aio.ServicerContext], Awaitable[_R]],
) -> Callable[[_S, _Q, grpc.aio.ServicerContext], Awaitable[_R]]:
    """``method`` run with the call's source (the peer) and operation named for the audit."""
    operation = f"MessageService/{method.__name__}"

    @functools.wraps(method)
    async def call(self: _S, request: _Q, context: grpc.aio.ServicerContext) -> _R:
        with calling_from(source_of(context.peer() or ""), operation):
            return await method(self, request, context)

    return call


class MessageServicer(messages_pb2_grpc.MessageServiceServicer):
    def __init__(self, post_office: PostOffice) -> None:
        self._po = post_office

    @rpc
    @_sourced
    async def Send(
        self, request: messages_pb2.SendMessageRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.SendMessageResponse:
        token = token_from(context)
        if not request.HasField("message"):
            raise InvalidInput([Problem("message", "required")], what="send request")
        message = smf_from_pb(request.message)
        ttl = request.ttl_seconds if request.HasField("ttl_seconds") else None
        if request.broadcast and request.topic:
            raise InvalidInput([Problem("topic", "a message is either broadcast or published to a topic")])
        if not request.content_type:  # the receiver must know how to read the content
            raise InvalidInput(
                [Problem("content_type", "required: the MIME type of the content, e.g. application/json")],
                what="send request",
            )
        ctype, correlation = request.content_type, request.correlation_id
        if request.broadcast:
            result = await self._po.broadcast(
                token,
                message,
                signature=request.signature,
                ttl=ttl,
                content_type=ctype,
                correlation_id=correlation,
            )
        elif request.topic:
            result = await self._po.publish(
                token,
                request.topic,
                message,
                signature=request.signature,
                ttl=ttl,
                trigger_turn=request.trigger_turn,
                content_type=ctype,
                correlation_id=correlation,
            )
        else:
            params = loads(request.params_json, "params_json", default={}, want=dict)
            result = await self._po.send(
                token,
                message,
                signature=request.signature,
                ttl=ttl,
                trigger_turn=request.trigger_turn,
                params=params,
                content_type=ctype,
                correlation_id=correlation,
            )
        return messages_pb2.SendMessageResponse(
            message_id=result.message_id,
            recipients=list(result.recipients),
            message_hash=result.message_hash,
            trace_link=result.trace_link,
            quarantined=result.quarantined,
        )

    @rpc
    @_sourced
    async def Pull(
        self, request: messages_pb2.PullRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.PullResponse:
        if not 0 <= request.wait_seconds <= 60:  # NaN fails this too
            raise InvalidInput([Problem("wait_seconds", "must be between 0 and 60")])
        message_type: Any = request.message_type
        if request.include_read:
            page, cursor = await self._po.browse(
                token_from(context),
                max_messages=request.max_messages or 10,
                cursor=request.cursor,
                message_type=message_type,
            )
            return messages_pb2.PullResponse(messages=[received_to_pb(r) for r in page], next_cursor=cursor)
        if request.cursor:
            raise InvalidInput(
                [Problem("cursor", "pages only with include_read (a pull continues by itself)")]
            )
        got = await self._po.pull(
            token_from(context),
            max_messages=request.max_messages or 10,
            wait=request.wait_seconds,
            consumer=request.consumer or None,
            message_type=message_type,
        )
        return messages_pb2.PullResponse(messages=[received_to_pb(r) for r in got])

    @rpc
    @_sourced
    async def Ack(
        self, request: messages_pb2.AckRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.AckResponse:
        done = await self._po.ack(token_from(context), list(request.receipts))
        return messages_pb2.AckResponse(acknowledged=done)

    @rpc
    @_sourced
    async def Register(
        self, request: messages_pb2.RegisterAgentRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.RegisterAgentResponse:
        record, token = await self._po.register_agent(
            request.name,
            request.public_key,
            description=request.description,
            publishes=list(request.publishes),
            subscribes=list(request.subscribes),
            caller=current_principal(),
        )
        return messages_pb2.RegisterAgentResponse(agent=agent_info(record), token=token)

    @rpc
    @_sourced
    async def Deregister(
        self, request: messages_pb2.DeregisterAgentRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.DeregisterAgentResponse:
        removed = await self._po.deregister_agent(
            request.name, token=token_from(context), caller=current_principal()
        )
        return messages_pb2.DeregisterAgentResponse(removed=removed)

    @rpc
    async def ApproveAgent(
        self, request: messages_pb2.ApproveAgentRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.AgentInfo:
        return agent_info(await self._po.approve_agent(request.name, caller=current_principal()))

    @rpc
    async def FindAgents(
        self, request: messages_pb2.FindAgentsRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.FindAgentsResponse:
        if len(request.capability) > 1000:
            raise InvalidInput([Problem("capability", "at most 1000 characters")])
        if request.topic:
            check_topic(request.topic)
        caller = current_principal()  # a tenant's client finds its tenant's agents only
        tenant = None if global_reader(caller) else tenant_of(caller)
        found = await self._po.find_agents(
            request.capability, topic=request.topic, include_pending=request.include_pending, tenant=tenant
        )
        return messages_pb2.FindAgentsResponse(agents=[agent_info(r, seen) for r, seen in found])

    @rpc
    @_sourced
    async def Report(
        self, request: messages_pb2.ReportMessageRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.ReportMessageResponse:
        count, held = await self._po.report(token_from(context), request.message_id, request.reason)
        return messages_pb2.ReportMessageResponse(reporters=count, quarantined=held)

    @rpc
    async def ListQuarantine(
        self, request: messages_pb2.ListQuarantineRequest, context: grpc.aio.ServicerContext
    ) -> messages_pb2.ListQuarantineResponse:
        if not 0 <= request.limit <= 1000:
            raise InvalidInput([Problem("limit", "must be between 0 and 1000")])
        items = await self._po.quarantine(caller=current_principal(), limit=request.limit or 100)
        out = []
        for item in items:
            pb = messages_pb2.QuarantinedMessage(
                message_id=item.message_id,
                sender=item.sender,
                reason=item.reason,
                rule=item.rule,
                at=item.at,
                recipients=item.recipients,
            )
            if item.envelope:
                pb.message.CopyFrom(smf_to_pb(Envelope.model_validate_json(item.envelope).message))
            out.append(pb)
        return messages_pb2.ListQuarantineResponse(messages=out)

    @rpc
    async def ReleaseQuarantined(
        self, request: messages_pb2.QuarantineDecision, context: grpc.aio.ServicerContext
    ) -> messages_pb2.ReleaseQuarantinedResponse:
        recipients = await self._po.release(request.message_id, caller=current_principal())
        return messages_pb2.ReleaseQuarantinedResponse(recipients=recipients)

    @rpc
    async def DeleteQuarantined(
        self, request: messages_pb2.QuarantineDecision, context: grpc.aio.ServicerContext
    ) -> messages_pb2.DeleteQuarantinedResponse:
        await self._po.delete_quarantined(request.message_id, caller=current_principal())
        return messages_pb2.DeleteQuarantinedResponse()

    @rpc_stream
    async def Subscribe(
        self, request: messages_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[messages_pb2.ReceivedMessage]:
        token = token_from(context)
        with calling_from(source_of(context.peer() or ""), "MessageService/Subscribe"):
            await self._po.authenticate(token)  # refuse at once, not on the first pull
            for i, topic in enumerate(request.topics):
                try:
                    await self._po.subscribe(token, topic)
                except InvalidInput as exc:
                    raise InvalidInput([Problem(f"topics[{i}]", p.reason) for p in exc.problems]) from None
            stream = self._po.stream(
                token,
                batch=request.batch or 10,
                consumer=request.consumer or None,
                poll=SUBSCRIBE_POLL_SECONDS,
            )
            async for received in stream:  # survives backend outages (backoff), see PostOffice.stream
                yield received_to_pb(received)


def agent_info(record: AgentRecord, last_seen: float | None = None) -> messages_pb2.AgentInfo:
    return messages_pb2.AgentInfo(
        name=record.name,
        description=record.description,
        publishes=record.publishes,
        subscribes=record.subscribes,
        status=record.status,
        registered_by=record.registered_by,
        registered_at=record.registered_at,
        last_seen=last_seen or 0.0,
    )


def add_message_service(server: grpc.aio.Server, post_office: PostOffice) -> str:
    """Register ``MessageService`` over ``post_office`` on ``server``; returns the service name."""
    messages_pb2_grpc.add_MessageServiceServicer_to_server(MessageServicer(post_office), server)
    return str(messages_pb2.DESCRIPTOR.services_by_name["MessageService"].full_name)
