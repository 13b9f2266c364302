"""An observation beside a simulation of the same requests: where the prediction is wrong.

    cmp = compare_results(observed, simulated)
    cmp.metrics       one row per figure: observed, simulated, error, target, within target
    cmp.requests      one row per request finished on both sides: observed and simulated
                      TTFT, TPOT, E2E and their errors (the per-request scatter)
    cmp.series        at each scrape of the server's /metrics: its KV usage, running and
                      waiting requests, and the simulation's at the same instant
    cmp.series_errors mean absolute difference of each series (KV usage in points)

Errors are relative, (simulated - observed) / observed, except for shares (hit rate, KV
usage), which are differences in percentage points. KV usage's mean and peak are taken at
the scrapes on both sides (`series_figures`). The targets are issue 23's: p50s and
throughput within 10%, p99s within 20%, the KV-usage series within 5 points on average.

The simulation's state at a scrape's instant is that of the iteration running then
(`kvsim.results.result.ITERATION_COLUMNS`: running = batch_size, num_waiting, kv_usage); between
iterations the engine is idle (nothing running, nothing held). ITL percentiles pool every
gap between two chunks a request received (vLLM's ``bench serve``): from the token times
of an observation, from the iterations a request's tokens came out of in a simulation
(`kvsim.results.bench_report.token_steps`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kvsim.results.bench_report import token_steps
from kvsim.results.result import Result

#: (summary key, label, kind, target): kind "rel" is a relative error, "points" a difference
#: of shares in percentage points; target None: shown, not judged.
METRICS: tuple[tuple[str, str, str, float | None], ...] = (
    ("ttft_p50_s", "TTFT p50", "rel", 0.10),
    ("ttft_p90_s", "TTFT p90", "rel", None),
    ("ttft_p99_s", "TTFT p99", "rel", 0.20),
    ("ttft_mean_s", "TTFT mean", "rel", None),
    ("tpot_p50_s", "TPOT p50", "rel", 0.10),
    ("tpot_p90_s", "TPOT p90", "rel", None),
    ("tpot_p99_s", "TPOT p99", "rel", 0.20),
    ("tpot_mean_s", "TPOT mean", "rel", None),
    ("itl_p50_s", "ITL p50", "rel", None),
    ("itl_p99_s", "ITL p99", "rel", None),
    ("itl_mean_s", "ITL mean", "rel", None),
    ("e2e_p50_s", "E2E p50", "rel", 0.10),
    ("e2e_p90_s", "E2E p90", "rel", None),
    ("e2e_p99_s", "E2E p99", "rel", 0.20),
    ("e2e_mean_s", "E2E mean", "rel", None),
    ("throughput_tokens_per_s", "throughput (output tok/s)", "rel", 0.10),
    ("throughput_requests_per_s", "throughput (req/s)", "rel", None),
    ("prefix_cache_hit_rate", "prefix-cache hit rate", "points", None),
    ("kv_usage_mean", "KV usage, mean at the scrapes", "points", None),
    ("kv_usage_peak", "KV usage, peak at the scrapes", "points", None),
    ("num_preemptions", "preemptions", "rel", None),
    ("num_finished", "finished requests", "rel", None),
)
#: The series compared: (name, label, target mean absolute difference or None).
SERIES: tuple[tuple[str, str, float | None], ...] = (
    ("kv_usage", "KV usage (points)", 5.0),
    ("running", "running requests", None),
    ("waiting", "waiting requests", None),
)


@dataclass(frozen=True)
class Comparison:
    """See the module docstring."""

    metrics: pd.DataFrame
    requests: pd.DataFrame
    series: pd.DataFrame
    series_errors: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for --json): metric rows, per-request summary and series errors."""
        return {
            "metrics": self.metrics.to_dict(orient="records"),
            "requests": {
                "num_paired": len(self.requests),
                **{
                    f"{m}_median_abs_error": _median_abs(self.requests[f"{m}_error"])
                    for m in ("ttft", "tpot", "e2e")
                },
            },
            "series_errors": dict(self.series_errors),
        }


def _median_abs(values: pd.Series) -> float:
    v = values.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return float(np.median(np.abs(v))) if len(v) else math.nan


