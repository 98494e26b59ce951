"""``agency config check FILE``: validate an agency definition without starting anything."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..access import Role
from ..errors import InvalidInput
from ..server.definition import load_definition, name_problems
from ._text import add_json_option, plural


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("config", help="work with agency definition files")
    cmds = p.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    check = cmds.add_parser(
        "check",
        help="validate a definition file and list every problem",
        description="Validate an agency definition file (YAML or JSON) exactly as 'agency serve --config' "
        "would, with the AGENCY_* environment overrides applied, and list every problem by path "
        "(the token file's by PATH:LINE). "
        "Exit code 0 when valid, 1 when not.",
    )
    check.add_argument("file", type=Path, help="the definition file")
    add_json_option(check)
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    try:
        definition = load_definition(args.file)
        clients = definition.server.token_hashes()  # a bad token file line, by PATH:LINE
        clashes = name_problems(definition, clients)  # the one name rule across people and clients
        if clashes:
            raise InvalidInput(clashes, what="definition")
    except InvalidInput as exc:
        if args.format == "json":
            problems = [{"path": p.field, "problem": p.reason} for p in exc.problems]
            print(json.dumps({"file": str(args.file), "valid": False, "problems": problems}, indent=2))
        else:
            print(f"{args.file}: {len(exc.problems)} problem(s)", file=sys.stderr)
            for p in exc.problems:
                print(f"  {p.field or '(root)'}: {p.reason}", file=sys.stderr)
        return 1
    messaging = definition.messaging
    flows = (
        [f"{e.sender} > {e.receiver} via {e.tool.kind}" for e in messaging.build_flows().edges()]
        if messaging.flows is not None
        else []
    )
    roles = {
        role.value: sorted({p.name for p in (clients or {}).values() if p.role is role}) for role in Role
    }
    summary = {
        "file": str(args.file),
        "valid": True,
        "agents": [a.contract.key for a in definition.agents],
        "goals": [g.id for g in definition.goals],
        "storage": definition.storage.backend,
        "address": definition.server.address,
        "token_clients": roles if clients is not None else None,
        "audit_directory": str(definition.audit_directory),
        "messaging": {
            "agents": [a.name for a in messaging.agents],
            "flows": flows,
            "mailboxes": definition.mailbox_backend,
        },
    }
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        tokens = "".join(f", {role} tokens: {', '.join(names)}" for role, names in roles.items() if names)
        enforced = plural(len(flows), "flow") if messaging.flows is not None else "flows not enforced"
        print(
            f"{args.file}: valid ({plural(len(definition.agents), 'agent')}, "
            f"{plural(len(definition.goals), 'goal')}, "
            f"{plural(len(messaging.agents), 'messaging agent')}, {enforced}, "
            f"mailboxes {definition.mailbox_backend}, "
            f"storage {definition.storage.backend}, listening on {definition.server.address}{tokens})"
        )
    return 0
