"""The public Python client of a gateway (``agency serve``): typed, asyncio or blocking.

::

    from middleware.client import SyncAgencyClient

    with SyncAgencyClient("127.0.0.1:50051") as client:
        outcome = client.submit("My phone's screen is shattered, I want a replacement",
                                goal_id="GOAL_WARRANTY_001")
        print(outcome.state, outcome.trace_id)

:class:`AgencyClient` is the asyncio twin (``async with``, ``await``). Both return the core
models (:class:`~middleware.tasks.Outcome`, :class:`~middleware.router.RoutingDecision`,
:class:`~middleware.catalog.CatalogEntry`, :class:`~middleware.goals.GoalAssertion`) and raise
the library's errors (:mod:`middleware.errors`), mapped back from the gRPC status and the
``agency-reason``/``agency-problems`` trailers. Audit checkpoints and proofs are verified on
the client side with the library's own code. An agent talks to other agents through the
gateway's post office with :mod:`middleware.client.messaging` (``MessagingClient``).
"""

from __future__ import annotations

from ._async import AgencyClient, AuditClient, CatalogClient, GoalClient
from ._errors import error_from_rpc
from ._sync import SyncAgencyClient
from .audit import AuditEntry, ConsistencyProof, InclusionProof, SignedCheckpoint
from .types import CatalogChange

__all__ = [
    "AgencyClient",
    "AuditClient",
    "AuditEntry",
    "CatalogChange",
    "CatalogClient",
    "ConsistencyProof",
    "GoalClient",
    "InclusionProof",
    "SignedCheckpoint",
    "SyncAgencyClient",
    "error_from_rpc",
]
