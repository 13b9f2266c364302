"""Several runs side by side: which meet the SLO, where a sweep's knee lies, how summaries differ.

- `meets_slo`                   whether each point's p99 TTFT and TPOT meet the targets
- `find_knee`                   highest load (or least capacity) that still meets the SLO
- `compare_summaries`           summary metrics of several runs side by side, with differences
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd


def meets_slo(points: pd.DataFrame, *, ttft_slo_s: float, tpot_slo_s: float) -> pd.Series:
    """Whether each row's p99 TTFT and p99 TPOT meet the targets (NaN counts as a miss)."""
    return (points["ttft_p99_s"] <= ttft_slo_s) & (points["tpot_p99_s"] <= tpot_slo_s)


def find_knee(x: Sequence[float], ok: Sequence[bool], *, load_axis: bool = True) -> float | None:
    """The knee of a sweep: the last point before the SLO breaks.

    On a load axis (request rate) it is the highest x such that every point at or
    below it meets the SLO; on a capacity axis (memory, replicas) the lowest x such that
    every point at or above it does. None if the first point already misses.
    """
    order = np.argsort(np.asarray(x, dtype=float), kind="stable")
    xs = np.asarray(x, dtype=float)[order]
    oks = np.asarray(ok, dtype=bool)[order]
    if not load_axis:
        xs, oks = xs[::-1], oks[::-1]
    knee = None
    for xv, good in zip(xs, oks, strict=True):
        if not good:
            break
        knee = float(xv)
    return knee


def compare_summaries(summaries: Mapping[str, Mapping[str, object]], metrics: Sequence[str]) -> pd.DataFrame:
    """Metrics (rows) of several runs (columns), with each run's change against the first.

    Adds one ``"<run> vs <first> (%)"`` column per later run: 100 * (run - first) / first
    (NaN when the first is 0 or a value is missing).
    """
    names = list(summaries)
    table = pd.DataFrame(
        {
            n: [float(v) if isinstance(v := summaries[n].get(m), int | float) else np.nan for m in metrics]
            for n in names
        },
        index=pd.Index(list(metrics), name="metric"),
    )
    if names:
        base = table[names[0]]
        for n in names[1:]:
            with np.errstate(invalid="ignore", divide="ignore"):
                table[f"{n} vs {names[0]} (%)"] = np.where(
                    base != 0, 100.0 * (table[n] - base) / base, np.nan
                )
    return table
