"""Argument types of the command line: every option's type and range, checked by argparse.

    p.add_argument("--window", type=number(0, MAX_TIME_S, low_open=True))   # finite, > 0
    p.add_argument("--top", type=count(1, 10_000))
    p.add_argument("--points", type=path_arg)                             # a name a file can have

A value out of range is refused by argparse with the option's name and the rule (exit 2),
before any work starts: ``argument --window: must be > 0, got 0``. Numbers are finite
(``nan`` and ``inf`` are refused), integers are integers (``1.5``, ``1e3`` and ``true``
are refused), and paths can name a file (`kvsim.paths.path_problem`), a leading ``~``
expanded.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from kvsim.paths import PathError, expand_user, path_problem, printable


def _shown(text: str) -> str:
    return printable(text if len(text) <= 40 else text[:37] + "...")


def count(low: int = 1, high: int = 2**31 - 1) -> Callable[[str], int]:
    """An integer in ``[low, high]``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {_shown(text)!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}, got {_shown(text)}")
        return value

    parse.__name__ = "integer"
    return parse


def number(
    low: float, high: float, *, low_open: bool = False, high_open: bool = False
) -> Callable[[str], float]:
    """A finite number in the interval from ``low`` to ``high`` (ends open when asked)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {_shown(text)!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {_shown(text)}")
        if value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(
                f"must be {'>' if low_open else '>='} {low:g}, got {_shown(text)}"
            )
        if value > high or (high_open and value == high):
            raise argparse.ArgumentTypeError(
                f"must be {'<' if high_open else '<='} {high:g}, got {_shown(text)}"
            )
        return value

    parse.__name__ = "number"
    return parse


def path_arg(text: str) -> str:
    """A path a file can have (no NUL, names of at most 255 bytes), a leading ``~`` or
    ``~user`` expanded as a shell would (``--out=~/runs`` is not expanded by the shell)."""
    problem = path_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: {problem}")
    if text.startswith("~"):
        try:
            return str(expand_user(text, "path"))
        except PathError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def text_arg(limit: int = 65_536) -> Callable[[str], str]:
    """Free text of at most ``limit`` characters (a preset name, inline JSON, a key list)."""

    def parse(text: str) -> str:
        if len(text) > limit:
            raise argparse.ArgumentTypeError(f"{len(text):,} characters; at most {limit:,}")
        return text

    parse.__name__ = "text"
    return parse
