"""Agency Middleware: the governance layer multi-agent LLM systems run behind.

The public API is the short list below: what a user of the embedded core holds in mind. Every
other name is imported from its own module (``middleware.router.Router``,
``middleware.redis.catalog.RedisCatalog``, ``middleware.server.settings.ServerConfig`` …); the
gRPC client is :mod:`middleware.client`.

The list is written once, as the imports type checkers read. At run time the same lines drive
the lazy re-exports (PEP 562): a name's module is imported on first use, so importing one
submodule (``middleware.audit.segment`` in a verification worker, say) does not import the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports, type_checking_imports

if TYPE_CHECKING:  # the public API, listed once (sorted by module; `as` marks a re-export)
    from .agency_config import AgencyConfig as AgencyConfig
    from .agents import Agent as Agent
    from .agents import AgentReply as AgentReply
    from .agents import AgentRequest as AgentRequest
    from .audit import AuditLog as AuditLog
    from .audit import MemoryAuditLog as MemoryAuditLog
    from .audit import WalAuditLog as WalAuditLog
    from .contracts import CapabilityContract as CapabilityContract
    from .errors import AgencyError as AgencyError
    from .errors import AgentFailure as AgentFailure
    from .errors import FailedPrecondition as FailedPrecondition
    from .errors import InvalidInput as InvalidInput
    from .errors import NotFound as NotFound
    from .errors import PermissionDenied as PermissionDenied
    from .failures import FailureEvent as FailureEvent
    from .failures import FailureHandler as FailureHandler
    from .failures import FailurePolicy as FailurePolicy
    from .failures import FailureProcessor as FailureProcessor
    from .failures import FailureType as FailureType
    from .failures import Resolution as Resolution
    from .failures import ResolutionKind as ResolutionKind
    from .goals import GoalAssertion as GoalAssertion
    from .pipeline import Agency as Agency
    from .smf import Provenance as Provenance
    from .smf import SMFMessage as SMFMessage
    from .task_progress import emit_progress as emit_progress
    from .tasks import Outcome as Outcome
    from .tasks import TaskRequest as TaskRequest
    from .tasks import TaskState as TaskState
    from .tasks import TaskStep as TaskStep
else:  # run time: the same lines, imported on first use (the type checker sees no __getattr__)
    _EXPORTS = type_checking_imports(__file__)
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
