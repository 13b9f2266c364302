"""benchmarks/vllm_latency.py on a recorded measurement: no vLLM, no live engine.

The records in benchmarks/results/ (vllm_latency: the machine lightly shared;
vllm_latency_busy: heavily) are what ``measure`` wrote when the figures in
docs/validation.md were taken; ``analyze`` on them must give those figures again (the fit,
kvsim's predictions, the errors), so that the documented numbers are reproducible here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark

from kvsim.request import Segment

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


bench = load_benchmark("vllm_latency")


def test_a_step_is_classified_as_kvsim_classifies_its_own() -> None:
    # [id, scheduled, computed before, num_tokens, num_output]
    batch = [
        [0, 1, 40, 41, 3],  # a decode: one token after all the others, with output
        [1, 200, 0, 300, 0],  # a prefill chunk
        [2, 56, 256, 312, 0],  # its last chunk, after 256 computed
        [3, 1, 99, 100, 0],  # a 1-token chunk that ends a prompt: not a decode
    ]
    assert bench.step_composition(batch) == ([(200, 0), (56, 256), (1, 99)], 1, 41)


def test_busy_time_runs_to_the_next_step_or_to_the_end_before_idling() -> None:
    run = {
        "steps": [
            {"start_s": 0.0, "end_s": 0.5, "then_idle": False},
            {"start_s": 0.6, "end_s": 0.9, "then_idle": True},
            {"start_s": 5.0, "end_s": 5.2, "then_idle": False},
        ]
    }
    assert bench.step_durations(run) == pytest.approx([0.6, 0.3, 0.2])


def test_workloads_are_pinned_and_the_held_out_one_shares_a_system_prompt() -> None:
    fit, held = (bench.make_requests(bench.WORKLOADS[w]) for w in ("fit", "heldout"))
    assert fit == bench.make_requests(bench.WORKLOADS["fit"])
    assert all(r.prompt[0] == Segment(0, 384) for r in held)
    assert not any(seg.content_id == 0 for r in fit for seg in r.prompt)
    assert fit[0].arrival_s == 0.0 and len(fit) == len(held) == 24


def test_latency_metrics_by_hand() -> None:
    rows = [
        {"arrival_s": 0.0, "first_token_s": 1.0, "finish_s": 3.0, "output_tokens": 5},
        {"arrival_s": 1.0, "first_token_s": 1.5, "finish_s": 4.0, "output_tokens": 1},
    ]
    m = bench.latency_metrics(rows)
    assert m["ttft_p50_s"] == pytest.approx(0.75)
    assert m["tpot_p50_s"] == pytest.approx(0.5)  # one request has more than one token
    assert m["e2e_p50_s"] == pytest.approx(3.0)
    assert m["throughput_tokens_per_s"] == pytest.approx(6 / 4)


@pytest.fixture(scope="module", params=["vllm_latency", "vllm_latency_busy"])
def result_dir(request: pytest.FixtureRequest) -> Path:
    path: Path = RESULTS / request.param
    return path


@pytest.fixture(scope="module")
def recorded(result_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((result_dir / "report.json").read_text())
    return data


@pytest.fixture(scope="module")
def reanalyzed(result_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp(result_dir.name)
    for name in ("record.json.gz", "meta.json"):
        shutil.copy(result_dir / name, out / name)
    report: dict[str, Any] = bench.analyze(out, bench.FIT_ARGS, variants=False)
    return report


def test_the_recorded_measurement_gives_the_documented_figures_again(
    recorded: dict[str, Any], reanalyzed: dict[str, Any]
) -> None:
    assert reanalyzed["vllm_version"] == recorded["vllm_version"] == "0.32.0"
    assert reanalyzed["fit"]["roofline"]["combine"] == recorded["fit"]["roofline"]["combine"] == "sum"
    # Tolerances are the precision docs/validation.md quotes, not the float's last digits.
    # The efficiencies are printed to three decimals; memory_efficiency is weakly determined
    # by this CPU fit (the weight reads of a 75M-parameter model are a small part of each
    # step), so the optimiser's end point moves by ~1e-4 with the BLAS build and CPU that
    # run it (0.56190 on one machine, 0.56213 on another, 0.56203 recorded) while every
    # prediction below agrees to 1e-5. Half a unit of the quoted digit is the honest bound.
    for key in ("compute_efficiency", "memory_efficiency", "kv_memory_efficiency"):
        assert reanalyzed["fit"]["roofline"][key] == pytest.approx(recorded["fit"]["roofline"][key], abs=5e-4)
    for name in ("fit", "heldout"):
        new, old = reanalyzed["results"][name], recorded["results"][name]
        # vLLM's measured figures come from the record as they are: exact.
        assert new["measured_median"] == pytest.approx(old["measured_median"], rel=1e-12, abs=1e-12), name
        # kvsim's predictions are quoted to three significant digits, their errors to a tenth
        # of a percentage point.
        assert new["predicted"] == pytest.approx(old["predicted"], rel=5e-4), name
        assert new["relative_error"] == pytest.approx(old["relative_error"], abs=5e-4), name
    assert reanalyzed["cpu_time"]["heldout_relative_error"] == pytest.approx(
        recorded["cpu_time"]["heldout_relative_error"], abs=5e-4
    )


def test_kvsim_serves_the_recorded_requests_like_the_engine(reanalyzed: dict[str, Any]) -> None:
    # No preemption on either side (the pool never fills), prefix caching hits the shared
    # system prompt of the held-out workload, and kvsim takes about as many steps as vLLM.
    for name, res in reanalyzed["results"].items():
        assert res["kvsim"]["preemptions"] == 0 and all(r["preemptions"] == 0 for r in res["runs"])
        vllm_steps = [r["num_steps"] for r in res["runs"]]
        assert min(vllm_steps) * 0.9 <= res["kvsim"]["num_steps"] <= max(vllm_steps) * 1.1, name
    assert reanalyzed["results"]["heldout"]["kvsim"]["prefix_cache_hit_rate"] > 0.3


def test_lightly_shared_the_held_out_prediction_meets_the_issues_goals() -> None:
    report = json.loads((RESULTS / "vllm_latency" / "report.json").read_text())
    errors = report["results"]["heldout"]["relative_error"]
    for key, _label, goal in bench.METRICS:
        assert abs(errors[key]) <= goal, key
