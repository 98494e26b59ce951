"""``agency.v1.GoalService`` over the core goal registry."""

from __future__ import annotations

import json

import grpc

from ..._model import parse_model
from ..._proto.agency.v1 import goals_pb2, goals_pb2_grpc
from ...access import current_principal
from ...errors import InvalidInput, NotFound, PermissionDenied, Problem
from ...goals import GoalAssertion
from ...pipeline import Agency
from ...tenancy import sees
from .convert import loads
from .status import rpc

__all__ = ["GoalServicer", "goal_to_pb"]


def goal_to_pb(goal: GoalAssertion) -> goals_pb2.Goal:
    return goals_pb2.Goal(
        id=goal.id,
        description=goal.description,
        timeout_seconds=goal.timeout_seconds,
        criticality=goal.criticality,
        stages=[s.name for s in goal.stages],
        verification_step_count=len(goal.verification_steps),
        goal_json=json.dumps(goal.model_dump(mode="json"), ensure_ascii=False),
        plan_steps=goal.plan.names() if goal.plan is not None else [],
    )


class GoalServicer(goals_pb2_grpc.GoalServiceServicer):
    def __init__(self, agency: Agency) -> None:
        self._agency = agency

    @rpc
    async def RegisterGoal(
        self, request: goals_pb2.RegisterGoalRequest, context: grpc.aio.ServicerContext
    ) -> goals_pb2.Goal:
        data = loads(request.goal_json, "goal_json", want=dict)
        if data is None:
            raise InvalidInput.single("goal_json", "the goal assertion is required", what="goal assertion")
        goal = parse_model(GoalAssertion, data, what="goal assertion", prefix="goal_json")
        try:  # its plan against the contracts registered now
            await self._agency.check_plan(goal)
        except InvalidInput as exc:
            raise InvalidInput(
                [Problem(f"goal_json.{p.field.removeprefix('goal.')}", p.reason) for p in exc.problems],
                what=exc.what,
            ) from None
        caller = current_principal()
        if caller is not None and caller.tenant:  # a tenant's admin registers its tenant's goals
            if goal.tenant and goal.tenant != caller.tenant:
                raise PermissionDenied(
                    f"client {caller.name!r} may not register goal {goal.id} for tenant {goal.tenant!r}: "
                    "a caller registers goals of its own tenant only"
                )
            goal = goal.model_copy(update={"tenant": caller.tenant})
        return goal_to_pb(self._agency.register_goal(goal, replace=request.replace))

    @rpc
    async def GetGoal(
        self, request: goals_pb2.GetGoalRequest, context: grpc.aio.ServicerContext
    ) -> goals_pb2.Goal:
        if not request.goal_id:
            raise InvalidInput.single("goal_id", "required")
        goal = self._agency.get_goal(request.goal_id)
        caller = current_principal()
        if goal.tenant and not sees(caller, goal.tenant):  # another tenant's goal is not even named
            raise NotFound(f"no goal {request.goal_id!r}")
        return goal_to_pb(goal)
