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

`DivergenceWatch` applies the same backlog test while a run goes, to stop it early once it
is certain to miss a latency bound and its queue is diverging (`kvsim.planning.planner` uses it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from kvsim.core.request_state import Request, Status

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


def backlog_growth(times_s: np.ndarray, level: np.ndarray, num_arrivals: int) -> tuple[float, bool]:
    """The backlog's fitted slope (requests per second) over ``times_s`` and whether it grows
    as overload does: by more than `OVERLOAD_GROWTH_SHARE` of the ``num_arrivals`` that
    arrived over the span, by at least `OVERLOAD_MIN_GROWTH_REQUESTS` and by at least
    `OVERLOAD_MIN_Z` times the backlog's scatter around the fitted line."""
    slope, intercept = np.polyfit(times_s, level, 1)
    slope = float(slope)
    scatter = float(np.std(level - (slope * times_s + intercept)))
    growth = slope * float(times_s[-1] - times_s[0])
    grows = (
        growth > OVERLOAD_GROWTH_SHARE * num_arrivals
        and growth >= OVERLOAD_MIN_GROWTH_REQUESTS
        and growth >= OVERLOAD_MIN_Z * scatter
    )
    return slope, grows


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
        slope, backlog_grows = backlog_growth(grid, level, late_arrivals)
        out["arrival_window_s"] = window
        out["offered_requests_per_s"] = len(arrivals) / window
        out["achieved_requests_per_s"] = late_finishes / half
        out["backlog_growth_requests_per_s"] = slope
        trend, t_stat = ttft_trend(requests, mid, last)
        out["ttft_trend_s_per_s"] = trend
        growing = backlog_grows and trend >= OVERLOAD_TTFT_TREND and t_stat >= OVERLOAD_MIN_T
    reasons = []
    if growing:
        reasons.append("backlog growing")
    if num_cut_off:
        reasons.append("requests cut off")
    out["overloaded"] = bool(reasons)
    out["overload_reason"] = ", ".join(reasons)
    return out


# --------------------------------------------------------------------------- stopping early

#: Latency keys of a summary whose bound a run can prove broken before it ends: a request
#: with no first token ``L`` seconds after it arrived has a TTFT over ``L``, one unfinished
#: then an end-to-end latency over ``L``, whatever happens next.
_PROVABLE_KEY = re.compile(r"(ttft|e2e)_p(\d{1,2}(?:\.\d+)?)_s")
#: Least backlog samples (one every `kvsim.engine.cluster.WATCH_EVERY` requests sent or done)
#: in the second half of the arrivals so far before the backlog's growth is judged.
MIN_WATCH_SAMPLES = 16


@dataclass(frozen=True)
class LatencyBound:
    """``metric``'s ``quantile``-th percentile (0-100) at most ``limit_s``: ``ttft_p99_s <= 2``."""

    metric: Literal["ttft", "e2e"]
    quantile: float
    limit_s: float

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.quantile:g}_s"

    @classmethod
    def from_key(cls, key: str, limit_s: float) -> LatencyBound | None:
        """The bound ``key <= limit_s`` if a run can prove it broken early, else None."""
        m = _PROVABLE_KEY.fullmatch(key)
        if m is None or not 0 < float(m.group(2)) < 100 or not limit_s > 0:
            return None
        return cls("ttft" if m.group(1) == "ttft" else "e2e", float(m.group(2)), float(limit_s))


def allowed_violations(num_values: int, quantile: float) -> int:
    """The most values over a limit that do not yet prove the ``quantile``-th percentile
    (0-100) of up to ``num_values`` values over it: one more does (numpy's linear
    interpolation, as `kvsim.results.result.summarize` takes percentiles).

    Sorted ascending, the percentile lies between values ``i = floor(q (n - 1))`` and
    ``i + 1``; it is over the limit for sure when value ``i`` is, i.e. when at least
    ``n - i`` values are. That count, ``n - floor(q (n - 1))``, never falls as ``n`` grows,
    so the largest possible ``n`` (every request of the run) gives an allowance that holds
    however many of them finish: ``n - floor(q (n - 1)) - 1``. (With exactly that many over
    the limit the percentile may still be over it, by interpolation: the allowance errs on
    the side of running on.)
    """
    n = max(num_values, 1)
    return n - math.floor(quantile / 100.0 * (n - 1)) - 1


