"""Offered against achieved load, and whether a run was overloaded.

A percentile over a run that cannot keep up with its arrivals is not a steady-state
figure: it grows with the run's length. `load_summary` measures, from the request table
alone, how fast requests arrived, how fast they were served while they kept arriving, and
whether the backlog (requests arrived and not yet finished) was still growing when the
arrivals stopped:

    requests in the system
      |                       .·'    overloaded: grows through the second half
      |                 .·'´
      |   __.·~~·.__.·~~·.__.·~~·.   stable: fluctuates around arrival rate x latency
      +--------------+--------------+--> time
      first arrival   middle          last arrival

The second half of the arrival window is the measuring window: by then a stable system
has left its empty start behind, and one that is overloaded has been so long enough for
the growth to stand out from the noise. ``overloaded`` is set when both

- the backlog grows: the straight line fitted to it over the window rises by more than
  `OVERLOAD_GROWTH_SHARE` of the requests that arrived in the window, by at least
  `OVERLOAD_MIN_GROWTH_REQUESTS`, and by at least `OVERLOAD_MIN_Z` times the backlog's
  scatter around the line (a stable backlog wanders: it is arrival rate x latency, give or
  take tens of requests);
- and first tokens come ever later: the TTFT of the requests arriving in the window rises
  with their arrival time by at least `OVERLOAD_TTFT_TREND` seconds per second, at least
  `OVERLOAD_MIN_T` standard errors from flat. This keeps a short run that is still filling
  up (backlog rising towards arrival rate x latency, 200 requests at 8 req/s on the default
  replica) from being called overloaded;

or when requests that arrived and were not rejected were still unfinished at the end of
the run (cut off by ``sim.max_time_s``). An overload that so far only slows decoding
(every request admitted, the batch growing, TTFT flat) is not flagged until it delays
first tokens; it shows in ``backlog_growth_requests_per_s``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: Backlog growth in the measuring window, as a share of its arrival rate, that counts as overload.
OVERLOAD_GROWTH_SHARE = 0.05
#: Least growth of the backlog over the measuring window, in requests, that counts as overload.
OVERLOAD_MIN_GROWTH_REQUESTS = 5
#: Least growth, in standard deviations of the backlog around the fitted line, that counts as overload.
OVERLOAD_MIN_Z = 3.0
#: TTFT growth against arrival time, seconds per second, that counts as overload.
OVERLOAD_TTFT_TREND = 0.01
#: Least t statistic of that growth.
OVERLOAD_MIN_T = 3.0
#: Points of the backlog curve the growth is fitted on.
_GRID_POINTS = 129

#: The summary keys `load_summary` adds (documented in docs/results.md).
LOAD_KEYS = (
    "arrival_window_s",
    "offered_requests_per_s",
    "achieved_requests_per_s",
    "backlog_growth_requests_per_s",
    "ttft_trend_s_per_s",
    "backlog_end_requests",
    "backlog_peak_requests",
    "num_rejected",
    "num_cut_off",
    "overloaded",
    "overload_reason",
)


def backlog(arrivals_s: np.ndarray, finishes_s: np.ndarray, times_s: np.ndarray) -> np.ndarray:
    """Requests arrived and not finished at each of ``times_s`` (both arrays sorted)."""
    return np.searchsorted(arrivals_s, times_s, side="right") - np.searchsorted(
        finishes_s, times_s, side="right"
    )


def ttft_trend(requests: pd.DataFrame, start_s: float, end_s: float) -> tuple[float, float]:
    """Least-squares slope of TTFT against arrival time for arrivals in (start, end], and its t statistic."""
    if "ttft_s" not in requests.columns:
        return float("nan"), float("nan")
    a = requests["arrival_s"].to_numpy(float)
    y = requests["ttft_s"].to_numpy(float)
    keep = (a > start_s) & (a <= end_s) & np.isfinite(y)
    x, y = a[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0:
        return float("nan"), float("nan")
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    se = float(np.sqrt(resid.var(ddof=2) / ((x - x.mean()) ** 2).sum()))
    return float(slope), (float(slope) / se if se > 0 else float("inf"))


def load_summary(requests: pd.DataFrame, events: pd.DataFrame) -> dict[str, Any]:
    """Offered and achieved request rates, the backlog's growth and the overload flag (`LOAD_KEYS`)."""
    arrived = requests["arrival_s"].notna().to_numpy()
    arrivals = np.sort(requests.loc[arrived, "arrival_s"].to_numpy(float))
    finished = requests["finished"].to_numpy(bool)
    finishes = np.sort(requests.loc[finished, "finish_s"].to_numpy(float))
    # The request table's own column where it has one: follow-up turns of a rejected
    # conversation are rejected without an event of their own (never sent).
    if "rejected" in requests:
        rejected = requests["rejected"].to_numpy(bool)
    else:
        rejected = (
            requests["request_id"].isin(events.loc[events["kind"] == "reject", "request_id"]).to_numpy()
        )
    num_cut_off = int((arrived & ~finished & ~rejected).sum())
    nan = float("nan")
    out: dict[str, Any] = {
        "arrival_window_s": nan,
        "offered_requests_per_s": nan,
        "achieved_requests_per_s": nan,
        "backlog_growth_requests_per_s": nan,
        "ttft_trend_s_per_s": nan,
        "backlog_end_requests": 0,
        "backlog_peak_requests": 0,
        "num_rejected": int(rejected.sum()),
        "num_cut_off": num_cut_off,
    }
    growing = False
    if len(arrivals):
        # Just after each arrival the backlog is at a local maximum.
        after_arrivals = np.arange(1, len(arrivals) + 1) - np.searchsorted(finishes, arrivals, side="right")
        out["backlog_peak_requests"] = int(after_arrivals.max())
        out["backlog_end_requests"] = int(after_arrivals[-1])
    first, last = (float(arrivals[0]), float(arrivals[-1])) if len(arrivals) else (0.0, 0.0)
    window = last - first
    if window > 0:
        mid = first + window / 2
        half = last - mid
        late_arrivals = int(((arrivals > mid) & (arrivals <= last)).sum())
        late_finishes = int(((finishes > mid) & (finishes <= last)).sum())
        grid = np.linspace(mid, last, _GRID_POINTS)
        level = backlog(arrivals, finishes, grid)
        slope, intercept = np.polyfit(grid, level, 1)
        slope = float(slope)
        scatter = float(np.std(level - (slope * grid + intercept)))
        growth = slope * half
        out["arrival_window_s"] = window
        out["offered_requests_per_s"] = len(arrivals) / window
        out["achieved_requests_per_s"] = late_finishes / half
        out["backlog_growth_requests_per_s"] = slope
        trend, t_stat = ttft_trend(requests, mid, last)
        out["ttft_trend_s_per_s"] = trend
        growing = (
            growth > OVERLOAD_GROWTH_SHARE * late_arrivals
            and growth >= OVERLOAD_MIN_GROWTH_REQUESTS
            and growth >= OVERLOAD_MIN_Z * scatter
            and trend >= OVERLOAD_TTFT_TREND
            and t_stat >= OVERLOAD_MIN_T
        )
    reasons = []
    if growing:
        reasons.append("backlog growing")
    if num_cut_off:
        reasons.append("requests cut off")
    out["overloaded"] = bool(reasons)
    out["overload_reason"] = ", ".join(reasons)
    return out
