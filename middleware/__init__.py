"""Agency Middleware: the governance layer multi-agent LLM systems run behind."""

from .agents import Agent, AgentRegistry, AgentReply, AgentRequest
from .audit import AuditLog, AuditRecord, FileAuditLog, MemoryAuditLog, WalAuditLog
from .catalog import Catalog, CatalogEntry, CatalogQuery
from .circuit_breaker import BreakerConfig, CircuitBreaker
from .config import AgencyConfig, ServerConfig
from .contracts import CapabilityContract
from .detectors import DetectorConfig, Detectors, PolicyRules
from .errors import (
    AgencyError,
    AgentFailure,
    AlreadyExists,
    AuditCorrupted,
    AuditError,
    ConcurrentUpdate,
    ContractViolation,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    PermissionDenied,
    Problem,
    ResourceExhausted,
    RoutingRefused,
    Unauthenticated,
    Unavailable,
)
from .failure_monitor import FailureMonitor, MonitorConfig
from .failures import (
    FailureEvent,
    FailureHandler,
    FailurePolicy,
    FailureProcessor,
    FailureType,
    Resolution,
    ResolutionKind,
)
from .goals import (
    CheckRegistry,
    GoalAssertion,
    GoalStage,
    GoalStore,
    GoalVerdict,
    MemoryGoalStore,
    StepVerdict,
    Verifier,
    parse_step_sentence,
    verify_goal,
)
from .interventions import HandoverPacket, HumanDecision
from .memory_catalog import MemoryCatalog
from .memory_task_store import MemoryTaskStore
from .pipeline import Agency
from .redis_task_store import RedisTaskStore
from .router import ConstraintExtractor, Constraints, Router, RoutingDecision, RuleBasedExtractor
from .smf import Provenance, SMFMessage, SMFMetadata
from .task_store import TaskStore
from .tasks import Outcome, TaskRecord, TaskRequest, TaskState, TaskStep

__all__ = [
    "Agency",
    "AgencyConfig",
    "AgencyError",
    "Agent",
    "AgentFailure",
    "AgentRegistry",
    "AgentReply",
    "AgentRequest",
    "AlreadyExists",
    "AuditCorrupted",
    "AuditError",
    "AuditLog",
    "AuditRecord",
    "BreakerConfig",
    "CapabilityContract",
    "Catalog",
    "CatalogEntry",
    "CatalogQuery",
    "CheckRegistry",
    "CircuitBreaker",
    "ConcurrentUpdate",
    "ConstraintExtractor",
    "Constraints",
    "ContractViolation",
    "DeadlineExceeded",
    "DetectorConfig",
    "Detectors",
    "FailedPrecondition",
    "FailureEvent",
    "FailureHandler",
    "FailureMonitor",
    "FailurePolicy",
    "FailureProcessor",
    "FailureType",
    "FileAuditLog",
    "GoalAssertion",
    "GoalStage",
    "GoalStore",
    "GoalVerdict",
    "HandoverPacket",
    "HumanDecision",
    "InvalidInput",
    "MemoryAuditLog",
    "MemoryCatalog",
    "MemoryGoalStore",
    "MemoryTaskStore",
    "MonitorConfig",
    "NotFound",
    "Outcome",
    "PermissionDenied",
    "PolicyRules",
    "Problem",
    "Provenance",
    "RedisTaskStore",
    "Resolution",
    "ResolutionKind",
    "ResourceExhausted",
    "Router",
    "RoutingDecision",
    "RoutingRefused",
    "RuleBasedExtractor",
    "SMFMessage",
    "SMFMetadata",
    "ServerConfig",
    "StepVerdict",
    "TaskRecord",
    "TaskRequest",
    "TaskState",
    "TaskStep",
    "TaskStore",
    "Unauthenticated",
    "Unavailable",
    "Verifier",
    "WalAuditLog",
    "parse_step_sentence",
    "verify_goal",
]
