"""Fitting the roofline to measurements: recovery of known parameters, held-out accuracy, CSV parsing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kvsim.cost.base import Batch
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.fit import Point, fit_roofline, point_time_s, read_points
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import KvsimError
from kvsim.presets import GPU_PRESETS, MODEL_PRESETS

LLAMA2_70B = MODEL_PRESETS["llama-2-70b"]
A100 = GPU_PRESETS["a100-80gb"]
TRUE = RooflineCostConfig(
    compute_efficiency=0.55,
    memory_efficiency=0.72,
    kv_memory_efficiency=0.4,
    per_layer_overhead_s=2e-5,
    per_iteration_overhead_s=1.5e-3,
    allreduce_latency_s=1.2e-5,
    allreduce_bandwidth_bytes_per_s=1.8e11,
)


def grid(tps: tuple[int, ...]) -> list[Point]:
    points = [Point(tp, "prefill", b, p, 0) for tp in tps for b in (1, 4, 16) for p in (128, 512, 2048, 8192)]
    points += [Point(tp, "decode", b, 0, c) for tp in tps for b in (1, 8, 32, 64) for c in (128, 1024, 4096)]
    return points


def timed(points: list[Point], cfg: RooflineCostConfig, noise: np.ndarray | None = None) -> list[Point]:
    out = []
    for i, p in enumerate(points):
        t = point_time_s(RooflineCostModel(LLAMA2_70B, A100, cfg, tp=p.tp), p)
        if noise is not None:
            t *= noise[i]
        out.append(Point(p.tp, p.phase, p.batch_size, p.prompt_tokens, p.context_tokens, t))
    return out


def test_fit_recovers_known_parameters() -> None:
    points = timed(grid((1, 2, 4, 8)), TRUE)
    result = fit_roofline(points, model=LLAMA2_70B, gpu=A100, per_layer_overhead_s=2e-5)
    got = result.config
    for name in (
        "compute_efficiency",
        "memory_efficiency",
        "kv_memory_efficiency",
        "per_layer_overhead_s",
        "per_iteration_overhead_s",
        "allreduce_latency_s",
        "allreduce_bandwidth_bytes_per_s",
    ):
        assert getattr(got, name) == pytest.approx(getattr(TRUE, name), rel=1e-3), name
    assert result.median_abs_rel_error_prefill < 1e-5 and result.median_abs_rel_error_decode < 1e-5
    assert result.fitted == (
        "compute_efficiency",
        "memory_efficiency",
        "kv_memory_efficiency",
        "fixed_s",
        "allreduce_latency_s",
        "allreduce_bandwidth_bytes_per_s",
    )


def test_fit_without_tensor_parallel_points_keeps_allreduce_defaults() -> None:
    points = timed(grid((1,)), TRUE)
    result = fit_roofline(points, model=LLAMA2_70B, gpu=A100, per_layer_overhead_s=2e-5)
    assert result.config.compute_efficiency == pytest.approx(0.55, rel=1e-3)
    assert result.config.memory_efficiency == pytest.approx(0.72, rel=1e-3)
    assert result.config.kv_memory_efficiency == pytest.approx(0.4, rel=1e-3)
    assert result.config.allreduce_latency_s is None and result.config.allreduce_bandwidth_bytes_per_s is None
    assert "allreduce_latency_s" not in result.fitted


def test_fixed_overhead_goes_to_the_per_layer_term_when_the_held_value_is_too_large() -> None:
    points = timed(grid((1,)), TRUE)
    fixed = 80 * 2e-5 + 1.5e-3
    result = fit_roofline(points, model=LLAMA2_70B, gpu=A100, per_layer_overhead_s=1e-4)
    assert result.config.per_iteration_overhead_s == 0.0
    assert result.config.per_layer_overhead_s == pytest.approx(fixed / 80, rel=1e-3)


def test_fit_on_half_predicts_the_other_half_of_noisy_measurements() -> None:
    rng = np.random.default_rng(7)
    points = timed(grid((2, 4, 8)), TRUE, noise=rng.lognormal(0.0, 0.08, size=len(grid((2, 4, 8)))))
    order = rng.permutation(len(points))
    train = [points[i] for i in order[: len(points) // 2]]
    test = [points[i] for i in order[len(points) // 2 :]]
    cfg = fit_roofline(train, model=LLAMA2_70B, gpu=A100).config
    for phase in ("prefill", "decode"):
        errs = [
            abs(point_time_s(RooflineCostModel(LLAMA2_70B, A100, cfg, tp=p.tp), p) / p.time_s - 1)
            for p in test
            if p.phase == phase and p.time_s is not None
        ]
        assert np.median(errs) < 0.1, phase


def test_points_become_batches() -> None:
    assert Point(2, "prefill", 3, 100, 20).batch() == Batch(prefill_chunks=[(100, 20)] * 3)
    assert Point(2, "decode", 4, 0, 500).batch() == Batch(num_decode_seqs=4, decode_context_tokens=2000)


def test_read_points_and_its_errors(tmp_path: Path) -> None:
    good = tmp_path / "m.csv"
    good.write_text(
        "tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n2,prefill,1,128,0,0.05\n4,decode,8,0,512,\n"
    )
    assert read_points(good) == [Point(2, "prefill", 1, 128, 0, 0.05), Point(4, "decode", 8, 0, 512, None)]
    header = "tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n"
    cases = {
        "tp,phase,batch_size,prompt_tokens\n": "missing column(s) context_tokens",
        header + "1,warmup,1,1,0,1\n": ":2: phase: must be",
        header + "1,decode,x,0,5,1\n": ":2: batch_size: must be an integer",
        header + "1,decode,1,0,0,1\n": "attends to >= 1 token",
        header + "1,decode,1,0,4,-2\n": "time_s: must be > 0",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(KvsimError, match=re.escape(message)):
            read_points(bad)


def test_fit_needs_measured_points() -> None:
    with pytest.raises(KvsimError, match="at least 3 points"):
        fit_roofline([Point(1, "decode", 1, 0, 10)], model=LLAMA2_70B, gpu=A100)
