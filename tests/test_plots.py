"""Plot builders on small hand-built tables: expected traces, values and axis titles (with units)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from kvsim import analysis
from kvsim.analysis import plots


def _requests() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": [0.0, 1.0, 2.0, 3.0],
            "first_scheduled_s": [0.0, 1.0, 2.0, 3.5],
            "first_token_s": [0.2, 1.2, 2.9, 4.0],
            "ttft_s": [0.2, 0.2, 0.9, 1.0],
            "tpot_s": [0.01, 0.02, 0.03, np.nan],
            "e2e_s": [1.0, 2.0, 3.0, 4.0],
            "prompt_tokens": [100, 100, 100, 100],
            "prefix_cache_hits_tokens": [0, 50, 50, 100],
            "request_id": [0, 1, 2, 3],
            "max_itl_s": [0.05, 0.9, 0.05, np.nan],
            "finish_s": [1.0, 3.0, 4.0, 5.0],
        }
    )


def _iterations() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "replica_id": ["r-0"] * 4,
            "start_s": [0.0, 1.0, 2.0, 3.0],
            "duration_s": [0.2, 0.02, 0.5, 0.02],
            "decode_tokens": [0, 2, 3, 1],
            "num_waiting": [0, 0, 4, 1],
            "kv_blocks_used": [2, 4, 9, 5],
            "kv_blocks_cached": [0, 1, 0, 2],
            "kv_blocks_free": [8, 6, 1, 5],
        }
    )


def _events() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "time_s": [2.0, 2.0, 2.1],
            "replica_id": ["r-0"] * 3,
            "kind": ["preempt_recompute", "evict", "evict"],
            "request_id": [1, -1, -1],
            "num_blocks": [3, 1, 1],
            "num_bytes": [0, 0, 0],
        }
    )


def _names(fig: go.Figure) -> list[str]:
    return [t.name for t in fig.data]


def _axis_titles(fig: go.Figure, axis: str) -> list[str]:
    layout = fig.to_plotly_json()["layout"]
    return [v["title"]["text"] for k, v in sorted(layout.items()) if k.startswith(axis) and "title" in v]


def test_latency_spikes_figure_traces_axes_and_spike_shading() -> None:
    spikes = pd.DataFrame([{"start_s": 2.0, "end_s": 3.0}])
    fig = plots.latency_spikes_figure(
        _requests(), _iterations(), _events(), window_s=1.0, spikes=spikes, ttft_slo_s=0.5, itl_slo_s=0.1
    )
    assert _names(fig) == [
        "TTFT (per request)",
        "TTFT rolling p50",
        "TTFT rolling p99",
        "ITL rolling p50",
        "ITL rolling p99",
        "gap of a preempted request",
        "preempt_recompute",
        "evict",
        "requests waiting",
    ]
    assert list(fig.data[0].y) == [0.2, 0.2, 0.9, 1.0]
    evict = next(t for t in fig.data if t.name == "evict")
    # Both evictions fall in the window [2, 3): one square in the evict lane, the largest.
    assert (list(evict.x), list(evict.y), list(evict.customdata)) == ([2.5], ["evict"], [2])
    assert list(evict.marker.size) == [20.0]
    preempt = next(t for t in fig.data if t.name == "preempt_recompute")
    assert list(preempt.marker.size) == pytest.approx([4 + 16 * np.sqrt(1 / 2)])
    assert _axis_titles(fig, "yaxis") == ["TTFT (s)", "ITL, log", "events", "requests"]
    slo = next(s for s in fig.layout.shapes if s.type == "line" and s.yref == "y2")
    label = next(a for a in fig.layout.annotations if a.text == "TPOT SLO 100 ms")
    assert (slo.y0, label.y, label.yref) == (100.0, 2.0, "y2")  # a label on a log axis takes log10
    # ITL from 20 ms to a 900-ms gap and the 100-ms SLO: decades 10 ms .. 1 s, labelled with units only.
    assert fig.layout.yaxis2.type == "log" and list(fig.layout.yaxis2.range) == [1, 3]
    assert list(fig.layout.yaxis2.ticktext) == ["10 ms", "100 ms", "1 s"]
    assert "request %{customdata}" in fig.data[0].hovertemplate and list(fig.data[0].customdata) == [
        0,
        1,
        2,
        3,
    ]
    assert _axis_titles(fig, "xaxis") == ["simulated time (s)"]
    assert len([s for s in fig.layout.shapes if s.type == "rect"]) == 4  # the spike, on each row
    assert {a.text for a in fig.layout.annotations} >= {"TTFT SLO 0.5 s", "TPOT SLO 100 ms"}


def test_throughput_capacity_figure_marks_slo_and_knee() -> None:
    pts = pd.DataFrame(
        {
            "rate_per_s": [4.0, 2.0, 8.0],
            "offered_requests_per_s": [4.0, 2.0, 8.0],
            "achieved_requests_per_s": [4.0, 2.0, 5.0],
            "ttft_p99_s": [0.2, 0.02, 20.0],
            "tpot_p99_s": [0.04, 0.03, 0.2],
            "overloaded": [False, False, True],
        }
    )
    fig = plots.throughput_capacity_figure(
        pts, x="rate_per_s", x_title="request rate (req/s)", ttft_slo_s=2.0, tpot_slo_s=0.1, knee_x=4.0
    )
    assert _names(fig) == ["offered (arrivals)", "achieved (finished)", "p99 TTFT", "p99 TPOT",
                           "overloaded (backlog growing)", "crosses the TTFT SLO", "crosses the TPOT SLO"]  # fmt: skip
    assert list(fig.data[0].x) == [2.0, 4.0, 8.0]  # sorted by x
    assert list(fig.data[1].y) == [2.0, 4.0, 5.0]
    assert list(fig.data[3].y) == [30.0, 40.0, 200.0]  # TPOT in ms
    assert list(fig.data[4].x) == [8.0]  # the overloaded point, drawn as a cross on the TTFT row
    # Between 4 (0.2 s) and 8 (20 s) the TTFT crosses 2 s halfway in log10: at 6. TPOT: linear, 40 -> 200 ms.
    assert list(fig.data[5].x) == pytest.approx([6.0])
    assert list(fig.data[6].x) == pytest.approx([4 + 4 * 60 / 160])
    assert _axis_titles(fig, "yaxis") == ["requests/s", "p99 TTFT, log", "p99 TPOT (ms)"]
    assert fig.layout.yaxis2.type == "log" and list(fig.layout.yaxis2.ticktext) == ["10 ms", "100 ms", "1 s",
                                                                                     "10 s", "100 s"]  # fmt: skip
    assert _axis_titles(fig, "xaxis") == ["request rate (req/s)"]
    assert fig.layout.title.text.endswith("(knee: 4)")  # in the title: never over a subplot title
    assert {"SLO 2 s", "SLO 100 ms"} <= {a.text for a in fig.layout.annotations}
    assert "req/s" in fig.data[1].hovertemplate and "ms" in fig.data[3].hovertemplate


def test_decade_ticks_label_whole_decades_only() -> None:
    ticks = plots.decade_ticks([0.005, 0.1, 0.12], plots.seconds_label)
    assert ticks["range"] == [-3, 0] and ticks["ticktext"] == ["1 ms", "10 ms", "100 ms", "1 s"]
    assert plots.decade_ticks([3.0, 7.0], plots.count_label)["ticktext"] == ["1", "10"]  # within one decade
    assert plots.decade_ticks([16, 512, 65536], plots.count_label)["ticktext"][-2:] == ["10k", "100k"]
    assert plots.decade_ticks([float("nan"), 0.0], plots.count_label) == {"type": "log"}


def test_kv_figures() -> None:
    kv = analysis.kv_blocks_over_time(_iterations())
    fig = plots.kv_blocks_figure(kv)
    assert _names(fig) == ["used by running requests", "cached (free, hittable)", "free and empty"]
    assert list(fig.data[2].y) == [8, 5, 1, 3]
    assert fig.layout.yaxis.title.text == "KV blocks (count)"
    hr = analysis.prefix_hit_rate_over_time(_requests(), window_s=2.0)
    fig = plots.prefix_hit_rate_figure(hr, overall=0.5)
    # [0, 2] admits requests at 0, 1, 2: 100 hit of 300 tokens; (2, 4] the one at 3.5: 100 of 100.
    assert list(fig.data[0].y) == pytest.approx([100 / 3, 100.0])
    assert fig.layout.yaxis.title.text == "prefix hit rate (% of prompt tokens)"
    curve = pd.DataFrame({"capacity_blocks": [10, 100, None], "token_hit_ratio": [0.1, 0.3, 0.4]})
    fig = plots.cache_curve_figure(curve, run_capacity_blocks=50, run_hit_rate=0.25)
    assert _names(fig) == ["cache-only replay (LRU)", "this run (timed)"]
    assert list(fig.data[0].x) == [10.0, 100.0]
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.ticktext) == ["10", "100"]
    assert fig.layout.xaxis.title.text == "cache capacity (KV blocks, log scale)"
    assert "unbounded cache: 40.0 %" in {a.text for a in fig.layout.annotations}


def test_latency_cdfs_figure_one_legend_entry_per_run() -> None:
    a, b = _requests(), _requests().assign(ttft_s=[1.0, 2.0, 3.0, 4.0])
    fig = plots.latency_cdfs_figure({"base": a, "tuned": b})
    assert len(fig.data) == 6
    assert [t.name for t in fig.data if t.showlegend] == ["base", "tuned"]
    tpot = fig.data[1]  # base, TPOT: NaN dropped, in ms
    assert list(tpot.x) == [10.0, 20.0, 30.0]
    assert list(tpot.y) == [1 / 3, 2 / 3, 1.0]
    assert _axis_titles(fig, "xaxis") == ["TTFT (s)", "TPOT (ms)", "E2E latency (s)"]
    assert fig.layout.yaxis.title.text == "fraction of requests"


def test_calibration_figure_panels_per_kernel() -> None:
    pts = pd.DataFrame(
        {
            "kernel": ["gemm", "gemm", "decode_attention"],
            "x": [1, 16, 1024],
            "measured_s": [1e-4, 2e-4, 3e-4],
            "roofline_s": [0.8e-4, 1.6e-4, 2e-4],
        }
    )
    fig = plots.calibration_figure(pts, x_titles={"gemm": "tokens", "decode_attention": "context (tokens)"})
    assert _names(fig) == ["measured", "roofline", "measured", "roofline"]
    assert list(fig.data[0].y) == [0.1, 0.2]  # ms
    assert [a.text for a in fig.layout.annotations] == ["gemm<br><sup>x: tokens</sup>",
                                                         "decode_attention<br><sup>x: context (tokens)</sup>"]  # fmt: skip
    assert fig.layout.yaxis.ticktext == ("10 µs", "100 µs", "1 ms")


def test_figures_export_to_html() -> None:
    fig = plots.kv_blocks_figure(analysis.kv_blocks_over_time(_iterations()))
    html = fig.to_html(include_plotlyjs="cdn", full_html=True)
    assert "KV cache blocks over time" in html


def test_latency_spikes_figure_marks_gaps_of_preempted_requests_on_a_log_axis() -> None:
    fig = plots.latency_spikes_figure(_requests(), _iterations(), _events(), window_s=1.0)
    gaps = next(t for t in fig.data if t.name == "gap of a preempted request")
    assert (list(gaps.x), list(gaps.y)) == ([2.9], [900.0])  # preempted at 2.0, gap 0.9 s
    assert fig.layout.yaxis2.type == "log"
    assert fig.layout.yaxis2.title.text == "ITL, log"


def test_latency_spikes_figure_keeps_the_events_row_when_there_are_none() -> None:
    fig = plots.latency_spikes_figure(_requests(), _iterations(), _events().iloc[0:0], window_s=1.0)
    assert "no preemption, swap, eviction or rejection in this run" in {
        a.text for a in fig.layout.annotations
    }
    assert fig.layout.yaxis3.title.text == "events"


def test_count_axes_tick_at_whole_numbers_only() -> None:
    # Plotly's own ticks on a queue of at most 1 request are 0, 0.5, 1: half a request.
    assert plots.count_ticks([0, 0, 1]) == {"tick0": 0, "dtick": 1, "tickformat": ",d", "range": [0, 1.05]}
    assert plots.count_ticks([])["dtick"] == 1  # an empty queue: 0 and 1
    assert [plots.count_ticks([n])["dtick"] for n in (6, 7, 13, 40, 1234)] == [1, 2, 5, 10, 500]
    fig = plots.latency_spikes_figure(_requests(), _iterations(), _events(), window_s=1.0)
    waiting = fig.layout.yaxis4
    assert (waiting.title.text, waiting.tick0, waiting.dtick, waiting.tickformat) == ("requests", 0, 1, ",d")
    series = analysis.replica_series(
        _iterations().assign(batch_size=[1, 2, 3, 1], kv_usage=[0.2, 0.4, 0.9, 0.5])
    )
    fig = plots.replica_panels_figure(series)
    for axis in (fig.layout.yaxis, fig.layout.yaxis2):  # running and waiting requests
        assert float(axis.dtick).is_integer() and axis.dtick >= 1 and axis.tickformat == ",d"
    assert fig.layout.yaxis3.dtick is None  # KV usage is a share


def test_prefix_hit_rate_of_the_whole_run_is_a_legend_entry_not_a_label_on_the_curve() -> None:
    hr = analysis.prefix_hit_rate_over_time(_requests(), window_s=2.0)
    fig = plots.prefix_hit_rate_figure(hr, overall=0.5)
    assert _names(fig) == ["hit rate (window)", "whole run: 50.0 %"]
    whole = fig.data[1]
    assert list(whole.y) == [50.0, 50.0] and list(whole.x) == [hr["time_s"].min(), hr["time_s"].max()]
    assert not fig.layout.annotations


def test_a_whole_number_knob_is_ticked_at_whole_numbers() -> None:
    pts = pd.DataFrame(
        {"replicas": [1, 2], "offered_requests_per_s": [8.0, 8.0], "achieved_requests_per_s": [7.0, 8.0],
         "ttft_p99_s": [0.2, 0.1], "tpot_p99_s": [0.01, 0.01]}
    )  # fmt: skip
    fig = plots.throughput_capacity_figure(
        pts, x="replicas", x_title="replicas", ttft_slo_s=2.0, tpot_slo_s=0.1
    )
    for axis in (fig.layout.xaxis, fig.layout.xaxis2, fig.layout.xaxis3):  # shared: 1, 2, never 1.5
        assert (axis.tick0, axis.dtick, axis.tickformat, axis.range) == (0, 1, ",d", None)
    rates = pts.assign(replicas=[1.0, 2.0])  # a rate of 1 and 2 req/s is not a count: Plotly's ticks
    fig = plots.throughput_capacity_figure(
        rates, x="replicas", x_title="rate", ttft_slo_s=2.0, tpot_slo_s=0.1
    )
    assert fig.layout.xaxis.dtick is None


def test_plan_pareto_figure_draws_runs_front_cheapest_and_stopped_ones_apart() -> None:
    runs = pd.DataFrame(
        {
            "label": ["1 x [a]", "2 x [a]", "3 x [a]", "1 x [b]", "1 x [c]"],
            "usd_per_hour": [6.0, 12.0, 18.0, 9.0, 3.0],
            "ttft_p99_s": [5.0, 0.5, 0.2, 0.4, np.nan],
            "tpot_p99_s": [0.02, 0.01, 0.008, 0.03, np.nan],
            "status": ["ok"] * 5,
            "stopped_early": [False, False, False, False, True],
            "feasible": [False, True, True, True, False],
            "pareto": [True, False, True, True, False],
            "cheapest": [False, False, False, True, False],
        }
    )
    fig = plots.plan_pareto_figure(runs, [("ttft_p99_s", 2.0, True), ("tpot_p99_s", 0.1, True)])
    names = [t.name for t in fig.data if t.showlegend]
    assert names == [
        "meets every SLO",
        "misses an SLO",
        "Pareto front (cost, every SLO metric)",
        "cheapest meeting every SLO",
        "overloaded, stopped early (no latency; drawn at the top)",
    ]
    front = next(t for t in fig.data if t.name.startswith("Pareto") and t.yaxis == "y")
    assert list(front.x) == [6.0, 9.0, 18.0]
    star = next(t for t in fig.data if t.name.startswith("cheapest") and t.yaxis == "y")
    assert list(star.x) == [9.0] and list(star.y) == [0.4]
    stopped = next(t for t in fig.data if t.name.startswith("overloaded") and t.yaxis == "y")
    assert list(stopped.x) == [3.0] and stopped.y[0] >= 5.0  # above every measured value
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis.title.text == "ttft_p99_s, log"
    assert fig.layout.xaxis2.title.text == "deployment price (USD/hour)"
