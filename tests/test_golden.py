"""Golden scenarios with pinned seeds: headline numbers must not drift unnoticed.

A change that moves these numbers on purpose (a fidelity fix, a new default) updates
them in the same commit and says why.
"""

from __future__ import annotations

import pytest
from conftest import ROOT

import kvsim

GOLDEN = {
    # file: (prefix_cache_hit_rate, ttft_p50_s, e2e_p99_s, num_finished, num_iterations)
    "default.yaml": (0.35434830067211354, 0.026335852896703926, 10.8486382375116, 299, 5048),
    "prefix_caching_on.yaml": (0.8884697361223759, 0.012872061716842076, 2.780476253696677, 300, 3366),
    "prefix_caching_off.yaml": (0.0, 0.12206210560674835, 10.284275635674772, 300, 1150),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_scenario(name):
    s = kvsim.run(ROOT / "scenarios" / name, overrides=["workload.num_requests=300"]).summary
    hit, ttft50, e2e99, finished, iters = GOLDEN[name]
    assert s["prefix_cache_hit_rate"] == pytest.approx(hit, rel=1e-12)
    assert s["ttft_p50_s"] == pytest.approx(ttft50, rel=1e-9)
    assert s["e2e_p99_s"] == pytest.approx(e2e99, rel=1e-9)
    assert (s["num_finished"], s["num_iterations"]) == (finished, iters)


def test_prefix_caching_pair_differs_only_in_the_switch():
    on = kvsim.load_scenario(ROOT / "scenarios" / "prefix_caching_on.yaml")
    off = kvsim.load_scenario(ROOT / "scenarios" / "prefix_caching_off.yaml")
    assert on.replicas[0].engine.enable_prefix_caching and not off.replicas[0].engine.enable_prefix_caching
    assert on.workload == off.workload and on.model == off.model
    assert on.model_copy(update={"name": "", "description": "", "replicas": []}) == off.model_copy(
        update={"name": "", "description": "", "replicas": []}
    )


def test_embedded_default_is_the_shipped_default_file():
    assert kvsim.load_scenario(None) == kvsim.load_scenario(ROOT / "scenarios" / "default.yaml")
