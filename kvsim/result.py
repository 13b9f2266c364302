"""What a simulation returns: tidy tables and a summary.

`Result` holds four things, all plain data:

- ``requests``   one row per request (columns: `REQUEST_COLUMNS`)
- ``iterations`` one row per engine iteration, all replicas (columns: `ITERATION_COLUMNS`)
- ``events``     one row per notable event (columns: `EVENT_COLUMNS`)
- ``summary``    a flat dict of numbers (keys: see `summarize`)

and the resolved ``scenario``. Times are simulated seconds from the start of the run.
Latencies of unfinished requests are NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kvsim.core.outcome import EventKind
from kvsim.scenario.schema import Scenario

if TYPE_CHECKING:
    from kvsim.core.outcome import CacheStats
from kvsim.overload import load_summary

#: Per-request table. ``*_s`` are times (absolute) or durations (latencies) in seconds.
REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "Request id from the workload.",
    "replica_id": "Replica that served the request (e.g. 'replica-0'); disaggregated: the decode replica.",
    "prefill_replica_id": "Disaggregated serving: the replica that prefilled the prompt ('' otherwise).",
    "tenant": "Tenant (its cache salt).",
    "priority": "Scheduling priority (lower runs first under the priority policy).",
    "arrival_s": "Arrival time.",
    "first_scheduled_s": "Start of the first iteration that computed any of its tokens.",
    "first_token_s": "End of the iteration that produced its first output token.",
    "finish_s": "End of the iteration that produced its last output token.",
    "queueing_s": "first_scheduled_s - arrival_s.",
    "ttft_s": "first_token_s - arrival_s (time to first token).",
    "tpot_s": "Mean time per output token after the first: (finish - first_token) / (output - 1).",
    "max_itl_s": "Longest gap between two consecutive output tokens (inter-token latency).",
    "e2e_s": "finish_s - arrival_s.",
    "prompt_tokens": "Prompt length.",
    "output_tokens": "Output tokens produced (equals the requested length when finished).",
    "prefix_cache_hits_tokens": "Prompt tokens found in the GPU prefix cache at first admission.",
    "recompute_hits_tokens": "Tokens found in the cache when re-admitted after preemption by recompute.",
    "offload_hits_tokens": "Tokens loaded from the offload tier (CPU offload) instead of recomputed.",
    "num_preemptions": "Times the request was preempted.",
    "num_swaps": "Times the request was swapped out to the swap space.",
    "finished": "Whether the request produced all its output tokens.",
}

#: Per-iteration table.
ITERATION_COLUMNS: dict[str, str] = {
    "replica_id": "Replica that ran the iteration.",
    "start_s": "Start time.",
    "duration_s": "Iteration time (cost model plus swap transfers).",
    "batch_size": "Requests computing tokens in the iteration.",
    "num_prefill_seqs": "Requests prefilling (a chunk of) their prompt.",
    "prefill_tokens": "Prompt tokens computed.",
    "decode_tokens": "Decode tokens computed (one per decoding request).",
    "num_waiting": "Requests waiting (queued, preempted or swapped out) after scheduling.",
    "kv_blocks_used": "Blocks referenced by running requests.",
    "kv_blocks_cached": "Free blocks that still hold a cached prefix (hittable, evictable).",
    "kv_blocks_free": "Free blocks (including the cached ones).",
    "kv_usage": "kv_blocks_used / total blocks.",
    "kv_tokens_stored": "Tokens whose KV the running requests hold once the iteration is done "
    "(their computed tokens; a shared prefix counts once per request).",
    "kv_token_usage": "kv_tokens_stored / (total blocks x block_size): the share of the KV pool "
    "holding token states (the vLLM paper's measure of memory waste).",
}

#: Event log.
EVENT_COLUMNS: dict[str, str] = {
    "time_s": "When it happened (start of the iteration that caused it).",
    "replica_id": "Where.",
    "kind": " | ".join(k.value for k in EventKind) + " (kvsim.core.outcome.EventKind).",
    "request_id": "Request concerned (-1 for pool-level events such as evictions).",
    "num_blocks": "Blocks involved.",
    "num_bytes": "Bytes moved or freed (all tensor-parallel shards together).",
}


#: Old summary keys kept for one release (0.2) beside their new names; removed in 0.3.
SUMMARY_ALIASES: dict[str, str] = {"prefix_hit_rate": "prefix_cache_hit_rate"}

#: Request columns renamed in 0.2 (old -> new); `kvsim.io.load_result` reads old folders.
RENAMED_REQUEST_COLUMNS: dict[str, str] = {
    "prefix_hit_tokens": "prefix_cache_hits_tokens",
    "recompute_hit_tokens": "recompute_hits_tokens",
    "offload_hit_tokens": "offload_hits_tokens",
}


@dataclass(frozen=True)
class Result:
    """Output of `kvsim.run`: per-request, per-iteration and event tables plus a summary."""

    scenario: Scenario
    requests: pd.DataFrame
    iterations: pd.DataFrame
    events: pd.DataFrame
    summary: dict[str, Any]


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(
    scenario: Scenario,
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    events: pd.DataFrame,
    *,
    cache: CacheStats,
    total_kv_blocks: int,
    sim_time_s: float,
) -> dict[str, Any]:
    """Flat summary of a run: counts, latency percentiles, throughput, hit rate, KV usage."""
    fin = requests[requests["finished"]]
    out: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "num_replicas": scenario.num_replicas,
        "num_requests": len(requests),
        "num_finished": len(fin),
        "num_unfinished": int(len(requests) - len(fin)),
        "sim_time_s": float(sim_time_s),
    }
    for col in ("ttft_s", "tpot_s", "e2e_s", "queueing_s", "max_itl_s"):
        vals = fin[col].to_numpy(dtype=float)
        vals = vals[~np.isnan(vals)]
        stem = col[:-2]
        out[f"{stem}_mean_s"] = float(vals.mean()) if len(vals) else float("nan")
        for q in (50, 90, 99):
            out[f"{stem}_p{q}_s"] = _pct(vals, q)
    span = sim_time_s if sim_time_s > 0 else float("nan")
    out_tokens = int(requests["output_tokens"].sum())
    out["output_tokens"] = out_tokens
    out["prompt_tokens"] = int(requests["prompt_tokens"].sum())
    out["throughput_tokens_per_s"] = out_tokens / span
    out["throughput_requests_per_s"] = len(fin) / span
    ok = fin[(fin["ttft_s"] <= scenario.slo.ttft_s) & ~(fin["tpot_s"] > scenario.slo.tpot_s)]
    out["goodput_requests_per_s"] = len(ok) / span
    out["slo_attainment"] = len(ok) / len(requests) if len(requests) else float("nan")
    queries, hits = cache.prefix_cache_queries_tokens, cache.prefix_cache_hits_tokens
    out["prefix_cache_queries_tokens"] = int(queries)
    out["prefix_cache_hits_tokens"] = int(hits)
    out["prefix_cache_hit_rate"] = hits / queries if queries else 0.0
    out["recompute_queries_tokens"] = int(cache.recompute_queries_tokens)
    out["recompute_hits_tokens"] = int(cache.recompute_hits_tokens)
    out["offload_hits_tokens"] = int(requests["offload_hits_tokens"].sum())
    out["num_preemptions"] = int(requests["num_preemptions"].sum())
    out["num_swaps"] = int(requests["num_swaps"].sum())
    out["num_evicted_blocks"] = int(events.loc[events["kind"] == "evict", "num_blocks"].sum())
    out["num_iterations"] = len(iterations)
    out["total_kv_blocks"] = int(total_kv_blocks)
    if len(iterations):
        usage = iterations["kv_usage"].to_numpy(dtype=float)
        dur = iterations["duration_s"].to_numpy(dtype=float)
        tokens = iterations["kv_token_usage"].to_numpy(dtype=float)
        weighted = dur.sum() > 0
        out["kv_usage_peak"] = float(usage.max())
        out["kv_usage_mean"] = float(np.average(usage, weights=dur)) if weighted else float(usage.mean())
        out["kv_token_usage_mean"] = (
            float(np.average(tokens, weights=dur)) if weighted else float(tokens.mean())
        )
        loaded = iterations["num_waiting"].to_numpy() > 0
        out["kv_token_usage_loaded_mean"] = (
            float(np.average(tokens[loaded], weights=dur[loaded])) if dur[loaded].sum() > 0 else float("nan")
        )
    else:
        out["kv_usage_peak"] = 0.0
        out["kv_usage_mean"] = 0.0
        out["kv_token_usage_mean"] = 0.0
        out["kv_token_usage_loaded_mean"] = float("nan")
    # Offered vs achieved load and the overload flag (kvsim.overload).
    out.update(load_summary(requests, events))
    for old, new in SUMMARY_ALIASES.items():
        out[old] = out[new]
    return out
