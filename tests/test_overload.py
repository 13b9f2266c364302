"""Offered vs achieved load and the overload flag (`kvsim.results.overload`): hand-built tables, then real runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

import kvsim
from kvsim.engine.cluster import RunStopped
from kvsim.results.overload import LOAD_KEYS, DivergenceWatch, LatencyBound, allowed_violations, load_summary

NO_EVENTS = pd.DataFrame(columns=["time_s", "replica_id", "kind", "request_id", "num_blocks", "num_bytes"])


def _requests(arrival: np.ndarray, ttft: np.ndarray, e2e: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": np.arange(len(arrival)),
            "arrival_s": arrival,
            "ttft_s": ttft,
            "finish_s": arrival + e2e,
            "finished": True,
        }
    )


def test_a_queue_served_at_half_the_arrival_rate_is_overloaded() -> None:
    # 10 req/s for 100 s, served FIFO at 5 req/s: request i finishes at 0.2 (i + 1) s.
    n = 1000
    arrival = 0.1 * np.arange(n)
    finish = 0.2 * np.arange(1, n + 1)
    out = load_summary(_requests(arrival, finish - arrival - 0.05, finish - arrival), NO_EVENTS)
    assert set(out) == set(LOAD_KEYS)
    assert out["offered_requests_per_s"] == pytest.approx(n / 99.9)
    # Second half (49.95, 99.9]: finishes at 0.2 k for k = 250..499 -> 250 in 49.95 s.
    assert out["achieved_requests_per_s"] == pytest.approx(250 / 49.95)
    assert out["backlog_growth_requests_per_s"] == pytest.approx(5.0, rel=0.01)  # 10 in, 5 out
    assert out["ttft_trend_s_per_s"] == pytest.approx(1.0)  # the wait grows a second per second
    assert out["backlog_end_requests"] == 501 == out["backlog_peak_requests"]  # 1,000 in, 499 out by 99.9 s
    assert (out["overloaded"], out["overload_reason"]) == (True, "backlog growing")


def test_a_stable_queue_and_a_run_still_filling_up_are_not() -> None:
    n = 1000
    arrival = 0.1 * np.arange(n)
    e2e = np.full(n, 2.0)
    stable = load_summary(_requests(arrival, np.full(n, 0.05), e2e), NO_EVENTS)
    assert stable["achieved_requests_per_s"] == pytest.approx(10.0, rel=0.01)
    assert (stable["overloaded"], stable["backlog_end_requests"]) == (False, 20)
    # Latencies that grow through the run (long outputs filling the batch) but TTFT flat:
    # the backlog rises, first tokens do not come later, so not overloaded.
    filling = load_summary(_requests(arrival, np.full(n, 0.05), 0.02 * np.arange(n) ** 0.9), NO_EVENTS)
    assert filling["backlog_growth_requests_per_s"] > 0.5 and filling["ttft_trend_s_per_s"] == pytest.approx(
        0
    )
    assert filling["overloaded"] is False


def test_requests_cut_off_make_a_run_overloaded_but_rejections_do_not() -> None:
    req = _requests(np.arange(10.0), np.full(10, 0.1), np.full(10, 0.5))
    req.loc[[3, 7], "finished"] = False
    events = pd.DataFrame([(3.0, "r-0", "reject", 3, 0, 0)], columns=NO_EVENTS.columns)
    out = load_summary(req, events)
    assert (out["num_rejected"], out["num_cut_off"]) == (1, 1)
    assert (out["overloaded"], out["overload_reason"]) == (True, "requests cut off")
    req.loc[7, "finished"] = True
    assert load_summary(req, events)["overloaded"] is False


@pytest.mark.parametrize(
    ("rate", "overloaded"), [(4, False), (8, False), (16, False), (24, True), (32, True)]
)
def test_the_default_scenarios_rate_sweep_flags_the_overloaded_points(rate: float, overloaded: bool) -> None:
    # The Throughput page's default sweep of the default scenario (0.5x .. 4x its 8 req/s), whole workload.
    s = kvsim.run(None, overrides=[f"workload.arrival.rate_per_s={rate}"]).summary
    assert s["overloaded"] is overloaded
    meets = s["ttft_p99_s"] <= 2.0 and s["tpot_p99_s"] <= 0.1
    assert meets is not overloaded  # the points that meet the SLO are the ones not flagged


def test_a_short_overloaded_point_that_meets_the_slo_is_flagged() -> None:
    # The "knee at 32 req/s": 200 requests at 32 req/s all fit in the batch, so p99 TTFT
    # stays at 0.4 s, but the backlog grows and first tokens come later and later.
    s = kvsim.run(None, overrides=["workload.arrival.rate_per_s=32", "workload.num_requests=200"]).summary
    assert s["ttft_p99_s"] < 2.0 and s["overloaded"]
    assert s["achieved_requests_per_s"] < 0.75 * s["offered_requests_per_s"]
    assert not kvsim.run(None, overrides=["workload.num_requests=200"]).summary["overloaded"]


@pytest.mark.slow
def test_the_azure_conversation_trace_at_8x_overloads_one_h100(traces_dir) -> None:
    # At the trace's own rate on one H100, and at 8x on three, the runs meet the SLO and are not
    # flagged: tests/test_questions.py checks the rows kvsim capacity prints for them (overloaded: no).
    overrides = ["workload.time_scale=8", "router.kind=least_loaded"]
    s = kvsim.run(ROOT / "scenarios" / "azure_conversation.yaml", overrides=overrides).summary
    assert (s["overloaded"], s["overload_reason"]) == (True, "backlog growing")
    assert s["ttft_p99_s"] > 2.0
    assert s["offered_requests_per_s"] == pytest.approx(44.2, abs=0.1)
    assert s["achieved_requests_per_s"] == pytest.approx(25.6, abs=0.1)


# --------------------------------------------------------------------------- the early stop


def test_one_late_request_beyond_the_allowance_proves_the_percentile_over_the_limit() -> None:
    # The Azure conversation trace: 19,366 requests; p99 over 2 s is certain at 195 late ones.
    assert allowed_violations(19_366, 99) == 194
    assert allowed_violations(1500, 99) == 15
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 100, 101, 1000, 19_366):
        for q in (50.0, 90.0, 99.0):
            late = allowed_violations(n, q) + 1
            # However many of the n requests finish (the late ones at least), numpy's
            # percentile of their values is over the limit (1.0).
            for finished in sorted({late, (late + n) // 2, n}):
                values = np.concatenate([rng.uniform(0, 1, finished - late), rng.uniform(1.001, 9, late)])
                assert np.percentile(values, q) > 1.0, (n, q, finished)


def test_only_ttft_and_e2e_percentiles_can_be_proven_broken_early() -> None:
    assert LatencyBound.from_key("ttft_p99_s", 2.0) == LatencyBound("ttft", 99.0, 2.0)
    assert LatencyBound.from_key("e2e_p90_s", 30.0) == LatencyBound("e2e", 90.0, 30.0)
    for key in ("tpot_p99_s", "ttft_mean_s", "slo_attainment", "ttft_p100_s"):
        assert LatencyBound.from_key(key, 2.0) is None


def _watched(overrides: list[str]) -> tuple[DivergenceWatch, RunStopped | None]:
    watch = DivergenceWatch([LatencyBound.from_key("ttft_p99_s", 2.0)])  # type: ignore[list-item]
    try:
        kvsim.run(None, overrides=overrides, watch=watch)
    except RunStopped as stop:
        return watch, stop
    return watch, None


def test_a_clearly_overloaded_run_is_stopped_early_and_flagged_overloaded() -> None:
    # The default replica (Llama-3-8B, one H100) serves about 20 req/s; 40 req/s is twice that.
    overrides = ["workload.num_requests=1500", "workload.arrival.rate_per_s=40"]
    full = kvsim.run(None, overrides=overrides).summary
    assert full["overloaded"] and full["ttft_p99_s"] > 2.0
    watch, stop = _watched(overrides)
    assert stop is not None and stop.reason.startswith("overloaded: the backlog grew")
    # Stopped a quarter of the way through the arrivals, long before the backlog drains.
    assert stop.at_s < 0.3 * full["arrival_window_s"] < full["sim_time_s"]
    figures = watch.figures
    assert figures["stopped_violations"] > figures["stopped_allowed_violations"] == 15
    assert figures["achieved_requests_per_s"] < 0.75 * figures["offered_requests_per_s"]
    assert f"more than the 15 ttft_p99_s <= 2 allows: stopped at t={stop.at_s:,.1f} s" in stop.reason


def test_a_borderline_run_is_not_stopped_and_its_result_is_unchanged() -> None:
    # 20 req/s: as busy as the replica gets without queueing for good (p99 TTFT 0.33 s).
    overrides = ["workload.num_requests=1500", "workload.arrival.rate_per_s=20"]
    watch = DivergenceWatch([LatencyBound.from_key("ttft_p99_s", 2.0)])  # type: ignore[list-item]
    watched = kvsim.run(None, overrides=overrides, watch=watch)
    plain = kvsim.run(None, overrides=overrides)
    assert watch.figures == {}
    assert not plain.summary["overloaded"] and plain.summary["ttft_p99_s"] < 2.0
    pd.testing.assert_frame_equal(watched.requests, plain.requests)
    assert watched.summary == pytest.approx(plain.summary, nan_ok=True)


def test_a_bound_that_can_still_be_met_never_stops_a_run() -> None:
    # Overloaded, but the bound (p99 TTFT under 10 minutes) is never certainly broken.
    watch = DivergenceWatch([LatencyBound("ttft", 99.0, 600.0)])
    kvsim.run(None, overrides=["workload.num_requests=600", "workload.arrival.rate_per_s=40"], watch=watch)
    assert watch.figures == {}
