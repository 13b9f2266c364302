"""Analyses over a run's tables: rolling percentiles, latency spikes and their causes, KV timelines.

Pure pandas/numpy over the tables of `kvsim.result.Result`; nothing here runs the engine
or draws anything (the figures are in `kvsim.plots`).

- `rolling_quantiles`           percentiles of samples in a sliding time window
- `ttft_samples`, `itl_samples`, `preemption_gap_samples`  latency samples of the spike view
- `find_spikes`                 windows whose p99 exceeds a threshold, merged into episodes
- `attribute_spikes`            each episode with the engine events that explain it
- `kv_blocks_over_time`         used / cached / free KV blocks summed over replicas
- `prefix_hit_rate_over_time`   prefix hit rate of the requests admitted in a sliding window
- `find_knee`                   highest load (or least capacity) that still meets the SLO
- `compare_summaries`           summary metrics of several runs side by side, with differences
- `cross_tenant_exposure`       prefix hits a tenant could only owe to another tenant (side channel)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.request import RequestSpec

#: Event kinds that explain latency spikes, in the order their causes are listed.
SPIKE_EVENT_KINDS = ("preempt_recompute", "swap_out", "swap_in", "offload_load", "evict", "reject")


def _qname(q: float) -> str:
    return "max" if q == 1.0 else f"p{q * 100:g}"


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
    interpolate linearly (numpy's default, like `kvsim.result.summarize`); with weights
    (e.g. decode tokens per iteration) they are the inverted CDF of the weighted samples.
    Returns columns ``time_s``, ``count`` (samples in the window) and one ``pNN`` per
    quantile (NaN for an empty window).
    """
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    step = window_s if step_s is None else step_s
    if step <= 0:
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
        n_steps = max(1, int(np.ceil((t[-1] - start_s) / step - 1e-9)))
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
    """TTFT of every request that got its first token, at the time it got it (``time_s``, ``ttft_s``)."""
    got = requests.dropna(subset=["first_token_s", "ttft_s"])
    out = pd.DataFrame(
        {"time_s": got["first_token_s"].to_numpy(float), "ttft_s": got["ttft_s"].to_numpy(float)}
    )
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


