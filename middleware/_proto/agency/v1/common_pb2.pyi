from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Provenance(_message.Message):
    __slots__ = ("source", "reliability_score")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    RELIABILITY_SCORE_FIELD_NUMBER: _ClassVar[int]
    source: str
    reliability_score: float
    def __init__(self, source: _Optional[str] = ..., reliability_score: _Optional[float] = ...) -> None: ...

class SMFMetadata(_message.Message):
    __slots__ = ("provenance", "freshness_ttl", "confidence_score", "intention_trace", "domain")
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    FRESHNESS_TTL_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    INTENTION_TRACE_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    provenance: Provenance
    freshness_ttl: float
    confidence_score: float
    intention_trace: _containers.RepeatedScalarFieldContainer[str]
    domain: str
    def __init__(self, provenance: _Optional[_Union[Provenance, _Mapping]] = ..., freshness_ttl: _Optional[float] = ..., confidence_score: _Optional[float] = ..., intention_trace: _Optional[_Iterable[str]] = ..., domain: _Optional[str] = ...) -> None: ...

class SMFMessage(_message.Message):
    __slots__ = ("message_id", "sender", "receiver", "content_json", "metadata", "trace_id", "created_at")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    sender: str
    receiver: str
    content_json: str
    metadata: SMFMetadata
    trace_id: str
    created_at: str
    def __init__(self, message_id: _Optional[str] = ..., sender: _Optional[str] = ..., receiver: _Optional[str] = ..., content_json: _Optional[str] = ..., metadata: _Optional[_Union[SMFMetadata, _Mapping]] = ..., trace_id: _Optional[str] = ..., created_at: _Optional[str] = ...) -> None: ...

class CapabilityContract(_message.Message):
    __slots__ = ("name", "version", "description", "tags", "slo_latency_ms", "can_do", "cannot_do", "input_schema_json", "output_schema_json", "owner", "endpoint", "regions", "data_residency", "max_data_delay_ms", "time_windows", "granularities", "metrics", "human_review", "time_critical", "side_effect_free", "data_classes", "restore_personal_data", "facts", "idempotency", "tenant", "shared_with", "stream_progress")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    SLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    CAN_DO_FIELD_NUMBER: _ClassVar[int]
    CANNOT_DO_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REGIONS_FIELD_NUMBER: _ClassVar[int]
    DATA_RESIDENCY_FIELD_NUMBER: _ClassVar[int]
    MAX_DATA_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    GRANULARITIES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    HUMAN_REVIEW_FIELD_NUMBER: _ClassVar[int]
    TIME_CRITICAL_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_FREE_FIELD_NUMBER: _ClassVar[int]
    DATA_CLASSES_FIELD_NUMBER: _ClassVar[int]
    RESTORE_PERSONAL_DATA_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SHARED_WITH_FIELD_NUMBER: _ClassVar[int]
    STREAM_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    slo_latency_ms: int
    can_do: _containers.RepeatedScalarFieldContainer[str]
    cannot_do: _containers.RepeatedScalarFieldContainer[str]
    input_schema_json: str
    output_schema_json: str
    owner: str
    endpoint: str
    regions: _containers.RepeatedScalarFieldContainer[str]
    data_residency: _containers.RepeatedScalarFieldContainer[str]
    max_data_delay_ms: int
    time_windows: _containers.RepeatedScalarFieldContainer[str]
    granularities: _containers.RepeatedScalarFieldContainer[str]
    metrics: _containers.RepeatedScalarFieldContainer[str]
    human_review: bool
    time_critical: bool
    side_effect_free: bool
    data_classes: _containers.RepeatedScalarFieldContainer[str]
    restore_personal_data: bool
    facts: _containers.RepeatedScalarFieldContainer[str]
    idempotency: str
    tenant: str
    shared_with: _containers.RepeatedScalarFieldContainer[str]
    stream_progress: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., slo_latency_ms: _Optional[int] = ..., can_do: _Optional[_Iterable[str]] = ..., cannot_do: _Optional[_Iterable[str]] = ..., input_schema_json: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., owner: _Optional[str] = ..., endpoint: _Optional[str] = ..., regions: _Optional[_Iterable[str]] = ..., data_residency: _Optional[_Iterable[str]] = ..., max_data_delay_ms: _Optional[int] = ..., time_windows: _Optional[_Iterable[str]] = ..., granularities: _Optional[_Iterable[str]] = ..., metrics: _Optional[_Iterable[str]] = ..., human_review: _Optional[bool] = ..., time_critical: _Optional[bool] = ..., side_effect_free: _Optional[bool] = ..., data_classes: _Optional[_Iterable[str]] = ..., restore_personal_data: _Optional[bool] = ..., facts: _Optional[_Iterable[str]] = ..., idempotency: _Optional[str] = ..., tenant: _Optional[str] = ..., shared_with: _Optional[_Iterable[str]] = ..., stream_progress: _Optional[bool] = ...) -> None: ...
