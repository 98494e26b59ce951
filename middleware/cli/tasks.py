"""``agency submit``, ``agency route``, ``agency task get|resume|cancel|watch|list``: tasks on a
running gateway.

Each calls the gateway with the public client (:mod:`middleware.client`), with the same
``--address``/``--token-file``/TLS flags as ``agency catalog`` (several addresses: the next
gateway when one cannot be reached); ``--json`` prints the whole reply as JSON (``task watch``:
one event per line). Exit status: 0 completed (or waiting for input, or accepted with ``submit
--no-wait``; for ``task cancel``: canceled), 1 the task failed, was rejected, cancelled or
interrupted (or the route was refused), 2 an error, 3 no such task (``task list``: none
matched), 4 no gateway answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ..errors import InvalidInput
from ._gateway import add_gateway_options, open_client
from ._text import plural, truncate
from .exit_codes import CHECK_FAILED, EXIT_CODES_HELP, NOTHING_FOUND, OK

_DONE = {"completed", "input_required"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "submit",
        help="submit a task to a running gateway and print its outcome",
        description="Submit a task to a gateway (agency serve) and wait for its outcome: state, the "
        "agent of each step, goal verdict, failures and resolutions, output.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument("text", help="the request, in words")
    s.add_argument("--goal-id", default="", help="a registered goal to verify (e.g. GOAL_WARRANTY_001)")
    s.add_argument("--goal", metavar="JSON|@FILE", help="an inline goal assertion")
    s.add_argument("--input", metavar="JSON|@FILE", help="structured input for the agents (a JSON object)")
    s.add_argument(
        "--constraints", metavar="JSON|@FILE", help='explicit constraints, e.g. \'{"action": "x"}\''
    )
    s.add_argument(
        "--step",
        action="append",
        default=[],
        metavar="NAME[:ACTION]",
        help="a step of a multi-step task, in order (repeatable); ACTION defaults to the text's",
    )
    s.add_argument("--user-id", default="", help="who asks (default anonymous)")
    s.add_argument("--session-id", default="")
    s.add_argument("--trace-id", default="", help="join this trace")
    s.add_argument("--task-id", default="", help="choose the task id (default: generated)")
    s.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the gateway has accepted the task (its id and trace); it runs on in the "
        "gateway: follow it with 'agency task watch ID'",
    )
    _common(s)
    s.set_defaults(handler=_run, op=_submit)

    r = sub.add_parser(
        "route",
        help="ask a gateway's router who would handle a request (runs nothing)",
        description="A dry run of the router: the constraints extracted from TEXT, the chosen agent, "
        "the ranked candidates and every rejection with its reason.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("text", help="the request, in words")
    r.add_argument("--constraints", metavar="JSON|@FILE", help="explicit constraints (a JSON object)")
    _common(r)
    r.set_defaults(handler=_run, op=_route)

    t = sub.add_parser("task", help="look at, resume or cancel a task on a running gateway")
    cmds = t.add_subparsers(dest="task_command", metavar="SUBCOMMAND", required=True)
    g = cmds.add_parser(
        "get",
        help="print a task's current outcome",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("task_id", metavar="TASK_ID")
    _common(g)
    g.set_defaults(handler=_run, op=_get)
    re = cmds.add_parser(
        "resume",
        help="answer a task waiting for input, or continue an interrupted one",
        description="Resume a task in state input_required: --answer OPTION for a clarification or "
        "a conflict (the option ids are in its pending packet), --input JSON for the fields a plan "
        "step asked for (missing_input; --answer VALUE when it asks for one), --decision JSON for a "
        'human handover ({"action": "retry|use_agent|provide_output|approve|abort|cancel", ...}). '
        "Resume a task in state interrupted (its gateway died) with none of them: it goes on where "
        "it was cut off, its step in flight dispatched again only if the agent's contract is "
        "side_effect_free or declares an idempotency key; otherwise decide provide_output, abort or "
        "cancel.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    re.add_argument("task_id", metavar="TASK_ID")
    how = re.add_mutually_exclusive_group()
    how.add_argument("--answer", help="the chosen option id (or the one asked field's value)")
    how.add_argument(
        "--input", metavar="JSON|@FILE", help='the asked fields, e.g. \'{"device_model": "PhoneX"}\''
    )
    how.add_argument("--decision", metavar="JSON|@FILE", help="a human handover decision")
    _common(re)
    re.set_defaults(handler=_run, op=_resume)
    c = cmds.add_parser(
        "cancel",
        help="cancel a task waiting for input or interrupted",
        description="Cancel a task in state input_required (auth_required included) or interrupted: "
        "it ends canceled, audited with who and why. Only its owner or an admin may; a finished "
        "task is refused naming its state; canceling a canceled task again prints it (exit 0).",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("task_id", metavar="TASK_ID")
    c.add_argument("--reason", default="", help="why (kept in the outcome and the audit log)")
    _common(c)
    c.set_defaults(handler=_run, op=_cancel)
    w = cmds.add_parser(
        "watch",
        help="follow a task live: each step, failure, retry, wait and the outcome as they happen",
        description="Follow a task as it runs (any replica of the gateway): routing decisions, each "
        "step dispatched and answered, failures with their resolution, retries and backups, goal "
        "verdicts, waits for a person and their decisions, an agent's streamed text as it comes, "
        "then the outcome (as 'task get' prints it). A broken connection is resumed after the last "
        "event seen. --json prints one event per line (the vocabulary of docs/client.md).",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    w.add_argument("task_id", metavar="TASK_ID")
    w.add_argument(
        "--after", type=_seq, default=0, metavar="SEQ", help="only the events after this seq (default: all)"
    )
    _common(w)
    w.set_defaults(handler=_run, op=_watch)
    ls = cmds.add_parser(
        "list",
        help="list your tasks (an admin: everyone's), newest first",
        description="List the tasks you submitted (with an admin token: every client's, or --client's), "
        "newest first, filtered by state, goal and creation time, a page at a time.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ls.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE",
        help="only tasks in this state (repeatable): submitted, routing, dispatched, retrying, "
        "verifying, input_required, completed, failed, rejected, canceled",
    )
    ls.add_argument("--goal-id", default="", help="only tasks of this goal")
    ls.add_argument("--since", help="created at or after this time (ISO 8601; UTC if no zone)")
    ls.add_argument("--until", help="created before this time (ISO 8601; UTC if no zone)")
    ls.add_argument("--limit", type=_page_size, default=50, help="tasks per page, 1..500 (default 50)")
    ls.add_argument("--page-token", default="", help="the next page (printed under a full page)")
    ls.add_argument("--client", default="", help="an admin: only this client's tasks")
    _common(ls)
    ls.set_defaults(handler=_run, op=_list)


def _common(p: argparse.ArgumentParser) -> None:
    add_gateway_options(p)
    p.add_argument("--json", action="store_true", help="print the whole reply as JSON")


def json_option(value: str | None, flag: str) -> Any:
    """A JSON flag value: JSON text, or ``@FILE`` holding it; InvalidInput names the flag."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput.single(
                flag, f"cannot read {value[1:]}: {exc.strerror}", what="option"
            ) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput.single(flag, f"not valid JSON: {exc}", what="option") from None
    if not isinstance(data, dict):
        raise InvalidInput.single(flag, "must be a JSON object", what="option")
    return data


