"""The summary table that ``kvsim run`` prints: a pure function from summary to text.

`format_summary` groups the flat summary of `kvsim.results.result.summarize` into sections
(requests, latency percentiles in milliseconds, throughput, cache, KV, and the cluster's
routing, transfers and fleet when the summary has them) with aligned columns and units. A key that is missing or NaN shows as ``-``, so summaries written
by older versions, or runs in which nothing finished, still format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Latency rows of the table: (label, summary key stem). Keys are STEM_{p50,p90,p99,mean}_s.
LATENCY_ROWS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft"),
    ("TPOT", "tpot"),
    ("E2E", "e2e"),
    ("queueing", "queueing"),
    ("max ITL", "max_itl"),
)
LATENCY_STATS: tuple[str, ...] = ("p50", "p90", "p99", "mean")
MISSING = "-"
_INDENT = "  "


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _count(value: Any) -> str:
    v = _number(value)
    return MISSING if v is None else f"{v:,.0f}"


def _fixed(value: Any, digits: int, scale: float = 1.0) -> str:
    v = _number(value)
    return MISSING if v is None else f"{v * scale:,.{digits}f}"


def _flag(value: Any) -> str:
    return MISSING if not isinstance(value, bool) else ("YES" if value else "no")


def _percent(value: Any) -> str:
    return _fixed(value, 1, 100.0)


def _sections(s: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(title, [(label, value, unit)]) for every section except latency."""
    hits, queries = s.get("prefix_cache_hits_tokens"), s.get("prefix_cache_queries_tokens")
    # Recompute after preemption is counted apart so that it does not inflate the hit rate.
    rc_hits, rc_queries = s.get("recompute_hits_tokens"), s.get("recompute_queries_tokens")
    return [
        (
            "Requests",
            [
                ("requests", _count(s.get("num_requests")), ""),
                ("finished", _count(s.get("num_finished")), ""),
                ("unfinished", _count(s.get("num_unfinished")), ""),
                ("rejected", _count(s.get("num_rejected")), _reasons(s)),
                ("prompt tokens", _count(s.get("prompt_tokens")), ""),
                ("output tokens", _count(s.get("output_tokens")), ""),
                ("simulated time", _fixed(s.get("sim_time_s"), 2), "s"),
                ("iterations", _count(s.get("num_iterations")), ""),
            ],
        ),
        (
            "Throughput",
            [
                ("output tokens", _fixed(s.get("throughput_tokens_per_s"), 1), "tokens/s"),
                ("finished requests", _fixed(s.get("throughput_requests_per_s"), 2), "requests/s"),
                ("goodput (SLO met)", _fixed(s.get("goodput_requests_per_s"), 2), "requests/s"),
                ("SLO attainment", _percent(s.get("slo_attainment")), "%"),
                ("offered load", _fixed(s.get("offered_requests_per_s"), 2), "requests/s (arrivals)"),
                (
                    "achieved load",
                    _fixed(s.get("achieved_requests_per_s"), 2),
                    "requests/s (finished, 2nd half of the arrivals)",
                ),
                ("overloaded", _flag(s.get("overloaded")), str(s.get("overload_reason") or "")),
            ],
        ),
        (
            "Cache",
            [
                ("prefix hit rate", _percent(s.get("prefix_cache_hit_rate")), "%"),
                ("prefix hits", _count(hits), f"tokens (of {_count(queries)} queried)"),
                (
                    "recompute hits",
                    _count(rc_hits),
                    f"tokens (of {_count(rc_queries)} re-queried after preemption)",
                ),
                ("evicted blocks", _count(s.get("num_evicted_blocks")), ""),
                ("tier hits", _count(s.get("offload_hits_tokens")), "tokens (DRAM, NVMe, shared pool)"),
                ("cluster hit rate", _percent(s.get("cluster_hit_rate")), "% (GPU and tiers)"),
            ],
        ),
        (
            "KV",
            [
                ("total blocks", _count(s.get("total_kv_blocks")), ""),
                ("peak usage", _percent(s.get("kv_usage_peak")), "%"),
                ("mean usage", _percent(s.get("kv_usage_mean")), "% (time-weighted)"),
                ("token states", _percent(s.get("kv_token_usage_mean")), "% of the pool (time-weighted)"),
                ("preemptions", _count(s.get("num_preemptions")), ""),
                ("swaps", _count(s.get("num_swaps")), ""),
            ],
        ),
    ]


