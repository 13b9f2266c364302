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
from kvsim.results.overload import load_summary
from kvsim.scenario.schema import Scenario

if TYPE_CHECKING:
    from kvsim.core.beam_search import BeamStats
    from kvsim.core.outcome import CacheStats, SpecDecodeStats
    from kvsim.engine.fleet import ClusterStats

#: Why a request was rejected (``reject_reason``; the summary counts each as num_rejected_REASON).
REJECT_REASONS: dict[str, str] = {
    "max_model_len": "the prompt is the replica's max_model_len tokens or longer",
    "kv_capacity": "the request needs more KV blocks than the replica's whole pool",
    "prompt_budget": "without chunked prefill, the prompt exceeds max_num_batched_tokens",
    "unschedulable": "with nothing else running its next chunk still did not fit the pool "
    "(e.g. a chunk plus its sliding window): no block would ever be freed for it",
    "queue_full": "the chosen replica's waiting queue was at admission.max_waiting_per_replica",
    "cluster_queue": "the entry replicas held admission.max_cluster_waiting waiting requests",
    "estimated_wait": "the chosen replica's estimated wait exceeded admission.max_estimated_wait_s",
    "kv_usage": "the chosen replica's KV usage was at admission.max_kv_usage",
    "parent_rejected": "an earlier turn of its conversation was rejected, so it was never sent",
}
#: Link kinds whose utilisation the summary reports under network.sharing: fair_share.
LINK_KINDS = ("nic_tx", "nic_rx", "pcie_h2d", "pcie_d2h", "nvme", "fabric", "shared_pool")

#: Per-request table. ``*_s`` are times (absolute) or durations (latencies) in seconds.
REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "Request id from the workload.",
    "replica_id": "Replica that served the request (e.g. 'replica-0'); disaggregated: the decode replica.",
    "prefill_replica_id": "Disaggregated serving: the replica that prefilled the prompt ('' otherwise).",
    "tenant": "Tenant (its cache salt).",
    "priority": "Scheduling priority (lower runs first under the priority policy).",
    "arrival_s": "Arrival time.",
    "first_scheduled_s": "Start of the first iteration that computed any of its tokens.",
    "first_token_s": "End of the iteration that produced its first output token (disaggregated: "
    "the prefill replica's, before the KV transfer).",
    "decode_scheduled_s": "Disaggregated serving: start of the first iteration on the decode replica "
    "that ran it, after its KV arrived (NaN otherwise).",
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
    "evicted_miss_tokens": "Prompt tokens recomputed because their cached blocks had been evicted "
    "since they were cached (hits lost to eviction), over all admissions.",
    "num_preemptions": "Times the request was preempted.",
    "num_swaps": "Times the request was swapped out to the swap space.",
    "finished": "Whether the request produced all its output tokens.",
    "rejected": "Whether the request was rejected (never served; see reject_reason).",
    "reject_reason": "Why it was rejected (kvsim.results.result.REJECT_REASONS), '' if it was not.",
    "router_expected_hits_tokens": "Prompt tokens the router's view said the chosen replica had cached "
    "(-1: the router does not read cached prefixes); compare with prefix_cache_hits_tokens.",
    "dram_hits_tokens": "Of offload_hits_tokens: loaded from the replica's host-DRAM tier.",
    "nvme_hits_tokens": "Of offload_hits_tokens: loaded from the replica's NVMe tier.",
    "shared_pool_hits_tokens": "Of offload_hits_tokens: loaded from the cluster-wide shared KV pool.",
    "kv_transfer_s": "Disaggregated serving: from the hand-off to the KV's arrival at the decode replica.",
    "kv_transfer_queueing_s": "Of kv_transfer_s: time lost to other transfers on shared links "
    "(kv_transfer_s - the transfer alone on its path).",
    "warmup": "Sent by a benchmark client (bench_serve) before its measured run: a warm-up or the "
    "ready check; left out of the summary.",
    "client_queue_s": "Time a benchmark client held the request ready before a slot was free "
    "(vLLM's client_queue_time; arrival_s is when it was sent); 0 for other workloads.",
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

