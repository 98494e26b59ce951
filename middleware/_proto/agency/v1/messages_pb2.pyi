from middleware._proto.agency.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReportMessageRequest(_message.Message):
    __slots__ = ("message_id", "reason")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    reason: str
    def __init__(self, message_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReportMessageResponse(_message.Message):
    __slots__ = ("reporters", "quarantined")
    REPORTERS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    reporters: int
    quarantined: bool
    def __init__(self, reporters: _Optional[int] = ..., quarantined: _Optional[bool] = ...) -> None: ...

class ListQuarantineRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class QuarantinedMessage(_message.Message):
    __slots__ = ("message_id", "sender", "reason", "rule", "at", "recipients", "message")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    RECIPIENTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    sender: str
    reason: str
    rule: str
    at: float
    recipients: _containers.RepeatedScalarFieldContainer[str]
    message: _common_pb2.SMFMessage
    def __init__(self, message_id: _Optional[str] = ..., sender: _Optional[str] = ..., reason: _Optional[str] = ..., rule: _Optional[str] = ..., at: _Optional[float] = ..., recipients: _Optional[_Iterable[str]] = ..., message: _Optional[_Union[_common_pb2.SMFMessage, _Mapping]] = ...) -> None: ...

class ListQuarantineResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[QuarantinedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[QuarantinedMessage, _Mapping]]] = ...) -> None: ...

class QuarantineDecision(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class ReleaseQuarantinedResponse(_message.Message):
    __slots__ = ("recipients",)
    RECIPIENTS_FIELD_NUMBER: _ClassVar[int]
    recipients: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, recipients: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteQuarantinedResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterAgentRequest(_message.Message):
    __slots__ = ("name", "description", "public_key", "publishes", "subscribes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    PUBLISHES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBES_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    public_key: str
    publishes: _containers.RepeatedScalarFieldContainer[str]
    subscribes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., public_key: _Optional[str] = ..., publishes: _Optional[_Iterable[str]] = ..., subscribes: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterAgentResponse(_message.Message):
    __slots__ = ("agent", "token")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    agent: AgentInfo
    token: str
    def __init__(self, agent: _Optional[_Union[AgentInfo, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class AgentInfo(_message.Message):
    __slots__ = ("name", "description", "publishes", "subscribes", "status", "registered_by", "registered_at", "last_seen")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PUBLISHES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_BY_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    publishes: _containers.RepeatedScalarFieldContainer[str]
    subscribes: _containers.RepeatedScalarFieldContainer[str]
    status: str
    registered_by: str
    registered_at: float
    last_seen: float
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., publishes: _Optional[_Iterable[str]] = ..., subscribes: _Optional[_Iterable[str]] = ..., status: _Optional[str] = ..., registered_by: _Optional[str] = ..., registered_at: _Optional[float] = ..., last_seen: _Optional[float] = ...) -> None: ...

class DeregisterAgentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeregisterAgentResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class ApproveAgentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class FindAgentsRequest(_message.Message):
    __slots__ = ("capability", "topic", "include_pending")
    CAPABILITY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PENDING_FIELD_NUMBER: _ClassVar[int]
    capability: str
    topic: str
    include_pending: bool
    def __init__(self, capability: _Optional[str] = ..., topic: _Optional[str] = ..., include_pending: _Optional[bool] = ...) -> None: ...

class FindAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentInfo]
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentInfo, _Mapping]]] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("message", "signature", "topic", "broadcast", "ttl_seconds", "trigger_turn", "params_json", "content_type", "correlation_id")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROADCAST_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TURN_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.SMFMessage
    signature: str
    topic: str
    broadcast: bool
    ttl_seconds: float
    trigger_turn: bool
    params_json: str
    content_type: str
    correlation_id: str
    def __init__(self, message: _Optional[_Union[_common_pb2.SMFMessage, _Mapping]] = ..., signature: _Optional[str] = ..., topic: _Optional[str] = ..., broadcast: _Optional[bool] = ..., ttl_seconds: _Optional[float] = ..., trigger_turn: _Optional[bool] = ..., params_json: _Optional[str] = ..., content_type: _Optional[str] = ..., correlation_id: _Optional[str] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("message_id", "recipients", "message_hash", "trace_link", "quarantined")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    RECIPIENTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_HASH_FIELD_NUMBER: _ClassVar[int]
    TRACE_LINK_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    recipients: _containers.RepeatedScalarFieldContainer[str]
    message_hash: str
    trace_link: str
    quarantined: str
    def __init__(self, message_id: _Optional[str] = ..., recipients: _Optional[_Iterable[str]] = ..., message_hash: _Optional[str] = ..., trace_link: _Optional[str] = ..., quarantined: _Optional[str] = ...) -> None: ...

class PullRequest(_message.Message):
    __slots__ = ("max_messages", "wait_seconds", "consumer", "include_read", "message_type", "cursor")
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_READ_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    max_messages: int
    wait_seconds: float
    consumer: str
    include_read: bool
    message_type: str
    cursor: str
    def __init__(self, max_messages: _Optional[int] = ..., wait_seconds: _Optional[float] = ..., consumer: _Optional[str] = ..., include_read: _Optional[bool] = ..., message_type: _Optional[str] = ..., cursor: _Optional[str] = ...) -> None: ...

class ReceivedMessage(_message.Message):
    __slots__ = ("receipt", "message", "kind", "topic", "trigger_turn", "delivery_count", "expires_at", "params_json", "signature", "ttl_seconds", "content_type", "correlation_id", "message_hash")
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TURN_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_HASH_FIELD_NUMBER: _ClassVar[int]
    receipt: str
    message: _common_pb2.SMFMessage
    kind: str
    topic: str
    trigger_turn: bool
    delivery_count: int
    expires_at: float
    params_json: str
    signature: str
    ttl_seconds: float
    content_type: str
    correlation_id: str
    message_hash: str
    def __init__(self, receipt: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.SMFMessage, _Mapping]] = ..., kind: _Optional[str] = ..., topic: _Optional[str] = ..., trigger_turn: _Optional[bool] = ..., delivery_count: _Optional[int] = ..., expires_at: _Optional[float] = ..., params_json: _Optional[str] = ..., signature: _Optional[str] = ..., ttl_seconds: _Optional[float] = ..., content_type: _Optional[str] = ..., correlation_id: _Optional[str] = ..., message_hash: _Optional[str] = ...) -> None: ...

class PullResponse(_message.Message):
    __slots__ = ("messages", "next_cursor")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ReceivedMessage]
    next_cursor: str
    def __init__(self, messages: _Optional[_Iterable[_Union[ReceivedMessage, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("receipts",)
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    receipts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, receipts: _Optional[_Iterable[str]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("acknowledged",)
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    acknowledged: int
    def __init__(self, acknowledged: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("topics", "batch", "consumer")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    batch: int
    consumer: str
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., batch: _Optional[int] = ..., consumer: _Optional[str] = ...) -> None: ...
