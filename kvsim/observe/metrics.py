"""The server's Prometheus metrics: which ones `kvsim observe` reads, and reading one scrape.

Each scrape of ``/metrics`` becomes one `Sample`: the gauges as they were and the counters
so far. vLLM's names are read, and SGLang's where it has the same quantity:

    quantity                      vLLM (0.32)                           SGLang
    running requests              vllm:num_requests_running             sglang:num_running_reqs
    waiting requests              vllm:num_requests_waiting             sglang:num_queue_reqs
    KV-cache usage (0..1)         vllm:kv_cache_usage_perc              sglang:token_usage
                                  (vllm:gpu_cache_usage_perc before 0.10)
    prefix-cache queries, hits    vllm:prefix_cache_queries_total,      -
      (tokens, counters)          vllm:prefix_cache_hits_total
    preemptions (counter)         vllm:num_preemptions_total            -
    prompt, generated tokens      vllm:prompt_tokens_total,             sglang:prompt_tokens_total,
                                  vllm:generation_tokens_total          sglang:generation_tokens_total
    engine steps (counter)        vllm:iteration_tokens_total_count     -
    the server's own TTFT, E2E    vllm:time_to_first_token_seconds,     -
      and queueing (histograms:   vllm:e2e_request_latency_seconds,
      sums and counts)            vllm:request_queue_time_seconds
    KV pool (labels)              vllm:cache_config_info{block_size, num_gpu_blocks}

Gauges and counters of several engines (data parallel, one ``engine`` label each) are
summed, the KV usage averaged. The text is parsed by Prometheus' own parser
(``prometheus_client.parser``), after the lines of other metrics are dropped, so that a
scrape of a large exposition costs little time in the process that timestamps tokens.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

#: Quantity -> the sample names that carry it, first found wins.
METRICS: dict[str, tuple[str, ...]] = {
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "prefix_cache_queries_tokens": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits_tokens": ("vllm:prefix_cache_hits_total",),
    "num_preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "num_steps": ("vllm:iteration_tokens_total_count",),
    "ttft_sum_s": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "e2e_sum_s": ("vllm:e2e_request_latency_seconds_sum",),
    "e2e_count": ("vllm:e2e_request_latency_seconds_count",),
    "queue_time_sum_s": ("vllm:request_queue_time_seconds_sum",),
    "queue_time_count": ("vllm:request_queue_time_seconds_count",),
}
#: Quantities that are gauges (the others are counters: differences between scrapes count).
GAUGES = ("num_running", "num_waiting", "kv_usage")
#: Quantities averaged over engines instead of summed.
AVERAGED = ("kv_usage",)
#: The info metric holding the KV pool's geometry, and the labels read from it.
CACHE_INFO = "vllm:cache_config_info"
CACHE_INFO_LABELS = ("block_size", "num_gpu_blocks")

_WANTED = tuple(sorted({name for names in METRICS.values() for name in names} | {CACHE_INFO}))
#: Family names as they appear in ``# TYPE`` lines (a counter's without ``_total``).
_FAMILY_PREFIXES = tuple(sorted({n.removesuffix("_total").removesuffix("_count") for n in _WANTED}))


@dataclass
class Sample:
    """One scrape: when (seconds since the observation started) and what it read."""

    time_s: float
    values: dict[str, float] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)


def relevant_lines(text: str) -> str:
    """The exposition's lines that concern the metrics read here (``# TYPE``/``# HELP`` and
    samples), in their order: everything Prometheus' parser needs for them."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2].startswith(_FAMILY_PREFIXES):
                keep.append(line)
        elif line.startswith(_WANTED):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_exposition(text: str, time_s: float) -> Sample:
    """Read one ``/metrics`` text into a `Sample` (`ValueError` when it is not Prometheus' text format)."""
    from prometheus_client.parser import text_string_to_metric_families  # the observe extra

    sums: dict[str, list[float]] = {}
    info: dict[str, str] = {}
    for family in text_string_to_metric_families(relevant_lines(text)):
        for sample in family.samples:
            name = sample.name
            if name == CACHE_INFO or (name == CACHE_INFO.removesuffix("_info") and family.type == "info"):
                info.update({k: str(v) for k, v in sample.labels.items() if k in CACHE_INFO_LABELS})
                continue
            sums.setdefault(name, []).append(float(sample.value))
    values: dict[str, float] = {}
    for quantity, names in METRICS.items():
        for name in names:
            if name in sums:
                found = sums[name]
                values[quantity] = sum(found) / len(found) if quantity in AVERAGED else sum(found)
                break
    return Sample(time_s, values, info)


def counter_deltas(samples: list[Sample]) -> dict[str, float]:
    """Each counter's growth from the first sample to the last (a counter reset counts from 0)."""
    out: dict[str, float] = {}
    for quantity in METRICS:
        if quantity in GAUGES:
            continue
        series = [s.values[quantity] for s in samples if quantity in s.values]
        if len(series) < 2:
            continue
        total = 0.0
        for before, after in itertools.pairwise(series):
            total += after - before if after >= before else after
        out[quantity] = total
    return out


def found_quantities(samples: list[Sample]) -> list[str]:
    """The quantities some sample read, in `METRICS` order."""
    seen = {q for s in samples for q in s.values}
    return [q for q in METRICS if q in seen]


def cache_geometry(samples: list[Sample]) -> dict[str, Any]:
    """The KV pool the server reported (``block_size``, ``num_gpu_blocks``), as integers."""
    for s in samples:
        out = {}
        for key in CACHE_INFO_LABELS:
            try:
                out[key] = int(s.info[key])
            except (KeyError, ValueError):
                continue
        if out:
            return out
    return {}


__all__ = [
    "METRICS",
    "Sample",
    "cache_geometry",
    "counter_deltas",
    "found_quantities",
    "parse_exposition",
    "relevant_lines",
]
