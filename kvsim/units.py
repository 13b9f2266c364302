"""Numbers as a reader wants them: durations with a unit and three significant digits.

    format_seconds(0.16806)  -> '168 ms'      format_seconds(269.25) -> '269 s'
    format_seconds(3.2e-05)  -> '32.0 µs'     format_seconds(11.61)  -> '11.6 s'

Used by the CLI tables, the dashboard and the figures' hover texts, so that one number
reads the same everywhere.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "-"


def sig(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, no exponent for ordinary magnitudes."""
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - exponent, 0)
    text = f"{value:,.{decimals}f}"
    return text


def format_seconds(value: Any) -> str:
    """A duration in s, ms or µs with three significant digits; ``-`` when undefined."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return MISSING
    if math.isinf(value):
        return "∞"
    a = abs(value)
    if a >= 1 or a == 0:
        return f"{sig(value)} s"
    if a >= 1e-3:
        return f"{sig(value * 1e3)} ms"
    return f"{sig(value * 1e6)} µs"


def rate_unit(key: str) -> str:
    """The unit of a summary key ending in ``_per_s``: ``tok/s`` for tokens, ``req/s`` for
    requests, ``/s`` for anything else."""
    if "tokens" in key:
        return "tok/s"
    if "requests" in key:
        return "req/s"
    return "/s"


def format_rate(value: Any, unit: str = "req/s") -> str:
    """A rate with three significant digits and its unit; ``-`` when undefined."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return MISSING
    return f"{sig(value)} {unit}"