def _optional_sections(s: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Sections shown only when the run has them (side channel analysis, speculation, beams)."""
    out = []
    if "side_channel_num_probes" in s:
        out.append(
            (
                "Side channel (attacker probes)",
                [
                    (
                        "probes",
                        _count(s.get("side_channel_num_probes")),
                        f"({_count(s.get('side_channel_num_test'))} held out)",
                    ),
                    ("victim had sent", _percent(s.get("side_channel_victim_sent_rate")), "%"),
                    (
                        "attacker accuracy",
                        _percent(s.get("side_channel_accuracy")),
                        f"% (chance {_percent(s.get('side_channel_chance_accuracy'))}%)",
                    ),
                    (
                        "balanced accuracy",
                        _percent(s.get("side_channel_balanced_accuracy")),
                        f"% (chance 50.0 +- {_percent(s.get('side_channel_noise'))})",
                    ),
                    (
                        "KS statistic",
                        _fixed(s.get("side_channel_ks_statistic"), 3),
                        f"(5% critical {_fixed(s.get('side_channel_ks_critical_value'), 3)}, p {_fixed(s.get('side_channel_ks_p_value'), 3)})",
                    ),
                ],
            )
        )
    if s.get("spec_decode_num_drafts"):
        out.append(
            (
                "Speculative decoding",
                [
                    ("verify passes", _count(s.get("spec_decode_num_drafts")), ""),
                    ("drafts accepted", _percent(s.get("spec_decode_acceptance_rate")), "%"),
                    ("tokens per verify", _fixed(s.get("spec_decode_mean_acceptance_length"), 2), "(mean)"),
                ],
            )
        )
    if s.get("beam_num_forks") or s.get("beam_num_forks_skipped"):
        out.append(
            (
                "Beam search",
                [
                    ("forks", _count(s.get("beam_num_forks")), "(blocks shared copy-on-write)"),
                    ("forks skipped", _count(s.get("beam_num_forks_skipped")), "(beams out of lockstep)"),
                ],
            )
        )
    return out


def _reasons(s: Mapping[str, Any]) -> str:
    """'(queue_full 3, max_model_len 1)' for the rejection reasons that occurred."""
    found = [
        (key.removeprefix("num_rejected_"), v)
        for key, v in s.items()
        if key.startswith("num_rejected_") and isinstance(v, int | float) and v
    ]
    return "(" + ", ".join(f"{k} {v:,.0f}" for k, v in found) + ")" if found else ""


def _cluster_section(s: Mapping[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    return (
        "Cluster",
        [
            (
                "GPU-hours",
                _fixed(s.get("gpu_hours"), 3),
                f"({_fixed(s.get('replica_seconds'), 1)} replica-s)",
            ),
            (
                "scaling",
                _count(s.get("num_scale_ups")),
                f"up, {_count(s.get('num_scale_downs'))} down, peak {_count(s.get('replicas_peak'))} replicas",
            ),
            (
                "router expected",
                _count(s.get("router_expected_hits_tokens")),
                f"cached tokens (found {_count(s.get('router_found_hits_tokens'))})",
            ),
            ("KV transfer", _fixed(s.get("kv_transfer_mean_s"), 2, 1000.0), "ms mean"),
        ],
    )


def _title(s: Mapping[str, Any]) -> str:
    name = s.get("scenario", "scenario")
    details = []
    if "seed" in s:
        details.append(f"seed {s['seed']}")
    n = _number(s.get("num_replicas"))
    if n is not None:
        details.append(f"{n:.0f} replica{'' if n == 1 else 's'}")
    return f"{name} ({', '.join(details)})" if details else str(name)


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary as an aligned, sectioned table (no trailing newline)."""
    sections = _sections(summary)
    if "replica_seconds" in summary:
        sections.append(_cluster_section(summary))
    sections += _optional_sections(summary)
    latency = [
        (label, [_fixed(summary.get(f"{stem}_{stat}_s"), 1, 1000.0) for stat in LATENCY_STATS])
        for label, stem in LATENCY_ROWS
    ]
    label_w = max(len(label) for _, rows in sections for label, _, _ in rows)
    label_w = max(label_w, *(len(label) for label, _ in latency))
    value_w = max(len(value) for _, rows in sections for _, value, _ in rows)
    col_w = max(len(c) for c in (*LATENCY_STATS, *(v for _, vals in latency for v in vals)))

    lines = [_title(summary)]
    note = summary.get("completion_note")
    if note:
        lines.append(f"NOTE: {note}")
    ordered = [sections[0], ("Latency (ms)", []), *sections[1:]]
    for title, rows in ordered:
        lines.append("")
        if title.startswith("Latency"):
            head = "  ".join(stat.rjust(col_w) for stat in LATENCY_STATS)
            lines.append(f"{title:<{len(_INDENT) + label_w}}  {head}")
            for label, vals in latency:
                cells = "  ".join(v.rjust(col_w) for v in vals)
                lines.append(f"{_INDENT}{label:<{label_w}}  {cells}")
            continue
        lines.append(title)
        for label, value, unit in rows:
            line = f"{_INDENT}{label:<{label_w}}  {value.rjust(value_w)}"
            lines.append(f"{line} {unit}" if unit else line)
    return "\n".join(lines)
