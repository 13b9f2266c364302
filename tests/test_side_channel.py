"""The side channel as an attacker measures it: probes, threshold, accuracy, KS statistic."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, spec

import kvsim
from kvsim.analysis.side_channel import (
    attacker_report,
    best_threshold,
    ks_critical_value,
    ks_p_value,
    ks_statistic,
    probes,
)

SCENARIO = ROOT / "scenarios" / "prefix_cache_side_channel.yaml"


def test_ks_statistic_by_hand() -> None:
    # CDFs of {1, 2, 3} and {2.5, 4}: at 2 the first is at 2/3, the second still at 0.
    assert ks_statistic(np.array([1.0, 2, 3]), np.array([2.5, 4])) == pytest.approx(2 / 3)
    assert ks_statistic(np.array([1.0, 2]), np.array([1.0, 2])) == 0.0
    assert ks_statistic(np.array([1.0, 2]), np.array([5.0, 6])) == 1.0
    # D = 0.5, n = m = 20: lambda = (sqrt(10) + 0.12 + 0.11 / sqrt(10)) x 0.5 = 1.6585;
    # Q = 2 (e^-2 lambda^2 - e^-8 lambda^2 + ...) = 0.00817.
    assert ks_p_value(0.5, 20, 20) == pytest.approx(0.00817, abs=5e-5)
    assert ks_p_value(0.0, 20, 20) == 1.0
    assert ks_critical_value(50, 50) == pytest.approx(1.3581 * math.sqrt(2 / 50), rel=1e-4)


def test_threshold_separates_hits_from_misses() -> None:
    ttft = np.array([0.008, 0.009, 0.05, 0.06, 0.052])
    truth = np.array([True, True, False, False, False])
    x = best_threshold(ttft, truth)
    assert 0.009 < x < 0.05


def test_probes_are_the_attackers_first_uses_with_the_secret() -> None:
    specs = [
        spec(0, [(7, 64), (100, 4)], output=1, tenant="victim"),
        spec(1, [(7, 64), (101, 4)], output=1, tenant="attacker"),  # victim sent 7 before: secret 1
        spec(2, [(7, 64), (102, 4)], output=1, tenant="attacker"),  # not a first use
        spec(3, [(8, 64), (103, 4)], output=1, tenant="attacker"),  # secret 0
        spec(4, [(8, 64), (104, 4)], output=1, tenant="victim"),  # after the probe: does not count
    ]
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3, 4],
            "tenant": [s.tenant for s in specs],
            "arrival_s": [0.0, 1.0, 2.0, 3.0, 4.0],
            "ttft_s": [0.05, 0.01, 0.01, 0.05, 0.05],
            "prefix_cache_hits_tokens": [0, 64, 64, 0, 0],
        }
    )
    got = probes(requests, specs, attacker="attacker", victim="victim")
    assert got.request_id.tolist() == [1, 3]
    assert got.victim_sent.tolist() == [True, False] and got.hit.tolist() == [True, False]


def test_a_perfect_channel_and_a_closed_one() -> None:
    n = 40
    truth = np.arange(n) % 4 < 2
    leaky = pd.DataFrame({"ttft_s": np.where(truth, 0.01, 0.05), "victim_sent": truth, "hit": truth})
    r = attacker_report(leaky)
    assert (r.accuracy, r.balanced_accuracy, r.ks_statistic) == (1.0, 1.0, 1.0)
    rng = np.random.default_rng(0)
    closed = pd.DataFrame({"ttft_s": rng.uniform(0.04, 0.06, n), "victim_sent": truth, "hit": False})
    r = attacker_report(closed)
    assert abs(r.balanced_accuracy - 0.5) <= r.noise and r.ks_statistic < r.ks_critical_value


def _attack(isolation: str, overrides: dict) -> dict:
    res = kvsim.run(SCENARIO, overrides={"replicas.0.engine.cache_isolation": isolation, **overrides})
    return {
        k.removeprefix("side_channel_"): v for k, v in res.summary.items() if k.startswith("side_channel_")
    }


def test_the_catalogue_scenario_reports_the_attacker_shared_and_isolated() -> None:
    shared, isolated = _attack("shared", {}), _attack("tenant", {})
    # Pinned (full run, seed 0): 62 probes, 31 held out, the victim had sent 45% of them.
    assert (
        (shared["num_probes"], shared["num_test"])
        == (62, 31)
        == (isolated["num_probes"], isolated["num_test"])
    )
    assert shared["accuracy"] == pytest.approx(30 / 31)
    assert shared["ks_statistic"] == pytest.approx(0.9642857142857143) and shared["ks_p_value"] < 1e-9
    assert isolated["probe_hit_rate"] == 0.0
    assert abs(isolated["balanced_accuracy"] - 0.5) <= isolated["noise"]
    assert isolated["ks_statistic"] < isolated["ks_critical_value"] and isolated["ks_p_value"] > 0.05


@pytest.mark.slow
def test_isolation_brings_the_attacker_to_chance_on_many_probes() -> None:
    # 512 prefixes and 3,000 requests: 330 probes, so chance's noise is +-0.08. The pool holds
    # fewer prefixes than the victim sends, so 44% of what it sent is evicted before the probe:
    # those probes miss and fool the attacker (balanced accuracy 0.77, KS 0.57).
    ov = {
        "workload.num_requests": 3000,
        "workload.system_prompts.num_prompts": 512,
        "workload.arrival.rate_per_s": 4.0,
    }
    shared, isolated = _attack("shared", ov), _attack("tenant", ov)
    assert shared["num_probes"] == 330 and isolated["noise"] < 0.08
    assert shared["balanced_accuracy"] > 0.7 and shared["ks_statistic"] > 0.5 and shared["ks_p_value"] < 1e-9
    assert abs(isolated["balanced_accuracy"] - 0.5) <= isolated["noise"]
    assert isolated["ks_statistic"] < isolated["ks_critical_value"]
