"""The ``agency`` command line.

Each command group is its own module exposing ``register(subparsers)``; add a
new group by listing its module in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from ..server.log_format import configure_logging
from .exit_codes import ERROR, EXIT_CODES_HELP, INTERRUPTED, NOTHING_FOUND, UNAVAILABLE

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES = [
    "middleware.cli.serve",
    "middleware.cli.demo",
    "middleware.cli.trace",
    "middleware.cli.report",
    "middleware.cli.health",
    "middleware.cli.config",
    "middleware.cli.audit",
    "middleware.cli.goal",
    "middleware.cli.smf",
    "middleware.cli.contracts",
    "middleware.cli.catalog",
    "middleware.cli.worker",
    "middleware.cli.tasks",
    "middleware.cli.protocols",
    "middleware.cli.messaging",
]


#: Which module registers which command, so one command imports only its own module (start-up
#: time: ``agency worker`` does not import the gateway). A command not listed here makes the
#: parser import every module of COMMAND_MODULES, as does ``agency --help``.
COMMAND_OWNERS = {
    "serve": "middleware.cli.serve",
    "demo": "middleware.cli.demo",
    "trace": "middleware.cli.trace",
    "report": "middleware.cli.report",
    "health": "middleware.cli.health",
    "config": "middleware.cli.config",
    "audit": "middleware.cli.audit",
    "goal": "middleware.cli.goal",
    "smf": "middleware.cli.smf",
    "contracts": "middleware.cli.contracts",
    "catalog": "middleware.cli.catalog",
    "worker": "middleware.cli.worker",
    "submit": "middleware.cli.tasks",
    "route": "middleware.cli.tasks",
    "task": "middleware.cli.tasks",
    "a2a": "middleware.cli.protocols",
    "mcp": "middleware.cli.protocols",
}


def _command_in(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (after the global options), if any."""
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--log-format":
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        return a
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agency",
        description="Agency Middleware: the governance layer in front of your agents.",
        epilog="Run 'agency COMMAND --help' for the options of one command.\n\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="log lines as text or JSON objects"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    owner = COMMAND_OWNERS.get(_command_in(argv) or "") if argv is not None else None
    wanted = [owner] if owner in COMMAND_MODULES else COMMAND_MODULES
    for name in wanted:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agency`` console script; returns the exit code (see ``exit_codes``)."""
    # gRPC's C core logs to stderr on its own (bind failures, DNS retries): the CLI reports
    # those errors itself. Set GRPC_VERBOSITY to see them. Must precede the first grpc import.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # repeated to child processes
    configure_logging([logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)], args.log_format)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception as exc:
        from ..errors import AgencyError, NotFound, Unavailable

        if isinstance(exc, AgencyError):
            print(f"agency: error: {_said_as_options(exc, parser, args)}", file=sys.stderr)
            if isinstance(exc, NotFound):
                return NOTHING_FOUND
            # 4 only when a call to a gateway found nobody answering (the client sets grpc_code);
            # a local resource (a taken port to serve on) is an error of the command line: 2
            called = isinstance(exc, Unavailable) and "grpc_code" in exc.details
            return UNAVAILABLE if called else ERROR
        if isinstance(exc, OSError) and exc.errno is not None:  # a path the user named: say which
            where = f": {exc.filename}" if exc.filename else ""
            print(f"agency: error: {exc.strerror or exc}{where}", file=sys.stderr)
            return ERROR
        if type(exc).__module__.split(".")[0] == "yaml":  # a YAML file the user named
            print(f"agency: error: not valid YAML: {exc}", file=sys.stderr)
            return ERROR
        raise


def _said_as_options(exc: Exception, parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The error, with each field that is an option of the command named as the user wrote it:
    ``cef_max_bytes: must be at least 1024`` reads ``--cef-max-bytes: must be at least 1024``."""
    from ..errors import InvalidInput, Problem

    if not isinstance(exc, InvalidInput):
        return str(exc)
    options: dict[str, str] = {}
    parsers = [parser]
    while parsers:
        current = parsers.pop()
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
                if chosen is not None:
                    parsers.append(chosen)
            elif action.option_strings and action.dest not in options:
                options[action.dest] = max(action.option_strings, key=len)
    if not any(p.field in options for p in exc.problems):
        return str(exc)
    named = [Problem(options.get(p.field, p.field), p.reason) for p in exc.problems]
    return str(InvalidInput(named, what=exc.what))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
