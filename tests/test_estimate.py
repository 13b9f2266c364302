"""Absurd work is refused before it starts: the work estimate and its limits."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import tracemalloc

import pytest
from conftest import ROOT

import kvsim
from kvsim.errors import ScenarioError
from kvsim.scenario.estimate import estimate_work
from kvsim.scenario.resolved import resolve_plan


def refused(overrides: list[str]) -> dict[str, str]:
    t0 = time.process_time()
    with pytest.raises(ScenarioError) as err:
        kvsim.run(None, overrides=overrides)
    assert time.process_time() - t0 < 1.0  # refused before anything big is built
    return dict(err.value.problems)


def test_a_billion_requests_are_refused_with_the_estimate():
    problems = refused(["workload.num_requests=1000000000"])
    assert "1,000,000,000 requests, more than sim.max_requests (10,000,000)" in problems["sim.max_requests"]
    assert "pass --force" in problems["sim.max_memory_gib"] and "GiB" in problems["sim.max_memory_gib"]


@pytest.mark.parametrize(
    "overrides",
    [
        ["replicas.0.count=10000"],  # 281,680,000 KV blocks
        ["replicas.0.engine.num_gpu_blocks_override=1000000000"],
        ["workload.num_requests=2000000", "workload.parallel_samples=1000"],
    ],
)
def test_huge_clusters_pools_and_sample_counts_are_refused(overrides):
    assert "sim.max_memory_gib" in refused(overrides)


def test_the_cli_refuses_in_under_a_second_of_work_and_exits_2():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "kvsim", "run", "--set", "workload.num_requests=1000000000", "--no-progress"],
        capture_output=True,
        text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 2 and "sim.max_requests" in proc.stderr and "--force" in proc.stderr
    assert cpu < 3.0  # Python start-up and imports included (~0.7 s here); the check itself is instant


def test_limits_are_knobs_and_force_skips_them():
    small = ["workload.num_requests=20", "sim.max_requests=10"]
    assert "sim.max_requests" in refused(small)
    assert kvsim.run(None, overrides=small, force=True).summary["num_finished"] == 20
    assert kvsim.run(None, overrides=[*small, "sim.max_requests=20"]).summary["num_finished"] == 20


@pytest.mark.slow
def test_the_memory_model_is_within_a_factor_of_two_of_a_real_run():
    scenario = kvsim.load_scenario(
        None, ["workload.num_requests=3000", "replicas.0.engine.num_gpu_blocks_override=20000"]
    )
    estimate = estimate_work(resolve_plan(scenario))
    tracemalloc.start()
    try:
        kvsim.run(scenario)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0.5 < peak / estimate.memory_bytes < 2.0


def test_validate_reports_the_estimate(capsys):
    from kvsim.cli import main

    default = str(ROOT / "scenarios" / "default.yaml")
    assert main(["validate", default]) == 0
    assert "estimated 2,000 requests, 1 replica, 28,167 KV blocks" in capsys.readouterr().out
    assert main(["validate", default, "--set", "workload.num_requests=1000000000"]) == 2
    assert "sim.max_requests" in capsys.readouterr().err
