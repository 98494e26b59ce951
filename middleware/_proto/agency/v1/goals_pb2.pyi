from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Goal(_message.Message):
    __slots__ = ("id", "description", "timeout_seconds", "criticality", "stages", "verification_step_count", "goal_json", "plan_steps")
    ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CRITICALITY_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_STEP_COUNT_FIELD_NUMBER: _ClassVar[int]
    GOAL_JSON_FIELD_NUMBER: _ClassVar[int]
    PLAN_STEPS_FIELD_NUMBER: _ClassVar[int]
    id: str
    description: str
    timeout_seconds: int
    criticality: str
    stages: _containers.RepeatedScalarFieldContainer[str]
    verification_step_count: int
    goal_json: str
    plan_steps: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., description: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., criticality: _Optional[str] = ..., stages: _Optional[_Iterable[str]] = ..., verification_step_count: _Optional[int] = ..., goal_json: _Optional[str] = ..., plan_steps: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterGoalRequest(_message.Message):
    __slots__ = ("goal_json", "replace")
    GOAL_JSON_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    goal_json: str
    replace: bool
    def __init__(self, goal_json: _Optional[str] = ..., replace: _Optional[bool] = ...) -> None: ...

class GetGoalRequest(_message.Message):
    __slots__ = ("goal_id",)
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    goal_id: str
    def __init__(self, goal_id: _Optional[str] = ...) -> None: ...
