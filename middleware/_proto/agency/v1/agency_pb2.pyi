from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskStep(_message.Message):
    __slots__ = ("name", "action", "tags", "text", "input_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    action: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    text: str
    input_json: str
    def __init__(self, name: _Optional[str] = ..., action: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., text: _Optional[str] = ..., input_json: _Optional[str] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("task_id", "text", "goal_json", "goal_id", "input_json", "constraints_json", "steps", "user_id", "session_id", "trace_id", "return_immediately")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    GOAL_JSON_FIELD_NUMBER: _ClassVar[int]
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_JSON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    RETURN_IMMEDIATELY_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    text: str
    goal_json: str
    goal_id: str
    input_json: str
    constraints_json: str
    steps: _containers.RepeatedCompositeFieldContainer[TaskStep]
    user_id: str
    session_id: str
    trace_id: str
    return_immediately: bool
    def __init__(self, task_id: _Optional[str] = ..., text: _Optional[str] = ..., goal_json: _Optional[str] = ..., goal_id: _Optional[str] = ..., input_json: _Optional[str] = ..., constraints_json: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[TaskStep, _Mapping]]] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., return_immediately: _Optional[bool] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ("text", "constraints_json")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_JSON_FIELD_NUMBER: _ClassVar[int]
    text: str
    constraints_json: str
    def __init__(self, text: _Optional[str] = ..., constraints_json: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("agent", "score", "slo_latency_ms", "success_rate", "load", "samples")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SLO_LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    agent: str
    score: float
    slo_latency_ms: int
    success_rate: float
    load: float
    samples: int
    def __init__(self, agent: _Optional[str] = ..., score: _Optional[float] = ..., slo_latency_ms: _Optional[int] = ..., success_rate: _Optional[float] = ..., load: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("agent", "constraint", "reason")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    agent: str
    constraint: str
    reason: str
    def __init__(self, agent: _Optional[str] = ..., constraint: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RoutingDecision(_message.Message):
    __slots__ = ("constraints_json", "chosen", "fallbacks", "candidates", "rejected", "explanation", "refused", "considered", "rejected_omitted")
    CONSTRAINTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    CONSIDERED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_OMITTED_FIELD_NUMBER: _ClassVar[int]
    constraints_json: str
    chosen: str
    fallbacks: _containers.RepeatedScalarFieldContainer[str]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    rejected: _containers.RepeatedCompositeFieldContainer[Rejection]
    explanation: str
    refused: bool
    considered: int
    rejected_omitted: int
    def __init__(self, constraints_json: _Optional[str] = ..., chosen: _Optional[str] = ..., fallbacks: _Optional[_Iterable[str]] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., rejected: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ..., explanation: _Optional[str] = ..., refused: _Optional[bool] = ..., considered: _Optional[int] = ..., rejected_omitted: _Optional[int] = ...) -> None: ...

class StepVerdict(_message.Message):
    __slots__ = ("step", "kind", "passed", "expected_json", "actual_json", "reason")
    STEP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_JSON_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_JSON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    step: str
    kind: str
    passed: bool
    expected_json: str
    actual_json: str
    reason: str
    def __init__(self, step: _Optional[str] = ..., kind: _Optional[str] = ..., passed: _Optional[bool] = ..., expected_json: _Optional[str] = ..., actual_json: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class GoalVerdict(_message.Message):
    __slots__ = ("goal_id", "passed", "steps", "duration_ms")
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    goal_id: str
    passed: bool
    steps: _containers.RepeatedCompositeFieldContainer[StepVerdict]
    duration_ms: float
    def __init__(self, goal_id: _Optional[str] = ..., passed: _Optional[bool] = ..., steps: _Optional[_Iterable[_Union[StepVerdict, _Mapping]]] = ..., duration_ms: _Optional[float] = ...) -> None: ...

class Resolution(_message.Message):
    __slots__ = ("kind", "failure_type", "reason", "agent", "delay_ms")
    KIND_FIELD_NUMBER: _ClassVar[int]
    FAILURE_TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    failure_type: str
    reason: str
    agent: str
    delay_ms: float
    def __init__(self, kind: _Optional[str] = ..., failure_type: _Optional[str] = ..., reason: _Optional[str] = ..., agent: _Optional[str] = ..., delay_ms: _Optional[float] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("type", "step", "agent", "attempt", "detail")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    type: str
    step: str
    agent: str
    attempt: int
    detail: str
    def __init__(self, type: _Optional[str] = ..., step: _Optional[str] = ..., agent: _Optional[str] = ..., attempt: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("task_id", "trace_id", "state", "a2a_state", "output_json", "goal_id", "goal_verdict", "failures", "resolutions", "reason", "pending_json", "audit_index", "outcome_json")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    A2A_STATE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_VERDICT_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    RESOLUTIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PENDING_JSON_FIELD_NUMBER: _ClassVar[int]
    AUDIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_JSON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    trace_id: str
    state: str
    a2a_state: str
    output_json: str
    goal_id: str
    goal_verdict: GoalVerdict
    failures: _containers.RepeatedCompositeFieldContainer[Failure]
    resolutions: _containers.RepeatedCompositeFieldContainer[Resolution]
    reason: str
    pending_json: str
    audit_index: int
    outcome_json: str
    def __init__(self, task_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., state: _Optional[str] = ..., a2a_state: _Optional[str] = ..., output_json: _Optional[str] = ..., goal_id: _Optional[str] = ..., goal_verdict: _Optional[_Union[GoalVerdict, _Mapping]] = ..., failures: _Optional[_Iterable[_Union[Failure, _Mapping]]] = ..., resolutions: _Optional[_Iterable[_Union[Resolution, _Mapping]]] = ..., reason: _Optional[str] = ..., pending_json: _Optional[str] = ..., audit_index: _Optional[int] = ..., outcome_json: _Optional[str] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("task_id", "answer", "decision_json", "input_json")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    DECISION_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    answer: str
    decision_json: str
    input_json: str
    def __init__(self, task_id: _Optional[str] = ..., answer: _Optional[str] = ..., decision_json: _Optional[str] = ..., input_json: _Optional[str] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("task_id", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WatchTaskRequest(_message.Message):
    __slots__ = ("task_id", "after_seq")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    after_seq: int
    def __init__(self, task_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("seq", "id", "type", "time", "task_id", "trace_id", "state", "step", "agent", "outcome", "rule", "detail_json", "audit_index", "node", "final")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_JSON_FIELD_NUMBER: _ClassVar[int]
    AUDIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    id: str
    type: str
    time: str
    task_id: str
    trace_id: str
    state: str
    step: str
    agent: str
    outcome: str
    rule: str
    detail_json: str
    audit_index: int
    node: str
    final: Outcome
    def __init__(self, seq: _Optional[int] = ..., id: _Optional[str] = ..., type: _Optional[str] = ..., time: _Optional[str] = ..., task_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., state: _Optional[str] = ..., step: _Optional[str] = ..., agent: _Optional[str] = ..., outcome: _Optional[str] = ..., rule: _Optional[str] = ..., detail_json: _Optional[str] = ..., audit_index: _Optional[int] = ..., node: _Optional[str] = ..., final: _Optional[_Union[Outcome, _Mapping]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("states", "goal_id", "created_after", "created_before", "page_size", "page_token", "client")
    STATES_FIELD_NUMBER: _ClassVar[int]
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[str]
    goal_id: str
    created_after: str
    created_before: str
    page_size: int
    page_token: str
    client: str
    def __init__(self, states: _Optional[_Iterable[str]] = ..., goal_id: _Optional[str] = ..., created_after: _Optional[str] = ..., created_before: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., client: _Optional[str] = ...) -> None: ...

class TaskSummary(_message.Message):
    __slots__ = ("task_id", "state", "a2a_state", "client", "user_id", "goal_id", "trace_id", "created_at", "updated_at", "reason", "text", "tenant")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    A2A_STATE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    state: str
    a2a_state: str
    client: str
    user_id: str
    goal_id: str
    trace_id: str
    created_at: str
    updated_at: str
    reason: str
    text: str
    tenant: str
    def __init__(self, task_id: _Optional[str] = ..., state: _Optional[str] = ..., a2a_state: _Optional[str] = ..., client: _Optional[str] = ..., user_id: _Optional[str] = ..., goal_id: _Optional[str] = ..., trace_id: _Optional[str] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., reason: _Optional[str] = ..., text: _Optional[str] = ..., tenant: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSummary]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
