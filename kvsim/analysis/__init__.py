"""Analyses over a run's tables (or a workload's prompts), and the figures drawn from them.

spikes.py        rolling percentiles, latency spikes and the engine events that explain them
timelines.py     KV blocks, prefix hit rate and replica queues over time; one request's Gantt timeline
runs.py          several runs side by side: SLO met, a sweep's knee, summaries compared
side_channel.py  the prefix-cache timing side channel: an attacker's probes, cross-tenant first uses
cache_curve.py   a workload's prefix reuse against a block cache of each size (no timing)
sharing.py       memory saved by sharing KV blocks (the vLLM paper's Figure 15)
plots.py         Plotly figure builders over those tables (know nothing of Streamlit)

The numbers are pure pandas/numpy over `kvsim.results` tables; sharing.py alone runs the simulator.

The public functions of spikes, timelines, runs and the side channel's exposure table are
re-exported here (``kvsim.analysis.attribute_spikes``), which the dashboard pages and the CLI
use; sharing, cache_curve and plots (plotly) are imported by their own path.
"""

from kvsim.analysis.runs import compare_summaries, find_knee, meets_slo
from kvsim.analysis.side_channel import cross_tenant_exposure, exposure_summary
from kvsim.analysis.spikes import (
    EVICTED_MISS_TOKENS,
    OFFLOAD_HIT_TOKENS,
    PREFIX_HIT_RATE,
    PREFIX_HIT_TOKENS,
    QUEUEING_SHARE,
    SPIKE_EVENT_KINDS,
    attribute_spikes,
    column,
    find_spikes,
    format_latency,
    itl_samples,
    nice_window,
    preemption_gap_samples,
    rolling_quantiles,
    run_spikes,
    summary_value,
    ttft_samples,
    window_count,
    worst_spikes,
)
from kvsim.analysis.timelines import (
    TIMELINE_LANES,
    VLLM_KV_USAGE,
    VLLM_RUNNING,
    VLLM_WAITING,
    kv_blocks_over_time,
    prefix_hit_rate_over_time,
    replica_series,
    request_timeline,
)

__all__ = [
    "EVICTED_MISS_TOKENS",
    "OFFLOAD_HIT_TOKENS",
    "PREFIX_HIT_RATE",
    "PREFIX_HIT_TOKENS",
    "QUEUEING_SHARE",
    "SPIKE_EVENT_KINDS",
    "TIMELINE_LANES",
    "VLLM_KV_USAGE",
    "VLLM_RUNNING",
    "VLLM_WAITING",
    "attribute_spikes",
    "column",
    "compare_summaries",
    "cross_tenant_exposure",
    "exposure_summary",
    "find_knee",
    "find_spikes",
    "format_latency",
    "itl_samples",
    "kv_blocks_over_time",
    "meets_slo",
    "nice_window",
    "preemption_gap_samples",
    "prefix_hit_rate_over_time",
    "replica_series",
    "request_timeline",
    "rolling_quantiles",
    "run_spikes",
    "summary_value",
    "ttft_samples",
    "window_count",
    "worst_spikes",
]
