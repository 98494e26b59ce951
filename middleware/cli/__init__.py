"""The ``agency`` command line.

Each command group is its own module exposing ``register(subparsers)``; add a
new group by listing its module in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from ..log_format import configure_logging

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

COMMAND_MODULES = [
    "middleware.cli.serve",
    "middleware.cli.demo",
    "middleware.cli.trace",
    "middleware.cli.health",
    "middleware.cli.config",
    "middleware.cli.audit",
    "middleware.cli.goal",
    "middleware.cli.smf",
    "middleware.cli.contracts",
    "middleware.cli.catalog",
    "middleware.cli.worker",
    "middleware.cli.messaging",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agency",
        description="Agency Middleware: the governance layer in front of your agents.",
        epilog="Run 'agency COMMAND --help' for the options of one command.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    parser.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="log lines as text or JSON objects"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agency`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging([logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)], args.log_format)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        from ..errors import AgencyError

        if isinstance(exc, AgencyError):
            print(f"agency: error: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
