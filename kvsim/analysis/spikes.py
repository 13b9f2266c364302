"""Rolling percentiles and latency spikes with their causes, over a run's tables.

Pure pandas/numpy over the tables of `kvsim.results.result.Result`; nothing here runs the engine
or draws anything (the figures are in `kvsim.analysis.plots`).

- `rolling_quantiles`           percentiles of samples in a sliding time window (`nice_window` picks one)
- `ttft_samples`, `itl_samples`, `preemption_gap_samples`  latency samples of the spike view
- `find_spikes`                 windows whose p99 exceeds a threshold, merged into episodes
- `attribute_spikes`            each episode with the engine events that explain it
- `window_count`, `column`      the window count guard and the column lookup the other analyses share
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import WorkLimitError
from kvsim.limits import MAX_WINDOWS
from kvsim.results.overload import backlog
from kvsim.units import format_seconds

#: Event kinds that explain latency spikes, in the order their causes are listed.
SPIKE_EVENT_KINDS = ("preempt_recompute", "swap_out", "swap_in", "offload_load", "evict", "reject")


def _qname(q: float) -> str:
    return "max" if q == 1.0 else f"p{q * 100:g}"


def window_count(span_s: float, step_s: float) -> int:
    """Steps of ``step_s`` that cover ``span_s`` (at least one), or a `ValueError` beyond `MAX_WINDOWS`.

    The work of the rolling statistics is proportional to this count: a window of
    1e-300 s over a run of minutes would be 1e302 of them.
    """
    steps = math.ceil(span_s / step_s - 1e-9) if math.isfinite(span_s / step_s) else math.inf
    if steps > MAX_WINDOWS:
        shortest = span_s / MAX_WINDOWS
        raise WorkLimitError(
            f"a step of {step_s:g} s cuts {span_s:g} s into more than {MAX_WINDOWS:,} windows (the most "
            f"kvsim computes); use a window of at least {shortest:.3g} s"
        )
    return max(1, int(steps))


def rolling_quantiles(
    times_s: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    *,
    window_s: float,
    step_s: float | None = None,
    quantiles: Sequence[float] = (0.5, 0.99),
    weights: Sequence[float] | np.ndarray | None = None,
    start_s: float = 0.0,
) -> pd.DataFrame:
    """Quantiles of the samples in the window ``(t - window_s, t]`` for t = start + step, + 2 step, ...

    (The first window is closed on the left, so that a sample at ``start_s`` counts.)
    The grid runs until it covers the last sample. Without weights the quantiles
    interpolate linearly (numpy's default, like `kvsim.results.result.summarize`); with weights
    (e.g. decode tokens per iteration) they are the inverted CDF of the weighted samples.
    Returns columns ``time_s``, ``count`` (samples in the window) and one ``pNN`` per
    quantile (NaN for an empty window).
    """
    if not window_s > 0:  # NaN too
        raise ValueError(f"window_s must be > 0, got {window_s}")
    step = window_s if step_s is None else step_s
    if not step > 0:
        raise ValueError(f"step_s must be > 0, got {step}")
    t = np.asarray(times_s, dtype=float)
    v = np.asarray(values, dtype=float)
    w = None if weights is None else np.asarray(weights, dtype=float)
    keep = ~np.isnan(v) & ~np.isnan(t)
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if w is not None:
        w = w[keep][order]
    cols: dict[str, list[float]] = {"time_s": [], "count": []}
    cols |= {_qname(q): [] for q in quantiles}
    if len(t):
        n_steps = window_count(float(t[-1]) - start_s, step)
        for k in range(1, n_steps + 1):
            end = start_s + k * step
            # The first window also holds samples at exactly start_s.
            lo = 0 if end - window_s <= start_s else np.searchsorted(t, end - window_s, side="right")
            hi = np.searchsorted(t, end, side="right")
            cols["time_s"].append(end)
            cols["count"].append(float(hi - lo))
            for q in quantiles:
                if hi == lo:
                    val = float("nan")
                elif w is None:
                    val = float(np.quantile(v[lo:hi], q))
                else:
                    val = float(np.quantile(v[lo:hi], q, weights=w[lo:hi], method="inverted_cdf"))
                cols[_qname(q)].append(val)
    out = pd.DataFrame(cols)
    out["count"] = out["count"].astype(int)
    return out


def ttft_samples(requests: pd.DataFrame) -> pd.DataFrame:
    """TTFT of every request that got its first token, at the time it got it (``time_s``, ``ttft_s``;
    ``request_id`` too when the table has it)."""
    got = requests.dropna(subset=["first_token_s", "ttft_s"])
    out = pd.DataFrame(
        {"time_s": got["first_token_s"].to_numpy(float), "ttft_s": got["ttft_s"].to_numpy(float)}
    )
    if "request_id" in got.columns:  # kept for hovers and for picking a request on a chart
        out["request_id"] = got["request_id"].to_numpy()
    return out.sort_values("time_s", kind="stable").reset_index(drop=True)


def itl_samples(iterations: pd.DataFrame) -> pd.DataFrame:
    """Inter-token latency seen by the decoding requests of each iteration.

    A request that decoded in the previous iteration gets its next token one iteration
    later, so every decode token of an iteration has an ITL equal to that iteration's
    duration. Returns ``time_s`` (iteration end), ``itl_s`` and ``weight`` (decode tokens).
    The longer gaps of preempted requests are not here; see `preemption_gap_samples`.
    """
    dec = iterations[iterations["decode_tokens"] > 0]
    out = pd.DataFrame(
        {
            "time_s": (dec["start_s"] + dec["duration_s"]).to_numpy(float),
            "itl_s": dec["duration_s"].to_numpy(float),
            "weight": dec["decode_tokens"].to_numpy(float),
        }
    )
    return out.sort_values("time_s", kind="stable").reset_index(drop=True)


def preemption_gap_samples(requests: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """The longest inter-token gap of each preempted request, placed where it most likely ended.

    A preempted request stops producing tokens at its preemption and resumes after it is
    re-admitted (and recomputed or swapped in), so its ``max_itl_s`` is, in all likelihood,
    that gap. The tables give the gap's length but not its place; it is put at the
    request's first preemption plus the gap (at most its finish). Returns ``time_s``,
    ``itl_s``, ``request_id``.
    """
    kinds = ("preempt_recompute", "swap_out")  # a swap-out is a preemption by swap
    pre = events[events["kind"].isin(kinds) & (events["request_id"] >= 0)]
    first = pre.groupby("request_id")["time_s"].min()
    req = requests.set_index("request_id").loc[first.index.intersection(requests["request_id"])]
    req = req.dropna(subset=["max_itl_s"])
    t = np.minimum(first.loc[req.index].to_numpy(float) + req["max_itl_s"].to_numpy(float),
                   req["finish_s"].fillna(np.inf).to_numpy(float))  # fmt: skip
    out = pd.DataFrame(
        {"time_s": t, "itl_s": req["max_itl_s"].to_numpy(float), "request_id": req.index.to_numpy()}
    )
    return out.sort_values("time_s", kind="stable").reset_index(drop=True)


def find_spikes(
    times_s: Sequence[float] | np.ndarray,
    values: Sequence[float] | np.ndarray,
    *,
    metric: str,
    window_s: float,
    threshold_s: float,
    quantile: float = 0.99,
    weights: Sequence[float] | np.ndarray | None = None,
) -> pd.DataFrame:
    """Episodes in which the per-window quantile of a latency exceeds ``threshold_s``.

    Time is cut into consecutive windows ``(k w, (k+1) w]``; consecutive windows over the
    threshold form one episode. Returns one row per episode: ``metric``, ``statistic``
    (``p99``, or ``max`` for quantile 1), ``start_s``, ``end_s`` (window bounds),
    ``peak_time_s`` (end of the worst window), ``peak_s`` (its quantile) and
    ``num_samples`` (samples in the episode).
    """
    per = rolling_quantiles(times_s, values, window_s=window_s, quantiles=(quantile,), weights=weights)
    col = _qname(quantile)
    over = (per[col] > threshold_s).to_numpy()
    rows = []
    k = 0
    while k < len(per):
        if not over[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(per) and over[j + 1]:
            j += 1
        ep = per.iloc[k : j + 1]
        worst = int(ep[col].to_numpy().argmax())
        rows.append(
            {
                "metric": metric,
                "statistic": col,
                "start_s": float(ep["time_s"].iloc[0] - window_s),
                "end_s": float(ep["time_s"].iloc[-1]),
                "peak_time_s": float(ep["time_s"].iloc[worst]),
                "peak_s": float(ep[col].iloc[worst]),
                "num_samples": int(ep["count"].sum()),
            }
        )
        k = j + 1
    cols = ["metric", "statistic", "start_s", "end_s", "peak_time_s", "peak_s", "num_samples"]
    return pd.DataFrame(rows, columns=cols)


def run_spikes(
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    events: pd.DataFrame,
    *,
    window_s: float,
    ttft_threshold_s: float,
    itl_threshold_s: float,
) -> pd.DataFrame:
    """Every spike of a run, by time: windows whose p99 TTFT or token-weighted p99 ITL exceed
    their thresholds, and windows in which a preempted request's gap does (those gaps are too
    few to move a p99, so their maximum counts). The dashboard's Latency spikes page and
    ``kvsim spikes`` both call this, then `attribute_spikes`."""
    ttft = ttft_samples(requests)
    itl = itl_samples(iterations)
    gaps = preemption_gap_samples(requests, events)
    found = [
        find_spikes(
            ttft["time_s"], ttft["ttft_s"], metric="TTFT", window_s=window_s, threshold_s=ttft_threshold_s
        ),
        find_spikes(
            itl["time_s"],
            itl["itl_s"],
            metric="ITL",
            window_s=window_s,
            threshold_s=itl_threshold_s,
            weights=itl["weight"],
        ),
        find_spikes(
            gaps["time_s"],
            gaps["itl_s"],
            metric="ITL",
            window_s=window_s,
            threshold_s=itl_threshold_s,
            quantile=1.0,
        ),
    ]
    return (
        pd.concat(found, ignore_index=True).sort_values("peak_time_s", kind="stable").reset_index(drop=True)
    )


def worst_spikes(
    table: pd.DataFrame, *, ttft_threshold_s: float, itl_threshold_s: float, n: int
) -> pd.DataFrame:
    """The ``n`` spikes that exceed their own threshold the most (TTFT and ITL differ in scale)."""
    limit = table["metric"].map({"TTFT": ttft_threshold_s, "ITL": itl_threshold_s}).clip(lower=1e-9)
    return table.assign(over=table["peak_s"] / limit).sort_values("over", ascending=False).head(n)


def format_latency(seconds: float) -> str:
    """Three significant digits and a unit: ``0.48`` -> ``'480 ms'``, ``2.5`` -> ``'2.50 s'``, ``270.2`` -> ``'270 s'``."""
    return format_seconds(seconds)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


#: Request columns and summary keys the attribution reads (a table may lack some).
PREFIX_HIT_TOKENS = ("prefix_cache_hits_tokens",)
#: Tokens loaded from the offload tier instead of recomputed (request column).
OFFLOAD_HIT_TOKENS = ("offload_hits_tokens",)
#: The summary's prefix hit rate.
PREFIX_HIT_RATE = ("prefix_cache_hit_rate",)
#: Prompt tokens that missed the prefix cache because their block had been evicted (request column).
EVICTED_MISS_TOKENS = ("evicted_miss_tokens",)
#: Share of the slow requests' TTFT spent queued (median) from which a TTFT spike is put down to queueing.
QUEUEING_SHARE = 0.5


def column(table: pd.DataFrame, names: Sequence[str]) -> pd.Series | None:
    """The first of ``names`` that ``table`` has, or None."""
    for name in names:
        if name in table.columns:
            return table[name]
    return None


def summary_value(summary: Mapping[str, Any], names: Sequence[str], default: Any = None) -> Any:
    """The first of ``names`` the summary has, or ``default``."""
    return next((summary[n] for n in names if n in summary), default)


def _slow_requests(requests: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """Requests whose first token came in [start, end] (the samples of a TTFT spike)."""
    if not {"first_token_s", "queueing_s", "ttft_s"} <= set(requests.columns):
        return requests.iloc[0:0]
    got = requests[(requests["first_token_s"] >= start) & (requests["first_token_s"] <= end)]
    return got[got["ttft_s"] > 0]


def _evicted_misses(requests: pd.DataFrame, lo: float, hi: float) -> tuple[int | None, float, float]:
    """Evidence that evictions cost hits in [lo, hi]: (evicted-miss tokens or None, span hit rate, run hit rate).

    With the engine's ``evicted_miss_tokens`` column: the tokens of requests first
    scheduled in the span that missed because their block had been evicted. Without it:
    None, and the prefix hit rates of the span's admissions and of the whole run.
    """
    hits = column(requests, PREFIX_HIT_TOKENS)
    nan = float("nan")
    if hits is None or "first_scheduled_s" not in requests.columns:
        return None, nan, nan
    sched = requests["first_scheduled_s"]
    in_span = (sched >= lo) & (sched <= hi)
    misses = column(requests, EVICTED_MISS_TOKENS)
    prompts = requests["prompt_tokens"]
    admitted = sched.notna()
    run_rate = float(hits[admitted].sum() / prompts[admitted].sum()) if prompts[admitted].sum() else nan
    span_rate = float(hits[in_span].sum() / prompts[in_span].sum()) if prompts[in_span].sum() else nan
    return (int(misses[in_span].sum()) if misses is not None else None), span_rate, run_rate


def attribute_spikes(
    spikes: pd.DataFrame,
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    events: pd.DataFrame,
    *,
    burst_factor: float = 1.5,
) -> pd.DataFrame:
    """Explain each spike episode by what the engine did while the slow requests waited.

    A sample observed at t with latency L lived through ``[t - L, t]``, so an episode's
    causes are counted over ``[start_s - peak_s, end_s]``: arrivals against completions
    there (and the backlog at both ends), the share of the slow requests' TTFT spent
    queued, preemptions (recompute, swap), swap traffic, evicted blocks, rejections, the
    longest waiting queue, prefill tokens in the slowest iteration (decodes wait for the
    prefill chunk they are batched with), and whether arrivals in that span came faster,
    or with longer prompts, than ``burst_factor`` times the run's average.

    The causes, in the order they are tried (``cause`` is the first that applies):

    1. **queueing** (TTFT spikes): the requests whose first token came in the spike spent
       most of their TTFT (median share >= `QUEUEING_SHARE`) waiting to be scheduled; the
       text says whether arrivals exceeded completions in the span (arrivals above
       capacity) or the queue had built up before it;
    2. preemption by recompute, by swap, swap traffic;
    3. **eviction**, only where evicted blocks were needed again: with the engine's
       ``evicted_miss_tokens`` column, when requests admitted in the span missed tokens
       whose blocks had been evicted. Otherwise eviction is never a cause: on a run with
       prefix reuse the evictions are added at the end as context ("none needed again";
       for a table without the column, the span's and the run's prefix hit rates), on a
       run without prefix hits not even that (nothing evicted could have been hit);
    4. rejections, the waiting queue, a prefill in the slowest iteration, an arrival
       burst, long prompts.

    Every text carries the numbers behind it, e.g. ``"p99 TTFT 269 s at t=700 s:
    queueing: 44.0 req/s arrived, 25.6 req/s finished (backlog 7,900 -> 8,400), 99% of
    TTFT spent queued"``; the added columns hold them all.
    """
    out = spikes.copy()
    arrivals = requests["arrival_s"].to_numpy(float)
    prompts = requests["prompt_tokens"].to_numpy(float)
    known = ~np.isnan(arrivals)
    span_all = float(arrivals[known].max() - arrivals[known].min()) if known.sum() > 1 else 0.0
    mean_rate = (known.sum() - 1) / span_all if span_all > 0 else float("nan")
    mean_prompt = float(prompts.mean()) if len(prompts) else float("nan")
    if "finish_s" in requests.columns and "finished" in requests.columns:
        finishes = np.sort(requests.loc[requests["finished"].astype(bool), "finish_s"].to_numpy(float))
    else:
        finishes = None
    sorted_arrivals = np.sort(arrivals[known])
    hits = column(requests, PREFIX_HIT_TOKENS)
    has_reuse = hits is not None and float(hits.sum()) > 0
    it_end = (iterations["start_s"] + iterations["duration_s"]).to_numpy(float)
    it_start = iterations["start_s"].to_numpy(float)
    waiting = iterations["num_waiting"].to_numpy(float)
    durations = iterations["duration_s"].to_numpy(float)
    prefill = iterations["prefill_tokens"].to_numpy(float)
    decode = iterations["decode_tokens"].to_numpy(float)
    ev_t = events["time_s"].to_numpy(float)
    extra: dict[str, list[Any]] = {
        "from_s": [],
        "queue_from_s": [],
        "queue_to_s": [],
        "queue_arrival_rate_per_s": [],
        "completion_rate_per_s": [],
        "backlog_start_requests": [],
        "backlog_end_requests": [],
        "queued_share_of_ttft": [],
        "num_preempt_recompute": [],
        "num_preempt_swap": [],
        "swapped_bytes": [],
        "num_evicted_blocks": [],
        "evicted_miss_tokens": [],
        "span_prefix_hit_rate": [],
        "num_rejected": [],
        "max_waiting": [],
        "slowest_iteration_s": [],
        "slowest_iteration_prefill_tokens": [],
        "arrival_rate_per_s": [],
        "mean_prompt_tokens": [],
        "cause": [],
        "explanation": [],
    }
    for sp in out.itertuples(index=False):
        lo, hi = float(sp.start_s) - float(sp.peak_s), float(sp.end_s)
        ev = events[(ev_t >= lo) & (ev_t <= hi)]
        kinds = ev["kind"]
        n_rec = int((kinds == "preempt_recompute").sum())
        n_swp = int((kinds == "swap_out").sum())  # preemptions by swap
        swap_bytes = int(ev.loc[kinds.isin(["swap_out", "swap_in"]), "num_bytes"].sum())
        evicted = int(ev.loc[kinds == "evict", "num_blocks"].sum())
        rejected = int((kinds == "reject").sum())
        live = (it_end >= lo) & (it_start <= hi)
        max_wait = int(waiting[live].max()) if live.any() else 0
        slow_prefill = slow_decode = 0
        slow_s = 0.0
        if live.any():
            k = int(np.flatnonzero(live)[np.argmax(durations[live])])
            slow_s, slow_prefill, slow_decode = float(durations[k]), int(prefill[k]), int(decode[k])
        arr = (arrivals >= lo) & (arrivals <= hi)
        rate = float(arr.sum()) / (hi - lo) if hi > lo else float("nan")
        mean_p = float(prompts[arr].mean()) if arr.any() else float("nan")
        # Arrivals against completions while the spike's slow requests arrived (TTFT), or over
        # the span (ITL): more arrivals than completions is a queue growing.
        slow = _slow_requests(requests, float(sp.start_s), hi) if sp.metric == "TTFT" else requests.iloc[0:0]
        a0, a1 = (float(slow["arrival_s"].min()), float(slow["arrival_s"].max())) if len(slow) else (lo, hi)
        if a1 <= a0:
            a0, a1 = lo, hi
        if finishes is not None and a1 > a0:
            in_rate = float(((sorted_arrivals >= a0) & (sorted_arrivals <= a1)).sum()) / (a1 - a0)
            done_rate = float(((finishes >= a0) & (finishes <= a1)).sum()) / (a1 - a0)
            b0, b1 = (int(v) for v in backlog(sorted_arrivals, finishes, np.array([a0, a1])))
        else:
            in_rate, done_rate, b0, b1 = float("nan"), float("nan"), 0, 0
        queued_share = float((slow["queueing_s"] / slow["ttft_s"]).median()) if len(slow) else float("nan")
        miss_tokens, span_hit, run_hit = _evicted_misses(requests, lo, hi)
        causes: list[tuple[str, str]] = []
        if len(slow) and queued_share >= QUEUEING_SHARE:
            digits = 0 if a1 - a0 >= 10 else 1
            when = f"while they arrived (t={a0:,.{digits}f}-{a1:,.{digits}f} s)"
            if in_rate > done_rate:
                what = f"{in_rate:.1f} req/s arrived, {done_rate:.1f} req/s finished {when}"
            else:
                what = f"the queue had built up before: {in_rate:.1f} req/s arrived, {done_rate:.1f} req/s finished {when}"
            causes.append(
                (
                    "queueing",
                    f"queueing: {what}, backlog {b0:,} -> {b1:,}; {queued_share:.0%} of TTFT spent queued",
                )
            )
        if n_rec:
            causes.append(("preemption (recompute)", _plural(n_rec, "preemption") + " by recompute"))
        if n_swp:
            causes.append(("preemption (swap)", _plural(n_swp, "preemption") + " by swap"))
        if swap_bytes:
            causes.append(("swap traffic", f"{swap_bytes / 2**30:.2f} GiB swapped over PCIe"))
        if evicted and miss_tokens:  # the engine's column: hits lost to eviction
            causes.append(
                (
                    "eviction",
                    f"{_plural(evicted, 'cached block')} evicted; {miss_tokens:,} prompt tokens "
                    "missed because their blocks had been evicted",
                )
            )
        # Without the engine's column nothing says whether an evicted block was needed again
        # (a hit rate that dips can as well be longer unique prompts): context, never a cause.
        # With it, evictions no admission missed are context too ("none needed again").
        eviction_context = None
        if evicted and has_reuse and miss_tokens is None:
            eviction_context = (
                f"{_plural(evicted, 'cached block')} evicted (whether any was needed again is not recorded; "
                f"prefix hit rate of the span's admissions {span_hit:.0%}, run {run_hit:.0%})"
            )
        elif evicted and has_reuse and not miss_tokens:
            eviction_context = (
                f"{_plural(evicted, 'cached block')} evicted, none needed again by the span's admissions"
            )
        if rejected:
            causes.append(("rejection", f"{_plural(rejected, 'request')} rejected"))
        if max_wait and sp.metric == "TTFT":
            causes.append(("queue build-up", f"queue up to {max_wait:,} waiting"))
        if slow_prefill:
            causes.append(
                (
                    "prefill in the batch",
                    f"slowest iteration ({format_latency(slow_s)}) computed {slow_prefill:,} prefill tokens "
                    f"beside {slow_decode} decodes",
                )
            )
        if rate > burst_factor * mean_rate:
            causes.append(("arrival burst", f"arrival burst {rate:.1f} req/s (run mean {mean_rate:.1f})"))
        if mean_p > burst_factor * mean_prompt:
            causes.append(
                ("long prompts", f"long prompts: mean {mean_p:,.0f} tokens (run mean {mean_prompt:,.0f})")
            )
        if max_wait and sp.metric != "TTFT":  # decodes do not wait for the queue: context only
            causes.append(("queue build-up", f"queue up to {max_wait:,} waiting"))
        if not causes:
            causes.append(("none found", "no preemption, swap, eviction, queue or burst in the span"))
        if eviction_context:
            causes.append(("context", eviction_context))
        head = f"{sp.statistic} {sp.metric} {format_latency(float(sp.peak_s))} at t={float(sp.peak_time_s):.0f} s"
        for key, val in (
            ("from_s", lo),
            ("queue_from_s", a0),
            ("queue_to_s", a1),
            ("queue_arrival_rate_per_s", in_rate),
            ("completion_rate_per_s", done_rate),
            ("backlog_start_requests", b0),
            ("backlog_end_requests", b1),
            ("queued_share_of_ttft", queued_share),
            ("num_preempt_recompute", n_rec),
            ("num_preempt_swap", n_swp),
            ("swapped_bytes", swap_bytes),
            ("num_evicted_blocks", evicted),
            ("evicted_miss_tokens", miss_tokens),
            ("span_prefix_hit_rate", span_hit),
            ("num_rejected", rejected),
            ("max_waiting", max_wait),
            ("slowest_iteration_s", slow_s),
            ("slowest_iteration_prefill_tokens", slow_prefill),
            ("arrival_rate_per_s", rate),
            ("mean_prompt_tokens", mean_p),
            ("cause", causes[0][0]),
            ("explanation", head + ": " + "; ".join(text for _, text in causes)),
        ):
            extra[key].append(val)
    for key, vals in extra.items():
        dtype = object if key in ("cause", "explanation", "evicted_miss_tokens") else None
        out[key] = pd.Series(vals, index=out.index, dtype=dtype)
    return out


def nice_window(span_s: float, num_windows: int = 60) -> float:
    """A round window (1, 2 or 5 times a power of ten) cutting ``span_s`` into about ``num_windows``."""
    if span_s <= 0:
        return 1.0
    raw = span_s / num_windows
    power = 10 ** np.floor(np.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * power:
            return float(m * power)
    return float(10 * power)