class DivergenceWatch:
    """The early stop of `kvsim.planning.planner`: a `kvsim.engine.cluster.RunWatch` that ends a run
    as soon as it is certain to fail a latency bound *and* its queue is diverging.

    Both must hold at a check (every 16 requests sent and 16 done):

    1. **The bound is already broken, whatever happens next.** For ``ttft_pQ_s <= L``,
       every request that arrived more than ``L`` seconds ago without a first token (and was
       not rejected) will have a TTFT over ``L``; once they outnumber `allowed_violations`
       of all the run's requests, the run's pQ is over ``L`` however the rest goes.
       ``e2e_pQ_s`` bounds count requests unfinished ``L`` seconds after arriving. A run
       that could still meet every bound is never stopped, so no feasible run is.
    2. **The backlog is diverging.** The requests sent and not done, sampled at every
       check, over the second half of the arrivals so far (from the first arrival to the
       latest; at least `MIN_WATCH_SAMPLES` samples), grow as `load_summary` requires of an overloaded run
       (`backlog_growth`: more than 5% of the arrivals in the window, at least 5 requests,
       at least 3 standard deviations of the backlog's scatter).

    (1) alone would also stop a stable run a burst pushed over its bound; (2) keeps those to
    the end, where their numbers are measured and reported. A stopped run is reported as
    overloaded (`figures` and the reason say how far it had got), never with latency
    figures. The rule assumes a request admitted is never refused later (true of
    aggregated replicas; disaggregated ones with decode pools as large as their prefill
    pools) and no ``sim.max_time_s``: a refused or cut-off request leaves the percentiles.
    """

    def __init__(self, bounds: Sequence[LatencyBound]) -> None:
        if not bounds:
            raise ValueError("DivergenceWatch needs at least one ttft or e2e percentile bound")
        self.bounds = list(bounds)
        self._order: list[Request] = []
        self._next = [0] * len(self.bounds)
        self._late = [0] * len(self.bounds)
        self._allowed = [0] * len(self.bounds)
        self._t: list[float] = []
        self._arrived: list[int] = []
        self._done: list[int] = []
        self._judged_at = 0
        #: What the run had reached when it was stopped (empty until then).
        self.figures: dict[str, Any] = {}

    def start(self, requests: Sequence[Request]) -> None:
        # Requests sent at a time known in advance, in that order (follow-up turns, sent
        # when their parent finishes, are left out: fewer violations counted is safe).
        roots = [r for r in requests if r.spec.parent_id is None and math.isfinite(r.spec.arrival_s)]
        self._order = sorted(roots, key=lambda r: (r.spec.arrival_s, r.request_id))
        self._allowed = [allowed_violations(len(requests), b.quantile) for b in self.bounds]

    def _count_late(self, now_s: float) -> int | None:
        """Advance every bound's deadline pointer to ``now_s``; the index of a bound proven
        broken, or None."""
        broken = None
        order = self._order
        for k, bound in enumerate(self.bounds):
            i, late, limit = self._next[k], self._late[k], bound.limit_s
            while i < len(order):
                r = order[i]
                due = r.arrival_s + limit
                if not due < now_s:  # not yet due (or not yet sent: arrival_s is NaN)
                    break
                met = (r.metrics.first_token_s if bound.metric == "ttft" else r.metrics.finish_s) <= due
                if not met and r.status is not Status.REJECTED:
                    late += 1
                i += 1
            self._next[k], self._late[k] = i, late
            if late > self._allowed[k] and broken is None:
                broken = k
        return broken

    def check(self, now_s: float, num_arrived: int, num_done: int) -> str | None:
        self._t.append(now_s)
        self._arrived.append(num_arrived)
        self._done.append(num_done)
        broken = self._count_late(now_s)
        if broken is None or not self._order or len(self._t) - self._judged_at < 4:
            return None
        self._judged_at = len(self._t)
        # The second half of the arrivals so far, as load_summary judges a whole run (once
        # the arrivals end, the backlog drains: the window stays on the arrivals).
        t = np.asarray(self._t)
        sent = np.asarray(self._arrived, dtype=float)
        first = float(self._order[0].arrival_s)
        last = float(t[int(np.argmax(sent))])  # the first sample holding the most arrivals
        mid = first + (last - first) / 2
        if ((t >= mid) & (t <= last)).sum() < MIN_WATCH_SAMPLES or last <= mid:
            return None
        level = sent - np.asarray(self._done, dtype=float)
        grid = np.linspace(mid, last, _GRID_POINTS)
        on_grid = np.interp(grid, t, level)
        arrived = np.interp([mid, last], t, sent)
        done = np.interp([mid, last], t, np.asarray(self._done, dtype=float))
        slope, grows = backlog_growth(grid, on_grid, int(arrived[1] - arrived[0]))
        if not grows:
            return None
        bound, span = self.bounds[broken], last - mid
        self.figures = {
            "stopped_at_s": now_s,
            "stopped_bound": bound.key,
            "stopped_violations": self._late[broken],
            "stopped_allowed_violations": self._allowed[broken],
            "backlog_start_requests": float(on_grid[0]),
            "backlog_end_requests": float(on_grid[-1]),
            "backlog_growth_requests_per_s": slope,
            "offered_requests_per_s": float(arrived[1] - arrived[0]) / span,
            "achieved_requests_per_s": float(done[1] - done[0]) / span,
        }
        what = "for a first token" if bound.metric == "ttft" else "to finish"
        return (
            f"overloaded: the backlog grew from {on_grid[0]:,.0f} to {on_grid[-1]:,.0f} requests over "
            f"t={mid:,.1f}-{last:,.1f} s ({self.figures['offered_requests_per_s']:.3g} req/s sent, "
            f"{self.figures['achieved_requests_per_s']:.3g} done), and {self._late[broken]:,} requests "
            f"waited more than {bound.limit_s:g} s {what}, more than the {self._allowed[broken]:,} "
            f"{bound.key} <= {bound.limit_s:g} allows: stopped at t={now_s:,.1f} s"
        )
