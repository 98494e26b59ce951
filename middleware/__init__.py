"""Agency Middleware: the governance layer multi-agent LLM systems run behind."""

from .agents import Agent, AgentRegistry, AgentReply, AgentRequest
from .audit import AuditLog, AuditRecord, FileAuditLog, MemoryAuditLog
from .catalog import Catalog, CatalogEntry, CatalogQuery
from .config import AgencyConfig, ServerConfig
from .contracts import CapabilityContract
from .errors import (
    AgencyError,
    AgentFailure,
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
from .goals import GoalAssertion, GoalVerdict, StepVerdict, verify_goal
from .memory_catalog import MemoryCatalog
from .pipeline import Agency
from .router import ConstraintExtractor, Constraints, Router, RoutingDecision, RuleBasedExtractor
from .smf import Provenance, SMFMessage, SMFMetadata
from .tasks import Outcome, TaskRequest, TaskState, TaskStep

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
    "CapabilityContract",
    "Catalog",
    "CatalogEntry",
    "CatalogQuery",
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
    "GoalVerdict",
    "InvalidInput",
    "MemoryAuditLog",
    "MemoryCatalog",
    "NotFound",
    "Outcome",
    "PermissionDenied",
    "Problem",
    "Provenance",
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
    "TaskRequest",
    "TaskState",
    "TaskStep",
    "Unauthenticated",
    "Unavailable",
    "verify_goal",
]
