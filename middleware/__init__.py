"""Agency Middleware: the governance layer multi-agent LLM systems run behind."""

from .agents import Agent, AgentRegistry, AgentReply, AgentRequest
from .audit import AuditLog, AuditRecord, FileAuditLog, MemoryAuditLog, WalAuditLog
from .catalog import Catalog, CatalogEntry, CatalogEvent, CatalogEventType, CatalogQuery
from .circuit_breaker import BreakerConfig, CircuitBreaker
from .config import AgencyConfig, ServerConfig
from .constraints import ConstraintExtractor, Constraints, LangChainExtractor, RuleBasedExtractor, Vocabulary
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
from .redis_catalog import RedisCatalog
from .redis_routing_stats import RedisRoutingStats
from .redis_task_store import RedisTaskStore
from .router import Router, RoutingDecision, RoutingWeights
from .routing_stats import MemoryRoutingStats, RoutingStats
from .smf import Provenance, SMFMessage, SMFMetadata
from .task_store import TaskStore
from .tasks import Outcome, TaskRecord, TaskRequest, TaskState, TaskStep
from .versions import Version, VersionRange

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
    "CatalogEvent",
    "CatalogEventType",
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
    "LangChainExtractor",
    "MemoryAuditLog",
    "MemoryCatalog",
    "MemoryGoalStore",
    "MemoryRoutingStats",
    "MemoryTaskStore",
    "MonitorConfig",
    "NotFound",
    "Outcome",
    "PermissionDenied",
    "PolicyRules",
    "Problem",
    "Provenance",
    "RedisCatalog",
    "RedisRoutingStats",
    "RedisTaskStore",
    "Resolution",
    "ResolutionKind",
    "ResourceExhausted",
    "Router",
    "RoutingDecision",
    "RoutingRefused",
    "RoutingStats",
    "RoutingWeights",
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
    "Version",
    "VersionRange",
    "Vocabulary",
    "WalAuditLog",
    "parse_step_sentence",
    "verify_goal",
]
