"""Agency Middleware: the governance layer multi-agent LLM systems run behind."""

from .agents import Agent, AgentRegistry, AgentReply, AgentRequest
from .audit import AuditLog, AuditRecord, FileAuditLog, MemoryAuditLog
from .catalog import Catalog, CatalogEntry, CatalogEvent, CatalogEventType, CatalogQuery
from .config import AgencyConfig, ServerConfig
from .constraints import ConstraintExtractor, Constraints, LangChainExtractor, RuleBasedExtractor, Vocabulary
from .contracts import CapabilityContract
from .errors import (
    AgencyError,
    AlreadyExists,
    AuditCorrupted,
    AuditError,
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
from .memory_catalog import MemoryCatalog
from .pipeline import Agency
from .redis_catalog import RedisCatalog
from .redis_routing_stats import RedisRoutingStats
from .router import Router, RoutingDecision, RoutingWeights
from .routing_stats import MemoryRoutingStats, RoutingStats
from .smf import Provenance, SMFMessage, SMFMetadata
from .tasks import Outcome, TaskRequest, TaskState, TaskStep
from .versions import Version, VersionRange

__all__ = [
    "Agency",
    "AgencyConfig",
    "AgencyError",
    "Agent",
    "AgentRegistry",
    "AgentReply",
    "AgentRequest",
    "AlreadyExists",
    "AuditCorrupted",
    "AuditError",
    "AuditLog",
    "AuditRecord",
    "CapabilityContract",
    "Catalog",
    "CatalogEntry",
    "CatalogEvent",
    "CatalogEventType",
    "CatalogQuery",
    "CheckRegistry",
    "ConstraintExtractor",
    "Constraints",
    "ContractViolation",
    "DeadlineExceeded",
    "FailedPrecondition",
    "FailureEvent",
    "FailureHandler",
    "FailurePolicy",
    "FailureProcessor",
    "FailureType",
    "FileAuditLog",
    "GoalAssertion",
    "GoalStage",
    "GoalStore",
    "GoalVerdict",
    "InvalidInput",
    "LangChainExtractor",
    "MemoryAuditLog",
    "MemoryCatalog",
    "MemoryGoalStore",
    "MemoryRoutingStats",
    "NotFound",
    "Outcome",
    "PermissionDenied",
    "Problem",
    "Provenance",
    "RedisCatalog",
    "RedisRoutingStats",
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
    "TaskRequest",
    "TaskState",
    "TaskStep",
    "Unauthenticated",
    "Unavailable",
    "Verifier",
    "Version",
    "VersionRange",
    "Vocabulary",
    "parse_step_sentence",
    "verify_goal",
]
