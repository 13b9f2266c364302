"""The summary table: sections, units, milliseconds, alignment and missing values."""

from __future__ import annotations

from kvsim.results.report import format_summary

SUMMARY = {
    "scenario": "default",
    "seed": 0,
    "num_replicas": 1,
    "num_requests": 2000,
    "num_finished": 1998,
    "num_unfinished": 2,
    "prompt_tokens": 3_072_000,
    "output_tokens": 512_000,
    "sim_time_s": 250.0,
    "num_iterations": 12345,
    "ttft_p50_s": 0.1234,
    "ttft_p90_s": 0.5,
    "ttft_p99_s": 1.25,
    "ttft_mean_s": 0.2,
    "tpot_p50_s": 0.012,
    "tpot_p90_s": 0.015,
    "tpot_p99_s": 0.02,
    "tpot_mean_s": 0.013,
    "e2e_p50_s": 3.0,
    "e2e_p90_s": 6.0,
    "e2e_p99_s": 12.5,
    "e2e_mean_s": 4.0,
    "queueing_p50_s": 0.0,
    "queueing_p90_s": 0.01,
    "queueing_p99_s": 0.2,
    "queueing_mean_s": 0.02,
    "max_itl_p50_s": 0.03,
    "max_itl_p90_s": 0.05,
    "max_itl_p99_s": 0.48,
    "max_itl_mean_s": 0.04,
    "throughput_tokens_per_s": 2048.0,
    "throughput_requests_per_s": 7.992,
    "goodput_requests_per_s": 7.5,
    "slo_attainment": 0.9375,
    "prefix_cache_queries_tokens": 3_072_000,
    "prefix_cache_hits_tokens": 1_024_000,
    "prefix_cache_hit_rate": 1_024_000 / 3_072_000,
    "recompute_queries_tokens": 0,
    "recompute_hits_tokens": 0,
    "num_evicted_blocks": 17,
    "total_kv_blocks": 30000,
    "kv_usage_peak": 0.871,
    "kv_usage_mean": 0.602,
    "num_preemptions": 12,
    "num_swaps": 0,
}


def test_sections_in_order_with_title() -> None:
    lines = format_summary(SUMMARY).splitlines()
    assert lines[0] == "default (seed 0, 1 replica)"
    titles = [line.split()[0] for line in lines if line and not line.startswith(" ")]
    assert titles == ["default", "Requests", "Latency", "Throughput", "Cache", "KV"]


def test_latency_in_milliseconds_with_percentile_columns() -> None:
    lines = format_summary(SUMMARY).splitlines()
    head = next(line for line in lines if line.startswith("Latency (ms)"))
    assert head.split()[2:] == ["p50", "p90", "p99", "mean"]
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.startswith("  ")}
    assert rows["TTFT"] == ["123.4", "500.0", "1,250.0", "200.0"]
    assert rows["TPOT"] == ["12.0", "15.0", "20.0", "13.0"]
    assert rows["E2E"] == ["3,000.0", "6,000.0", "12,500.0", "4,000.0"]
    # Every latency cell ends in the same column as its header.
    lat = [line for line in lines if line.startswith("  ") and line.split()[0] in ("TTFT", "TPOT", "E2E")]
    assert {len(line) for line in lat} == {len(head)}


def _rows(text: str) -> dict[str, str]:
    """Label -> value and unit, for rows of the single-value sections (two spaces split them)."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("  "):
            label, _, rest = line.strip().partition("  ")
            rows[label] = " ".join(rest.split())
    return rows


def test_values_units_and_percentages() -> None:
    rows = _rows(format_summary(SUMMARY))
    assert rows["requests"] == "2,000"
    assert rows["simulated time"] == "250.00 s"
    assert rows["output tokens"] == "2,048.0 tokens/s"  # Throughput's row comes after Requests'
    assert rows["finished requests"] == "7.99 requests/s"
    assert rows["SLO attainment"] == "93.8 %"
    assert rows["prefix hit rate"] == "33.3 %"
    assert rows["prefix hits"] == "1,024,000 tokens (of 3,072,000 queried)"
    assert rows["recompute hits"] == "0 tokens (of 0 re-queried after preemption)"
    assert rows["peak usage"] == "87.1 %"
    assert rows["mean usage"] == "60.2 % (time-weighted)"
    assert rows["total blocks"] == "30,000"


def test_single_values_are_right_aligned_in_one_column() -> None:
    lines = format_summary(SUMMARY).splitlines()
    value_ends = set()
    for line in lines:
        label = line.strip().partition("  ")[0]
        if line.startswith("  ") and label not in ("TTFT", "TPOT", "E2E", "queueing", "max ITL"):
            value = line.strip().partition("  ")[2].split()[0]
            value_ends.add(line.index(value, len(label) + 2) + len(value))
    assert len(value_ends) == 1


def test_missing_and_nan_values_show_a_dash() -> None:
    text = format_summary({"scenario": "empty", "num_requests": 0, "ttft_p99_s": float("nan")})
    lines = text.splitlines()
    assert lines[0] == "empty"
    ttft = next(line for line in lines if line.startswith("  TTFT"))
    assert ttft.split() == ["TTFT", "-", "-", "-", "-"]
    rows = _rows(text)
    assert rows["requests"] == "0"
    assert rows["peak usage"] == "- %"
    assert rows["prefix hits"] == "- tokens (of - queried)"


def test_plural_replicas() -> None:
    assert format_summary(dict(SUMMARY, num_replicas=4)).splitlines()[0] == "default (seed 0, 4 replicas)"


def test_speculation_and_beam_sections_only_when_they_ran() -> None:
    assert "Speculative decoding" not in format_summary(SUMMARY | {"spec_decode_num_drafts": 0})
    text = format_summary(
        SUMMARY
        | {
            "spec_decode_num_drafts": 4760,
            "spec_decode_acceptance_rate": 0.438,
            "spec_decode_mean_acceptance_length": 2.744,
            "beam_num_forks": 1939,
            "beam_num_forks_skipped": 3,
        }
    )
    lines = [" ".join(line.split()) for line in text.splitlines()]
    at = lines.index("Speculative decoding")
    assert lines[at : at + 4] == [
        "Speculative decoding",
        "verify passes 4,760",
        "drafts accepted 43.8 %",
        "tokens per verify 2.74 (mean)",
    ]
    at = lines.index("Beam search")
    assert lines[at + 1 : at + 3] == [
        "forks 1,939 (blocks shared copy-on-write)",
        "forks skipped 3 (beams out of lockstep)",
    ]
