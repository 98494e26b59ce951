from middleware._proto.agency.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CatalogEntry(_message.Message):
    __slots__ = ("contract", "key", "registered_at", "last_heartbeat", "stale", "revision")
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    contract: _common_pb2.CapabilityContract
    key: str
    registered_at: str
    last_heartbeat: str
    stale: bool
    revision: int
    def __init__(self, contract: _Optional[_Union[_common_pb2.CapabilityContract, _Mapping]] = ..., key: _Optional[str] = ..., registered_at: _Optional[str] = ..., last_heartbeat: _Optional[str] = ..., stale: _Optional[bool] = ..., revision: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("contract", "replace")
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    contract: _common_pb2.CapabilityContract
    replace: bool
    def __init__(self, contract: _Optional[_Union[_common_pb2.CapabilityContract, _Mapping]] = ..., replace: _Optional[bool] = ...) -> None: ...

class GetCapabilityRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("name", "action", "tags", "max_slo_latency_ms", "include_stale", "version_range")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    MAX_SLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STALE_FIELD_NUMBER: _ClassVar[int]
    VERSION_RANGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    action: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    max_slo_latency_ms: int
    include_stale: bool
    version_range: str
    def __init__(self, name: _Optional[str] = ..., action: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., max_slo_latency_ms: _Optional[int] = ..., include_stale: _Optional[bool] = ..., version_range: _Optional[str] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[CatalogEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[CatalogEntry, _Mapping]]] = ...) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("contract",)
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    contract: _common_pb2.CapabilityContract
    def __init__(self, contract: _Optional[_Union[_common_pb2.CapabilityContract, _Mapping]] = ...) -> None: ...

class DeregisterRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class DeregisterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("include_existing",)
    INCLUDE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    include_existing: bool
    def __init__(self, include_existing: _Optional[bool] = ...) -> None: ...

class CatalogEvent(_message.Message):
    __slots__ = ("type", "key", "entry", "at")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    type: str
    key: str
    entry: CatalogEntry
    at: str
    def __init__(self, type: _Optional[str] = ..., key: _Optional[str] = ..., entry: _Optional[_Union[CatalogEntry, _Mapping]] = ..., at: _Optional[str] = ...) -> None: ...