def measured(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests a summary counts: warm-ups left out."""
    if "warmup" in requests:
        return requests[~requests["warmup"].to_numpy(dtype=bool)]
    return requests


def itl_gaps(result: Result) -> np.ndarray:
    """Every gap between two chunks a finished request received, pooled (see the module docstring)."""
    req = measured(result.requests)
    done = req[req["finished"].to_numpy(dtype=bool)]
    if "token_times_s" in done:
        gaps = []
        for times in done["token_times_s"]:
            t = np.unique(np.asarray(times, dtype=float))
            if len(t) > 1:
                gaps.append(np.diff(t))
        return np.concatenate(gaps) if gaps else np.zeros(0)
    _times, step_gaps, counts = token_steps(done, result.iterations)
    keep = counts > 0
    gaps_repeated: np.ndarray = np.repeat(step_gaps[keep], counts[keep])
    return gaps_repeated


def figures(result: Result) -> dict[str, float]:
    """The compared figures of one result: its summary's, and ITL percentiles."""
    out = {key: _number(result.summary.get(key)) for key, _, _, _ in METRICS}
    gaps = itl_gaps(result)
    out["itl_p50_s"] = float(np.percentile(gaps, 50)) if len(gaps) else math.nan
    out["itl_p99_s"] = float(np.percentile(gaps, 99)) if len(gaps) else math.nan
    return out


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return math.nan
    return float(value)


def metrics_table(observed: Mapping[str, float], simulated: Mapping[str, float]) -> pd.DataFrame:
    rows = []
    for key, label, kind, target in METRICS:
        o, s = observed.get(key, math.nan), simulated.get(key, math.nan)
        relative = (s - o) / o if o else math.nan
        error = 100.0 * (s - o) if kind == "points" else relative
        ok: bool | None = None
        if target is not None and math.isfinite(error):
            ok = abs(error) <= target
        rows.append(
            {"metric": key, "label": label, "observed": o, "simulated": s, "error": error, "kind": kind,
             "target": target, "within_target": ok}
        )  # fmt: skip
    return pd.DataFrame(rows)


def paired_requests(observed: Result, simulated: Result) -> pd.DataFrame:
    """Requests finished (and measured) on both sides, by request id."""
    cols = ["request_id", "arrival_s", "ttft_s", "tpot_s", "e2e_s", "prompt_tokens", "output_tokens"]
    o = measured(observed.requests)
    s = measured(simulated.requests)
    o = o.loc[o["finished"].to_numpy(dtype=bool), cols]
    s = s.loc[s["finished"].to_numpy(dtype=bool), cols]
    both = o.merge(s, on="request_id", suffixes=("_observed", "_simulated"))
    for m in ("ttft", "tpot", "e2e"):
        obs = both[f"{m}_s_observed"].to_numpy(dtype=float)
        sim = both[f"{m}_s_simulated"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            both[f"{m}_error"] = np.where(obs > 0, (sim - obs) / obs, np.nan)
    return both


def _state_at(iterations: pd.DataFrame, times: np.ndarray) -> dict[str, np.ndarray]:
    """The simulation's KV usage, running and waiting requests at each instant (summed over
    replicas; KV usage averaged over them); idle between iterations."""
    out = {name: np.zeros(len(times)) for name in ("kv_usage", "running", "waiting")}
    if not len(iterations) or not len(times):
        return out
    replicas = iterations["replica_id"].unique()
    for replica in replicas:
        it = iterations[iterations["replica_id"] == replica].sort_values("start_s", kind="stable")
        start = it["start_s"].to_numpy(dtype=float)
        end = start + it["duration_s"].to_numpy(dtype=float)
        i = np.searchsorted(start, times, side="right") - 1
        inside = (i >= 0) & (times < end[np.maximum(i, 0)])
        idx = np.maximum(i, 0)
        for name, col in (("kv_usage", "kv_usage"), ("running", "batch_size"), ("waiting", "num_waiting")):
            values = pd.to_numeric(it[col], errors="coerce").to_numpy(dtype=float)
            out[name] += np.where(inside, values[idx], 0.0)
    out["kv_usage"] /= len(replicas)
    return out


def time_series(observed: Result, simulated: Result) -> pd.DataFrame:
    """At each observed scrape: the server's series and the simulation's (see the module docstring)."""
    it = observed.iterations
    times = it["start_s"].to_numpy(dtype=float)
    sim = _state_at(simulated.iterations, times)

    def col(name: str) -> np.ndarray:
        values: np.ndarray = pd.to_numeric(it[name], errors="coerce").to_numpy(dtype=float)
        return values

    return pd.DataFrame(
        {
            "time_s": times,
            "observed_kv_usage": col("kv_usage"),
            "simulated_kv_usage": sim["kv_usage"],
            "observed_running": col("batch_size"),
            "simulated_running": sim["running"],
            "observed_waiting": col("num_waiting"),
            "simulated_waiting": sim["waiting"],
        }
    )


def series_errors(series: pd.DataFrame) -> dict[str, float]:
    """Mean absolute difference of each series where the server reported it (KV usage in points)."""
    out = {}
    for name, _label, _target in SERIES:
        o = series[f"observed_{name}"].to_numpy(dtype=float)
        s = series[f"simulated_{name}"].to_numpy(dtype=float)
        ok = np.isfinite(o) & np.isfinite(s)
        scale = 100.0 if name == "kv_usage" else 1.0
        out[f"{name}_mean_abs_diff"] = float(scale * np.mean(np.abs(o[ok] - s[ok]))) if ok.any() else math.nan
    return out


def series_figures(observed: Result, series: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
    """KV usage's time-weighted mean and peak at the scrapes, the server's and the simulation's:
    the summaries' own figures are not alike (a simulation weighs its busy iterations only, an
    observation every scrape, idle ones included)."""
    weights = pd.to_numeric(observed.iterations["duration_s"], errors="coerce").to_numpy(dtype=float)
    out: tuple[dict[str, float], dict[str, float]] = ({}, {})
    for side, figures_of in zip(("observed", "simulated"), out, strict=True):
        values = series[f"{side}_kv_usage"].to_numpy(dtype=float)
        ok = np.isfinite(values) & np.isfinite(weights) & (weights > 0)
        if ok.any():
            figures_of["kv_usage_mean"] = float(np.average(values[ok], weights=weights[ok]))
            figures_of["kv_usage_peak"] = float(values[ok].max())
    return out


def compare_results(observed: Result, simulated: Result) -> Comparison:
    """See the module docstring."""
    series = time_series(observed, simulated)
    at_scrapes = series_figures(observed, series)
    return Comparison(
        metrics=metrics_table(figures(observed) | at_scrapes[0], figures(simulated) | at_scrapes[1]),
        requests=paired_requests(observed, simulated),
        series=series,
        series_errors=series_errors(series),
    )


def format_comparison(
    cmp: Comparison, observed_label: str = "observed", simulated_label: str = "simulated"
) -> str:
    """The comparison as an aligned table (latencies in ms), then the per-request and series errors."""

    def value(v: float, key: str) -> str:
        if not math.isfinite(v):
            return "-"
        if key.endswith("_s") and not key.endswith("_per_s"):
            return f"{1e3 * v:,.1f} ms"
        if key in ("prefix_cache_hit_rate", "kv_usage_mean", "kv_usage_peak"):
            return f"{100 * v:.1f}%"
        return f"{v:,.4g}" if isinstance(v, float) and not v.is_integer() else f"{v:,.0f}"

    def error(row: Mapping[str, Any]) -> str:
        e = row["error"]
        if not math.isfinite(e):
            return "-"
        text = f"{e:+.1f} pt" if row["kind"] == "points" else f"{100 * e:+.1f}%"
        if row["within_target"] is None:
            return text
        word = "ok" if row["within_target"] else "MISS"
        sign = "pt" if row["kind"] == "points" else "%"
        limit = row["target"] if row["kind"] == "points" else 100 * row["target"]
        return f"{text}  (±{limit:g}{sign} {word})"

    rows = [("metric", observed_label, simulated_label, "error")]
    for row in cmp.metrics.to_dict(orient="records"):
        rows.append((row["label"], value(row["observed"], row["metric"]), value(row["simulated"], row["metric"]),
                     error(row)))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows]
    req = cmp.requests
    lines.append("")
    lines.append(f"per request ({len(req)} finished on both sides): median |error| " + ", ".join(
        f"{m.upper()} {100 * _median_abs(req[f'{m}_error']):.1f}%" for m in ("ttft", "tpot", "e2e")
    ))  # fmt: skip
    parts = []
    for name, label, target in SERIES:
        v = cmp.series_errors.get(f"{name}_mean_abs_diff", math.nan)
        if not math.isfinite(v):
            parts.append(f"{label}: -")
            continue
        judged = "" if target is None else f" (≤ {target:g}: {'ok' if v <= target else 'MISS'})"
        parts.append(f"{label} {v:.2f}{judged}")
    lines.append(f"time series at {len(cmp.series)} scrapes, mean |difference|: " + "; ".join(parts))
    return "\n".join(lines)


__all__ = [
    "METRICS",
    "SERIES",
    "Comparison",
    "compare_results",
    "figures",
    "format_comparison",
    "itl_gaps",
    "paired_requests",
    "time_series",
]