def _steps(specs: list[str]) -> list[dict[str, Any]]:
    steps = []
    for i, spec in enumerate(specs):
        name, _, action = spec.partition(":")
        if not name.strip():
            raise InvalidInput.single(f"step[{i}]", "give NAME or NAME:ACTION", what="option")
        steps.append({"name": name.strip(), "action": action.strip()})
    return steps


def _run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with open_client(args) as client:
            return int(await args.op(client, args, sys.stdout))

    return asyncio.run(main())


def _seq(value: str) -> int:
    try:
        seq = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an event seq (0, 1, 2 …)") from None
    if seq < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: must not be negative")
    return seq


def _page_size(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of tasks") from None
    if not 1 <= size <= 500:
        raise argparse.ArgumentTypeError(f"{value!r}: give 1..500")
    return size


def _time(value: str | None, option: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput.single(option, f"{value!r} is not an ISO 8601 time", what="option") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


async def _submit(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    outcome = await client.submit(
        args.text,
        goal_id=args.goal_id,
        goal=json_option(args.goal, "goal"),
        input=json_option(args.input, "input"),
        constraints=json_option(args.constraints, "constraints"),
        steps=_steps(args.step),
        user_id=args.user_id,
        session_id=args.session_id,
        trace_id=args.trace_id,
        task_id=args.task_id,
        wait=not args.no_wait,
    )
    if args.no_wait and not args.json:
        out.write(f"task {outcome.task_id}: {outcome.state} (accepted; it runs on in the gateway)\n")
        out.write(f"trace {outcome.trace_id}\n")
        out.write(f"follow with: agency task watch {outcome.task_id}\n")
        return OK
    return _print_outcome(outcome, args, out)


async def _watch(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    from .task_view import EventView

    view = EventView(out, json_lines=args.json)
    final = None
    async for event in client.watch(args.task_id, after=args.after):
        view.show(event)
        if event.ends_task:
            final = event.final
    view.end()
    if final is None:  # the stream ended without the outcome (never expected): ask for it
        final = await client.get_task(args.task_id)
    if args.json:
        return OK if str(final.state) in _DONE else CHECK_FAILED
    out.write("\n")
    return _print_outcome(final, args, out)


async def _list(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    page = await client.list_tasks(
        states=args.state,
        goal_id=args.goal_id,
        created_after=_time(args.since, "since"),
        created_before=_time(args.until, "until"),
        page_size=args.limit,
        page_token=args.page_token,
        client=args.client,
    )
    if args.json:
        out.write(page.model_dump_json(indent=2) + "\n")
        return OK if page.tasks else NOTHING_FOUND
    if not page.tasks:
        out.write("no tasks match\n" if not page.next_page_token else "none on this page\n")
    for t in page.tasks:
        created = t.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        owner = f"  [{t.client}]" if t.client and args.client == "" else ""
        out.write(
            f"{t.task_id}  {t.state.value:<14} {created}  {t.goal_id or '-':<20} "
            f"{truncate(t.text, 60)}{owner}\n"
        )
    if page.next_page_token:
        out.write(f"more: agency task list --page-token {page.next_page_token} (same filters)\n")
    return OK if page.tasks or page.next_page_token else NOTHING_FOUND


async def _get(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    return _print_outcome(await client.get_task(args.task_id), args, out)


async def _resume(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    outcome = await client.resume(
        args.task_id,
        answer=args.answer,
        decision=json_option(args.decision, "decision"),
        input=json_option(args.input, "input"),
    )
    return _print_outcome(outcome, args, out)


async def _cancel(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    outcome = await client.cancel(args.task_id, reason=args.reason)
    _print_outcome(outcome, args, out)
    return OK if str(outcome.state) == "canceled" else CHECK_FAILED


async def _route(client: Any, args: argparse.Namespace, out: IO[str]) -> int:
    decision = await client.route(args.text, json_option(args.constraints, "constraints"))
    if args.json:
        out.write(
            json.dumps({**decision.model_dump(mode="json"), "refused": decision.refused}, indent=2) + "\n"
        )
        return CHECK_FAILED if decision.refused else OK
    c = decision.constraints.model_dump(mode="json", exclude_defaults=True)
    out.write(f"constraints: {json.dumps(c, ensure_ascii=False)}\n")
    if decision.refused:
        out.write("REFUSED: no capability satisfies the request\n")
    else:
        out.write(f"chosen: {decision.chosen}\n")
        if decision.fallbacks:
            out.write(f"fallbacks: {', '.join(decision.fallbacks)}\n")
    for cand in decision.candidates:
        out.write(
            f"  candidate {cand.agent}  score {cand.score:.3f}  (SLO {cand.slo_latency_ms} ms, "
            f"success {cand.success_rate:.0%} over {plural(cand.samples, 'dispatch', 'dispatches')}, "
            f"load {cand.load:g})\n"
        )
    for rej in decision.rejected:
        out.write(f"  rejected  {rej.agent}: {rej.constraint}: {truncate(rej.reason, 100)}\n")
    if decision.rejected_omitted:
        out.write(f"  ... and {plural(decision.rejected_omitted, 'more rejection')}\n")
    if decision.explanation:
        out.write(f"why: {decision.explanation}\n")
    return CHECK_FAILED if decision.refused else OK


def _where(failure: Any) -> str:
    """Where a failure happened, in words: the step, and the agent and attempt when one ran."""
    step = f"at step {failure.step}" if failure.step else "in the task"
    if failure.agent:
        return f"{step} on {failure.agent} (attempt {failure.attempt})"
    if failure.type.value in ("CAPABILITY_MISMATCH", "INTENT_DRIFT"):
        return f"{step}, before any agent ran"
    return step


def _headline(outcome: Any) -> str:
    """The outcome in one plain sentence, when the state alone does not say it."""
    first = outcome.failures[0].type.value if outcome.failures else ""
    if str(outcome.state) == "rejected" and first == "CAPABILITY_MISMATCH":
        return "refused: no registered agent's contract allows this request, so no agent ran (see why below)"
    if str(outcome.state) == "rejected":
        return f"refused: {truncate(outcome.reason, 200)}"
    return ""


def plan_line(plan: dict[str, Any]) -> str:
    """A plan in one line: ``a → b → c`` when each step waits for the one before, else each
    step with what it waits for (``join ◄ left, right``)."""
    steps = [s for s in plan.get("steps") or [] if isinstance(s, dict)]
    names = [str(s.get("name", "?")) for s in steps]
    if all(list(s.get("after") or []) == names[i - 1 : i] for i, s in enumerate(steps)):
        return " → ".join(names)
    return "; ".join(
        f"{s.get('name')} ◄ {', '.join(map(str, s['after']))}" if s.get("after") else str(s.get("name"))
        for s in steps
    )


def _resume_hint(pending: dict[str, Any]) -> str:
    if pending.get("kind") == "missing_input":
        fields = [str(f) for f in pending.get("fields") or []]
        given = ", ".join(f'"{f}": ...' for f in fields)
        one = " (or --answer VALUE)" if len(fields) == 1 else ""
        return f"--input '{{{given}}}'{one}"
    return "--answer OPTION (or --decision JSON)"


def _print_outcome(outcome: Any, args: argparse.Namespace, out: IO[str]) -> int:
    state = str(outcome.state)
    code = OK if state in _DONE else CHECK_FAILED
    if args.json:
        out.write(outcome.model_dump_json(indent=2) + "\n")
        return code
    out.write(f"task {outcome.task_id}: {state} ({outcome.a2a_state})\n")
    headline = _headline(outcome)
    if headline:
        out.write(f"{headline}\n")
    out.write(f"trace {outcome.trace_id}\n")
    if outcome.plan:
        out.write(f"plan ({outcome.plan.get('source') or '?'}): {plan_line(outcome.plan)}\n")
    for step in outcome.steps:
        out.write(
            f"  step {step.name}: {step.agent or '-'} {step.status}, "
            f"{plural(step.attempts, 'attempt')}, {step.duration_ms:.0f} ms\n"
        )
    for f in outcome.failures:
        out.write(f"  failure {f.type.value} {_where(f)}: {truncate(f.detail, 100)}\n")
    for r in outcome.resolutions:
        out.write(
            f"  resolution {r.kind.value}{' -> ' + r.agent if r.agent else ''}: {truncate(r.reason, 100)}\n"
        )
    verdict = outcome.goal_verdict
    if verdict is not None:
        passed = sum(s.passed for s in verdict.steps)
        out.write(
            f"goal {verdict.goal_id}: {'passed' if verdict.passed else 'FAILED'} "
            f"({passed}/{plural(len(verdict.steps), 'check')})\n"
        )
    if outcome.reason:
        out.write(f"reason: {outcome.reason}\n")
    if outcome.pending:
        out.write(f"waiting for: {truncate(json.dumps(outcome.pending, ensure_ascii=False), 300)}\n")
        if state == "interrupted":
            out.write(
                f"resume with: agency task resume {outcome.task_id} (or --decision JSON); "
                f"or: agency task cancel {outcome.task_id}\n"
            )
        else:
            out.write(f"resume with: agency task resume {outcome.task_id} {_resume_hint(outcome.pending)}\n")
    if outcome.output is not None:
        out.write(f"output: {truncate(json.dumps(outcome.output, ensure_ascii=False), 300)}\n")
    out.write(f"timeline: agency trace show {outcome.trace_id} (on the gateway's data directory)\n")
    return code
