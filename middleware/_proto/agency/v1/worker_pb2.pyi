from middleware._proto.agency.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InvokeRequest(_message.Message):
    __slots__ = ("message", "contract_key", "task_id", "step", "attempt", "deadline_ms", "text", "idempotency_key")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_KEY_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.SMFMessage
    contract_key: str
    task_id: str
    step: str
    attempt: int
    deadline_ms: float
    text: str
    idempotency_key: str
    def __init__(self, message: _Optional[_Union[_common_pb2.SMFMessage, _Mapping]] = ..., contract_key: _Optional[str] = ..., task_id: _Optional[str] = ..., step: _Optional[str] = ..., attempt: _Optional[int] = ..., deadline_ms: _Optional[float] = ..., text: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class InvokeResult(_message.Message):
    __slots__ = ("output_json", "confidence_score", "provenance", "freshness_ttl", "created_at", "intention_trace", "usage")
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_TTL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    INTENTION_TRACE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    output_json: str
    confidence_score: float
    provenance: _common_pb2.Provenance
    freshness_ttl: float
    created_at: str
    intention_trace: IntentionTrace
    usage: _containers.RepeatedCompositeFieldContainer[ModelUsage]
    def __init__(self, output_json: _Optional[str] = ..., confidence_score: _Optional[float] = ..., provenance: _Optional[_Union[_common_pb2.Provenance, _Mapping]] = ..., freshness_ttl: _Optional[float] = ..., created_at: _Optional[str] = ..., intention_trace: _Optional[_Union[IntentionTrace, _Mapping]] = ..., usage: _Optional[_Iterable[_Union[ModelUsage, _Mapping]]] = ...) -> None: ...

class ModelUsage(_message.Message):
    __slots__ = ("model", "input_tokens", "output_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    input_tokens: int
    output_tokens: int
    def __init__(self, model: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class IntentionTrace(_message.Message):
    __slots__ = ("goal_ids",)
    GOAL_IDS_FIELD_NUMBER: _ClassVar[int]
    goal_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, goal_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AgentFailure(_message.Message):
    __slots__ = ("type", "detail", "context_json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    type: str
    detail: str
    context_json: str
    def __init__(self, type: _Optional[str] = ..., detail: _Optional[str] = ..., context_json: _Optional[str] = ...) -> None: ...

class InvokeResponse(_message.Message):
    __slots__ = ("result", "failure")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    result: InvokeResult
    failure: AgentFailure
    def __init__(self, result: _Optional[_Union[InvokeResult, _Mapping]] = ..., failure: _Optional[_Union[AgentFailure, _Mapping]] = ...) -> None: ...
