"""kvsim calibrate --from-observed: the cost model's free terms from an observation's tokens.

A simulation is an observation whose server is known: its tokens come out at its steps' ends.
Fitting a simulation made with known terms, starting from other terms, must give the known
terms back (the steps read from the tokens are the simulated ones, batch for batch), and the
profile it writes must reproduce the simulation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kvsim
from kvsim.cli import main
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.roofline import RooflineCostModel
from kvsim.observe.fit import FitError, fit_observed, server_steps, token_times
from kvsim.results.io import load_result, save_result
from kvsim.results.result import Result
from kvsim.scenario.resolved import resolve_plan

WORKLOAD: dict[str, Any] = {
    "kind": "synthetic",
    "num_requests": 60,
    "arrival": {"kind": "poisson", "rate_per_s": 6},
    "prompt_tokens": {"kind": "lognormal", "mean_tokens": 800, "cv": 1, "max_tokens": 4000},
    "output_tokens": {"kind": "lognormal", "mean_tokens": 100, "cv": 1, "max_tokens": 500},
}
TRUE_ROOFLINE = {
    "kind": "roofline",
    "compute_efficiency": 0.35,
    "memory_efficiency": 0.55,
    "kv_memory_efficiency": 0.3,
    "per_iteration_overhead_s": 0.002,
}


def scenario(cost_model: Any, gpu: str = "h100-sxm", **workload: Any) -> dict[str, Any]:
    return {
        "name": "fit-test",
        "model": "llama-3-8b",
        "replicas": [{"gpu": gpu, "cost_model": cost_model}],
        "workload": {**WORKLOAD, **workload},
    }


def as_observation(truth: Result, start: dict[str, Any]) -> Result:
    """``truth``'s tables, under a scenario whose cost model is where the fit starts."""
    return Result(
        scenario=kvsim.load_scenario(start),
        requests=truth.requests,
        iterations=truth.iterations,
        events=truth.events,
        summary=truth.summary,
    )


def test_the_steps_read_from_the_tokens_are_the_simulated_ones() -> None:
    truth = kvsim.run(scenario(TRUE_ROOFLINE))
    plan = resolve_plan(truth.scenario)
    points = server_steps(truth, plan.groups[0].engine)
    cost = RooflineCostModel(plan.model, plan.groups[0].gpu, RooflineCostConfig(**TRUE_ROOFLINE))
    # Every step that followed another without a pause, priced as it was simulated.
    assert len(points) >= 0.9 * len(truth.iterations)
    for p in points:
        assert cost.step_time_s(p.batch()) == pytest.approx(p.time_s, rel=1e-9)


def test_a_roofline_fit_gives_the_true_terms_back() -> None:
    truth = kvsim.run(scenario(TRUE_ROOFLINE))
    fit = fit_observed(as_observation(truth, scenario("roofline")), robust_scale=None, match_total=False)
    for name in (
        "compute_efficiency",
        "memory_efficiency",
        "kv_memory_efficiency",
        "per_iteration_overhead_s",
    ):
        assert getattr(fit.config, name) == pytest.approx(TRUE_ROOFLINE[name], rel=1e-4), name
    before = fit.before.metrics.set_index("metric")["error"]
    after = fit.after.metrics.set_index("metric")["error"]
    assert abs(before["ttft_p50_s"]) > 0.1  # the defaults were wrong ...
    for key in ("ttft_p50_s", "tpot_p99_s", "e2e_p50_s", "throughput_tokens_per_s"):
        assert abs(after[key]) < 1e-6, key  # ... the fit reproduces the server
    # Sampled at the observed steps' starts, which the fitted simulation moves by rounding only.
    assert fit.after.series_errors["kv_usage_mean_abs_diff"] < 0.1


def test_a_kernels_fit_gives_the_true_overheads_back() -> None:
    pytest.importorskip("aiconfigurator_core")
    true = {"kind": "kernels", "per_iteration_overhead_s": 0.003, "elementwise_memory_efficiency": 0.4}
    truth = kvsim.run(scenario(true, gpu="h200", num_requests=30))
    fit = fit_observed(as_observation(truth, scenario({"kind": "kernels"}, gpu="h200", num_requests=30)),
                       robust_scale=None, match_total=False)  # fmt: skip
    assert fit.kind == "kernels"
    assert fit.config.per_iteration_overhead_s == pytest.approx(0.003, rel=1e-4)
    assert fit.config.elementwise_memory_efficiency == pytest.approx(0.4, rel=1e-4)


def test_noisy_tokens_still_give_the_terms_within_a_few_percent() -> None:
    truth = kvsim.run(scenario(TRUE_ROOFLINE))
    rng = np.random.default_rng(0)
    it = truth.iterations
    ends = (it["start_s"] + it["duration_s"]).to_numpy()
    # One step in twenty 30% slower (other work on the server's machine; everything after it
    # later), and every token read 0-1 ms late (the client's jitter): the robust fit follows
    # the undisturbed majority.
    extra = np.where(rng.random(len(ends)) < 0.05, 0.3 * it["duration_s"].to_numpy(), 0.0)
    shifted = ends + np.cumsum(extra)
    req = truth.requests.copy()
    noisy = []
    for rid in req["request_id"]:
        t = token_times(truth).get(int(rid), np.zeros(0))
        moved = shifted[np.searchsorted(ends, t - 1e-12)]
        noisy.append(moved + rng.uniform(0, 1e-3, len(t)))
    req["token_times_s"] = noisy
    observed = Result(
        kvsim.load_scenario(scenario("roofline")), req, truth.iterations, truth.events, truth.summary
    )
    fit = fit_observed(observed, robust_scale=0.05, match_total=False)
    for name in ("compute_efficiency", "memory_efficiency", "per_iteration_overhead_s"):
        assert getattr(fit.config, name) == pytest.approx(TRUE_ROOFLINE[name], rel=0.05), name
    truth_figures = fit.after.metrics.set_index("metric")
    assert abs(truth_figures.at["tpot_p50_s", "error"]) < 0.05  # against the (slowed) observation


