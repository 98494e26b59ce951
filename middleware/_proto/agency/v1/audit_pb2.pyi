from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ExportRequest(_message.Message):
    __slots__ = ("since", "until", "trace_id", "goal_id", "agent", "event_types", "tenant")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    since: str
    until: str
    trace_id: str
    goal_id: str
    agent: str
    event_types: _containers.RepeatedScalarFieldContainer[str]
    tenant: str
    def __init__(self, since: _Optional[str] = ..., until: _Optional[str] = ..., trace_id: _Optional[str] = ..., goal_id: _Optional[str] = ..., agent: _Optional[str] = ..., event_types: _Optional[_Iterable[str]] = ..., tenant: _Optional[str] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("node", "index", "time_ns", "record")
    NODE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    node: str
    index: int
    time_ns: int
    record: bytes
    def __init__(self, node: _Optional[str] = ..., index: _Optional[int] = ..., time_ns: _Optional[int] = ..., record: _Optional[bytes] = ...) -> None: ...

class LatestCheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SignedCheckpoint(_message.Message):
    __slots__ = ("node", "origin", "size", "root", "note", "vkey")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    VKEY_FIELD_NUMBER: _ClassVar[int]
    node: str
    origin: str
    size: int
    root: bytes
    note: str
    vkey: str
    def __init__(self, node: _Optional[str] = ..., origin: _Optional[str] = ..., size: _Optional[int] = ..., root: _Optional[bytes] = ..., note: _Optional[str] = ..., vkey: _Optional[str] = ...) -> None: ...

class InclusionProofRequest(_message.Message):
    __slots__ = ("index", "tree_size")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    index: int
    tree_size: int
    def __init__(self, index: _Optional[int] = ..., tree_size: _Optional[int] = ...) -> None: ...

class InclusionProofResponse(_message.Message):
    __slots__ = ("index", "tree_size", "leaf_hash", "proof")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEAF_HASH_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    index: int
    tree_size: int
    leaf_hash: bytes
    proof: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, index: _Optional[int] = ..., tree_size: _Optional[int] = ..., leaf_hash: _Optional[bytes] = ..., proof: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ConsistencyProofRequest(_message.Message):
    __slots__ = ("old_size", "new_size")
    OLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NEW_SIZE_FIELD_NUMBER: _ClassVar[int]
    old_size: int
    new_size: int
    def __init__(self, old_size: _Optional[int] = ..., new_size: _Optional[int] = ...) -> None: ...

class ConsistencyProofResponse(_message.Message):
    __slots__ = ("old_size", "new_size", "proof")
    OLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NEW_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    old_size: int
    new_size: int
    proof: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, old_size: _Optional[int] = ..., new_size: _Optional[int] = ..., proof: _Optional[_Iterable[bytes]] = ...) -> None: ...
