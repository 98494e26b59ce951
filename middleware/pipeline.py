"""The governance pipeline: the path of one task, from request to verified goal.

``Agency`` is the in-process API (async-first). ``submit`` runs a task through::

    validate ─► anchor goal ─► for each step: route (skip open circuits) ─► dispatch (circuit,
       stale inputs, input schema, deadline) ─► output schema + SMF metadata ─► detectors
       ─► goal stage ─► (failure? handler → resolution → executor)
    ─► verify the goal on the final output ─► outcome

through the explicit task states of ``middleware.tasks``, appending every step to the
audit log before moving on and persisting the task record (``middleware.task_store``)
when it is created, claimed and stopped. A task waiting for input continues with
``resume`` on any gateway that shares the store. With shared task leases (``leases=``, see
``middleware.takeover``) the gateway also holds a lease on each task it runs and saves the
record before every dispatch, so another replica takes over the tasks of a gateway that died
(``interrupted``: resumed or canceled). It knows nothing about gRPC:
``middleware.server.grpc_api`` adapts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ._model import trusted
from .access import Principal, Role, authorize_task, current_principal, refusal_record
from .agency_config import AgencyConfig
from .agents import AgentCallable, AgentRegistry
from .audit import AuditLog, AuditRecord, MemoryAuditLog
from .audit.record import AuditEventType, PlainRecord
from .catalog import Catalog, CatalogEntry
from .circuit_breaker import CircuitBreaker
from .contracts import CapabilityContract
from .detectors import Detectors
from .dispatcher import AttemptFailed, Dispatcher, brief, decision_detail, envelope
from .drift import DriftFinding, IntentJudge
from .errors import (
    AgencyError,
    AlreadyExists,
    FailedPrecondition,
    InvalidInput,
    NotFound,
    PermissionDenied,
    Problem,
)
from .executor import AlertSink, Directive, ResolutionExecutor, StepCursor
from .failure_monitor import FailureMonitor
from .failures import FailureEvent, FailureProcessor, FailureType, Resolution, ResolutionKind
from .goals import (
    GoalAssertion,
    GoalStore,
    GoalVerdict,
    MemoryGoalStore,
    StagedVerifier,
    Verifier,
    check_stage_bindings,
    stage_binding_problems,
)
from .guards.audit_guard import PersonalDataAuditLog
from .guards.content_guard import ContentGuard
from .guards.policy import PolicyGate
from .interventions import HumanDecision
from .memory_catalog import MemoryCatalog
from .memory_session_store import MemorySessionStore
from .memory_task_events import MemoryTaskEventLog
from .memory_task_store import MemoryTaskStore
from .metering import BudgetStop, Metering
from .people.approvals import ApprovalGates, TaskObserver, approval_expired, check_approver
from .people.model import PersonRef
from .plan_runner import PlanRunner, check_client_steps, task_steps
from .planner import Planner
from .plans import check_plan
from .reliability import ReliabilityScorer, WeightedReliabilityScorer
from .resume import ResumePlan, apply_plan, plan_resume, prefer
from .router import Router, RoutingDecision
from .session_memory import remember
from .sessions import SessionStore, authorize_session
from .smf import new_trace_id, utcnow
from .takeover import Takeover, mark_interrupted, redispatch_allowed
from .task_events import TaskEvent, TaskEventLog, events_of, outcome_event
from .task_journal import TaskJournal, observer_of
from .task_leases import TaskLeases
from .task_listing import RUNNING_STATES, STOPPED_STATES, TaskPage, TaskQuery, live_row
from .task_progress import TaskProgress
from .task_runner import TaskRunner
from .task_store import BatchingTaskStore, TaskStore
from .tasks import (
    Outcome,
    StepRecord,
    TaskRecord,
    TaskRequest,
    TaskState,
    TaskStep,
    Transition,
    _a2a_state,
    check_transition,
    keep_outcome_json,
    outcome_json,
)
from .tenancy import tenant_of

__all__ = ["Agency"]

log = logging.getLogger("agency.pipeline")
# Why a task stored and never begun is interrupted (its caller went away while it was stored).
_CUT_BEFORE_BEGUN = "the call was cancelled before the task began"

Sleeper = Callable[[float], Awaitable[None]]


#: Records after which a task waits until everything it has logged is durable: before
#: anything leaves the gateway (a dispatch to an agent, an outcome). Acceptance is not one:
#: nothing leaves between it and the next barrier, which makes it durable too. Nor is the
#: dispatch to a side-effect-free agent that runs in process (its contract's
#: ``side_effect_free``; the dispatcher passes ``barrier=False``): nothing leaves the process
#: and the call cannot act on the world, so its records become durable with the next barrier
#: (the outcome at the latest, before the client sees it).
_DURABLE_BARRIERS = frozenset(
    {
        AuditEventType.DISPATCH,
        AuditEventType.TASK_COMPLETED,
        AuditEventType.TASK_INTERRUPTED,
    }
)


#: Longest reason a cancel may give (it is kept in the outcome and the audit log).
MAX_CANCEL_REASON = 4000

#: Problems one rejection record lists (a request with thousands of bad fields is one record).
MAX_AUDITED_PROBLEMS = 100


def _listed(problems: Sequence[Problem]) -> list[str]:
    listed = [str(p) for p in problems[:MAX_AUDITED_PROBLEMS]]
    if len(problems) > MAX_AUDITED_PROBLEMS:
        listed.append(f"... and {len(problems) - MAX_AUDITED_PROBLEMS} more problems")
    return listed


class Agency:
    """The governance core, in process.

    Args:
        catalog: Where contracts live (default: in memory).
        audit: Where every step is recorded (default: in memory; ``agency serve`` uses a file).
        router: Routes steps to agents (default: a :class:`Router` over ``catalog``).
        failures: Maps failure events to resolutions (default: the built-in handlers).
        config: Core knobs (failure policies, breaker, detectors, monitor).
        sleep: How retries wait (injected so tests need no real sleeping).
        goals: Where registered goals live (default: in memory).
        verifier: The goal verification engine and its custom checks (default: no checks).
        clock: The current time, for freshness and goal date checks (injected in tests).
        tasks: Where task state is persisted (default: in memory; Redis for several replicas).
        detectors: Finds failures in agents' answers (default: built from ``config.detectors``).
        breaker: Per-agent circuit breaker (default: from ``config.breaker``).
        monitor: Failure-rate monitor that flags contracts (default: from ``config.monitor``).
        alerts: Where quarantine alerts go (default: the ``agency.alerts`` log).
        scorer: Computes answers' reliability (default: weighted, from ``config.reliability``).
        sessions: Conversation state by session id (default: in memory, ``config.session_ttl_seconds``).
        intent_judges: Judge answers against a goal's intention scope, in order (default: the
            rule-based judge; add a ``LangChainIntentJudge`` for meaning the rules miss).
        approvals: Approval gates checked before each step's agent runs (default: none).
        humans: Told when tasks start and stop (the human desk: inboxes, mailboxes).
        planner: Proposes a plan for a task that names no steps and whose goal declares none
            (default: none; ``middleware.planner``, checked before anything runs).
        agents: The callables behind contracts, and how remote workers are called (default: an
            :class:`AgentRegistry` with the plaintext gRPC remote factory; ``agency serve``
            injects one with the definition's ``workers`` TLS and token).
        guard: The content guards at dispatch (default: built from ``config.guards`` when one
            is on; with the personal-data guard, ``audit`` is wrapped so records hold no
            personal data in clear — docs/security.md).
        policy: Policies as code asked at routing, dispatch and approval (default: none), e.g.
            ``PolicyGate(CedarPolicyEngine(text))`` (docs/security.md).
        leases: Leases on running tasks shared with other replicas (default: none, one
            process): with them, ``self.takeover`` holds this gateway's leases and takes over
            the tasks of gateways that died (start its loop with ``self.takeover.start()``).
        metering: Prices, sums and bounds the agents' model usage (default: built from
            ``config.usage`` when it prices or bounds anything, sums in this process; ``agency
            serve`` gives it Redis sums with Redis storage).
        events: Every task's events for its followers (:meth:`watch`; default: in memory;
            Redis so that any replica serves them).
        runner: Runs the tasks submitted without waiting (default: a :class:`TaskRunner`).
    """

    def __init__(
        self,
        *,
        catalog: Catalog | None = None,
        audit: AuditLog | None = None,
        router: Router | None = None,
        failures: FailureProcessor | None = None,
        config: AgencyConfig | None = None,
        sleep: Sleeper = asyncio.sleep,
        goals: GoalStore | None = None,
        verifier: Verifier | None = None,
        clock: Callable[[], datetime] = utcnow,
        tasks: TaskStore | None = None,
        detectors: Detectors | None = None,
        breaker: CircuitBreaker | None = None,
        monitor: FailureMonitor | None = None,
        alerts: AlertSink | None = None,
        scorer: ReliabilityScorer | None = None,
        sessions: SessionStore | None = None,
        intent_judges: list[IntentJudge] | None = None,
        approvals: ApprovalGates | None = None,
        humans: TaskObserver | None = None,
        agents: AgentRegistry | None = None,
        guard: ContentGuard | None = None,
        policy: PolicyGate | None = None,
        leases: TaskLeases | None = None,
        planner: Planner | None = None,
        metering: Metering | None = None,
        events: TaskEventLog | None = None,
        runner: TaskRunner | None = None,
    ) -> None:
        self.config = config or AgencyConfig()
        self.catalog: Catalog = catalog or MemoryCatalog()
        self.audit: AuditLog = audit or MemoryAuditLog()
        if guard is None and self.config.guards.any_enabled:
            guard = ContentGuard(self.config.guards)
        self.guard = guard
        self.policy = policy
        if guard is not None and guard.personal_data and guard.config.personal_data.audit:
            self.audit = PersonalDataAuditLog(self.audit, guard.scanner, replacer=guard.audit_replacer)
        self.router = router or Router(self.catalog)
        self.failures = failures or FailureProcessor(
            policy=self.config.failure_policy, policies=self.config.failure_policies
        )
        self.agents = agents if agents is not None else AgentRegistry()
        self.goals: GoalStore = goals if goals is not None else MemoryGoalStore()
        self.clock = clock
        self.verifier = verifier if verifier is not None else Verifier(clock=clock)
        self.tasks: TaskStore = tasks or MemoryTaskStore(max_finished=self.config.kept_finished_tasks)
        self.sessions: SessionStore = sessions or MemorySessionStore(ttl_s=self.config.session_ttl_seconds)
        self.detectors = detectors or Detectors(self.config.detectors, clock=clock)
        self.breaker = breaker or CircuitBreaker(self.config.breaker)
        self.monitor = monitor or FailureMonitor(self.config.monitor)
        self.approvals = approvals or ApprovalGates()
        self.humans = humans
        if metering is None and self.config.usage.enabled:
            metering = Metering(self.config.usage, clock=clock)
        self.metering = metering
        self.events: TaskEventLog = (
            events if events is not None else MemoryTaskEventLog(max_tasks=self.config.kept_task_events)
        )
        self.runner = runner if runner is not None else TaskRunner()
        self._journals: dict[str, TaskJournal] = {}  # task id -> its records not yet handed over
        self._observer_of: tuple[AuditLog | None, Callable[[PlainRecord], None] | None] = (None, None)
        self._running: dict[str, TaskRecord] = {}  # task id -> task begun in the log, not ended yet
        self._deadlines: dict[str, tuple[asyncio.Timeout, float]] = {}  # task id -> (timeout, start)
        self._dispatcher = Dispatcher(
            catalog=self.catalog,
            agents=self.agents,
            router=self.router,
            breaker=self.breaker,
            detectors=self.detectors,
            deadline_factor=self.config.deadline_factor,
            audit=self._audit,
            clock=clock,
            scorer=scorer or WeightedReliabilityScorer(self.config.reliability),
            time_critical_domains=frozenset(self.config.time_critical_domains),
            intent_judges=intent_judges,
            max_output_bytes=self.config.limits.max_output_bytes,
            guard=guard,
            policy=policy,
            goals=self.goals,
            metering=metering,
            progress=self._progress,
        )
        self._executor = ResolutionExecutor(sleep=sleep, max_backups=self.config.max_backups, alerts=alerts)
        self.takeover: Takeover | None = None
        if leases is not None:
            self.takeover = Takeover(
                leases=leases,
                tasks=self.tasks,
                stats=self.router.stats,
                catalog=self.catalog,
                node=self.config.node_id,
                append=self._append_told,  # the takeover's records join the task's event stream
                observer=lambda: self.humans,
            )
        # a store that writes a task with its lease or its events at once (Redis: one round trip)
        self._batching: BatchingTaskStore | None = None
        if isinstance(self.tasks, BatchingTaskStore) and self.tasks.batches_with(self.events, leases):
            self._batching = self.tasks
        self._plans = PlanRunner(  # the orchestrator of tasks that name no steps (plans.py)
            catalog=self.catalog,
            router=self.router,
            planner=planner,
            max_steps=self.config.limits.max_steps_per_task,
            run_step=self._run_step,
            verify=self._verify,
            finish=self._finish,
            resolve=self._resolve,
            executor=self._executor,
            audit=self._audit,
            transition=self._transition,
            guard=self.guard,
        )

    # ----------------------------------------------------------------- registry
    async def register(
        self,
        contract: CapabilityContract | Mapping[str, Any],
        agent: AgentCallable | None = None,
        *,
        replace: bool = False,
        actor: str = "",
    ) -> CatalogEntry:
        """Register a contract (validated) and, for in-process agents, its callable.

        ``actor`` (the authenticated client, if any) is recorded as the change's user.

        Raises:
            FailedPrecondition: the contract names an ``endpoint`` (a remote worker), no
                ``agent`` is given, and the agent registry has no remote factory
                (``Agency(agents=AgentRegistry(remote_factory=...))``).
        """
        contract = CapabilityContract.parse(contract, what="capability contract")
        if agent is None:
            self.agents.check_remote(contract)
        entry = await self.catalog.register(contract, replace=replace)
        if agent is not None:
            self.agents.add(contract.key, agent)
        await self._record(
            AuditEventType.CATALOG_CHANGE,
            outcome="registered",
            agent=contract.key,
            user=actor,
            detail={"contract": contract.model_dump(mode="json")},
        )
        return entry

    async def deregister(self, key: str, *, actor: str = "") -> None:
        await self.catalog.deregister(key)
        self.agents.remove(key)
        await self._record(AuditEventType.CATALOG_CHANGE, outcome="deregistered", agent=key, user=actor)

    def register_goal(
        self, goal: GoalAssertion | Mapping[str, Any], *, replace: bool = False
    ) -> GoalAssertion:
        """Register a goal so tasks can reference it by id.

        Raises:
            InvalidInput: the goal does not validate, or names custom checks that are not
                registered on ``self.verifier.checks``; every problem is named.
            AlreadyExists: another goal with this id is registered and ``replace`` is false.
        """
        goal = GoalAssertion.parse(goal, what="goal assertion")
        self.verifier.require_checks(goal)
        return self.goals.put(goal, replace=replace)

    async def check_plan(self, goal: GoalAssertion | Mapping[str, Any]) -> None:
        """Check a goal's plan against the contracts registered now: each contract that can do
        a step's action gets every input its schema requires, none refuses it (``cannot_do``).
        A step no contract can do yet is allowed (its worker may register later; the plan is
        checked again when a task runs it).

        Raises:
            InvalidInput: every problem, by field (``goal.plan.steps[1].input.device_model``).
        """
        goal = GoalAssertion.parse(goal, what="goal assertion")
        if goal.plan is None:
            return
        problems = check_plan(
            goal.plan,
            [e.contract for e in await self.catalog.all()],
            prefix="goal.plan",
            max_steps=self.config.limits.max_steps_per_task,
            require_contracts=False,
        )
        if problems:
            raise InvalidInput(problems, what=f"plan of {goal.id}")

    def get_goal(self, goal_id: str) -> GoalAssertion:
        """The registered goal ``goal_id``.

        Raises:
            NotFound: no such goal.
        """
        return self.goals.get(goal_id)

    async def record_rejection(self, error: InvalidInput, *, component: str = "gateway") -> None:
        """Audit input refused at a boundary (a transport calls this for what it refuses itself)."""
        await self._record(
            AuditEventType.MESSAGE_REJECTED,
            outcome="rejected",
            rule="request_validation",  # a client's input, not an SMF message between agents
            detail={"what": error.what, "problems": _listed(error.problems)},
        )

    # ------------------------------------------------------------------ routing
    async def route(
        self, text: str, constraints: Mapping[str, Any] | None = None, *, tenant: str | None = None
    ) -> RoutingDecision:
        """A dry run: what the router would decide for ``text``, with its reasons (among the
        contracts of ``tenant``, default: the current caller's, and those shared with it)."""
        wanted = await self.router.constraints_for(text, constraints)
        return await self.router.decide(
            wanted, tenant=tenant_of(current_principal()) if tenant is None else tenant
        )

    # ------------------------------------------------------------------- submit
    async def submit(
        self,
        request: TaskRequest | Mapping[str, Any] | str,
        *,
        client: str = "",
        tenant: str | None = None,
        wait: bool = True,
    ) -> Outcome:
        """Run one task through the governance pipeline and return its outcome.

        ``client`` (the authenticated caller, if any) owns the task: only it, or an admin,
        may read or resume it (see :func:`middleware.access.authorize_task`). ``tenant`` (default:
        the current caller's) scopes it: routed only to that tenant's agents and those shared
        with it, seen only by that tenant (:mod:`middleware.tenancy`).

        ``wait=False`` answers as soon as the task is accepted and durable (its record stored,
        its acceptance in the audit log): the outcome in state ``submitted``, after the same
        validation and refusals. The task runs on in :attr:`runner`; follow it with
        :meth:`watch` or :meth:`get_task`.

        Raises:
            InvalidInput: the request (or its SMF envelope) does not validate; audited.
            NotFound: the request names a goal that is not registered.
            ResourceExhausted: ``wait=False`` and the runner is full (nothing was created).
            Unavailable: ``wait=False`` and the gateway is shutting down.
        """
        if not wait:
            self.runner.check()  # refused before anything is created
        try:
            req = TaskRequest.parse(request, what="task request")
            limit = self.config.limits.max_steps_per_task
            if len(req.steps) > limit:  # refused before anything runs (limits.max_steps_per_task)
                raise InvalidInput.single(
                    "steps", f"{len(req.steps)} steps, more than limits.max_steps_per_task ({limit})"
                )
        except InvalidInput as exc:
            await self.record_rejection(exc)
            raise
        if tenant is None:
            tenant = tenant_of(current_principal())
        goal = req.goal or (self.get_goal(req.goal_id) if req.goal_id else None)
        if goal is not None and req.goal is None and goal.tenant and goal.tenant != tenant:
            raise NotFound(f"no goal {req.goal_id!r}")  # another tenant's goal is not even named
        run = TaskRecord.start(req, goal, req.trace_id or new_trace_id(), client=client, tenant=tenant)
        if req.session_id:  # a later task of a conversation starts with what the earlier ones found
            await self._recall(run)
        if goal is not None:
            try:
                check_client_steps(goal, req.steps)  # a client's steps against the goal's plan
                names = self._plans.stage_steps(req.steps, goal)
                if names is not None:  # None: the planner's plan will be checked against them
                    check_stage_bindings(goal, names)
            except InvalidInput as exc:
                await self._record(
                    AuditEventType.MESSAGE_REJECTED,
                    outcome="rejected",
                    task_id=req.task_id,
                    detail={"problems": [str(p) for p in exc.problems]},
                )
                raise
        await self._create(run)  # AlreadyExists for a duplicate task id
        try:
            await self._tell_humans("task_started", run)
        except BaseException as exc:  # stored, not begun in the log: stopped in the store now
            await asyncio.shield(self._stop_unbegun(run, _why(exc)))
            raise
        self._running[req.task_id] = run
        try:
            submitted: dict[str, Any] = {"text": req.text}
            if run.context:  # what the session already knew: the agents are not asked for it again
                submitted["session_context"] = sorted(run.context)
            await self._audit(run, AuditEventType.TASK_SUBMITTED, "accepted", submitted)
            message = envelope(run, "gateway", req.text, sender=f"user:{req.user_id}", now=self.clock())
            await self._audit(run, AuditEventType.MESSAGE_ACCEPTED, "accepted", {"message": brief(message)})
            if goal:
                await self._audit(
                    run, AuditEventType.GOAL_ANCHORED, "anchored", {"goal": goal.model_dump(mode="json")}
                )
            if not wait:
                await self._flush_audit(run)  # durable before the client hears of it
                self.runner.start(run.task_id, self._run_on(run))
                return run.outcome()
            return await self._drive(run, self._run(run))
        except BaseException as exc:
            await self._cut_short(run, exc)
            raise

    async def _create(self, run: TaskRecord) -> None:
        """Store a new task, its lease held first when leases are shared (a gateway dying in
        between leaves a lease on no task, never a task without a lease)."""
        takeover = self.takeover
        if self._batching is not None and takeover is not None:  # lease and task: one round trip
            try:
                created = await self._batching.create_leased(run, takeover.leases, takeover.holder)
            except asyncio.CancelledError:  # the caller went away while the write was on its way
                await asyncio.shield(takeover.settle_cut_create(run.task_id, _CUT_BEFORE_BEGUN))
                raise
            if not created:
                raise AlreadyExists(f"task {run.task_id!r} already exists (another gateway runs it)")
            takeover.held_now(run.task_id)
            return
        if takeover is not None and not await takeover.hold(run.task_id):
            raise AlreadyExists(f"task {run.task_id!r} already exists (another gateway runs it)")
        try:
            await self.tasks.create(run)
        except asyncio.CancelledError:
            if takeover is not None:
                await asyncio.shield(takeover.settle_cut_create(run.task_id, _CUT_BEFORE_BEGUN))
            raise
        except BaseException:
            if takeover is not None:  # stored or not (a reply lost): the lease expires, the sweep decides
                takeover.forget(run.task_id)
            raise

    async def _stop_unbegun(self, run: TaskRecord, why: str) -> None:
        """A task stored but not begun in the log (cut short in between): ``interrupted`` in the
        store now (not left ``submitted`` for a sweep to find), its lease released."""
        if self.takeover is not None:
            await self.takeover.interrupt(run, why)
            return
        try:
            mark_interrupted(run, dead_node=self.config.node_id, node=self.config.node_id, reason=why)
            await self.tasks.save(run)
        except Exception as exc:  # best effort: the store is what failed
            log.warning("task %s: not marked interrupted (%s)", run.task_id, exc)

    async def _run_on(self, run: TaskRecord) -> Outcome:
        """The rest of a task submitted without waiting (in the runner, cancelled only when the
        gateway shuts down)."""
        try:
            return await self._drive(run, self._run(run))
        except asyncio.CancelledError as exc:
            await self._cut_short(run, exc, why="the gateway shut down before the task ended")
            raise
        except BaseException as exc:
            await self._cut_short(run, exc)
            raise

    async def _cut_short(self, run: TaskRecord, error: BaseException, *, why: str = "") -> None:
        """End a task's segment in the log with a ``task.interrupted`` record, if it began
        (``task.submitted`` / ``task.resumed``) and did not end (``task.completed``): whatever
        cut it short (a backend error, the call cancelled), every task that began in the log
        ends in it."""
        if self._running.pop(run.request.task_id, None) is not None:
            await asyncio.shield(self._interrupted(run, why or _why(error)))

    async def _interrupted(self, run: TaskRecord, why: str) -> None:
        """Audit that ``run`` stopped without an outcome (best effort: the log may be what failed)
        and, with shared leases, mark it ``interrupted`` in the store (or leave its lease to
        expire, so a replica takes it over)."""
        try:
            await self._audit(
                run,
                AuditEventType.TASK_INTERRUPTED,
                "interrupted",
                {"reason": why, "state": run.state.value},
            )
        except Exception as exc:
            log.error("could not audit the interruption of task %s: %s", run.request.task_id, exc)
        if self.takeover is not None:
            await self.takeover.interrupt(run, why)
            if run.state is TaskState.INTERRUPTED:  # stopped: resume or cancel it (its followers are told)
                await self._tell_stopped(run)

    async def _tell_stopped(self, run: TaskRecord) -> None:
        """Tell the task's followers it stopped outside ``_finish`` (best effort: the task's
        state is in the store; a follower also finds it there)."""
        try:
            await self.events.append(run.task_id, [self._outcome_event(run)])
        except Exception as exc:
            log.warning("task %s: its followers were not told it stopped: %s", run.task_id, exc)

    async def _append_told(self, record: AuditRecord) -> int:
        """Append a record a component writes for a task outside its journal (a takeover's
        ``task.interrupted``) and tell it to the task's followers, then that the task stopped."""
        index = await self.audit.append(record)
        if record.task_id and record.event_type == AuditEventType.TASK_INTERRUPTED:
            try:
                run = await self.tasks.get(record.task_id)
                told = events_of([record.model_dump(mode="json")], [run.state.value], [index])
                await self.events.append(record.task_id, [*told, self._outcome_event(run)])
            except Exception as exc:  # the record is in the log; the store has the state
                log.warning(
                    "task %s: its followers were not told of %s: %s", record.task_id, record.event_type, exc
                )
        return index

    async def _drive(self, run: TaskRecord, work: Awaitable[Outcome]) -> Outcome:
        """Run one segment of a task (from submit, or from a resume) under the goal's timeout."""
        started = time.perf_counter()
        begun = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(run.goal.timeout_seconds if run.goal else None) as deadline:
                # a goal an intake agent anchors later is timed from the segment's start too
                self._deadlines[run.task_id] = (deadline, begun)
                return await work
        except TimeoutError:
            return await self._goal_timeout(run)
        finally:
            self._deadlines.pop(run.task_id, None)
            run.active_ms += (time.perf_counter() - started) * 1000
            await self._flush_audit(run)

    def _steps(self, run: TaskRecord) -> list[TaskStep]:
        if run.plan is not None:  # the goal's, the planner's (plan_runner.py)
            return task_steps(run)
        return run.request.steps or [_main_step()]

    async def _run(self, run: TaskRecord, first: ResumePlan | None = None) -> Outcome:
        if self._plans.wants_plan(run) and (stopped := await self._plans.prepare(run)) is not None:
            return stopped
        if run.plan is not None:  # steps the gateway planned: a DAG, branches at the same time
            return await self._plans.run(run, first)
        steps = self._steps(run)
        while run.step_index < len(steps):
            step = steps[run.step_index]
            plan, first = first, None
            stopped = await self._run_step(
                run, step, agent=plan.agent if plan else "", extra=run.step_inputs.get(step.name)
            )
            if stopped is not None:
                return stopped
        verified = await self._verify(run)
        if verified is None:  # the goal failed and its policy retries: redo the last step
            return await self._run(run)
        return verified

    async def _run_step(
        self, run: TaskRecord, step: TaskStep, *, agent: str = "", extra: dict[str, Any] | None = None
    ) -> Outcome | None:
        await self._transition(run, TaskState.ROUTING)
        decision = await self._dispatcher.route(run, step)
        if agent:  # a resume names the agent: only one the contracts allow for this step
            decision = prefer(decision, agent)
        dumped = decision.model_dump(mode="json")
        run.routing.append({"step": step.name, **dumped})
        if decision.refused:
            drift = await self._dispatcher.scope_drift(run, step, decision)
            await self._audit(
                run,
                AuditEventType.ROUTING_REFUSED,
                "refused",
                {"step": step.name, **decision_detail(decision, dumped)},
                rule="intention_scope" if drift is not None else "",
            )
            if drift is not None:
                return await self._out_of_scope(run, step, drift)
            event = run.failure_event(
                FailureType.CAPABILITY_MISMATCH, step=step.name, detail=decision.explanation
            )
            resolution = await self._resolve(run, event)
            if resolution.kind is ResolutionKind.ABORT:
                return await self._finish(run, TaskState.REJECTED, reason=resolution.reason)
            cursor = StepCursor(agent="", fallbacks=[])
            await self._carry_out(run, resolution, event, cursor)
            return await self._stop(run, cursor)
        await self._audit(
            run,
            AuditEventType.ROUTING_DECISION,
            "chosen",
            {
                "step": step.name,
                **decision_detail(decision, dumped),
                "circuit_open": self.breaker.open_agents(),
            },
            agent=decision.chosen,
        )
        cursor = StepCursor(agent=decision.chosen, fallbacks=list(decision.fallbacks))
        record = run.step_record(step.name)
        if record is None:
            record = StepRecord.begin(step.name)
            run.steps.append(record)
        record.status = "running"
        while True:
            # a spent budget stops the task before its next attempt (the chosen agent, a retry, a backup)
            if self.metering is not None and (spent := await self.metering.check(run, agent=cursor.agent)):
                record.status = "pending"
                return await self._budget_stop(run, step, cursor.agent, spent)
            # an approval gate holds the step before its agent (the chosen one, or a backup) runs
            if self.approvals and (gate := self.approvals.pending_for(run, step, cursor.agent)) is not None:
                record.status = "pending"
                await self._audit(
                    run, AuditEventType.HUMAN_HANDOVER, "approval_required", gate, agent=cursor.agent
                )
                return await self._finish(
                    run, TaskState.INPUT_REQUIRED, reason=str(gate["why"]), pending=gate
                )
            await self._transition(run, TaskState.DISPATCHED)
            record.agent, record.attempts = cursor.agent, record.attempts + 1
            if self.takeover is not None:  # the shared store knows what is done and what is in flight
                run.updated_at = utcnow()
                await self.tasks.save(run)
            try:
                answer = await self._dispatcher.attempt(run, step, cursor, extra or {})
            except AttemptFailed as failed:
                stale_input = str(failed.context.get("stale_step", ""))
                event = run.failure_event(
                    failed.ftype,
                    step=step.name,
                    agent=cursor.agent,
                    attempt=run.rewinds + 1 if stale_input else cursor.attempt,
                    # another agent would get the same stale input
                    fallbacks=[] if stale_input else cursor.fallbacks,
                    detail=failed.detail,
                    context=failed.context,
                )
                run.held = failed.held
                resolution = await self._resolve(run, event)
                directive = await self._carry_out(
                    run, resolution, event, cursor, followable=(Directive.RETRY, Directive.SWITCH)
                )
                if directive is Directive.RETRY and stale_input:  # fresh data: redo the step it came from
                    run.rewinds += 1
                    run.step_index = [s.name for s in self._steps(run)].index(stale_input)
                    record.status = "pending"
                    await self._transition(run, TaskState.ROUTING)
                    return None
                if directive is Directive.RETRY:
                    await self._transition(run, TaskState.RETRYING)
                    continue
                if directive is Directive.SWITCH:
                    await self._transition(run, TaskState.ROUTING)
                    continue
                record.status = "failed"
                if failed.ftype is FailureType.POLICY_VIOLATION:
                    await self._audit(
                        run, AuditEventType.QUARANTINE, "blocked", dict(failed.context), agent=cursor.agent
                    )
                return await self._stop(run, cursor)
            run.complete_step(
                step.name,
                answer.output,
                confidence=answer.confidence,
                provenance=answer.provenance,
                fresh_until=answer.fresh_until,
            )
            if run.anchor_goal:
                refused = await self._anchor(run, step.name, cursor.agent)
                if refused is not None:
                    return refused
            return await self._verify_stage(run, step.name, answer.output)

    async def _out_of_scope(self, run: TaskRecord, step: TaskStep, drift: DriftFinding) -> Outcome:
        """A step whose action (or every agent that could take it) is outside the goal's
        intention scope: INTENT_DRIFT before dispatch, so nothing out of scope ever runs; its
        resolution (a person re-anchors the goal, or abort by policy) stops the task."""
        assert run.goal is not None
        event = run.failure_event(
            FailureType.INTENT_DRIFT,
            step=step.name,
            detail=f"{drift.reason}: refused before dispatch",
            context={
                "judge": drift.judge,
                "evidence": drift.evidence,
                "goal_id": run.goal.id,
                "intention_trace": [run.goal.id],
                "before_dispatch": True,
            },
        )
        resolution = await self._resolve(run, event)
        cursor = StepCursor(agent="", fallbacks=[])
        await self._carry_out(run, resolution, event, cursor)
        return await self._stop(run, cursor)

    async def _anchor(self, run: TaskRecord, step: str, agent: str) -> Outcome | None:
        """Anchor the goal an intake agent named (see ``middleware.intake``; the dispatcher has
        checked that it is registered); the goal's plan, if it has one, joins after the intake
        step (``PlanRunner.on_anchor``).

        Returns an outcome when the task stops here: the goal's own plan cannot run on the
        live contracts (the deployment's fault, not the client's: the task fails, explained).

        Raises:
            InvalidInput: the task's plan cannot satisfy the goal's stages (a stage bound to a
                step the task does not have): the client's plan, not the agent, is at fault; the
                task ends ``rejected`` with the reason before the error leaves.
        """
        goal_id, run.anchor_goal = run.anchor_goal, ""
        if run.goal is not None:
            return None  # the client anchored one already: it stays
        goal = self.get_goal(goal_id)
        try:
            names = await self._plans.on_anchor(run, goal, [s.name for s in self._steps(run)])
        except AgencyError as exc:
            event = run.failure_event(
                FailureType.SCHEMA_VIOLATION,
                step=step,
                agent=agent,
                detail=f"{agent} anchored {goal_id}: {exc}",
            )
            resolution = await self._resolve(run, event)
            cursor = StepCursor(agent="", fallbacks=[])
            if await self._executor.apply(resolution, event, cursor, run) is not Directive.STOP:
                cursor.stop_state, cursor.stop_reason = TaskState.FAILED, event.detail  # no retry fixes it
            return await self._stop(run, cursor)
        problems = stage_binding_problems(goal, names, anchored_by=agent) if names is not None else []
        if problems:  # None above: the planner's plan is checked against the stages instead
            error = InvalidInput(problems, what="task request")
            await self._audit(
                run,
                AuditEventType.MESSAGE_REJECTED,
                "rejected",
                {"what": error.what, "problems": _listed(problems), "goal_id": goal.id, "by": agent},
                agent=agent,
                rule="plan_against_goal",
            )
            reason = "; ".join(p.reason for p in problems)
            await self._finish(run, TaskState.REJECTED, reason=reason, now=True)
            raise error
        run.goal = goal
        timing = self._deadlines.get(run.task_id)
        if timing is not None and timing[0].when() is None:
            timing[0].reschedule(timing[1] + goal.timeout_seconds)
        await self._audit(
            run,
            AuditEventType.GOAL_ANCHORED,
            "anchored",
            {
                "goal": goal.model_dump(mode="json"),
                "by": agent,
                "intent": run.intent,
                "language": run.language,
                "context": run.context,
            },
            agent=agent,
        )
        return None

    async def _verify_stage(self, run: TaskRecord, step: str, output: Any) -> Outcome | None:
        """Verify the goal stage bound to ``step`` (if any) as soon as the step returned."""
        goal = run.goal
        stage = goal.stage_for(step) if goal is not None else None
        if goal is None or stage is None:
            return None
        await self._transition(run, TaskState.VERIFYING)
        verdict = await StagedVerifier(goal, self.verifier).after_step(step, output)
        assert verdict is not None
        # a redo replaces; read after the check: a plan's branches verify their stages at once
        run.stage_verdicts = [*(v for v in run.stage_verdicts if v.stage != stage.name), verdict]
        await self._audit(
            run,
            AuditEventType.VERIFICATION,
            verdict.status,
            {"stage": verdict.stage, "step": step, **verdict.model_dump(mode="json")},
        )
        if verdict.passed:
            return None
        return await self._goal_unmet(run, verdict, step, output)

    def _staged(self, run: TaskRecord) -> StagedVerifier:
        """The goal's staged verifier, over the verdicts kept in the task record."""
        assert run.goal is not None
        staged = StagedVerifier(run.goal, self.verifier)
        staged.verdicts = run.stage_verdicts  # the same list: verdicts are persisted with the task
        return staged

    async def _verify(self, run: TaskRecord) -> Outcome | None:
        await self._transition(run, TaskState.VERIFYING)
        final = run.outputs[run.steps[-1].name] if run.steps else None
        if run.goal is None:
            return await self._finish(run, TaskState.COMPLETED, output=final)
        verdict = await self._staged(run).final(final)
        await self._audit(
            run,
            AuditEventType.VERIFICATION,
            verdict.status,
            {"stage": "", **verdict.model_dump(mode="json")},
        )
        if verdict.passed:
            return await self._finish(run, TaskState.COMPLETED, output=final, verdict=verdict)
        return await self._goal_unmet(run, verdict, run.steps[-1].name if run.steps else "", final)

    async def _goal_unmet(
        self, run: TaskRecord, verdict: GoalVerdict, step: str, output: Any
    ) -> Outcome | None:
        """A failed (or manually pending) verification becomes a GOAL_UNMET failure event.

        ``None`` when its resolution is a retry (``failure_policies.GOAL_UNMET.resolution:
        retry``): the step whose output failed is run again (routed afresh).
        """
        event = run.goal_unmet_event(verdict, step)
        resolution = await self._resolve(run, event)
        cursor = StepCursor(agent=event.agent, fallbacks=[])
        names = [s.name for s in self._steps(run)]
        directive = await self._carry_out(
            run, resolution, event, cursor, followable=(Directive.RETRY,) if step in names else ()
        )
        run.step_index = names.index(step) if step in names else 0  # a resume redoes or replaces it
        if directive is Directive.RETRY and step in names:
            record = run.step_record(step)
            if record is not None:
                record.status = "pending"
            await self._transition(run, TaskState.ROUTING)
            return None
        return await self._stop(run, cursor, output=output, verdict=verdict)

    async def _goal_timeout(self, run: TaskRecord) -> Outcome:
        assert run.goal is not None
        event = run.failure_event(
            FailureType.GOAL_TIMEOUT,
            step=run.steps[-1].name if run.steps else "",
            detail=f"goal {run.goal.id} not reached within {run.goal.timeout_seconds} s",
        )
        resolution = await self._resolve(run, event)
        cursor = StepCursor(agent="", fallbacks=[])
        await self._carry_out(run, resolution, event, cursor)
        return await self._stop(run, cursor)

    async def _budget_stop(self, run: TaskRecord, step: TaskStep, agent: str, spent: BudgetStop) -> Outcome:
        """Stop before ``step`` runs on ``agent``: a budget is spent (audited with it and the
        spend); a person decides (``hold``) or the task fails (``abort``)."""
        error, detail = spent.error(), spent.detail()
        hold = spent.budget.on_exhausted == "hold"
        await self._audit(
            run,
            AuditEventType.BUDGET_EXCEEDED,
            "held" if hold else "aborted",
            {"step": step.name, **detail, "why": error.message},
            agent=agent,
            rule=f"budget:{spent.budget.label}",
        )
        if not hold:
            return await self._finish(run, TaskState.FAILED, reason=error.message)
        pending = {
            "kind": "human_handover",
            "reason": error.message,
            "step": step.name,
            "agent": agent,
            "failure_type": error.reason,
            "budget": detail,
        }
        return await self._finish(run, TaskState.INPUT_REQUIRED, reason=error.message, pending=pending)

    async def _carry_out(
        self,
        run: TaskRecord,
        resolution: Resolution,
        event: FailureEvent,
        cursor: StepCursor,
        *,
        followable: Sequence[Directive] = (),
    ) -> Directive:
        """Apply ``resolution`` (the executor) where the pipeline can follow the directives in
        ``followable`` (a stop always). What is not carried out as decided — by the executor (no
        backup left to switch to, a question without options) or because the pipeline cannot
        follow it here — goes to a person, and is recorded beside the resolution: a
        ``failure.resolution`` record with outcome ``not_carried_out``, the kind, why, and what
        happened instead. Every logged resolution is carried out or recorded as not carried out."""
        directive = await self._executor.apply(resolution, event, cursor, run)
        if directive is not Directive.STOP and directive not in followable:
            why = f"the task cannot {directive.value} at {event.type.value} here (step {event.step or '-'})"
            directive = self._executor.not_carried_out(resolution, event, cursor, run, why)
        if cursor.not_carried_out:
            await self._audit(
                run,
                AuditEventType.RESOLUTION,
                "not_carried_out",
                {
                    "kind": resolution.kind.value,
                    "reason": resolution.reason,
                    "why": cursor.not_carried_out,
                    "instead": "escalated to a person",
                },
                agent=event.agent,
                rule=f"handler:{event.type.value}",
            )
        return directive

    async def _stop(self, run: TaskRecord, cursor: StepCursor, **extra: Any) -> Outcome:
        return await self._finish(
            run,
            cursor.stop_state or TaskState.FAILED,
            reason=cursor.stop_reason,
            pending=cursor.pending,
            **extra,
        )

    # ------------------------------------------------------------------- resume
    async def resume(
        self,
        task_id: str,
        *,
        answer: str | None = None,
        decision: HumanDecision | Mapping[str, Any] | None = None,
        caller: Principal | None = None,
        person: PersonRef | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """Continue a task waiting for input, or interrupted, where it stopped, on any gateway
        sharing the store.

        An interrupted task goes on where it was cut off; its step in flight is dispatched
        again only when the agent's contract declares ``side_effect_free`` or an
        ``idempotency`` key (then on that agent only), else a person decides
        (``provide_output``, ``abort``, ``cancel``).

        Args:
            task_id: The task.
            answer: For a clarification or a conflict: the id of the chosen option.
            decision: For a human handover (or an interrupted task): the human's
                :class:`HumanDecision`.
            input: For a plan step's missing input: the asked fields' values (they join the
                task's context).
            caller: The authenticated client (None: tokens off): the task's owner or an admin.
            person: The person deciding (the operator console, which checked their roles);
                an approval needs one of its gate's roles, and never the task's submitter.

        Raises:
            PermissionDenied: another client's task; an approval by the submitter, by a
                person without the gate's role, or by a client that is not an admin.
            NotFound: no such task.
            FailedPrecondition: the task is not waiting for input nor interrupted (e.g. another
                resume won); its interrupted step may have acted and would run again.
            ConcurrentUpdate: another resume holds the task right now.
            InvalidInput: the answer is not an offered option / the decision is malformed.
        """
        if not task_id:
            raise InvalidInput.single("task_id", "required", what="resume")
        async with self.tasks.lock(task_id):
            run = await self.tasks.get(task_id)
            if person is None:
                await self._authorize_task(caller, run, "AgencyService/Resume")
            approval = run.state is TaskState.INPUT_REQUIRED and run.pending.get("kind") == "approval"
            who: dict[str, str] = {"person": person.name, "role": person.role_names} if person else {}
            if approval:
                name, role = check_approver(run, person, caller)
                who = {"person": name, "role": role} if name else who
                if self.policy is not None:  # policies as code: may this person approve this step?
                    try:
                        await self.policy.approve(
                            run,
                            person=name,
                            roles=[r for r in role.split(",") if r],
                            agent=str(run.pending.get("agent", "")),
                            audit=self._audit,
                        )
                    finally:  # the decision is durable before the refusal leaves
                        await self._flush_audit(run)
                if approval_expired(run.pending):
                    return await self._approval_timeout(run)
            if run.state is TaskState.INTERRUPTED:
                await self._redispatch_now(run)
            cut_off_at = str(run.pending.get("state", "")) if run.state is TaskState.INTERRUPTED else ""
            plan = plan_resume(run, self._steps(run), answer=answer, decision=decision, input=input)
            bound = decision is not None or plan.require_agent  # a person's choice, or the key's
            if plan.action in ("rerun", "continue") and plan.agent and bound:
                await self._check_agent(run, plan)
            if self.takeover is not None:  # it waits (checked under its lock): nobody else runs it
                await self.takeover.hold(task_id, force=True)
            self._running[task_id] = run
            try:
                await self._audit(
                    run,
                    AuditEventType.TASK_RESUMED,
                    plan.action,
                    {"reason": plan.reason, **plan.audit, **who},
                )
                if approval and plan.action == "rerun":
                    run.approvals[str(run.pending.get("step", ""))] = {
                        **who,
                        "gate": run.pending.get("gate", ""),
                        "at": utcnow().isoformat(),
                        "reason": plan.reason,
                    }
                if plan.action in ("fail", "cancel"):
                    state = TaskState.FAILED if plan.action == "fail" else TaskState.CANCELED
                    return await self._finish(run, state, reason=plan.reason)
                # approving the final verification (a stop with the goal's own, stage-less verdict)
                final_verdict_approved = (
                    plan.action == "approve" and run.verdict is not None and not run.verdict.stage
                )
                claim = apply_plan(run, plan, self._steps(run))
                await self._transition(run, claim, save=True)  # saved with a version check: the claim
            except BaseException as exc:
                await self._cut_short(run, exc)
                raise
        try:
            if final_verdict_approved:  # vouched for by a human: not verified again
                final = run.outputs.get(self._steps(run)[-1].name)
                return await self._finish(
                    run, TaskState.COMPLETED, output=final, verdict=run.verdict, reason=plan.reason
                )
            if plan.action == "accept":
                return await self._drive(
                    run, self._accepted(run, self._steps(run)[plan.step_index].name, plan.output)
                )
            if plan.action == "continue" and cut_off_at == TaskState.VERIFYING.value and run.step_index:
                # cut off while verifying the stage of the step done last: verified again
                done = self._steps(run)[run.step_index - 1].name
                return await self._drive(run, self._accepted(run, done, run.outputs.get(done)))
            return await self._drive(run, self._run(run, None if plan.action == "approve" else plan))
        except BaseException as exc:
            await self._cut_short(run, exc)
            raise

    async def _redispatch_now(self, run: TaskRecord) -> None:
        """An interrupted task's ``pending["redispatch"]`` as the in-flight agent's contract says
        now (it may have registered since the takeover; kept when it is gone)."""
        agent = str(run.pending.get("agent", ""))
        if agent:
            with contextlib.suppress(NotFound):
                run.pending["redispatch"] = redispatch_allowed((await self.catalog.get(agent)).contract)

    async def _check_agent(self, run: TaskRecord, plan: ResumePlan) -> None:
        """Refuse a resume whose step must run on ``plan.agent`` when the contracts do not allow
        it there now (InvalidInput for a person's choice; FailedPrecondition for an interrupted
        step bound to its agent by the idempotency key)."""
        step = self._steps(run)[plan.step_index]
        routed = await self._dispatcher.route(run, step)
        if prefer(routed, plan.agent).chosen == plan.agent:
            return
        why = next((r.reason for r in routed.rejected if r.agent == plan.agent), "")
        why = why or await self.router.why_not(plan.agent, routed.constraints) or "not chosen"
        if plan.require_agent:
            raise FailedPrecondition(
                f"task {run.task_id}: step {step.name} was interrupted while {plan.agent} ran it, and only "
                f"{plan.agent} may run it again (its idempotency key), which it may not now: {why}. Resume "
                "once it is back, or decide provide_output, abort or cancel",
                details={"state": run.state.value, "step": step.name, "agent": plan.agent},
            )
        raise InvalidInput.single(
            "decision.agent", f"{plan.agent} may not run this step: {why}", what="resume"
        )

    async def cancel(
        self,
        task_id: str,
        *,
        reason: str = "",
        caller: Principal | None = None,
        person: PersonRef | None = None,
    ) -> Outcome:
        """Cancel a task waiting for input (``input_required``, ``auth_required``) or interrupted.

        Audited (``task.resumed`` ``cancel`` naming who and why, then ``task.completed``
        ``canceled``); canceling a canceled task again answers its outcome (nothing audited).

        Args:
            task_id: The task.
            reason: Why (kept in the outcome's reason and the audit log).
            caller: The authenticated client (None: tokens off): the task's owner or an admin.
            person: The person canceling (the operator console, which checked their role).

        Raises:
            NotFound: no such task.
            PermissionDenied: another client's task (audited).
            FailedPrecondition: the task has finished (its state named), or is running (a step
                an agent runs has no safe point to stop).
            ConcurrentUpdate: a resume holds the task right now.
        """
        if not task_id:
            raise InvalidInput.single("task_id", "required", what="cancel")
        if len(reason) > MAX_CANCEL_REASON:
            raise InvalidInput.single(
                "reason", f"{len(reason)} characters, at most {MAX_CANCEL_REASON}", what="cancel"
            )
        async with self.tasks.lock(task_id):
            run = await self.tasks.get(task_id)
            if person is None:
                await self._authorize_task(caller, run, "AgencyService/Cancel")
            if run.state is TaskState.CANCELED:
                return run.outcome()
            if run.state.terminal:
                raise FailedPrecondition(
                    f"task {task_id} is {run.state.value}: a finished task cannot be canceled",
                    details={"state": run.state.value},
                )
            if run.state not in (TaskState.INPUT_REQUIRED, TaskState.INTERRUPTED):
                raise FailedPrecondition(
                    f"task {task_id} is {run.state.value}: only a task waiting for input or interrupted can "
                    "be canceled (a step an agent is running has no safe point to stop)",
                    details={"state": run.state.value},
                )
            who = person.name if person is not None else (caller.name if caller is not None else "")
            role = person.role_names if person is not None else (caller.role.value if caller else "")
            why = f"canceled by {who or 'the client'}" + (f": {reason}" if reason else "")
            self._running[task_id] = run
            try:
                await self._audit(
                    run,
                    AuditEventType.TASK_RESUMED,
                    "cancel",
                    {"reason": why, "by": who, "role": role, "why": reason, "was": run.state.value},
                )
                return await self._finish(run, TaskState.CANCELED, reason=why)
            except BaseException as exc:
                await self._cut_short(run, exc)
                raise

    async def expire_approval(self, task_id: str) -> Outcome | None:
        """End a task whose approval was not given in time (a TOOL_TIMEOUT of the approvers,
        resolved ``abort``); None when the task is not waiting on an expired approval."""
        async with self.tasks.lock(task_id):
            run = await self.tasks.get(task_id)
            if not (
                run.state is TaskState.INPUT_REQUIRED
                and run.pending.get("kind") == "approval"
                and approval_expired(run.pending)
            ):
                return None
            return await self._approval_timeout(run)

    async def _approval_timeout(self, run: TaskRecord) -> Outcome:
        pending = run.pending
        detail = f"approval ({pending.get('gate', '')}) not given within {pending.get('timeout_seconds')} s"
        event = run.failure_event(
            FailureType.TOOL_TIMEOUT,
            step=str(pending.get("step", "")),
            agent="human:approvers",
            detail=detail,
            context={
                "approval_timeout": True,
                "gate": pending.get("gate", ""),
                "expires_at": pending.get("expires_at"),
            },
        )
        run.failures.append(event)
        await self._audit(
            run,
            AuditEventType.FAILURE,
            event.type.value,
            event.model_dump(mode="json"),
            rule="approval_timeout",
        )
        resolution = Resolution(kind=ResolutionKind.ABORT, reason=detail, failure_type=event.type)
        run.resolutions.append(resolution)
        await self._audit(
            run,
            AuditEventType.RESOLUTION,
            "abort",
            resolution.model_dump(mode="json"),
            rule="approval_timeout",
        )
        outcome = await self._finish(run, TaskState.FAILED, reason=detail)
        await self._flush_audit(run)
        return outcome

    async def _tell_humans(self, what: str, run: TaskRecord) -> None:
        """Tell the human desk (if any); its trouble never changes the task's course. What the
        desk shows a person leaves the gateway: the task's records before it are made durable
        first (the same rule as before a dispatch)."""
        if self.humans is None:
            return
        await self._flush_audit(run)
        try:
            await getattr(self.humans, what)(run)
        except Exception:  # logged here; the task goes on (its state is in the task store)
            log.exception("human desk: %s failed for task %s", what, run.task_id)

    async def _accepted(self, run: TaskRecord, step: str, output: Any) -> Outcome:
        """After a resume supplied a step's output: verify its goal stage, then go on."""
        stopped = await self._verify_stage(run, step, output)
        return stopped if stopped is not None else await self._run(run)

    async def get_task(self, task_id: str, *, caller: Principal | None = None) -> Outcome:
        """Where a task is now (any gateway sharing the store).

        Raises:
            NotFound: no such task.
            PermissionDenied: another client's task (``caller``: see ``resume``).
        """
        if not task_id:
            raise InvalidInput.single("task_id", "required")
        run = await self.tasks.get(task_id)
        await self._authorize_task(caller, run, "AgencyService/GetTask")
        if run.state in STOPPED_STATES:
            return run.outcome()
        # a running task is stored as it was accepted or claimed: its live state is its last event's
        last = await self.events.last(task_id)
        live = TaskState(last.state) if last is not None and last.state else run.state
        return run.outcome(live if live in RUNNING_STATES else run.state)

    async def watch(
        self, task_id: str, *, after: int = 0, caller: Principal | None = None, wait_s: float = 5.0
    ) -> AsyncIterator[TaskEvent]:
        """The task's events after ``after`` (0: from the start), as they happen, until it ends.

        The last event of an ended task is its ``task.outcome`` with ``final`` (the outcome).
        Any gateway sharing the event log serves it. While nothing happens, the task store is
        asked every ``wait_s`` seconds whether the task ended without its last event (a gateway
        that stopped in between; events dropped): then a ``task.outcome`` made from the store
        ends the stream.

        Raises:
            NotFound: no such task. PermissionDenied: another client's task (``caller``).
        """
        if not task_id:
            raise InvalidInput.single("task_id", "required")
        if after < 0:
            raise InvalidInput.single("after_seq", "must not be negative")
        run = await self.tasks.get(task_id)
        await self._authorize_task(caller, run, "AgencyService/WatchTask")
        ended = run.state.terminal
        while True:
            events = await self.events.read(task_id, after=after, limit=100, wait_s=0 if ended else wait_s)
            if not events:
                if not ended:
                    run = await self.tasks.get(task_id)
                    ended = run.state.terminal
                    if not ended:
                        continue
                    events = await self.events.read(task_id, after=after, limit=100)
                if not events:
                    if not await self._seen_end(task_id, after):  # its last event is not in the log
                        yield self._outcome_event(run, run.outcome()).model_copy(update={"seq": after})
                    return
            for event in events:
                yield event
                after = event.seq
                if event.ends_task:
                    return

    async def _seen_end(self, task_id: str, after: int) -> bool:
        """Whether the task's last stored event, at or before ``after``, ended it."""
        last = await self.events.last(task_id)
        return last is not None and last.seq <= after and last.ends_task

    async def list_tasks(
        self, query: TaskQuery | Mapping[str, Any], *, caller: Principal | None = None
    ) -> TaskPage:
        """The caller's tasks (an admin: everyone's of its tenant, or one client's; a global
        admin: every tenant's), newest first, one page.

        A running task's state is the live one (its last event's; the store holds the state it
        was accepted or claimed in until it stops).

        Raises:
            InvalidInput: a bad filter or page token, named.
            PermissionDenied: a client that is not an admin names another client.
        """
        wanted = TaskQuery.parse(query, what="task list") if not isinstance(query, TaskQuery) else query
        if caller is not None and (caller.tenant or caller.role is not Role.ADMIN):
            # one tenant's tasks only, as GetTask sees them (a global admin: every tenant's)
            wanted = wanted.model_copy(update={"tenant": caller.tenant})
        if caller is not None and caller.role is not Role.ADMIN:
            if (
                wanted.client not in (None, "")
                and wanted.client.strip().casefold() != caller.name.strip().casefold()
            ):
                error = PermissionDenied(
                    f"client {caller.name!r} (role {caller.role.value}) may list only its own tasks, "
                    f"not those of {wanted.client!r}: that takes an admin",
                    details={
                        "client": caller.name,
                        "operation": "AgencyService/ListTasks",
                        "target": wanted.client,
                    },
                )
                await self.audit.append(refusal_record(error, node=self.config.node_id))
                raise error
            wanted = wanted.model_copy(update={"client": caller.name})
        elif wanted.client == "":
            wanted = wanted.model_copy(update={"client": None})
        # a running task is stored as it was accepted or claimed: its live state is its last event's
        asked = set(wanted.states)
        if asked - STOPPED_STATES:
            wanted = wanted.model_copy(update={"states": sorted(asked | RUNNING_STATES)})
        page = await self.tasks.list(wanted)
        running = [row for row in page.tasks if row.state not in STOPPED_STATES]
        lasts = await asyncio.gather(*(self.events.last(row.task_id) for row in running))
        live = {
            row.task_id: last.state for row, last in zip(running, lasts, strict=True) if last and last.state
        }
        rows = [live_row(row, live.get(row.task_id, "")) for row in page.tasks]
        if asked:
            rows = [row for row in rows if row.state in asked]
        return TaskPage(tasks=rows, next_page_token=page.next_page_token)

    # ------------------------------------------------------------------ helpers
    async def _authorize_task(self, caller: Principal | None, run: TaskRecord, operation: str) -> None:
        """:func:`authorize_task`, auditing a refusal (``message.rejected``, rule PERMISSION_DENIED)."""
        try:
            authorize_task(caller, run.client, operation=operation, task_id=run.task_id, tenant=run.tenant)
        except PermissionDenied as exc:
            record = refusal_record(exc, node=self.config.node_id)
            ids = {"task_id": run.task_id, "trace_id": run.trace_id}
            await self.audit.append(record.model_copy(update=ids))
            raise

    async def _resolve(self, run: TaskRecord, event: FailureEvent) -> Resolution:
        run.failures.append(event)
        await self._audit(
            run,
            AuditEventType.FAILURE,
            event.type.value,
            event.model_dump(mode="json"),
            agent=event.agent,
            rule=event.type.value,
        )
        resolution = self.failures.process(event)
        run.resolutions.append(resolution)
        await self._audit(
            run,
            AuditEventType.RESOLUTION,
            resolution.kind.value,
            resolution.model_dump(mode="json"),
            agent=event.agent,
            rule=f"handler:{event.type.value}",
        )
        return resolution

    async def _transition(self, run: TaskRecord, new: TaskState, *, save: bool = False) -> None:
        """Move ``run`` to ``new`` (IllegalTransition if not allowed) and audit it.

        The record is persisted when the task is created, claimed by a resume, and when it
        stops (waiting or terminal) – the states another replica can act on – not on every
        working transition (each is in the audit log).
        """
        if run.state is new or self._plans.in_parallel(run, new):  # branches at once: dispatched
            return
        check_transition(run.state, new)
        old, run.state = run.state, new
        run.transitions.append(Transition.now(old, new, self.config.node_id))
        await self._audit(
            run, AuditEventType.STATE_TRANSITION, new.value, {"from": old.value, "to": new.value}
        )
        if save:
            run.updated_at = utcnow()
            await self.tasks.save(run)

    async def _finish(
        self,
        run: TaskRecord,
        state: TaskState,
        *,
        output: Any = None,
        verdict: GoalVerdict | None = None,
        reason: str = "",
        pending: dict[str, Any] | None = None,
        now: bool = False,
    ) -> Outcome:
        """End a task's segment in ``state``; in a plan step the runner ends it once its branches
        settled, unless ``now`` (an error is about to leave the task, e.g. a rejected plan)."""
        if not now:
            held = self._plans.defer(
                run, state, output=output, verdict=verdict, reason=reason, pending=pending
            )
            if held is not None:  # a plan step: the runner ends the task once its branches settled
                return held
        if state is TaskState.REJECTED and run.state is not TaskState.ROUTING:
            await self._transition(run, TaskState.ROUTING)
        run.output = output if state is not TaskState.FAILED or verdict is not None else None
        run.verdict, run.reason, run.pending = verdict, reason, pending or {}
        state, reason, measured = self._bound_outcome(run, state, reason)
        await self._transition(run, state)
        if run.pending.get("kind") == "human_handover":
            await self._audit(run, AuditEventType.HUMAN_HANDOVER, "escalated", run.pending)
        ended: dict[str, Any] = {"reason": reason, "goal_passed": verdict.passed if verdict else None}
        if state is TaskState.INPUT_REQUIRED:  # what a store that forgot it is rebuilt from
            ended["task"] = run.model_dump(mode="json")  # (middleware/task_recovery.py)
        await self._audit(
            run,
            AuditEventType.TASK_COMPLETED,
            state.value,
            ended,
            barrier=False,  # made durable below, with the contract reviews the monitor records
        )
        self._running.pop(run.request.task_id, None)  # the segment ended in the log
        if state.terminal:
            await self._monitor(run)
        run.updated_at = utcnow()
        # durable, and told to the task's followers with its task.outcome in the same append,
        # before it is stored: a resume (any replica) may follow the save at once
        try:
            outcome = await self._flush_audit(run, stopped=True, measured=measured, save=True)
        except BaseException:
            if self.takeover is not None:  # stored still running, or not (the reply was lost):
                self.takeover.forget(run.task_id)  # its lease expires and the sweep decides
            raise
        if self.takeover is not None:
            await self.takeover.release(run.task_id)
        if run.request.session_id:
            try:
                await remember(self.sessions, run)
            except Exception:  # the outcome stands; only the conversation memory is behind
                log.exception(
                    "session %s: conversation state not updated after task %s",
                    run.request.session_id,
                    run.task_id,
                )
        await self._tell_humans("task_stopped", run)
        assert outcome is not None
        return outcome

    async def _recall(self, run: TaskRecord) -> None:
        """Seed ``run`` with its session's context (PermissionDenied: another client's session)."""
        state = await self.sessions.get(run.request.session_id)
        if state is None:
            return
        try:
            authorize_session(state, run.client, tenant=run.tenant)
        except PermissionDenied as exc:
            await self._record(
                AuditEventType.MESSAGE_REJECTED,
                outcome="rejected",
                rule="session_owner",
                task_id=run.task_id,
                session=run.request.session_id,
                detail={"reason": str(exc)},
            )
            raise
        run.context = state.context()
        run.intent, run.language = state.intent_id, state.language

    def _bound_outcome(
        self, run: TaskRecord, state: TaskState, reason: str
    ) -> tuple[TaskState, str, tuple[Outcome, bytes] | None]:
        """``state``, ``reason`` and the outcome measured with its JSON, or, when the outcome
        would exceed ``limits.max_outcome_bytes``, ``failed``, a reason naming the limit and
        nothing measured, the outputs left out (a typed end the client can receive, not a
        response too big to send)."""
        outcome = run.outcome(state)  # as it ends, but for the index of its last record
        data = outcome_json(outcome)  # its UTF-8 JSON, as the response carries it
        size = len(data)
        limit = self.config.limits.max_outcome_bytes
        if size <= limit:
            return state, reason, (outcome, data)
        run.output, run.pending = None, {}
        for step in run.steps:
            step.output = None
        run.reason = (
            f"the outcome ({size} bytes) exceeds limits.max_outcome_bytes ({limit}); its outputs are left out"
        )
        return TaskState.FAILED, run.reason, None

    async def _monitor(self, run: TaskRecord) -> None:
        """Feed the failure-rate monitor; audit every contract it newly flags for review."""
        for flag in self.monitor.task_finished(run):
            await self._audit(
                run,
                AuditEventType.CONTRACT_REVIEW,
                "cleared" if flag.cleared else "flagged",
                flag.model_dump(mode="json"),
                agent=flag.agent,
                rule=f"failure_rate:{flag.failure_type.value}>{flag.threshold:g}",
            )

    async def _audit(
        self,
        run: TaskRecord,
        event_type: AuditEventType,
        outcome: str,
        detail: dict[str, Any],
        *,
        agent: str = "",
        rule: str = "",
        barrier: bool = True,
    ) -> None:
        """Append a record of this task's progress.

        Records are collected in the task's journal and handed to the log as one batch at
        a barrier (before an agent is dispatched, when the task ends, and when the
        segment returns), so one group commit covers several steps and nothing leaves the
        gateway — a dispatch or an outcome — before the records that precede it are on disk.
        ``barrier=False``: this record, though of a barrier type, waits for the next barrier
        (a dispatch to a side-effect-free agent in process).
        """
        journal = self._journals.get(run.request.task_id)
        if journal is None:
            journal = self._journals[run.request.task_id] = TaskJournal(
                self.audit,
                observer=self._record_observer(),
                node=self.config.node_id,
                task_id=run.request.task_id,
                trace_id=run.trace_id,
                goal_id=run.goal.id if run.goal else "",
                user=run.request.user_id,
                session=run.request.session_id,
                tenant=run.tenant,
            )
        if run.goal is not None:  # anchored mid-task by an intake agent: from then on, every record
            journal.goal_id = run.goal.id
        journal.add(event_type, outcome, detail, agent=agent, rule=rule, state=run.state.value)
        if barrier and event_type in _DURABLE_BARRIERS:
            await self._flush_audit(run)

    def _outcome_event(self, run: TaskRecord, final: Outcome | None = None) -> TaskEvent:
        """The ``task.outcome`` of a task that stopped (``final``: its outcome, when it ended)."""
        detail: dict[str, Any] = {"reason": run.reason, "a2a_state": _a2a_state(run.state, run.pending)}
        if run.pending:
            detail["pending"] = run.pending
        return outcome_event(
            task_id=run.task_id,
            trace_id=run.trace_id,
            state=run.state,
            detail=detail,
            node=self.config.node_id,
            final=final,
        )

    def _progress(self, run: TaskRecord, step: str, agent: str) -> TaskProgress:
        """The progress of one call of ``agent`` (a contract with ``stream_progress``)."""

        async def publish(events: list[TaskEvent]) -> None:
            # a dispatch record that waits for the next barrier (a side-effect-free agent in
            # process) is made durable first: nothing of the call leaves before it
            await self._flush_audit(run, then=events)

        return TaskProgress(
            publish,
            task_id=run.task_id,
            trace_id=run.trace_id,
            step=step,
            agent=agent,
            node=self.config.node_id,
        )

    def _record_observer(self) -> Callable[[PlainRecord], None] | None:
        """The audit log's record observer, looked up once per log (``self.audit`` may be
        replaced: ``agency serve`` wraps it for tracing)."""
        audit, observer = self._observer_of
        if audit is not self.audit:
            self._observer_of = (self.audit, observer := observer_of(self.audit))
        return observer

    async def _flush_audit(
        self,
        run: TaskRecord,
        *,
        stopped: bool = False,
        measured: tuple[Outcome, bytes] | None = None,
        then: Sequence[TaskEvent] = (),
        save: bool = False,
    ) -> Outcome | None:
        """Hand this task's pending records to the log as one batch and wait until durable;
        then tell them to the task's followers (its event stream: same ids, same times).

        The batch is appended in this task's context (observers such as tracing attach
        context here). ``stopped``: the task stopped — its ``task.outcome`` (with the final
        outcome when it ended) is told with the records, and the outcome returned, its JSON
        made from ``measured`` when given (the edge and the event log send those bytes).
        ``then``: events told after the records (an agent's progress). One append to the
        event log. ``save``: then store the task (with a batching store: the append and the
        save in one write, see :class:`~middleware.task_store.BatchingTaskStore`).
        """
        journal = self._journals.pop(run.request.task_id, None)
        told: list[TaskEvent] = []
        if journal is not None:
            records, states, indexes = await journal.hand_over()
            if indexes:
                run.last_index = max(run.last_index, indexes[-1])
                told = events_of(records, states, indexes)
        outcome = None
        if stopped:
            outcome = run.outcome()
            if measured is not None:  # its JSON, measured once, is what the edge sends
                keep_outcome_json(outcome, *measured)
            told.append(self._outcome_event(run, outcome if run.state.terminal else None))
        told.extend(then)
        if save and told and self._batching is not None:  # told and stored in one round trip
            await self._batching.save_told(run, told)
            return outcome
        if told:
            await self.events.append(run.task_id, told)
        if save:
            await self.tasks.save(run)
        return outcome

    async def _record(
        self,
        event_type: AuditEventType,
        *,
        outcome: str,
        detail: dict[str, Any] | None = None,
        agent: str = "",
        rule: str = "",
        task_id: str = "",
        trace_id: str = "",
        goal_id: str = "",
        user: str = "",
        session: str = "",
    ) -> int:
        return await self.audit.append(
            self._new_record(
                event_type,
                outcome=outcome,
                detail=detail,
                agent=agent,
                rule=rule,
                task_id=task_id,
                trace_id=trace_id,
                goal_id=goal_id,
                user=user,
                session=session,
            )
        )

    def _new_record(
        self,
        event_type: AuditEventType,
        *,
        outcome: str,
        detail: dict[str, Any] | None,
        agent: str,
        rule: str,
        task_id: str,
        trace_id: str,
        goal_id: str,
        user: str,
        session: str,
    ) -> AuditRecord:
        # validated from plain data in one pass (a nested Actors built first costs a second one)
        return AuditRecord.model_validate(
            {
                "event_type": event_type.value,
                "node": self.config.node_id,
                "component": "gateway",
                "actors": {"user": user, "agent": agent, "session": session},
                "task_id": task_id,
                "trace_id": trace_id,
                "goal_id": goal_id,
                "rule": rule,
                "outcome": outcome,
                "detail": detail or {},
            }
        )

    async def close(self) -> None:
        """Close the agents, the audit log, the task store and the session store (the log
        whatever else fails); tasks still running are first ended in the log as interrupted
        (and, with shared leases, marked interrupted in the store: resumable on a replica)."""
        try:
            await self.runner.close()  # background tasks cancelled: each ends in the log itself
            if self.takeover is not None:
                await self.takeover.stop()
            for run in list(self._running.values()):
                if self._running.pop(run.request.task_id, None) is not None:
                    await self._interrupted(run, "the gateway shut down before the task ended")
            if self.takeover is not None:
                await self.takeover.stop()  # the leases of the tasks that stopped are dropped
            await self.agents.aclose()
        finally:
            try:
                await self.audit.close()
            finally:
                try:
                    await self.tasks.close()
                finally:
                    try:
                        await self.sessions.close()
                    finally:
                        try:
                            await self.events.close()
                        finally:
                            if self.takeover is not None:
                                await self.takeover.leases.close()


def _main_step() -> TaskStep:
    """The one step of a task that names none (a fresh object: steps are the pipeline's input)."""
    return trusted(TaskStep, {"name": "main", "action": "", "tags": [], "text": "", "input": {}})


def _why(error: BaseException) -> str:
    """What cut a task short, for its ``task.interrupted`` record."""
    if isinstance(error, asyncio.CancelledError):
        return "the call was cancelled before the task ended"
    if isinstance(error, AgencyError):
        return f"{error.reason}: {error.message}"
    return f"{type(error).__name__}: {error}"