#: Request columns renamed in 0.2 (old -> new); `kvsim.results.io.load_result` reads old folders.
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
    spec: SpecDecodeStats | None = None,
    beams: BeamStats | None = None,
    cluster: ClusterStats | None = None,
    measured_start_s: float = 0.0,
) -> dict[str, Any]:
    """Flat summary of a run: counts, latency percentiles, throughput, hit rate, KV usage,
    and the cluster layer's figures (``cluster``: from `kvsim.engine.cluster.Cluster.stats`).

    A benchmark client's warm-ups (``warmup`` rows) are left out of every figure taken from
    the request table, and rates are per second of the measured run, from
    ``measured_start_s`` (when its warm-ups ended) to the end; engine figures (iterations,
    cache counters, KV usage) cover the whole run, as a server's own metrics would.
    """
    num_warmups = int(requests["warmup"].sum()) if "warmup" in requests else 0
    if num_warmups:
        requests = requests[~requests["warmup"].to_numpy(dtype=bool)]
    fin = requests[requests["finished"]]
    rejected = (
        requests["rejected"].to_numpy(dtype=bool) if "rejected" in requests else np.zeros(len(requests), bool)
    )
    num_rejected = int(rejected.sum())
    out: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "num_replicas": scenario.num_replicas,
        "num_requests": len(requests),
        "num_finished": len(fin),
        "num_unfinished": int(len(requests) - len(fin) - num_rejected),
        "num_rejected": num_rejected,
        "num_warmup_requests": num_warmups,
        "sim_time_s": float(sim_time_s),
        "measured_start_s": float(measured_start_s),
    }
    reasons = requests["reject_reason"] if "reject_reason" in requests else pd.Series([], dtype=object)
    for reason in REJECT_REASONS:
        out[f"num_rejected_{reason}"] = int((reasons == reason).sum())
    out["completion_note"] = _completion_note(out, scenario)
    for col in ("ttft_s", "tpot_s", "e2e_s", "queueing_s", "max_itl_s"):
        vals = fin[col].to_numpy(dtype=float)
        vals = vals[~np.isnan(vals)]
        stem = col[:-2]
        out[f"{stem}_mean_s"] = float(vals.mean()) if len(vals) else float("nan")
        for q in (50, 90, 99):
            out[f"{stem}_p{q}_s"] = _pct(vals, q)
    out["itl_mean_s"] = _mean_itl(fin)
    measured = sim_time_s - measured_start_s
    span = measured if measured > 0 else float("nan")
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
    out["evicted_miss_tokens"] = int(requests["evicted_miss_tokens"].sum())
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
    out.update(_spec_decode_summary(spec))
    out.update(_tenant_summary(requests))
    out["beam_num_forks"] = beams.num_forks if beams is not None else 0
    out["beam_num_forks_skipped"] = beams.num_forks_skipped if beams is not None else 0
    out.update(_cluster_summary(requests, out, cluster))
    # Offered vs achieved load and the overload flag (kvsim.results.overload).
    out.update(load_summary(requests, events))
    for old, new in SUMMARY_ALIASES.items():
        out[old] = out[new]
    return out


def _mean_itl(finished: pd.DataFrame) -> float:
    """The mean of all inter-token gaps of the finished requests, as vLLM's ``bench serve``
    averages them (``serve.py``, ``calculate_metrics``: every request's gaps in one list):
    sum of (finish - first token) over sum of (output tokens - 1). One gap per token: a
    speculative verify step's tokens reach vLLM's client as one chunk, so its mean ITL is
    about the mean acceptance length times this one."""
    out_tokens = finished["output_tokens"].to_numpy(dtype=np.int64)
    many = out_tokens > 1
    gaps = int((out_tokens[many] - 1).sum())
    if not gaps:
        return float("nan")
    spans = (
        finished["finish_s"].to_numpy(dtype=float)[many]
        - finished["first_token_s"].to_numpy(dtype=float)[many]
    )
    return float(spans.sum() / gaps)


def _spec_decode_summary(spec: SpecDecodeStats | None) -> dict[str, Any]:
    """Speculative decoding's counters, vLLM's names; zeros without speculation."""
    drafts = spec.num_drafts if spec is not None else 0
    draft_tokens = spec.num_draft_tokens if spec is not None else 0
    accepted = spec.num_accepted_tokens if spec is not None else 0
    return {
        "spec_decode_num_drafts": drafts,
        "spec_decode_num_draft_tokens": draft_tokens,
        "spec_decode_num_accepted_tokens": accepted,
        "spec_decode_acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        "spec_decode_mean_acceptance_length": 1 + accepted / drafts if drafts else 0.0,
    }


def _tenant_summary(requests: pd.DataFrame) -> dict[str, Any]:
    """With two tenants or more, each tenant's prefix hit rate (hit over prompt tokens, on
    admission) and TTFT p50: what one tier's cache does to another's (none with one tenant)."""
    tenants = sorted(set(requests["tenant"]))
    if len(tenants) < 2:
        return {}
    out: dict[str, Any] = {}
    for tenant in tenants:
        own = requests[requests["tenant"] == tenant]
        prompt = int(own["prompt_tokens"].sum())
        hits = int(own["prefix_cache_hits_tokens"].sum())
        ttft = own.loc[own["finished"], "ttft_s"].to_numpy(dtype=float)
        out[f"tenant_{tenant}_prefix_cache_hit_rate"] = hits / prompt if prompt else 0.0
        out[f"tenant_{tenant}_ttft_p50_s"] = _pct(ttft[~np.isnan(ttft)], 50)
    return out


