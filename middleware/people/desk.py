"""The human desk: every escalation reaches the right people, and their decisions resume tasks.

The pipeline tells the desk when a task starts and whenever it stops
(:class:`~middleware.people.approvals.TaskObserver`). A task that stops waiting for a
person (a clarification, a conflict, a handover, an approval) or whose output was
quarantined becomes an :class:`~middleware.people.model.Escalation`: routed to people by
their routes and roles, stored (memory or Redis, shared by replicas), posted to each
person's mailbox in the post office (``human:<name>``), and shown in their console inbox.
A message the post office's moderation holds on its quarantine board becomes a
``quarantine`` escalation too (``task_id`` ``message:<id>``), routed to the people with the
``moderator`` role (or a route), decided ``release`` or ``delete`` through the same post
office operations as ``MessageService.ReleaseQuarantined`` / ``DeleteQuarantined``.

:meth:`HumanDesk.decide` is the one way a person's answer goes in: it checks the person
may decide, that the escalation is still open (its id is a one-time decision id, claimed
atomically), that the answer is one of the offered ones, then resumes the task through
``Agency.resume`` — the same path as gRPC ``Resume``. Every refusal is audited with the
person, their roles and why; every decision names the person, the role and the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..access import HumanRole
from ..audit.record import Actors, AuditRecord
from ..errors import AgencyError, FailedPrecondition, InvalidInput, NotFound, PermissionDenied
from ..server.metrics import Metrics
from ..smf import Provenance, SMFMessage, SMFMetadata, utcnow
from ..tasks import Outcome, TaskRecord, TaskState
from .model import ESCALATION_KINDS, MESSAGE_SUBJECT, Escalation, Person
from .store import EscalationStore, MemoryEscalationStore

if TYPE_CHECKING:
    from ..messaging.moderation import Quarantined
    from ..messaging.post_office import PostOffice
    from ..pipeline import Agency
    from ..server.definition import AgencyDefinition

__all__ = ["DESK_SENDER", "HumanDesk"]

log = logging.getLogger("agency.humans")

#: The post office sender of escalation notices.
DESK_SENDER = "agency:desk"

#: Who may decide each kind when no gate names roles.
_DECIDERS: dict[str, list[HumanRole]] = {
    "clarification": [HumanRole.OPERATOR],
    "conflict": [HumanRole.OPERATOR],
    "human_handover": [HumanRole.OPERATOR],
    "quarantine": [HumanRole.COMPLIANCE_OFFICER, HumanRole.QUARANTINE_REVIEWER],
}


def _kind(run: TaskRecord) -> str | None:
    kind = str(run.pending.get("kind", ""))
    if run.state is TaskState.INPUT_REQUIRED and kind in ESCALATION_KINDS:
        return kind
    if run.state is TaskState.FAILED and kind == "quarantine":
        return kind
    return None


class HumanDesk:
    """Routes escalations to people, delivers them, and applies their decisions.

    Args:
        agency: The governance core whose tasks it watches (it sets ``agency.humans``).
        people: The definition's people.
        store: Where escalations live (default: in memory; Redis for replicas).
        metrics: Where ``agency_escalations_waiting`` and ``agency_human_answer_seconds`` go
            (default: a private registry).
    """

    def __init__(
        self,
        agency: Agency,
        people: Sequence[Person],
        *,
        store: EscalationStore | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.agency = agency
        self.people = {p.name: p for p in people}
        self._by_token = {p.token_sha256: p for p in people if p.token_sha256}
        self.store: EscalationStore = store or MemoryEscalationStore()
        self.post_office: PostOffice | None = None
        self._desk_token = ""
        self._desk_key: Any = None
        self._sweeper: asyncio.Task[None] | None = None
        self.notify: list[str] = []
        metrics = metrics if metrics is not None else Metrics()
        self.waiting = metrics.escalations_waiting
        self.answer_seconds = metrics.human_answer
        agency.humans = self

    @classmethod
    async def from_definition(
        cls,
        definition: AgencyDefinition,
        agency: Agency,
        post_office: PostOffice | None = None,
        *,
        metrics: Metrics | None = None,
    ) -> HumanDesk:
        """The desk of a served gateway: the definition's people and approval gates on
        ``agency``, escalations in Redis when ``storage.backend`` is redis (replicas share
        them), each person's mailbox in ``post_office``."""
        from .approvals import ApprovalGates

        humans = definition.humans
        agency.approvals = ApprovalGates(humans.approvals)
        store: EscalationStore | None = None
        if definition.storage.backend == "redis":
            from ..redis.escalation_store import RedisEscalationStore

            store = RedisEscalationStore.from_url(
                definition.storage.redis_url, prefix=definition.storage.key_prefix
            )
        desk = cls(agency, humans.people, store=store, metrics=metrics)
        if post_office is not None:
            await desk.attach_post_office(post_office, notify=humans.notify)
        return desk

    # ----------------------------------------------------------------- people
    def authenticate(self, token: str) -> Person | None:
        """The person whose bearer token this is (compared by SHA-256), or None."""
        if not token:
            return None
        return self._by_token.get(hashlib.sha256(token.strip().encode()).hexdigest())

    async def attach_post_office(self, post_office: PostOffice, *, notify: Sequence[str] = ()) -> None:
        """Give every person a mailbox (``human:<name>``, their own token reads it over
        MessageService) and let the desk post escalation notices to them, and to the
        messaging agents in ``notify`` (e.g. a receive-only ``human_ops``).

        Raises:
            InvalidInput: on ``humans.notify``: an agent that has no mailbox.
        """
        from ..messaging.identity import generate_key, public_key_b64

        missing = [n for n in notify if n not in post_office.identity]
        if missing:
            raise InvalidInput.single(
                "humans.notify", f"no messaging agent {', '.join(missing)} (declare it in messaging.agents)"
            )
        self.notify = list(notify)
        self.post_office = post_office
        for person in self.people.values():
            if person.mailbox not in post_office.identity:
                # people read their mailbox; they never sign: a key nobody holds
                await post_office.enroll(
                    person.mailbox,
                    public_key_b64(generate_key()),
                    # a person signing in only by SSO reads no mailbox over gRPC: a token nobody holds
                    person.token_sha256 or hashlib.sha256(secrets.token_bytes(32)).hexdigest(),
                    description=f"mailbox of {person.display_name or person.name}",
                )
        self._desk_key = generate_key()
        if DESK_SENDER not in post_office.identity:
            self._desk_token = await post_office.register(
                DESK_SENDER, public_key_b64(self._desk_key), description="escalations for people"
            )
        post_office.flows_exempt.add(DESK_SENDER)
        post_office.moderation_exempt.add(DESK_SENDER)  # one notice to many moderators is no spam
        post_office.on_quarantined.append(self.message_held)
        post_office.on_moderated.append(self.message_decided)

    # ---------------------------------------------------------------- observer
    async def task_started(self, run: TaskRecord) -> None:
        await self.store.note_task(self._summary(run))

    async def task_stopped(self, run: TaskRecord) -> None:
        await self.store.note_task(self._summary(run))
        current = await self.store.open_for_task(run.task_id)
        if current is not None:  # resumed elsewhere (gRPC Resume), or stopped again
            current.status = "closed"
            current.reason = current.reason or f"task went on ({run.state.value})"
            await self.store.put(current)
        kind = _kind(run)
        if kind is None:
            if current is not None:  # only a change of what waits is recounted
                await self._count()
            return
        esc = self._escalation(run, kind)
        await self.store.put(esc)
        await self._record(
            "human.escalation",
            "routed" if esc.assignees else "unrouted",
            esc,
            {"assignees": esc.assignees, "routing": esc.routing, "kind": kind},
        )
        await self._notify(esc)
        await self._count()

    def _escalation(self, run: TaskRecord, kind: str) -> Escalation:
        pending = run.pending
        failure = run.failures[-1] if run.failures else None
        step_name = str(pending.get("step") or (failure.step if failure else ""))
        step = next((s for s in run.request.steps if s.name == step_name), None)
        tags = [*(step.tags if step else []), *map(str, run.request.constraints.get("tags", []) or [])]
        failure_type = str(
            pending.get("failure_type")
            or (pending.get("blocking_point") or {}).get("failure_type")
            or (failure.type.value if failure and kind != "approval" else "")
        )
        expires = pending.get("expires_at")
        esc = Escalation(
            task_id=run.task_id,
            trace_id=run.trace_id,
            kind=kind,
            failure_type=failure_type,
            step=step_name,
            agent=str(pending.get("agent") or (failure.agent if failure else "")),
            criticality=run.goal.criticality if run.goal else "",
            tags=tags,
            client=run.client,
            tenant=run.tenant,
            user_id=run.request.user_id,
            summary=str(pending.get("question") or pending.get("why") or run.reason)[:500],
            expires_at=datetime.fromisoformat(str(expires)) if expires else None,
            pending=dict(pending),
            deciders=[HumanRole(r) for r in pending.get("roles", [])]
            if kind == "approval"
            else _DECIDERS[kind],
        )
        if failure_type == "POLICY_VIOLATION":
            esc.deciders = _DECIDERS["quarantine"]
        self._route(esc)
        return esc

    def _route(self, esc: Escalation) -> None:
        # separation of duties: an approval never reaches the person who submitted the task
        submitters = {s for s in (esc.client, esc.user_id) if s and s != "anonymous"}
        for person in self.people.values():
            if person.tenant != esc.tenant:  # a tenant's escalations reach its own people only
                continue
            if esc.kind == "approval" and person.name in submitters:
                continue
            why = self._why(person, esc)
            if why:
                esc.assignees.append(person.name)
                esc.routing.append(f"{person.name}: {why}")

    # ------------------------------------------------------- held messages
    async def message_held(self, item: Quarantined) -> None:
        """A message the post office's moderation held: a ``quarantine`` escalation for the
        people with the ``moderator`` role (or whose routes match it), with the rule that
        fired and its evidence — never the content (read from the board when shown)."""
        if item.sender == DESK_SENDER:  # the desk's own notices never escalate
            return
        subject = MESSAGE_SUBJECT + item.message_id
        if await self.store.open_for_task(subject) is not None:
            return
        trace_id = ""
        if item.envelope:
            with contextlib.suppress(ValueError, AttributeError):
                trace_id = str(json.loads(item.envelope).get("message", {}).get("trace_id", ""))
        sender = item.sender or "an agent"
        esc = Escalation(
            task_id=subject,
            trace_id=trace_id,
            kind="quarantine",
            agent=item.sender,
            tags=["message", item.rule],
            summary=f"message from {sender} held by moderation (rule {item.rule}: {item.reason})"[:500],
            pending={
                "source": "message",
                "message_id": item.message_id,
                "rule": item.rule,
                "reason": item.reason,
                "sender": item.sender,
                "recipients": list(item.recipients),
                "evidence": dict(item.evidence),
                "decisions": ["release", "delete"],
            },
            deciders=[HumanRole.MODERATOR],
        )
        self._route(esc)
        await self.store.put(esc)
        await self._record(
            "human.escalation",
            "routed" if esc.assignees else "unrouted",
            esc,
            {"assignees": esc.assignees, "routing": esc.routing, "kind": esc.kind, "rule": item.rule},
        )
        await self._notify(esc)
        await self._count()

    async def message_decided(self, message_id: str, decision: str, by: str) -> None:
        """A held message was released or deleted (e.g. over gRPC by an admin): its open
        escalation closes, so a later decision in the console is refused as already taken."""
        esc = await self.store.open_for_task(MESSAGE_SUBJECT + message_id)
        if esc is None or not await self.store.claim(esc.id):
            return  # decided in the console (already answered), or by a concurrent decision
        esc.status, esc.decided_by, esc.decision = "closed", by, decision
        esc.reason, esc.decided_at = f"{decision} by {by} (MessageService)", utcnow()
        await self.store.put(esc)
        await self._count()

    @staticmethod
    def _why(person: Person, esc: Escalation) -> str:
        for route in person.routes:
            if route.matches(esc):
                return f"route ({route.describe()})"
        if esc.held_message:
            return "role moderator decides held messages" if person.has(HumanRole.MODERATOR) else ""
        if esc.kind == "approval" and person.has(*esc.deciders):
            return f"role {next(r for r in person.roles if r in esc.deciders).value} may approve"
        if esc.failure_type == "POLICY_VIOLATION" and person.has(HumanRole.COMPLIANCE_OFFICER):
            return "role compliance_officer receives policy violations"
        kinds = ("clarification", "conflict", "human_handover")
        if esc.failure_type == "POLICY_VIOLATION":  # the content may be sensitive: compliance only
            return ""
        if esc.kind in kinds and not person.routes and person.has(HumanRole.OPERATOR):
            return "role operator (no routes: receives every question and handover)"
        return ""

    async def _notify(self, esc: Escalation) -> None:
        """A notice in each assignee's mailbox: what waits, never quarantined content."""
        po = self.post_office
        if po is None or not self._desk_token:
            return
        from ..messaging.identity import sign_message

        mailboxes = [self.people[name].mailbox for name in esc.assignees] + self.notify
        for mailbox in mailboxes:
            msg = SMFMessage(
                sender=DESK_SENDER,
                receiver=mailbox,
                content={
                    "escalation_id": esc.id,
                    "kind": esc.kind,
                    "task_id": esc.task_id,
                    "failure_type": esc.failure_type,
                    "summary": esc.summary
                    if esc.kind != "quarantine"
                    else (
                        "a message was held by moderation"
                        if esc.held_message
                        else "an output was quarantined"
                    ),
                    "console": f"/inbox/{esc.id}",
                },
                metadata=SMFMetadata(
                    provenance=Provenance(source="agency", reliability_score=1.0),
                    intention_trace=[esc.task_id],  # the task the person is asked about
                    freshness_ttl=86_400,
                    confidence_score=1.0,
                ),
                trace_id=esc.trace_id or "escalation",
            )
            try:
                await po.send(self._desk_token, msg, signature=sign_message(self._desk_key, msg))
            except AgencyError as exc:  # a full mailbox must not lose the escalation: it is stored
                log.warning("escalation %s: mailbox %s: %s", esc.id, mailbox, exc)

    async def _count(self) -> None:
        counts = dict.fromkeys(ESCALATION_KINDS, 0)
        for esc in await self.store.list_open():
            counts[esc.kind] += 1
        for kind, n in counts.items():
            self.waiting.labels(kind).set(n)

    # ------------------------------------------------------------------- inbox
    async def inbox(self, person: Person) -> list[Escalation]:
        """What waits for ``person``, oldest first (quarantined content removed unless allowed)."""
        found = [
            e
            for e in await self.store.list_open()
            if person.name in e.assignees and e.tenant == person.tenant
        ]
        return [self.redact(e, person) for e in sorted(found, key=lambda e: e.created_at)]

    async def escalation(self, esc_id: str, person: Person) -> Escalation:
        """One escalation as ``person`` may see it.

        Raises:
            NotFound: no such escalation (or expired from the store).
        """
        esc = await self.store.get(esc_id)
        if esc is None or esc.tenant != person.tenant:  # another tenant's is not even named
            raise NotFound(f"no escalation {esc_id!r}")
        shown = self.redact(esc, person)
        if esc.held_message and not shown.pending.get("redacted") and self.post_office is not None:
            item = await self.post_office.board.get(esc.held_message)  # still held: its content
            if item is not None and item.envelope:
                message = json.loads(item.envelope).get("message") or {}
                shown.pending["message"] = {k: message.get(k) for k in ("sender", "receiver", "content")}
        return shown

    @staticmethod
    def redact(esc: Escalation, person: Person) -> Escalation:
        """POLICY_VIOLATION escalations without what was blocked, unless the person may see it;
        a held message's content is only ever added for those who may see it (the same rule)."""
        if esc.held_message:
            if person.has(HumanRole.QUARANTINE_REVIEWER):
                return esc
            return esc.model_copy(update={"pending": {**esc.pending, "redacted": True}})
        if esc.failure_type != "POLICY_VIOLATION" or person.has(HumanRole.QUARANTINE_REVIEWER):
            return esc
        pending = dict(esc.pending)
        failure = dict(pending.get("failure") or {})
        context = failure.get("context") or {}
        if failure:
            failure["context"] = {k: context[k] for k in ("rule", "output_sha256") if k in context}
            failure["detail"] = "(withheld: quarantined content)"
            pending["failure"] = failure
        if "state" in pending:
            pending["state"] = {k: v for k, v in pending["state"].items() if k not in ("outputs",)}
        blocking = dict(pending.get("blocking_point") or {})
        if blocking:
            blocking["detail"] = "(withheld: quarantined content)"
            pending["blocking_point"] = blocking
        pending["redacted"] = True
        return esc.model_copy(update={"pending": pending, "summary": "an output was quarantined"})

    # --------------------------------------------------------------- decisions
    async def decide(
        self, esc_id: str, person: Person, *, choice: str, note: str = "", output: Any = None
    ) -> Outcome | None:
        """Apply ``person``'s decision on escalation ``esc_id`` and resume its task at once.

        ``choice``: an option id (clarification, conflict); ``approve`` or ``reject``
        (approval); ``retry`` / ``approve`` / ``provide_output`` / ``abort`` / ``cancel``
        (handover); ``acknowledge`` (quarantine: nothing to resume).

        Returns:
            The task's outcome after the resume (None for an acknowledged quarantine).

        Raises:
            NotFound, PermissionDenied, FailedPrecondition, InvalidInput: each audited.
        """
        esc = await self.store.get(esc_id)
        try:
            if esc is None:
                raise NotFound(f"no escalation {esc_id!r}")
            self._may_decide(esc, person)
            if esc.status != "open":
                by = f" by {esc.decided_by}" if esc.decided_by else ""
                raise FailedPrecondition(
                    f"escalation {esc_id} is already {esc.status}{by}: a decision is taken once",
                    details={"escalation": esc_id, "status": esc.status},
                )
            answer, decision = self._reply(esc, person, choice, note, output)
            if not await self.store.claim(esc_id):
                raise FailedPrecondition(
                    f"escalation {esc_id} is being decided by someone else", details={"escalation": esc_id}
                )
        except AgencyError as exc:
            await self._refused(esc_id, esc, person, choice, exc)
            raise
        role = self._role(esc, person)
        esc.status, esc.decided_by, esc.decided_role = "answered", person.name, role
        esc.decision, esc.reason, esc.decided_at = choice, note, utcnow()
        await self.store.put(esc)  # closed before the task moves: its next stop opens a new one
        try:
            outcome = None
            if esc.held_message:
                await self._moderate(esc, person, choice, note)
            elif esc.kind != "quarantine":
                outcome = await self.agency.resume(
                    esc.task_id, answer=answer, decision=decision, person=person.ref()
                )
        except AgencyError as exc:
            if not isinstance(exc, FailedPrecondition):  # the task still waits: reopen
                esc.status, esc.decided_by, esc.decided_role, esc.decided_at = "open", "", "", None
                await self.store.put(esc)
                await self.store.release(esc_id)
            await self._refused(esc_id, esc, person, choice, exc)
            raise
        self.answer_seconds.labels(esc.kind).observe((esc.decided_at - esc.created_at).total_seconds())
        await self._record(
            "human.decision",
            choice,
            esc,
            {"person": person.name, "role": role, "reason": note, "kind": esc.kind, "escalation": esc_id},
            user=person.name,
        )
        await self._count()
        return outcome

    async def _moderate(self, esc: Escalation, person: Person, choice: str, note: str) -> None:
        """Release or delete a held message through the post office (the gRPC RPCs' path)."""
        po = self.post_office
        if po is None:
            raise FailedPrecondition("no post office is attached to the desk: nothing to release or delete")
        try:
            if choice == "release":
                await po.release(esc.held_message, person=person.name, roles=person.roles, note=note)
            else:
                await po.delete_quarantined(
                    esc.held_message, person=person.name, roles=person.roles, note=note
                )
        except NotFound:  # taken off the board by another decision (an admin over gRPC)
            esc.status, esc.reason = "closed", "no longer on the quarantine board"
            await self.store.put(esc)
            raise FailedPrecondition(
                f"message {esc.held_message} is no longer on the quarantine board: "
                "it was already released or deleted",
                details={"escalation": esc.id, "message_id": esc.held_message},
            ) from None

    def _may_decide(self, esc: Escalation, person: Person) -> None:
        if person.has(*esc.deciders) or (
            esc.kind != "approval" and not esc.held_message and person.name in esc.assignees
        ):
            return
        raise PermissionDenied(
            f"{person.name} (roles {', '.join(r.value for r in person.roles)}) may not decide this "
            f"{esc.kind}: it needs one of the roles {', '.join(r.value for r in esc.deciders)}",
            details={"person": person.name, "needed": [r.value for r in esc.deciders], "target": esc.id},
        )

    @staticmethod
    def _role(esc: Escalation, person: Person) -> str:
        return next((r.value for r in person.roles if r in esc.deciders), person.roles[0].value)

    @staticmethod
    def _reply(
        esc: Escalation, person: Person, choice: str, note: str, output: Any
    ) -> tuple[str | None, dict[str, Any] | None]:
        """The resume arguments for ``choice`` (InvalidInput when it is not an offered one)."""
        if esc.kind in ("clarification", "conflict"):
            ids = [str(o.get("id")) for o in esc.pending.get("options", [])]
            if choice not in ids:
                raise InvalidInput.single("answer", f"must be one of the offered options: {', '.join(ids)}")
            return choice, None
        if esc.kind == "approval":
            actions = {"approve": "approve", "reject": "abort"}
            if choice not in actions:
                raise InvalidInput.single("answer", "an approval is answered approve or reject")
            if choice == "reject" and not note.strip():
                raise InvalidInput.single("reason", "say why the approval is rejected")
            return None, {"action": actions[choice], "by": person.name, "note": note}
        if esc.held_message:
            if choice not in ("release", "delete"):
                raise InvalidInput.single("answer", "a held message is released or deleted")
            if choice == "delete" and not note.strip():
                raise InvalidInput.single("reason", "say why the message is deleted")
            return None, {"action": choice}
        if esc.kind == "quarantine":
            if choice != "acknowledge":
                raise InvalidInput.single("answer", "a quarantine is acknowledged (the task has ended)")
            return None, None
        allowed = [d for d in esc.pending.get("decisions", []) if d != "use_agent"]
        if choice not in allowed:
            raise InvalidInput.single("answer", f"must be one of: {', '.join(allowed)}")
        decision: dict[str, Any] = {"action": choice, "by": person.name, "note": note}
        if choice == "provide_output":
            if output is None or output == "":
                raise InvalidInput.single("output", "required when you provide the output")
            decision["output"] = output
        return None, decision

    async def _refused(
        self, esc_id: str, esc: Escalation | None, person: Person, choice: str, exc: AgencyError
    ) -> None:
        await self._record(
            "human.decision",
            "refused",
            esc,
            {
                "escalation": esc_id,
                "person": person.name,
                "roles": [r.value for r in person.roles],
                "answer": choice[:200],
                "why": exc.message,
                "reason_code": exc.reason,
            },
            user=person.name,
        )

    async def refuse_request(self, person_name: str, why: str, detail: dict[str, Any] | None = None) -> None:
        """Audit a request refused before it reached a decision (a forged or replayed form post)."""
        await self._record(
            "human.decision", "refused", None, {"person": person_name, "why": why, **(detail or {})}
        )

    # ----------------------------------------------------------------- expiry
    def start_sweeper(self, every_seconds: float = 30.0) -> None:
        """End timed-out approvals every ``every_seconds`` until :meth:`stop_sweeper`."""

        async def sweep() -> None:
            while True:
                await asyncio.sleep(every_seconds)
                try:
                    await self.expire_due()
                except Exception:  # logged; the next round tries again
                    log.exception("approval sweeper")

        self._sweeper = asyncio.create_task(sweep())

    async def stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def expire_due(self, now: datetime | None = None) -> int:
        """End the tasks whose approvals were not given in time; how many ended."""
        now = now or utcnow()
        ended = 0
        for esc in await self.store.list_open():
            if esc.kind != "approval" or esc.expires_at is None or esc.expires_at > now:
                continue
            if not await self.store.claim(esc.id):
                continue
            esc.status, esc.reason = "expired", "approval timed out"
            await self.store.put(esc)
            try:
                if await self.agency.expire_approval(esc.task_id) is not None:
                    ended += 1
            except AgencyError as exc:
                log.warning("approval %s: %s", esc.id, exc)
        return ended

    # ----------------------------------------------------------------- helpers
    def _summary(self, run: TaskRecord) -> dict[str, Any]:
        return {
            "task_id": run.task_id,
            "trace_id": run.trace_id,
            "state": run.state.value,
            "text": run.request.text[:200],
            "client": run.client,
            "tenant": run.tenant,
            "user_id": run.request.user_id,
            "goal_id": run.goal.id if run.goal else "",
            "pending": str(run.pending.get("kind", "")),
            "reason": run.reason[:300],
            "updated_at": utcnow().isoformat(),
            "created_at": run.created_at.isoformat(),
        }

    async def _record(
        self, event: str, outcome: str, esc: Escalation | None, detail: dict[str, Any], *, user: str = ""
    ) -> None:
        await self.agency.audit.append(
            AuditRecord(
                event_type=event,
                node=self.agency.config.node_id,
                component="humans",
                actors=Actors(user=user, agent=esc.agent if esc else ""),
                task_id=esc.task_id if esc and not esc.held_message else "",
                trace_id=esc.trace_id if esc else "",
                rule=esc.kind if esc else "",
                outcome=outcome,
                detail={
                    "escalation": esc.id if esc else "",
                    **({"message_id": esc.held_message} if esc and esc.held_message else {}),
                    **detail,
                },
            )
        )