def format_latency(seconds: float) -> str:
    """``0.48`` -> ``'480 ms'``, ``2.5`` -> ``'2.50 s'``."""
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


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
    causes are counted over ``[start_s - peak_s, end_s]``: preemptions (recompute, swap),
    swap traffic, evicted blocks, rejections, the longest waiting queue, prefill tokens
    in the slowest iteration (decodes wait for the prefill chunk they are batched with),
    and whether arrivals in that span came faster, or with longer prompts, than
    ``burst_factor`` times the run's average. Adds those counts, ``cause`` (the first that applies, in
    that order) and ``explanation``, e.g. ``"p99 ITL 480 ms at t=312 s: 14 preemptions by
    recompute; queue up to 37 waiting"``.
    """
    out = spikes.copy()
    arrivals = requests["arrival_s"].to_numpy(float)
    prompts = requests["prompt_tokens"].to_numpy(float)
    span_all = float(arrivals.max() - arrivals.min()) if len(arrivals) > 1 else 0.0
    mean_rate = (len(arrivals) - 1) / span_all if span_all > 0 else float("nan")
    mean_prompt = float(prompts.mean()) if len(prompts) else float("nan")
    it_end = (iterations["start_s"] + iterations["duration_s"]).to_numpy(float)
    it_start = iterations["start_s"].to_numpy(float)
    waiting = iterations["num_waiting"].to_numpy(float)
    durations = iterations["duration_s"].to_numpy(float)
    prefill = iterations["prefill_tokens"].to_numpy(float)
    decode = iterations["decode_tokens"].to_numpy(float)
    ev_t = events["time_s"].to_numpy(float)
    extra: dict[str, list[Any]] = {
        "from_s": [],
        "num_preempt_recompute": [],
        "num_preempt_swap": [],
        "swapped_bytes": [],
        "num_evicted_blocks": [],
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
        causes: list[tuple[str, str]] = []
        if n_rec:
            causes.append(("preemption (recompute)", _plural(n_rec, "preemption") + " by recompute"))
        if n_swp:
            causes.append(("preemption (swap)", _plural(n_swp, "preemption") + " by swap"))
        if swap_bytes:
            causes.append(("swap traffic", f"{swap_bytes / 2**30:.2f} GiB swapped over PCIe"))
        if evicted:
            causes.append(("eviction", f"{_plural(evicted, 'cached block')} evicted"))
        if rejected:
            causes.append(("rejection", f"{_plural(rejected, 'request')} rejected"))
        if max_wait:
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
        if not causes:
            causes.append(("none found", "no preemption, swap, eviction, queue or burst in the span"))
        head = f"{sp.statistic} {sp.metric} {format_latency(float(sp.peak_s))} at t={float(sp.peak_time_s):.0f} s"
        for key, val in (
            ("from_s", lo),
            ("num_preempt_recompute", n_rec),
            ("num_preempt_swap", n_swp),
            ("swapped_bytes", swap_bytes),
            ("num_evicted_blocks", evicted),
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
        out[key] = pd.Series(vals, index=out.index, dtype=object if key in ("cause", "explanation") else None)
    return out


def kv_blocks_over_time(iterations: pd.DataFrame, *, num_points: int = 400) -> pd.DataFrame:
    """KV blocks used, cached (free but hittable) and free-and-empty, summed over replicas.

    Each replica's state holds from the start of one iteration to the start of its next;
    the sums are taken on a grid of ``num_points`` times (or at every iteration start when
    there is one replica and fewer iterations). Columns: ``time_s``, ``used``, ``cached``,
    ``empty`` (free minus cached) and ``total``.
    """
    cols = ["time_s", "used", "cached", "empty", "total"]
    if iterations.empty:
        return pd.DataFrame(columns=cols)
    it = iterations.sort_values("start_s", kind="stable")
    replicas = list(dict.fromkeys(it["replica_id"]))
    if len(replicas) == 1 and len(it) <= num_points:
        used = it["kv_blocks_used"].to_numpy(int)
        cached = it["kv_blocks_cached"].to_numpy(int)
        free = it["kv_blocks_free"].to_numpy(int)
        return pd.DataFrame(
            {
                "time_s": it["start_s"].to_numpy(float),
                "used": used,
                "cached": cached,
                "empty": free - cached,
                "total": used + free,
            }
        )
    grid = np.linspace(float(it["start_s"].iloc[0]), float(it["start_s"].iloc[-1]), num_points)
    sums = {c: np.zeros(num_points, dtype=np.int64) for c in ("used", "cached", "free")}
    for rid in replicas:
        r = it[it["replica_id"] == rid]
        idx = np.clip(np.searchsorted(r["start_s"].to_numpy(float), grid, side="right") - 1, 0, None)
        for c in sums:
            sums[c] += r[f"kv_blocks_{c}"].to_numpy(np.int64)[idx]
    return pd.DataFrame(
        {
            "time_s": grid,
            "used": sums["used"],
            "cached": sums["cached"],
            "empty": sums["free"] - sums["cached"],
            "total": sums["used"] + sums["free"],
        }
    )


def prefix_hit_rate_over_time(
    requests: pd.DataFrame, *, window_s: float, step_s: float | None = None
) -> pd.DataFrame:
    """Prefix hit rate (hit tokens / prompt tokens) of requests first scheduled in each window.

    Windows as in `rolling_quantiles` (from time 0). Columns ``time_s``, ``num_requests``, ``hit_rate``
    (NaN where no request was admitted).
    """
    adm = requests.dropna(subset=["first_scheduled_s"]).sort_values("first_scheduled_s", kind="stable")
    t = adm["first_scheduled_s"].to_numpy(float)
    hits = np.concatenate([[0.0], np.cumsum(adm["prefix_cache_hits_tokens"].to_numpy(float))])
    toks = np.concatenate([[0.0], np.cumsum(adm["prompt_tokens"].to_numpy(float))])
    step = window_s if step_s is None else step_s
    if not len(t):
        return pd.DataFrame(columns=["time_s", "num_requests", "hit_rate"])
    ends = step * np.arange(1, max(1, int(np.ceil(t[-1] / step - 1e-9))) + 1)
    lo = np.where(ends - window_s <= 0, 0, np.searchsorted(t, ends - window_s, side="right"))
    hi = np.searchsorted(t, ends, side="right")
    q = toks[hi] - toks[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(q > 0, (hits[hi] - hits[lo]) / q, np.nan)
    return pd.DataFrame({"time_s": ends, "num_requests": hi - lo, "hit_rate": rate})


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


def cross_tenant_exposure(requests: pd.DataFrame, specs: Sequence[RequestSpec]) -> pd.DataFrame:
    """Requests that send a prompt prefix their tenant never sent before, and whether they hit.

    Such a request can only hit the prefix cache on blocks another tenant put there, and a
    hit shows in its TTFT: the timing side channel of a cache shared between tenants. The
    prefix is the prompt's first segment (a system prompt, a document, a session's start).
    With ``cache_isolation: tenant`` none of these requests hits. Columns: request_id,
    tenant, arrival_s, hit, ttft_s; only first uses that were admitted.
    """
    first = {s.request_id: s.prompt[0].content_id for s in specs}
    df = requests[["request_id", "tenant", "arrival_s", "prefix_cache_hits_tokens", "ttft_s"]].dropna(
        subset=["ttft_s"]
    )
    df = df.sort_values(["arrival_s", "request_id"], kind="stable")
    seen: set[tuple[str, int]] = set()
    keep = []
    for rid, tenant in zip(df["request_id"], df["tenant"], strict=True):
        key = (tenant, first[int(rid)])
        keep.append(key not in seen)
        seen.add(key)
    out = df[np.asarray(keep, dtype=bool)].copy()
    out["hit"] = out["prefix_cache_hits_tokens"] > 0
    return out[["request_id", "tenant", "arrival_s", "hit", "ttft_s"]].reset_index(drop=True)


def exposure_summary(exposure: pd.DataFrame) -> dict[str, Any]:
    """How often first uses hit, and how far apart hit and miss TTFTs lie (medians, seconds)."""
    hits, misses = exposure[exposure["hit"]], exposure[~exposure["hit"]]
    return {
        "first_uses": len(exposure),
        "first_use_hit_rate": float(exposure["hit"].mean()) if len(exposure) else float("nan"),
        "ttft_p50_hit_s": float(hits["ttft_s"].median()) if len(hits) else float("nan"),
        "ttft_p50_miss_s": float(misses["ttft_s"].median()) if len(misses) else float("nan"),
    }