def _completion_note(out: dict[str, Any], scenario: Scenario) -> str:
    """'' normally; what went wrong when requests were sent and none finished."""
    if out["num_finished"] or not out["num_requests"]:
        return ""
    if out["num_rejected"] == out["num_requests"]:
        counts = [f"{r} {out[f'num_rejected_{r}']}" for r in REJECT_REASONS if out[f"num_rejected_{r}"]]
        return "no request can finish: every one was rejected (" + ", ".join(counts) + ")"
    if scenario.sim.max_time_s is not None:
        return f"no request finished before sim.max_time_s ({scenario.sim.max_time_s} s)"
    return "no request finished"


def _column_sum(requests: pd.DataFrame, column: str) -> int:
    return int(requests[column].sum()) if column in requests else 0


def _cluster_summary(
    requests: pd.DataFrame, out: dict[str, Any], cluster: ClusterStats | None
) -> dict[str, Any]:
    """Routing, tiers, transfers, links and fleet figures (zeros or NaN where they do not apply)."""
    nan = float("nan")
    s: dict[str, Any] = {}
    expected = requests.get("router_expected_hits_tokens")
    if expected is not None and (expected >= 0).any():
        served = ~requests["rejected"] if "rejected" in requests else True
        seen = requests[(expected >= 0) & served]
        diff = seen["router_expected_hits_tokens"].to_numpy(np.int64) - seen[
            "prefix_cache_hits_tokens"
        ].to_numpy(np.int64)
        s["router_expected_hits_tokens"] = int(seen["router_expected_hits_tokens"].sum())
        s["router_found_hits_tokens"] = int(seen["prefix_cache_hits_tokens"].sum())
        s["router_overestimated_tokens"] = int(diff[diff > 0].sum())
        s["router_underestimated_tokens"] = int(-diff[diff < 0].sum())
        s["router_mispredicted_requests"] = int((diff != 0).sum())
    else:
        for key in ("expected_hits", "found_hits", "overestimated", "underestimated"):
            s[f"router_{key}_tokens"] = 0
        s["router_mispredicted_requests"] = 0
    for kind in ("dram", "nvme", "shared_pool"):
        s[f"{kind}_hits_tokens"] = _column_sum(requests, f"{kind}_hits_tokens")
    queries = out["prefix_cache_queries_tokens"]
    tier_first = cluster.first_admission_tier_hits_tokens if cluster is not None else 0
    s["cluster_hit_rate"] = (out["prefix_cache_hits_tokens"] + tier_first) / queries if queries else 0.0
    writes = cluster.tier_write_bytes if cluster is not None else {}
    for kind in ("dram", "nvme", "shared_pool"):
        s[f"{kind}_write_bytes"] = float(writes.get(kind, 0.0))
    transfer = (
        requests["kv_transfer_s"].dropna() if "kv_transfer_s" in requests else pd.Series([], dtype=float)
    )
    queueing = (
        requests["kv_transfer_queueing_s"].dropna() if "kv_transfer_queueing_s" in requests else transfer
    )
    s["num_kv_transfers"] = len(transfer)
    s["kv_transfer_mean_s"] = float(transfer.mean()) if len(transfer) else nan
    s["kv_transfer_p99_s"] = _pct(transfer.to_numpy(float), 99)
    s["kv_transfer_queueing_mean_s"] = float(queueing.mean()) if len(queueing) else nan
    util = cluster.link_utilization if cluster is not None else {}
    for kind in LINK_KINDS:
        mean, peak = util.get(kind, (nan, nan))
        s[f"link_{kind}_utilization_mean"] = mean
        s[f"link_{kind}_utilization_max"] = peak
    if cluster is not None:
        s["replica_seconds"] = cluster.replica_seconds
        s["gpu_hours"] = cluster.gpu_seconds / 3600.0
        s["num_scale_ups"], s["num_scale_downs"] = cluster.num_scale_ups, cluster.num_scale_downs
        s["replicas_peak"] = cluster.replicas_peak
    else:  # a table made by hand: a fixed fleet, GPUs per replica unknown
        s["replica_seconds"] = out["num_replicas"] * out["sim_time_s"]
        s["gpu_hours"] = nan
        s["num_scale_ups"] = s["num_scale_downs"] = 0
        s["replicas_peak"] = out["num_replicas"]
    return s
