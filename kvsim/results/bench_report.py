"""What ``vllm bench serve`` would have printed and saved, computed from a kvsim `Result`.

    metrics = bench_metrics(result, percentile_metrics=("ttft", "tpot", "itl"), percentiles=(99,))
    print(format_bench_block(metrics))          # ============ Serving Benchmark Result ...
    json.dumps(bench_result_json(metrics, ...))  # the keys --save-result writes

Every definition is vLLM 0.32.0's (``vllm/benchmarks/serve.py``): ``calculate_metrics``
(TTFT and E2EL per successful request; TPOT = (E2EL - TTFT) / (output tokens - 1) for
requests of more than one output token; ITL = every gap between two streamed chunks of
every request, pooled; means, medians, population standard deviations and linear
percentiles with numpy; throughputs over the benchmark's duration; the per-second peaks),
``benchmark`` (the result block, its formats, and the result dict) and ``main_async`` (the
saved JSON's header keys). Requests are measured from when the client sent them (the
request table's ``arrival_s``); warm-ups (``warmup``) are left out; the duration runs from
the measured run's start (``measured_start_s``) to the last finish.

ITL needs every gap, which kvsim does not store per token: a request's gaps are the
differences between the end times of its replica's iterations from its first token to its
last, one gap per iteration (a speculative verify step's tokens arrive in one chunk, as in
vLLM). That is exact for a request that ran in every iteration of that span; a request that
was preempted, swapped out or moved to a decode replica had its long gap counted as the
iterations it waited through.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.results.result import Result
from kvsim.workload.config import BenchServeWorkload

#: Metrics ``--percentile-metrics`` may name, in the order vLLM reports them.
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
#: vLLM's default for generative models.
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")
#: (name printed, section header) of each metric, as ``benchmark`` prints them.
_METRIC_NAMES: dict[str, tuple[str, str]] = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency"),
}


def _stats(values: np.ndarray, weights: np.ndarray | None, percentiles: Sequence[float]) -> dict[str, Any]:
    """Mean, median, std and percentiles in ms, as numpy gives them on the (expanded) values;
    an empty list counts as [0] (vLLM's ``np.mean(x or 0)``)."""
    if weights is not None:
        keep = weights > 0
        values, weights = values[keep], weights[keep]
    if not len(values):
        values, weights = np.zeros(1), None
    if weights is None:
        mean, median, std = np.mean(values), np.median(values), np.std(values)
        pcts = [float(np.percentile(values, p)) for p in percentiles]
    else:
        order = np.argsort(values, kind="stable")
        values, weights = values[order], weights[order]
        total = float(weights.sum())
        mean = float(np.dot(values, weights) / total)
        std = math.sqrt(float(np.dot((values - mean) ** 2, weights) / total))
        median = _weighted_median(values, weights)
        pcts = [_weighted_percentile(values, weights, p) for p in percentiles]
    return {
        "mean": float(mean) * 1000,
        "median": float(median) * 1000,
        "std": float(std) * 1000,
        "percentiles": [(float(p), v * 1000) for p, v in zip(percentiles, pcts, strict=True)],
    }


def _expanded(values: np.ndarray, weights: np.ndarray, index: int) -> float:
    """Element ``index`` of ``np.repeat(values, weights)`` (values sorted)."""
    return float(values[np.searchsorted(np.cumsum(weights), index, side="right")])


def _weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` without repeating (values sorted,
    integer weights): numpy's linear method, its index and interpolation formulas."""
    n = int(weights.sum())
    virtual = (n - 1) * (q / 100)  # numpy's 'linear' get_virtual_index
    if virtual >= n - 1:
        return _expanded(values, weights, n - 1)
    lower = math.floor(virtual)
    frac = virtual - lower
    a = _expanded(values, weights, lower)
    b = _expanded(values, weights, lower + 1)
    diff = b - a  # numpy's _lerp
    return b - diff * (1 - frac) if frac >= 0.5 else a + diff * frac


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """``np.median(np.repeat(values, weights))``: the middle value, or the mean of the two."""
    n = int(weights.sum())
    if n % 2:
        return _expanded(values, weights, n // 2)
    return float(np.mean([_expanded(values, weights, n // 2 - 1), _expanded(values, weights, n // 2)]))


def token_steps(
    requests: pd.DataFrame, iterations: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunks streamed after each request's first token, pooled over ``requests``:
    (end time of each iteration, its gap since the replica's previous iteration end, how many
    of ``requests`` received a chunk at it). See the module docstring."""
    times: list[np.ndarray] = []
    gaps: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    if not len(requests) or not len(iterations):
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    ends_all = iterations["start_s"].to_numpy(dtype=float) + iterations["duration_s"].to_numpy(dtype=float)
    replica_of_iteration = iterations["replica_id"].to_numpy(dtype=object)
    for replica, group in requests.groupby("replica_id", sort=True):
        ends = np.sort(ends_all[replica_of_iteration == replica])
        if not len(ends):
            continue
        first = group["first_token_s"].to_numpy(dtype=float)
        last = group["finish_s"].to_numpy(dtype=float)
        # Iteration ends equal token times exactly; the tolerance only guards an ulp.
        lo = np.searchsorted(ends, first + 1e-12 * np.maximum(1.0, np.abs(first)), side="right")
        hi = np.searchsorted(ends, last + 1e-12 * np.maximum(1.0, np.abs(last)), side="right")
        diff = np.zeros(len(ends) + 1, dtype=np.int64)
        np.add.at(diff, lo, 1)
        np.add.at(diff, hi, -1)
        count = np.cumsum(diff)[:-1]
        gap = np.diff(ends, prepend=ends[0])
        times.append(ends)
        gaps.append(gap)
        counts.append(count)
    if not times:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    return np.concatenate(times), np.concatenate(gaps), np.concatenate(counts)


def _per_second_peaks(
    starts: np.ndarray,
    ends: np.ndarray,
    first_tokens: np.ndarray,
    chunk_times: np.ndarray,
    chunk_counts: np.ndarray,
) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests``: chunks received and
    requests active in each whole second from the first send."""
    if not len(starts):
        return 0.0, 0
    origin = float(starts.min())
    seconds = int(np.ceil(float(ends.max()) - origin)) + 1
    tokens = np.zeros(seconds)
    for t, w in ((first_tokens, None), (chunk_times, chunk_counts)):
        bucket = (t - origin).astype(np.int64)  # int() truncates; t >= origin
        ok = (bucket >= 0) & (bucket < seconds)
        tokens += np.bincount(bucket[ok], weights=None if w is None else w[ok], minlength=seconds)[:seconds]
    active = np.zeros(seconds + 1)
    np.add.at(active, (starts - origin).astype(np.int64), 1)
    np.add.at(active, (ends - origin).astype(np.int64) + 1, -1)
    return float(tokens.max()), int(np.cumsum(active)[:-1].max())


def bench_metrics(
    result: Result,
    *,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    percentiles: Sequence[float] = (99.0,),
) -> dict[str, Any]:
    """vLLM's ``benchmark()`` result for a run: counts, throughputs, per-second peaks and the
    statistics of the selected metrics (ms), keys in vLLM's order, plus ``max_concurrency``
    and ``request_rate`` for the result block (None / inf for a workload without a client)."""
    unknown = [m for m in percentile_metrics if m not in PERCENTILE_METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(PERCENTILE_METRICS)}")
    workload = result.scenario.workload
    client = workload if isinstance(workload, BenchServeWorkload) else None
    max_concurrency = client.max_concurrency if client is not None else None
    request_rate = client.request_rate_per_s if client is not None else math.inf
    req = result.requests
    if "warmup" in req:
        req = req[~req["warmup"].to_numpy(dtype=bool)]
    req = req.sort_values("request_id", kind="stable")
    ok = req["finished"].to_numpy(dtype=bool)
    done = req[ok]
    summary = result.summary
    start = float(summary.get("measured_start_s", 0.0))
    duration = float(summary["sim_time_s"]) - start
    out_tokens = done["output_tokens"].to_numpy(dtype=np.int64)
    ttfts = done["ttft_s"].to_numpy(dtype=float)
    e2els = done["e2e_s"].to_numpy(dtype=float)
    many = out_tokens > 1
    tpots = (e2els[many] - ttfts[many]) / (out_tokens[many] - 1)
    chunk_times, chunk_gaps, chunk_counts = token_steps(done, result.iterations)
    queue_all = req["client_queue_s"].to_numpy(dtype=float) if "client_queue_s" in req else np.zeros(len(req))
    queue = queue_all[ok]
    sent = done["arrival_s"].to_numpy(dtype=float)
    peak_tokens, peak_requests = _per_second_peaks(
        sent, sent + e2els, done["first_token_s"].to_numpy(dtype=float), chunk_times, chunk_counts
    )
    completed, total_input = len(done), int(done["prompt_tokens"].sum())
    total_output = int(out_tokens.sum())
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: math.nan)
    out: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": int(len(req) - completed),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": per_s(completed),
        "request_goodput": None,
        "output_throughput": per_s(total_output),
        "total_token_throughput": per_s(total_input + total_output),
        "latencies": np.where(ok, req["e2e_s"].to_numpy(dtype=float), 0.0).tolist(),
        "queue_times": queue_all.tolist(),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "rtfx": 0.0,
    }
    values: dict[str, tuple[np.ndarray, np.ndarray | None]] = {
        "ttft": (ttfts, None),
        "tpot": (tpots, None),
        "itl": (chunk_gaps, chunk_counts),
        "e2el": (e2els, None),
    }
    if max_concurrency is not None:
        values["client_queue_time"] = (queue, None)
        if not math.isinf(request_rate):
            values["e2el_including_client_queue"] = (e2els + queue, None)
    for name in PERCENTILE_METRICS:
        if name not in percentile_metrics or name not in values:
            continue
        stats = _stats(*values[name], percentiles)
        out[f"mean_{name}_ms"] = stats["mean"]
        out[f"median_{name}_ms"] = stats["median"]
        out[f"std_{name}_ms"] = stats["std"]
        for p, v in stats["percentiles"]:
            out[f"p{_p_word(p)}_{name}_ms"] = v
    out["max_concurrency"] = max_concurrency
    out["request_rate"] = request_rate
    return out


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def format_bench_block(metrics: Mapping[str, Any], percentiles: Sequence[float] = (99.0,)) -> str:
    """The result block ``vllm bench serve`` prints (vLLM 0.32.0, ``serve.py``, ``benchmark``),
    character for character: 40-column labels, values left-aligned in 10."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]

    def row(label: str, value: Any, fmt: str = "") -> None:
        lines.append(("{:<40} {:<10" + fmt + "}").format(label, value))

    row("Successful requests:", metrics["completed"])
    row("Failed requests:", metrics["failed"])
    if metrics.get("max_concurrency") is not None:
        row("Maximum request concurrency:", metrics["max_concurrency"])
    if metrics.get("request_rate", math.inf) != math.inf:
        row("Request rate configured (RPS):", metrics["request_rate"], ".2f")
    row("Benchmark duration (s):", metrics["duration"], ".2f")
    row("Total input tokens:", metrics["total_input_tokens"])
    row("Total generated tokens:", metrics["total_output_tokens"])
    row("Request throughput (req/s):", metrics["request_throughput"], ".2f")
    row("Output token throughput (tok/s):", metrics["output_throughput"], ".2f")
    row("Peak output token throughput (tok/s):", metrics["max_output_tokens_per_s"], ".2f")
    row("Peak concurrent requests:", metrics["max_concurrent_requests"], ".2f")
    row("Total token throughput (tok/s):", metrics["total_token_throughput"], ".2f")
    for name in PERCENTILE_METRICS:
        if f"mean_{name}_ms" not in metrics:
            continue
        label, header = _METRIC_NAMES[name]
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        row(f"Mean {label} (ms):", metrics[f"mean_{name}_ms"], ".2f")
        row(f"Median {label} (ms):", metrics[f"median_{name}_ms"], ".2f")
        for p in percentiles:
            row(f"P{_p_word(p)} {label} (ms):", metrics[f"p{_p_word(p)}_{name}_ms"], ".2f")
    lines.append("=" * 50)
    return "\n".join(lines)


def bench_result_json(
    metrics: Mapping[str, Any],
    *,
    date: str,
    backend: str,
    model_id: str,
    num_prompts: int,
    burstiness: float,
    label: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON ``--save-result`` writes (``main_async``): its header keys, then the metrics."""
    rate = metrics.get("request_rate", math.inf)
    out: dict[str, Any] = {
        "date": date,
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
    }
    out.update(metadata or {})
    out["request_rate"] = rate if rate < math.inf else "inf"
    out["burstiness"] = burstiness
    out["max_concurrency"] = metrics.get("max_concurrency")
    out.update({k: v for k, v in metrics.items() if k not in ("max_concurrency", "request_rate")})
    return out


__all__ = [
    "DEFAULT_PERCENTILE_METRICS",
    "PERCENTILE_METRICS",
    "bench_metrics",
    "bench_result_json",
    "format_bench_block",
    "token_steps",
]
