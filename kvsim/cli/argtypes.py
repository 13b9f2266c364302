"""Types of numeric command-line options: each accepts a finite number in a stated range.

``--window 1e-300`` or ``--batch 10**40`` are refused by argparse itself (exit 2, the
usage line and ``argument --window: must be ...``), before anything runs, so that no
option can multiply a command's work without bound or reach the library as NaN. The
ranges come from `kvsim.limits` and the scenario's own field bounds.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not an integer, or more than 4,300 digits
            raise argparse.ArgumentTypeError(f"must be an integer, got {_shown(text)!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo:,} and {hi:,}, got {_shown(text)}")
        return value

    return parse


def float_in(lo: float, hi: float, *, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in ``[lo, hi]`` (``(lo, hi]`` when ``above``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {_shown(text)!r}") from None
        low_ok = value > lo if above else value >= lo
        if not (math.isfinite(value) and low_ok and value <= hi):
            low = f"more than {lo:g}" if above else f"at least {lo:g}"
            raise argparse.ArgumentTypeError(f"must be {low} and at most {hi:g}, got {_shown(text)}")
        return value

    return parse


__all__ = ["float_in", "int_in"]
