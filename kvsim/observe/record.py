"""An observation as a kvsim `Result`: the same tables and summary a simulation has.

    requests     one row per request of the workload, every column of
                 `kvsim.results.result.REQUEST_COLUMNS`; what a client cannot see is marked missing:
                 NaN (first_scheduled_s, decode_scheduled_s, queueing_s, kv_transfer_*) or
                 <NA> in nullable integer columns (recompute_hits_tokens, offload_hits_tokens,
                 evicted_miss_tokens, num_preemptions, num_swaps, the tier hits);
                 prefix_cache_hits_tokens is the server's usage.prompt_tokens_details.
                 cached_tokens (<NA> when it reports none). Plus `OBSERVED_REQUEST_COLUMNS`.
    iterations   one row per scrape of /metrics (not per engine step: a client sees the
                 server's state only when it asks), every column of ITERATION_COLUMNS:
                 batch_size = running requests, num_waiting, kv_usage, kv_blocks_used/free
                 from the KV pool the server reports; duration_s = the time to the next
                 scrape, so that time-weighted means hold. Plus `OBSERVED_ITERATION_COLUMNS`.
    events       one preempt_recompute row per preemption the server counted between two
                 scrapes (request -1: the counter does not say whose)
    summary      `kvsim.results.result.summarize` over these tables, then the server's own counters
                 where it has them (prefix-cache queries and hits, preemptions, engine
                 steps, KV blocks), NaN for what nothing measured, and `observed_*` keys.

A summary with ``observed: true`` is an observation; `kvsim compare` and the dashboard's
Compare page put it beside a simulation of the same scenario.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kvsim.core.outcome import CacheStats
from kvsim.observe.metrics import Sample, cache_geometry, counter_deltas, found_quantities
from kvsim.observe.outcome import STATUSES, Record
from kvsim.request import RequestSpec
from kvsim.results.result import EVENT_COLUMNS, ITERATION_COLUMNS, REQUEST_COLUMNS, Result, summarize
from kvsim.scenario.schema import Scenario

#: The replica id of the observed server (one endpoint: a cluster behind it is one "replica").
SERVER_REPLICA = "replica-0"

#: Request columns an observation adds (docs/results.md).
OBSERVED_REQUEST_COLUMNS: dict[str, str] = {
    "observed_status": "How the request ended: " + ", ".join(STATUSES) + " (kvsim.observe.client.STATUSES).",
    "error": "What went wrong, as the server or the connection said it ('' when ok).",
    "requested_output_tokens": "Output tokens asked for (max_tokens; min_tokens too where supported).",
    "scheduled_s": "When the scenario's clock had the request sent (NaN: never released).",
    "send_lag_s": "arrival_s - scheduled_s: how late the client sent it (a busy client, retries).",
    "num_attempts": "Attempts made (retries after a refused connection or a busy status).",
    "http_status": "HTTP status of the last attempt (<NA>: no response).",
    "token_times_s": "Arrival time of each output token (tokens of one event share its time).",
}
#: Iteration (scrape) columns an observation adds: counters' growth since the previous scrape.
OBSERVED_ITERATION_COLUMNS: dict[str, str] = {
    "server_prompt_tokens": "Prompt tokens the server took in since the previous scrape (cached ones included).",
    "server_generation_tokens": "Tokens the server generated since the previous scrape.",
    "server_num_steps": "Engine steps since the previous scrape (vllm:iteration_tokens_total).",
    "server_prefix_cache_queries_tokens": "Prefix-cache queries since the previous scrape, tokens.",
    "server_prefix_cache_hits_tokens": "Prefix-cache hits since the previous scrape, tokens.",
    "server_num_preemptions": "Preemptions since the previous scrape.",
}
#: Request columns a client cannot observe, as nullable integers (<NA>).
UNOBSERVED_INT_COLUMNS = (
    "recompute_hits_tokens",
    "offload_hits_tokens",
    "evicted_miss_tokens",
    "num_preemptions",
    "num_swaps",
    "dram_hits_tokens",
    "nvme_hits_tokens",
    "shared_pool_hits_tokens",
)
#: Statuses of requests the server never served (the simulation's rejections).
REFUSED = ("http_error", "connection_error", "parent_failed")


@dataclass
class Collected:
    """Everything an observation gathered (filled in by `kvsim.observe.runner`)."""

    records: dict[int, Record] = field(default_factory=dict)
    #: Requests never sent and why (parent_failed).
    dropped: dict[int, str] = field(default_factory=dict)
    #: When the scenario's clock released each request: (at_s, ready_s).
    schedule: dict[int, tuple[float, float]] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    probe: Sample | None = None
    scrape_errors: int = 0
    last_scrape_error: str = ""
    wall_s: float = 0.0

    def num_over(self) -> int:
        """Requests that are over: answered, failed or dropped."""
        return len(self.records) + len(self.dropped)


def _itl_max(times: list[float]) -> float:
    return float(np.diff(times).max()) if len(times) > 1 else math.nan


def requests_frame(
    specs: Iterable[RequestSpec], collected: Collected, warmups: Iterable[int] = ()
) -> pd.DataFrame:
    """The request table of an observation (see the module docstring), ordered by request id."""
    warm = set(warmups)
    rows = []
    for spec in sorted(specs, key=lambda s: s.request_id):
        rid = spec.request_id
        rec = collected.records.get(rid)
        at_s, ready_s = collected.schedule.get(rid, (math.nan, math.nan))
        status = collected.dropped.get(rid) or (rec.status if rec is not None else "not_sent")
        sent = rec is not None and rec.num_attempts > 0
        times = rec.token_times_s if rec is not None else []
        finished = status == "ok"
        arrival = rec.send_s if sent and rec is not None else math.nan
        first = times[0] if times else math.nan
        finish = times[-1] if finished else math.nan
        n_out = len(times)
        refused = status in REFUSED and not times
        rows.append(
            {
                "request_id": rid,
                "replica_id": SERVER_REPLICA if sent else "",
                "prefill_replica_id": "",
                "tenant": spec.tenant,
                "priority": spec.priority,
                "arrival_s": arrival,
                "first_scheduled_s": math.nan,
                "first_token_s": first,
                "decode_scheduled_s": math.nan,
                "finish_s": finish,
                "queueing_s": math.nan,
                "ttft_s": first - arrival,
                "tpot_s": (finish - first) / (n_out - 1) if finished and n_out > 1 else math.nan,
                "max_itl_s": _itl_max(times),
                "e2e_s": finish - arrival,
                "prompt_tokens": rec.prompt_tokens
                if rec is not None and rec.prompt_tokens
                else spec.prompt_tokens,
                "output_tokens": n_out,
                "prefix_cache_hits_tokens": rec.cached_tokens if rec is not None else None,
                "finished": finished,
                "rejected": refused,
                "reject_reason": ("parent_rejected" if status == "parent_failed" else status)
                if refused
                else "",
                "router_expected_hits_tokens": -1,
                "kv_transfer_s": math.nan,
                "kv_transfer_queueing_s": math.nan,
                "warmup": rid in warm,
                "client_queue_s": at_s - ready_s if math.isfinite(ready_s) and math.isfinite(at_s) else 0.0,
                "observed_status": status,
                "error": rec.error if rec is not None else STATUSES[status],
                "requested_output_tokens": spec.output_tokens,
                "scheduled_s": at_s,
                "send_lag_s": arrival - at_s,
                "num_attempts": rec.num_attempts if rec is not None else 0,
                "http_status": rec.http_status if rec is not None else None,
                "token_times_s": [float(t) for t in times],
            }
        )
    df = pd.DataFrame(rows)
    for col in (*UNOBSERVED_INT_COLUMNS,):
        df[col] = pd.array([pd.NA] * len(df), dtype="Int64")
    df["prefix_cache_hits_tokens"] = pd.array(list(df["prefix_cache_hits_tokens"]), dtype="Int64")
    df["http_status"] = pd.array(list(df["http_status"]), dtype="Int64")
    for col in ("request_id", "priority", "prompt_tokens", "output_tokens", "router_expected_hits_tokens"):
        df[col] = df[col].astype(np.int64)
    for col in ("requested_output_tokens", "num_attempts"):
        df[col] = df[col].astype(np.int64)
    df["finished"] = df["finished"].astype(bool)
    df["rejected"] = df["rejected"].astype(bool)
    df["warmup"] = df["warmup"].astype(bool)
    return df[[*REQUEST_COLUMNS, *OBSERVED_REQUEST_COLUMNS]]


def _delta(samples: list[Sample], i: int, quantity: str) -> float:
    """A counter's growth from scrape i - 1 to scrape i (NaN when either lacks it)."""
    if i == 0:
        return math.nan
    a, b = samples[i - 1].values.get(quantity), samples[i].values.get(quantity)
    if a is None or b is None:
        return math.nan
    return b - a if b >= a else b


