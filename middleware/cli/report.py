"""``agency report``: the seed's section 4.4 measures over a period, from the audit log.

For a compliance report: first-contact resolution, average handling time, human-transfer
rate, intent-drift rate and SLA attainment of the tasks submitted in ``[--since, --until)``,
as text or JSON (``--json``). Definitions: :mod:`middleware.kpi`.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from ..errors import InvalidInput, NotFound
from ..kpi import DEFAULT_SLA_SECONDS, KpiReport, compute_kpis
from .exit_codes import NOTHING_FOUND


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "report",
        help="KPIs over a period from the audit log (FCR, handling time, transfers, drift, SLA)",
        description="Compute the seed's section 4.4 measures of the tasks submitted in a period from "
        "the audit log: first-contact resolution, average handling time, human-transfer rate, "
        "intent-drift rate and SLA attainment.",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="the gateway's data directory (default: $AGENCY_DATA_DIR or ./agency-data)",
    )
    p.add_argument(
        "--audit-dir", type=Path, default=None, help="the audit log directory, if not DATA_DIR/audit"
    )
    p.add_argument("--since", help="tasks submitted at or after this time (ISO 8601; UTC if no zone)")
    p.add_argument("--until", help="tasks submitted before this time (ISO 8601; UTC if no zone)")
    p.add_argument(
        "--sla-seconds",
        type=float,
        default=DEFAULT_SLA_SECONDS,
        help=f"the SLA handling times are compared with (default {DEFAULT_SLA_SECONDS:g})",
    )
    p.add_argument(
        "--tenant",
        help="only this tenant's tasks ('' for the tasks without a tenant; default: every task)",
    )
    p.add_argument(
        "--by-tenant",
        action="store_true",
        help="one report per tenant found in the period (and one for the tasks without a tenant)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_run)


def _time(value: str | None, option: str) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput.single(option, f"{value!r} is not an ISO 8601 time", what="option") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _run(args: argparse.Namespace) -> int:
    from ..audit.opener import open_audit_log
    from ..server.settings import ServerConfig

    if args.sla_seconds <= 0:
        print("agency: error: --sla-seconds must be > 0", file=sys.stderr)
        return 2
    since, until = _time(args.since, "--since"), _time(args.until, "--until")
    directory = args.audit_dir or Path(ServerConfig.from_env(data_dir=args.data_dir).data_dir) / "audit"
    if not directory.is_dir():
        raise NotFound(f"no audit log at {directory}: is --data-dir the gateway's data directory?")
    log = open_audit_log(directory)
    if args.by_tenant:
        tenants = sorted({r.actors.tenant for _, r in log.records() if r.event_type == "task.submitted"})
        reports = [
            compute_kpis(
                (r for _, r in log.records()),
                since=since,
                until=until,
                sla_seconds=args.sla_seconds,
                tenant=t,
            )
            for t in tenants
        ]
        if args.json:
            sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in reports], indent=2) + "\n")
        else:
            for r in reports:
                render(r, sys.stdout)
                sys.stdout.write("\n")
        return 0 if any(r.tasks for r in reports) or not (since or until) else NOTHING_FOUND
    report = compute_kpis(
        (r for _, r in log.records()),
        since=since,
        until=until,
        sla_seconds=args.sla_seconds,
        tenant=args.tenant,
    )
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        render(report, sys.stdout)
    if report.tasks == 0 and (since or until):  # a period that selects no task (exit_codes: 3)
        print("agency: warning: no task was submitted in that period", file=sys.stderr)
        return NOTHING_FOUND
    return 0


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def render(report: KpiReport, out: TextIO) -> None:
    """The report as text."""
    period = f"{report.since.isoformat() if report.since else 'start'} .. "
    period += report.until.isoformat() if report.until else "now"
    n = report.tasks
    aht = "n/a" if report.average_handling_seconds is None else f"{report.average_handling_seconds:.3f} s"
    lines = [
        *([f"Tenant: {report.tenant or '(none)'}"] if report.tenant is not None else []),
        f"Period: {period}",
        f"Tasks handled:            {n}  {json.dumps(report.outcomes, sort_keys=True)}",
        f"First-contact resolution: {_pct(report.first_contact_resolution)} "
        f"({report.resolved_first_contact}/{n})",
        f"Average handling time:    {aht}",
        f"Human-transfer rate:      {_pct(report.human_transfer_rate)} ({report.human_transfers}/{n})",
        f"Intent-drift rate:        {_pct(report.intent_drift_rate)} ({report.intent_drift_tasks}/{n})",
        f"SLA attainment (< {report.sla_seconds:g} s): {_pct(report.sla_attainment)} ({report.sla_met}/{n})",
    ]
    out.write("\n".join(lines) + "\n")
