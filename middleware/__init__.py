"""Agency Middleware: the governance layer multi-agent LLM systems run behind.

The names below are imported on first use (PEP 562), so importing one submodule
(``middleware.audit.segment`` in a verification worker, say) does not import them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .agency_config import AgencyConfig
    from .agents import Agent, AgentRegistry, AgentReply, AgentRequest
    from .audit import AuditLog, AuditRecord, FileAuditLog, MemoryAuditLog, WalAuditLog
    from .catalog import Catalog, CatalogEntry, CatalogEvent, CatalogEventType, CatalogQuery
    from .circuit_breaker import BreakerConfig, CircuitBreaker
    from .constraints import (
        ConstraintExtractor,
        Constraints,
        LangChainExtractor,
        RuleBasedExtractor,
        Vocabulary,
    )
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
    from .memory_session_store import MemorySessionStore
    from .memory_task_store import MemoryTaskStore
    from .pipeline import Agency
    from .redis.catalog import RedisCatalog
    from .redis.routing_stats import RedisRoutingStats
    from .redis.session_store import RedisSessionStore
    from .redis.task_store import RedisTaskStore
    from .reliability import ReliabilityConfig, ReliabilityScorer, WeightedReliabilityScorer
    from .router import Router, RoutingDecision, RoutingWeights
    from .routing_stats import MemoryRoutingStats, RoutingStats
    from .server.settings import ServerConfig
    from .sessions import ConversationState, SessionStore
    from .smf import Provenance, SMFMessage, SMFMetadata
    from .task_store import TaskStore
    from .tasks import Outcome, TaskRecord, TaskRequest, TaskState, TaskStep
    from .versions import Version, VersionRange

_EXPORTS: dict[str, str] = {
    "Agency": ".pipeline",
    "AgencyConfig": ".agency_config",
    "AgencyError": ".errors",
    "Agent": ".agents",
    "AgentFailure": ".errors",
    "AgentRegistry": ".agents",
    "AgentReply": ".agents",
    "AgentRequest": ".agents",
    "AlreadyExists": ".errors",
    "AuditCorrupted": ".errors",
    "AuditError": ".errors",
    "AuditLog": ".audit",
    "AuditRecord": ".audit",
    "BreakerConfig": ".circuit_breaker",
    "CapabilityContract": ".contracts",
    "Catalog": ".catalog",
    "CatalogEntry": ".catalog",
    "CatalogEvent": ".catalog",
    "CatalogEventType": ".catalog",
    "CatalogQuery": ".catalog",
    "CheckRegistry": ".goals",
    "CircuitBreaker": ".circuit_breaker",
    "ConcurrentUpdate": ".errors",
    "ConstraintExtractor": ".constraints",
    "Constraints": ".constraints",
    "ContractViolation": ".errors",
    "ConversationState": ".sessions",
    "DeadlineExceeded": ".errors",
    "DetectorConfig": ".detectors",
    "Detectors": ".detectors",
    "FailedPrecondition": ".errors",
    "FailureEvent": ".failures",
    "FailureHandler": ".failures",
    "FailureMonitor": ".failure_monitor",
    "FailurePolicy": ".failures",
    "FailureProcessor": ".failures",
    "FailureType": ".failures",
    "FileAuditLog": ".audit",
    "GoalAssertion": ".goals",
    "GoalStage": ".goals",
    "GoalStore": ".goals",
    "GoalVerdict": ".goals",
    "HandoverPacket": ".interventions",
    "HumanDecision": ".interventions",
    "InvalidInput": ".errors",
    "LangChainExtractor": ".constraints",
    "MemoryAuditLog": ".audit",
    "MemoryCatalog": ".memory_catalog",
    "MemoryGoalStore": ".goals",
    "MemoryRoutingStats": ".routing_stats",
    "MemorySessionStore": ".memory_session_store",
    "MemoryTaskStore": ".memory_task_store",
    "MonitorConfig": ".failure_monitor",
    "NotFound": ".errors",
    "Outcome": ".tasks",
    "PermissionDenied": ".errors",
    "PolicyRules": ".detectors",
    "Problem": ".errors",
    "Provenance": ".smf",
    "RedisCatalog": ".redis.catalog",
    "RedisRoutingStats": ".redis.routing_stats",
    "RedisSessionStore": ".redis.session_store",
    "RedisTaskStore": ".redis.task_store",
    "ReliabilityConfig": ".reliability",
    "ReliabilityScorer": ".reliability",
    "Resolution": ".failures",
    "ResolutionKind": ".failures",
    "ResourceExhausted": ".errors",
    "Router": ".router",
    "RoutingDecision": ".router",
    "RoutingRefused": ".errors",
    "RoutingStats": ".routing_stats",
    "RoutingWeights": ".router",
    "RuleBasedExtractor": ".constraints",
    "SMFMessage": ".smf",
    "SMFMetadata": ".smf",
    "ServerConfig": ".server.settings",
    "SessionStore": ".sessions",
    "StepVerdict": ".goals",
    "TaskRecord": ".tasks",
    "TaskRequest": ".tasks",
    "TaskState": ".tasks",
    "TaskStep": ".tasks",
    "TaskStore": ".task_store",
    "Unauthenticated": ".errors",
    "Unavailable": ".errors",
    "Verifier": ".goals",
    "Version": ".versions",
    "VersionRange": ".versions",
    "Vocabulary": ".constraints",
    "WalAuditLog": ".audit",
    "WeightedReliabilityScorer": ".reliability",
    "parse_step_sentence": ".goals",
    "verify_goal": ".goals",
}

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
    "ConversationState",
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
    "MemorySessionStore",
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
    "RedisSessionStore",
    "RedisTaskStore",
    "ReliabilityConfig",
    "ReliabilityScorer",
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
    "SessionStore",
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
    "WeightedReliabilityScorer",
    "parse_step_sentence",
    "verify_goal",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