def iterations_frame(samples: list[Sample], num_blocks: int | None, interval_s: float) -> pd.DataFrame:
    """One row per scrape (see the module docstring)."""
    rows = []
    for i, s in enumerate(samples):
        nxt = samples[i + 1].time_s if i + 1 < len(samples) else s.time_s + interval_s
        usage = s.values.get("kv_usage", math.nan)
        used = round(usage * num_blocks) if num_blocks and math.isfinite(usage) else None
        rows.append(
            {
                "replica_id": SERVER_REPLICA,
                "start_s": s.time_s,
                "duration_s": max(nxt - s.time_s, 0.0),
                "batch_size": s.values.get("num_running"),
                "num_prefill_seqs": None,
                "prefill_tokens": None,
                "decode_tokens": None,
                "num_waiting": s.values.get("num_waiting"),
                "kv_blocks_used": used,
                "kv_blocks_cached": None,
                "kv_blocks_free": num_blocks - used if used is not None and num_blocks else None,
                "kv_usage": usage,
                "kv_tokens_stored": None,
                "kv_token_usage": math.nan,
                "server_prompt_tokens": _delta(samples, i, "prompt_tokens"),
                "server_generation_tokens": _delta(samples, i, "generation_tokens"),
                "server_num_steps": _delta(samples, i, "num_steps"),
                "server_prefix_cache_queries_tokens": _delta(samples, i, "prefix_cache_queries_tokens"),
                "server_prefix_cache_hits_tokens": _delta(samples, i, "prefix_cache_hits_tokens"),
                "server_num_preemptions": _delta(samples, i, "num_preemptions"),
            }
        )
    columns = [*ITERATION_COLUMNS, *OBSERVED_ITERATION_COLUMNS]
    df = pd.DataFrame(rows, columns=columns)
    for col in (
        "batch_size",
        "num_prefill_seqs",
        "prefill_tokens",
        "decode_tokens",
        "num_waiting",
        "kv_blocks_used",
        "kv_blocks_cached",
        "kv_blocks_free",
        "kv_tokens_stored",
    ):
        df[col] = pd.array([None if v is None or v != v else int(v) for v in df[col]], dtype="Int64")
    for col in ("start_s", "duration_s", "kv_usage", "kv_token_usage", *OBSERVED_ITERATION_COLUMNS):
        df[col] = df[col].astype(float)
    df["replica_id"] = df["replica_id"].astype(object)
    return df


