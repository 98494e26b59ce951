"""People as members of the agency: who they are, approval gates, escalations to them.

``middleware.people.desk`` (the :class:`~middleware.people.desk.HumanDesk`) routes
escalations and applies decisions; ``middleware.server.console`` is the web console on top.
"""

from .._lazy import lazy_exports
from .approvals import ApprovalGates, TaskObserver, approval_expired, check_approver
from .model import (
    ApprovalGate,
    ConsoleSettings,
    Escalation,
    EscalationRoute,
    HumansSettings,
    Person,
    PersonRef,
)
from .store import EscalationStore, MemoryEscalationStore

__all__ = [
    "ApprovalGate",
    "ApprovalGates",
    "ConsoleSettings",
    "Escalation",
    "EscalationRoute",
    "EscalationStore",
    "HumansSettings",
    "MemoryEscalationStore",
    "Person",
    "PersonRef",
    "RedisEscalationStore",
    "TaskObserver",
    "approval_expired",
    "check_approver",
]

# RedisEscalationStore lives in the Redis layer (middleware.redis.escalation_store), imported on
# first use.
__getattr__, __dir__ = lazy_exports(
    __name__, {"RedisEscalationStore": "middleware.redis.escalation_store"}, __all__
)