def test_the_cli_writes_a_profile_that_reproduces_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = kvsim.run(scenario(TRUE_ROOFLINE, num_requests=30))
    save_result(as_observation(truth, scenario("roofline", num_requests=30)), tmp_path / "obs")
    assert (
        main(
            [
                "calibrate",
                "--from-observed",
                str(tmp_path / "obs"),
                "--plain",
                "--out",
                str(tmp_path / "fit.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "compute_efficiency: 0.35" in out and "TTFT p50" in out
    profile = json.loads((tmp_path / "fit.json").read_text())
    assert profile["kind"] == "roofline-fit" and profile["fit"]["num_points"] > 100
    assert profile["command"].startswith("kvsim calibrate --from-observed")
    again = kvsim.run(scenario({"profile": str(tmp_path / "fit.json")}, num_requests=30))
    assert again.summary["ttft_p50_s"] == pytest.approx(truth.summary["ttft_p50_s"], rel=1e-6)
    assert again.summary["tpot_p99_s"] == pytest.approx(truth.summary["tpot_p99_s"], rel=1e-6)
    # kvsim compare, simulating with the profile, agrees as well.
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "obs"), "--json", "--set",
                 f"replicas.0.cost_model={{profile: {tmp_path / 'fit.json'}}}"]) == 0  # fmt: skip
    rows = {row["metric"]: row for row in json.loads(capsys.readouterr().out)["metrics"]}
    assert abs(rows["ttft_p50_s"]["error"]) < 1e-6


def test_a_kernels_fit_profile_is_a_cost_model(tmp_path: Path) -> None:
    pytest.importorskip("aiconfigurator_core")
    true = {"kind": "kernels", "per_iteration_overhead_s": 0.003, "elementwise_memory_efficiency": 0.5}
    truth = kvsim.run(scenario(true, gpu="h200", num_requests=20))
    save_result(
        as_observation(truth, scenario({"kind": "kernels"}, gpu="h200", num_requests=20)), tmp_path / "o"
    )
    assert (
        main(
            [
                "calibrate",
                "--from-observed",
                str(tmp_path / "o"),
                "--plain",
                "--out",
                str(tmp_path / "k.json"),
            ]
        )
        == 0
    )
    profile = json.loads((tmp_path / "k.json").read_text())
    assert profile["kind"] == "kernels-fit"
    # The backend's constants the config left None are written as the fit used them.
    overheads = ("per_iteration_overhead_s", "per_layer_overhead_s", "elementwise_kernel_s")
    assert all(isinstance(profile["kernels"][k], float) for k in overheads), profile["kernels"]
    again = kvsim.run(scenario({"profile": str(tmp_path / "k.json")}, gpu="h200", num_requests=20))
    assert again.summary["e2e_p50_s"] == pytest.approx(truth.summary["e2e_p50_s"], rel=1e-6)
    assert main(["calibrate", "--compare", str(tmp_path / "k.json")]) == 2  # no points to compare


def test_what_cannot_be_fitted_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    few = {"num_requests": 2, "output_tokens": {"kind": "fixed", "tokens": 3}}
    truth = kvsim.run(scenario(TRUE_ROOFLINE, **few))
    with pytest.raises(FitError, match="steps could be read"):
        fit_observed(as_observation(truth, scenario("roofline", **few)))
    two = scenario("roofline", num_requests=30)
    two["replicas"][0]["count"] = 2
    truth = kvsim.run(two)
    save_result(truth, tmp_path / "two")
    assert (
        main(["calibrate", "--from-observed", str(tmp_path / "two"), "--out", str(tmp_path / "f.json")]) == 2
    )
    assert "one server" in capsys.readouterr().err
    assert not (tmp_path / "f.json").exists()
    save_result(kvsim.run(scenario(TRUE_ROOFLINE, num_requests=30)), tmp_path / "one")
    (tmp_path / "notes.json").write_text("{}")
    assert (
        main(["calibrate", "--from-observed", str(tmp_path / "one"), "--out", str(tmp_path / "notes.json")])
        == 2
    )
    assert (tmp_path / "notes.json").read_text() == "{}"


def test_an_observation_reads_back_and_fits(tmp_path: Path) -> None:
    """The folder of kvsim observe (Int64 columns with <NA>, token lists) is fitted as read back."""
    truth = kvsim.run(scenario(TRUE_ROOFLINE, num_requests=30))
    req = truth.requests.copy()
    times = token_times(truth)
    req["token_times_s"] = [times.get(int(r), np.zeros(0)).tolist() for r in req["request_id"]]
    req["num_preemptions"] = req["num_preemptions"].astype("Int64")
    req.loc[0, "num_preemptions"] = None
    save_result(Result(kvsim.load_scenario(scenario("roofline", num_requests=30)), req, truth.iterations,
                       truth.events, truth.summary), tmp_path / "obs")  # fmt: skip
    fit = fit_observed(load_result(tmp_path / "obs"), robust_scale=None, match_total=False)
    assert fit.config.compute_efficiency == pytest.approx(0.35, rel=1e-4)