def events_frame(samples: list[Sample]) -> pd.DataFrame:
    """One preempt_recompute event per preemption counted between two scrapes."""
    rows = []
    for i, s in enumerate(samples):
        n = _delta(samples, i, "num_preemptions")
        if math.isfinite(n) and n > 0:
            rows += [(s.time_s, SERVER_REPLICA, "preempt_recompute", -1, 0, 0)] * int(n)
    df = pd.DataFrame(rows, columns=list(EVENT_COLUMNS))
    return df.astype({"time_s": float, "request_id": np.int64, "num_blocks": np.int64, "num_bytes": np.int64})


def build_result(
    scenario: Scenario,
    specs: list[RequestSpec],
    collected: Collected,
    *,
    info: Mapping[str, Any],
    workload_summary: Mapping[str, Any],
    warmups: Iterable[int] = (),
    measured_start_s: float = 0.0,
    scrape_interval_s: float = 0.5,
) -> Result:
    """The observation as a `Result` (see the module docstring)."""
    samples = collected.samples
    geometry = cache_geometry([*samples, *([collected.probe] if collected.probe else [])])
    num_blocks = geometry.get("num_gpu_blocks")
    requests = requests_frame(specs, collected, warmups)
    iterations = iterations_frame(samples, num_blocks, scrape_interval_s)
    events = events_frame(samples)
    deltas = counter_deltas(samples)
    ends = [t for rec in collected.records.values() for t in rec.token_times_s[-1:]]
    end_s = max(ends) if ends else collected.wall_s
    measured = measured_start_s if math.isfinite(measured_start_s) else end_s
    served = requests[~requests["warmup"].to_numpy(bool)]
    reported = requests["prefix_cache_hits_tokens"].notna().to_numpy(bool)
    if "prefix_cache_queries_tokens" in deltas and "prefix_cache_hits_tokens" in deltas:
        queries, hits = deltas["prefix_cache_queries_tokens"], deltas["prefix_cache_hits_tokens"]
    elif reported.any():  # from the usage the server reported per request
        queries = float(requests.loc[reported, "prompt_tokens"].sum())
        hits = float(requests["prefix_cache_hits_tokens"].sum())
    else:
        queries = hits = math.nan
    cache = CacheStats(
        prefix_cache_queries_tokens=int(queries) if math.isfinite(queries) else 0,
        prefix_cache_hits_tokens=int(hits) if math.isfinite(hits) else 0,
    )
    summary = summarize(
        scenario,
        requests,
        iterations.fillna({"num_waiting": 0}),  # a server without the gauge: never "loaded"
        events,
        cache=cache,
        total_kv_blocks=int(num_blocks or 0),
        sim_time_s=float(end_s),
        measured_start_s=float(measured),
    )
    nan = math.nan
    summary.update(workload_summary)
    summary.update(
        {
            "num_preemptions": deltas.get("num_preemptions", nan),
            "num_iterations": deltas.get("num_steps", nan),
            "num_evicted_blocks": nan,
            "total_kv_blocks": num_blocks if num_blocks else nan,
            "recompute_queries_tokens": nan,
            "recompute_hits_tokens": nan,
            "offload_hits_tokens": nan,
            "evicted_miss_tokens": nan,
            "num_swaps": nan,
            "kv_token_usage_mean": nan,
            "kv_token_usage_loaded_mean": nan,
        }
    )
    if not math.isfinite(queries):
        summary.update(
            prefix_cache_queries_tokens=nan, prefix_cache_hits_tokens=nan, prefix_cache_hit_rate=nan
        )
    if not samples or "kv_usage" not in found_quantities(samples):
        summary.update(kv_usage_peak=nan, kv_usage_mean=nan)
    statuses = served["observed_status"].value_counts()
    attempts = served["num_attempts"].to_numpy(np.int64)
    summary.update(
        {
            "observed": True,
            **info,
            "observed_num_failed": int(len(served) - statuses.get("ok", 0)),
            **{f"observed_num_{s}": int(statuses.get(s, 0)) for s in STATUSES if s != "ok"},
            "observed_num_retries": int(np.maximum(attempts - 1, 0).sum()),
            "observed_send_lag_p99_s": _pct(served["send_lag_s"], 99),
            "observed_num_scrapes": len(samples),
            "observed_num_scrape_errors": collected.scrape_errors,
            "observed_metrics": ",".join(found_quantities(samples)),
            **_server_means(deltas),
            "server_block_size": geometry.get("block_size", nan),
            "server_num_gpu_blocks": num_blocks if num_blocks else nan,
        }
    )
    summary["prefix_hit_rate"] = summary["prefix_cache_hit_rate"]
    return Result(scenario=scenario, requests=requests, iterations=iterations, events=events, summary=summary)


def _server_means(deltas: Mapping[str, float]) -> dict[str, float]:
    """The server's own mean TTFT, E2E and queueing over the observation (its histograms' sums
    over counts; vLLM times them from the request's arrival in its API process, so the
    client's TTFT minus the server's is what the HTTP front adds)."""
    out = {}
    for name in ("ttft", "e2e", "queue_time"):
        total, count = deltas.get(f"{name}_sum_s"), deltas.get(f"{name}_count")
        out[f"server_{name}_mean_s"] = total / count if total is not None and count else math.nan
    return out


def _pct(values: pd.Series, q: float) -> float:
    v = values.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q)) if len(v) else math.nan


def is_observation(summary: Mapping[str, Any]) -> bool:
    """Whether a result's summary is an observation's (`kvsim observe`), not a simulation's."""
    return summary.get("observed") is True


__all__ = [
    "OBSERVED_ITERATION_COLUMNS",
    "OBSERVED_REQUEST_COLUMNS",
    "Collected",
    "build_result",
    "events_frame",
    "is_observation",
    "iterations_frame",
    "requests_frame",
]
