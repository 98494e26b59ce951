"""Progress bars with rate and time left (tqdm) on stderr, for long CLI work.

Shown when stderr is a terminal, or as ``--progress``/``--no-progress`` say.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any

__all__ = ["Progress", "add_progress_option", "progress_wanted"]


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """``--progress/--no-progress`` (default: a bar when stderr is a terminal)."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar with rate and time left on stderr (default: when stderr is a terminal)",
    )


def progress_wanted(args: argparse.Namespace, stream: IO[str] | None = None) -> bool:
    if args.progress is not None:
        return bool(args.progress)
    return (stream or sys.stderr).isatty()


class Progress:
    """A callable ``progress(done, total)`` drawing one tqdm bar; ``close()`` when done."""

    def __init__(
        self, desc: str, *, unit: str = "it", unit_scale: bool = False, stream: IO[str] | None = None
    ):
        self._desc, self._unit, self._scale = desc, unit, unit_scale
        self._stream = stream or sys.stderr
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=self._desc,
                unit=self._unit,
                unit_scale=self._scale,
                unit_divisor=1024 if self._unit == "B" else 1000,
                file=self._stream,
                mininterval=0.2,
                dynamic_ncols=True,
                leave=True,
            )
        if total != self._bar.total:
            self._bar.total = total
        self._bar.update(max(0, done - self._bar.n))
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
