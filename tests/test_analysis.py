"""Analyses on small hand-built tables: every expected figure below is computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kvsim import analysis


def _iterations(rows: list[tuple], prefill: list[int] | None = None) -> pd.DataFrame:
    cols = [
        "replica_id",
        "start_s",
        "duration_s",
        "decode_tokens",
        "num_waiting",
        "kv_blocks_used",
        "kv_blocks_cached",
        "kv_blocks_free",
    ]
    out = pd.DataFrame(rows, columns=cols)
    out["prefill_tokens"] = prefill if prefill is not None else 0
    return out


def _events(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(
        rows, columns=["time_s", "replica_id", "kind", "request_id", "num_blocks", "num_bytes"]
    )


def test_rolling_quantiles_windows_and_linear_interpolation() -> None:
    # Samples at t=0.5,1.5,2.5,3.5 with values 1,2,3,4; window 2 s, step 1 s.
    out = analysis.rolling_quantiles(
        [0.5, 1.5, 2.5, 3.5], [1, 2, 3, 4], window_s=2, step_s=1, quantiles=(0.5,)
    )
    assert out["time_s"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert out["count"].tolist() == [1, 2, 2, 2]
    # (t-2, t]: {1}, {1,2}, {2,3}, {3,4}
    assert out["p50"].tolist() == [1.0, 1.5, 2.5, 3.5]


def test_rolling_quantiles_empty_window_is_nan_and_weights_count() -> None:
    out = analysis.rolling_quantiles([0.5, 2.5], [1.0, 9.0], window_s=1, quantiles=(0.5, 0.99))
    assert out["count"].tolist() == [1, 0, 1]
    assert math.isnan(out["p50"].iloc[1])
    # Weighted: 3 samples of 0.01 s and 1 of 0.5 s -> the median is 0.01, p99 is 0.5.
    w = analysis.rolling_quantiles([1, 1], [0.01, 0.5], window_s=1, weights=[3, 1])
    assert (w["p50"].iloc[0], w["p99"].iloc[0]) == (0.01, 0.5)


def test_rolling_quantiles_rejects_bad_window() -> None:
    with pytest.raises(ValueError, match="window_s must be > 0"):
        analysis.rolling_quantiles([1], [1], window_s=0)


def test_itl_samples_use_decode_iterations_only() -> None:
    it = _iterations([("r-0", 0.0, 0.2, 0, 0, 1, 0, 9), ("r-0", 0.2, 0.05, 4, 0, 2, 0, 8)])
    s = analysis.itl_samples(it)
    assert s.to_dict("list") == {"time_s": [0.25], "itl_s": [0.05], "weight": [4.0]}


def test_ttft_samples_skip_requests_without_first_token() -> None:
    req = pd.DataFrame({"first_token_s": [3.0, np.nan, 1.0], "ttft_s": [0.5, np.nan, 0.25]})
    assert analysis.ttft_samples(req).to_dict("list") == {"time_s": [1.0, 3.0], "ttft_s": [0.25, 0.5]}


def test_find_spikes_merges_consecutive_windows() -> None:
    # 1-s windows; windows 3 and 4 (t in (2,4]) are over 0.3 s, window 6 alone too.
    t = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    v = [0.1, 0.1, 0.4, 0.6, 0.1, 0.35]
    sp = analysis.find_spikes(t, v, metric="TTFT", window_s=1, threshold_s=0.3)
    assert sp[["start_s", "end_s", "peak_time_s", "peak_s", "num_samples"]].values.tolist() == [
        [2.0, 4.0, 4.0, 0.6, 2],
        [5.0, 6.0, 6.0, 0.35, 1],
    ]
    assert sp["metric"].tolist() == ["TTFT", "TTFT"]
    assert sp["statistic"].tolist() == ["p99", "p99"]
    worst = analysis.find_spikes(t, v, metric="ITL", window_s=3, threshold_s=0.5, quantile=1.0)
    assert worst[["statistic", "start_s", "end_s", "peak_s"]].values.tolist() == [["max", 3.0, 6.0, 0.6]]


def test_preemption_gap_samples_place_the_gap_after_the_first_preemption() -> None:
    requests = pd.DataFrame(
        {"request_id": [0, 1, 2], "max_itl_s": [0.02, 1.5, 4.0], "finish_s": [5.0, 20.0, 11.0]}
    )
    events = _events(
        [
            (3.0, "r-0", "preempt_recompute", 1, 8, 0),
            (9.0, "r-0", "preempt_recompute", 1, 8, 0),
            (8.0, "r-0", "swap_out", 2, 8, 4096),
            (8.5, "r-0", "evict", -1, 2, 0),
        ]
    )
    gaps = analysis.preemption_gap_samples(requests, events)
    # Request 1: first preempted at 3 s, gap 1.5 s -> 4.5 s. Request 2: 8 + 4 = 12 > finish 11.
    assert gaps.to_dict("list") == {"time_s": [4.5, 11.0], "itl_s": [1.5, 4.0], "request_id": [1, 2]}


def test_attribute_spikes_counts_events_in_the_span_the_slow_samples_lived() -> None:
    spikes = pd.DataFrame(
        [
            {
                "metric": "ITL",
                "statistic": "p99",
                "start_s": 310.0,
                "end_s": 312.0,
                "peak_time_s": 312.0,
                "peak_s": 0.48,
                "num_samples": 9,
            }
        ]
    )
    # The span is [310 - 0.48, 312]; the event at 309 is outside, the one at 309.6 inside.
    events = _events(
        [(309.0, "r-0", "preempt_recompute", 1, 4, 0)]
        + [(309.6 + 0.1 * i, "r-0", "preempt_recompute", i, 4, 0) for i in range(14)]
        + [(311.0, "r-0", "evict", -1, 3, 0), (311.5, "r-0", "evict", -1, 2, 0)]
    )
    iterations = _iterations([("r-0", 300.0, 1.0, 4, 5, 10, 0, 0), ("r-0", 311.0, 0.48, 4, 37, 10, 0, 0)])
    requests = pd.DataFrame({"arrival_s": [0.0, 100.0, 200.0, 400.0], "prompt_tokens": [100, 100, 100, 100]})
    out = analysis.attribute_spikes(spikes, requests, iterations, events)
    row = out.iloc[0]
    assert row["num_preempt_recompute"] == 14
    assert row["num_evicted_blocks"] == 5
    assert row["max_waiting"] == 37
    assert row["cause"] == "preemption (recompute)"
    # No prefix hits in the run (the table has none): the evicted blocks could not have been hit.
    assert (
        row["explanation"] == "p99 ITL 480 ms at t=312 s: 14 preemptions by recompute; queue up to 37 waiting"
    )


def test_attribute_spikes_detects_bursts_of_long_prompts_and_says_when_nothing_found() -> None:
    spikes = pd.DataFrame(
        [
            {
                "metric": "TTFT",
                "statistic": "p99",
                "start_s": 10.0,
                "end_s": 11.0,
                "peak_time_s": 11.0,
                "peak_s": 1.0,
                "num_samples": 1,
            },
            {
                "metric": "TTFT",
                "statistic": "p99",
                "start_s": 50.0,
                "end_s": 51.0,
                "peak_time_s": 51.0,
                "peak_s": 2.5,
                "num_samples": 1,
            },
        ]
    )
    # One request per 10 s on average, but 4 arrive in [9, 11] with 5x longer prompts.
    arrivals = [0.0, 20.0, 30.0, 40.0, 60.0, 70.0, 80.0, 90.0, 100.0, 9.5, 10.0, 10.5, 10.9]
    prompts = [100] * 9 + [500] * 4
    requests = pd.DataFrame({"arrival_s": arrivals, "prompt_tokens": prompts})
    out = analysis.attribute_spikes(spikes, requests, _iterations([]), _events([]))
    assert out["cause"].tolist() == ["arrival burst", "none found"]
    assert out["explanation"].iloc[0] == (
        "p99 TTFT 1.00 s at t=11 s: arrival burst 2.0 req/s (run mean 0.1); "
        "long prompts: mean 500 tokens (run mean 223)"
    )
    assert out["explanation"].iloc[1].endswith("no preemption, swap, eviction, queue or burst in the span")


def test_attribute_spikes_names_the_prefill_the_decodes_waited_for() -> None:
    spikes = pd.DataFrame(
        [
            {
                "metric": "ITL",
                "statistic": "p99",
                "start_s": 10.0,
                "end_s": 11.0,
                "peak_time_s": 11.0,
                "peak_s": 0.19,
                "num_samples": 3,
            }
        ]
    )
    # Three iterations live in [9.81, 11]; the slowest (190 ms) ran a 4,096-token chunk.
    iterations = _iterations(
        [
            ("r-0", 9.9, 0.01, 12, 0, 10, 0, 0),
            ("r-0", 10.0, 0.19, 12, 0, 10, 0, 0),
            ("r-0", 10.19, 0.01, 12, 0, 10, 0, 0),
            ("r-0", 20.0, 0.5, 0, 0, 10, 0, 0),
        ],
        prefill=[0, 4096, 16, 8192],
    )
    requests = pd.DataFrame({"arrival_s": [0.0, 30.0], "prompt_tokens": [100, 100]})
    row = analysis.attribute_spikes(spikes, requests, iterations, _events([])).iloc[0]
    assert row["cause"] == "prefill in the batch"
    assert (row["slowest_iteration_s"], row["slowest_iteration_prefill_tokens"]) == (0.19, 4096)
    assert row["explanation"] == (
        "p99 ITL 190 ms at t=11 s: slowest iteration (190 ms) computed 4,096 prefill tokens beside 12 decodes"
    )


def _overloaded_requests() -> pd.DataFrame:
    """10 req/s arrive for 20 s, 5 req/s finish; request i waits 0.1 i s, then 0.5 s to its first token."""
    n = 200
    arrival = np.arange(n) * 0.1
    queueing = 0.1 * np.arange(n)  # the queue grows by 0.1 s per request
    first_token = arrival + queueing + 0.5
    finish = 0.2 * np.arange(1, n + 1)  # one every 0.2 s: 5 req/s
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": 100,
            "first_scheduled_s": arrival + queueing,
            "first_token_s": first_token,
            "queueing_s": queueing,
            "ttft_s": first_token - arrival,
            "finish_s": finish,
            "finished": True,
            "prefix_cache_hits_tokens": 0,
        }
    )


def _spike(metric: str, start: float, end: float, peak: float) -> pd.DataFrame:
    row = {"metric": metric, "statistic": "p99", "start_s": start, "end_s": end, "peak_time_s": end,
           "peak_s": peak, "num_samples": 10}  # fmt: skip
    return pd.DataFrame([row])


def test_a_ttft_spike_under_sustained_overload_is_put_down_to_queueing_with_its_numbers() -> None:
    requests = _overloaded_requests()
    # Evictions in the span, but the run has no prefix hits: not blamed.
    events = _events([(30.0 + i, "r-0", "evict", -1, 1000, 0) for i in range(5)])
    iterations = _iterations([("r-0", 30.0, 0.1, 4, 90, 10, 0, 0)])
    # Spike (30, 35] with p99 TTFT 20 s: the span is [10, 35].
    row = analysis.attribute_spikes(_spike("TTFT", 30.0, 35.0, 20.0), requests, iterations, events).iloc[0]
    assert row["cause"] == "queueing"
    # First tokens (at 0.2 i + 0.5 s) in [30, 35]: requests 148..172, which arrived at 14.8..17.2 s.
    # There, 25 arrivals and 13 finishes (0.2 k, k = 74..86) in 2.4 s; backlog 149 - 74 -> 173 - 86.
    assert (row["queue_from_s"], row["queue_to_s"]) == pytest.approx((14.8, 17.2))
    assert (row["queue_arrival_rate_per_s"], row["completion_rate_per_s"]) == pytest.approx(
        (25 / 2.4, 13 / 2.4)
    )
    assert (row["backlog_start_requests"], row["backlog_end_requests"]) == (75, 87)
    assert row["queued_share_of_ttft"] == pytest.approx(16 / 16.5)  # the median, request 160: 16 s of 16.5 s
    assert row["num_evicted_blocks"] == 5000
    # Evictions in the span, but the run has no prefix hits: not blamed, not even mentioned.
    assert row["explanation"] == (
        "p99 TTFT 20.0 s at t=35 s: queueing: 10.4 req/s arrived, 5.4 req/s finished while they arrived "
        "(t=14.8-17.2 s), backlog 75 -> 87; 97% of TTFT spent queued; queue up to 90 waiting"
    )


def test_a_queue_built_up_before_the_slow_requests_arrived_is_named_so() -> None:
    # 100 requests at t=0, then one a second (t=1..40); served FIFO two a second.
    arrival = np.r_[np.zeros(100), np.arange(1.0, 41.0)]
    finish = 0.5 * np.arange(2, 142)
    first_token = finish - 0.4
    requests = pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": 100,
            "first_scheduled_s": first_token - 0.1,
            "first_token_s": first_token,
            "queueing_s": first_token - 0.1 - arrival,
            "ttft_s": first_token - arrival,
            "finish_s": finish,
            "finished": True,
        }
    )
    row = analysis.attribute_spikes(_spike("TTFT", 51.0, 70.0, 49.6), requests, _iterations([]), _events([]))
    row = row.iloc[0]
    # Request k gets its first token at 0.5 k + 0.6 s: k = 101..138 in [51, 70], arrived at 2..39 s.
    # There: 38 arrivals and 75 finishes (0.5 j, j = 4..78) in 37 s; backlog 102 - 3 -> 139 - 77.
    assert row["explanation"] == (
        "p99 TTFT 49.6 s at t=70 s: queueing: the queue had built up before: 1.0 req/s arrived, 2.0 req/s "
        "finished while they arrived (t=2-39 s), backlog 99 -> 62; 100% of TTFT spent queued"
    )


def test_eviction_is_blamed_only_for_hits_it_cost() -> None:
    requests = _overloaded_requests().assign(queueing_s=0.0)  # no queueing: other causes only
    events = _events([(12.0, "r-0", "evict", -1, 40, 0)])
    spike = _spike("TTFT", 12.0, 13.0, 0.6)
    empty = _iterations([])

    def cause(req: pd.DataFrame) -> tuple[str, str]:
        row = analysis.attribute_spikes(spike, req, empty, events).iloc[0]
        return row["cause"], row["explanation"]

    # The engine's column: the 9 requests admitted in [11.4, 13] (at 0.2 i s) missed 16 tokens each.
    misses = np.where(requests["first_scheduled_s"].between(11.4, 13.0), 16, 0)
    assert cause(requests.assign(evicted_miss_tokens=misses)) == (
        "eviction",
        "p99 TTFT 600 ms at t=13 s: 40 cached blocks evicted; 144 prompt tokens missed because their "
        "blocks had been evicted",
    )
    assert cause(requests.assign(evicted_miss_tokens=0))[0] == "none found"  # evictions that cost nothing
    assert cause(requests)[0] == "none found"  # no column, no prefix reuse in the run
    # No column, prefix reuse: never a cause (a dip in the hit rate can be longer unique prompts),
    # but the evictions are told as context, with the hit rates.
    hits = np.where(requests["first_scheduled_s"].between(11.4, 13.0), 10, 50)
    assert cause(requests.assign(prefix_cache_hits_tokens=hits)) == (
        "none found",
        "p99 TTFT 600 ms at t=13 s: no preemption, swap, eviction, queue or burst in the span; 40 cached blocks "
        "evicted (whether any was needed again is not recorded; prefix hit rate of the span's admissions 10%, "
        "run 48%)",
    )


def test_kv_blocks_over_time_single_replica_keeps_iterations() -> None:
    it = _iterations([("r-0", 0.0, 0.1, 0, 0, 2, 1, 8), ("r-0", 0.1, 0.1, 1, 0, 5, 0, 5)])
    kv = analysis.kv_blocks_over_time(it)
    assert kv.to_dict("list") == {
        "time_s": [0.0, 0.1],
        "used": [2, 5],
        "cached": [1, 0],
        "empty": [7, 5],
        "total": [10, 10],
    }


def test_kv_blocks_over_time_sums_replicas_on_a_grid() -> None:
    it = _iterations(
        [("a", 0.0, 1, 0, 0, 1, 0, 9), ("b", 0.5, 1, 0, 0, 4, 2, 6), ("a", 1.0, 1, 0, 0, 3, 1, 7)]
    )
    kv = analysis.kv_blocks_over_time(it, num_points=3)  # grid 0, 0.5, 1.0
    # b has not started at t=0: its first state is used (4 used) - the grid clips to it.
    assert kv["used"].tolist() == [5, 5, 7]
    assert kv["cached"].tolist() == [2, 2, 3]
    assert kv["total"].tolist() == [20, 20, 20]


def test_prefix_hit_rate_over_time() -> None:
    req = pd.DataFrame(
        {
            "first_scheduled_s": [0.5, 0.7, 1.5, np.nan],
            "prompt_tokens": [100, 300, 200, 50],
            "prefix_cache_hits_tokens": [0, 200, 100, 0],
        }
    )
    out = analysis.prefix_hit_rate_over_time(req, window_s=1)
    assert out["time_s"].tolist() == [1.0, 2.0]
    assert out["num_requests"].tolist() == [2, 1]
    assert out["hit_rate"].tolist() == [0.5, 0.5]


def test_find_knee_on_load_and_capacity_axes() -> None:
    assert analysis.find_knee([4, 1, 2, 8], [False, True, True, True], load_axis=True) == 2.0
    assert analysis.find_knee([1, 2], [False, True], load_axis=True) is None
    assert analysis.find_knee([0.5, 0.7, 0.9], [False, True, True], load_axis=False) == 0.7


def test_meets_slo_treats_nan_as_a_miss() -> None:
    pts = pd.DataFrame({"ttft_p99_s": [1.0, 3.0, np.nan], "tpot_p99_s": [0.05, 0.05, 0.05]})
    assert analysis.meets_slo(pts, ttft_slo_s=2, tpot_slo_s=0.1).tolist() == [True, False, False]


def test_compare_summaries_relative_differences() -> None:
    table = analysis.compare_summaries(
        {"a": {"ttft_p99_s": 2.0, "num_preemptions": 0}, "b": {"ttft_p99_s": 1.5, "num_preemptions": 4}},
        ["ttft_p99_s", "num_preemptions", "missing"],
    )
    assert table["b vs a (%)"].iloc[0] == -25.0
    assert math.isnan(table["b vs a (%)"].iloc[1])  # base is 0
    assert math.isnan(table.loc["missing", "a"])


def test_nice_window() -> None:
    assert analysis.nice_window(300.0) == 5.0  # 300 / 60 = 5
    assert analysis.nice_window(250.0) == 5.0  # 4.17 -> 5
    assert analysis.nice_window(61.0) == 2.0  # 1.02 -> 2
    assert analysis.nice_window(3.0) == 0.05
    assert analysis.nice_window(0.0) == 1.0


def test_cross_tenant_exposure_lists_first_uses_per_tenant_in_arrival_order() -> None:
    from kvsim.analysis import cross_tenant_exposure, exposure_summary
    from kvsim.request import RequestSpec, Segment

    def s(rid: int, first: int) -> RequestSpec:
        return RequestSpec(
            request_id=rid, arrival_s=rid, prompt=(Segment(first, 32), Segment(100 + rid, 4)), output_tokens=1
        )

    specs = [s(0, 7), s(1, 7), s(2, 7), s(3, 8)]
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "tenant": ["a", "b", "a", "b"],
            "arrival_s": [0.0, 1.0, 2.0, 3.0],
            "prefix_cache_hits_tokens": [0, 32, 32, 0],
            "ttft_s": [0.05, 0.01, 0.01, 0.05],
        }
    )
    ex = cross_tenant_exposure(requests, specs)
    # a's first 7 (0), b's first 7 (1, hit: only a could have put it there), b's first 8 (3).
    assert ex["request_id"].tolist() == [0, 1, 3] and ex["hit"].tolist() == [False, True, False]
    summary = exposure_summary(ex)
    assert summary["first_uses"] == 3 and summary["first_use_hit_rate"] == pytest.approx(1 / 3)
    assert (summary["ttft_p50_hit_s"], summary["ttft_p50_miss_s"]) == (0.01, 0.05)
