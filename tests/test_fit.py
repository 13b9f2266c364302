"""Fitting the roofline to measurements: recovery of known parameters, held-out accuracy, CSV parsing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kvsim.cost.base import Batch
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.fit import Point, fit_roofline, point_time_s, read_points, write_points
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import KvsimError
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.model.specs import GpuSpec, ModelSpec

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


# -- whole steps (phase=step), the sum roofline, robust and mean-matching fits -----------

CPU = GpuSpec(
    name="one-core",
    memory_bytes=2**34,
    hbm_bandwidth_bytes_per_s=1.6e10,
    bf16_flops=1.8e11,
    fp16_flops=1.8e11,
    fp32_flops=1.8e11,
    interconnect_bandwidth_bytes_per_s=1.6e10,
    pcie_bandwidth_bytes_per_s=1.6e10,
)
SMALL = ModelSpec(
    name="small-fp32",
    num_layers=8,
    hidden_size=768,
    num_attention_heads=12,
    num_kv_heads=4,
    head_dim=64,
    intermediate_size=2048,
    vocab_size=16384,
    num_params=75_510_528,
    weight_dtype="fp32",
    max_model_len=4096,
)
CPU_TRUE = RooflineCostConfig(
    compute_efficiency=0.7,
    memory_efficiency=0.5,
    kv_memory_efficiency=0.35,
    combine="sum",
    per_iteration_overhead_s=5e-4,
)


def mixed_steps(n: int, seed: int) -> list[Point]:
    """Steps like a chunked-prefill engine's: decodes, often with one prefill chunk."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        num_decode = int(rng.integers(0, 12))
        ctx = int(num_decode * rng.integers(16, 1500)) if num_decode else 0
        chunks = (
            [(int(rng.integers(1, 257)), int(32 * rng.integers(0, 40)))]
            if rng.random() < 0.3 or not num_decode
            else []
        )
        out.append(Point.step(chunks, num_decode, max(ctx, num_decode)))
    return out


def timed_with(points: list[Point], cfg: RooflineCostConfig, factors: np.ndarray) -> list[Point]:
    m = RooflineCostModel(SMALL, CPU, cfg)
    return [
        Point.step(p.prefill_chunks, p.num_decode_seqs, p.decode_context_tokens, point_time_s(m, p) * f)
        for p, f in zip(points, factors, strict=True)
    ]


def test_step_points_become_their_batch() -> None:
    p = Point.step([(256, 0), (31, 480)], 3, 900, 0.3)
    assert p.batch() == Batch(
        prefill_chunks=[(256, 0), (31, 480)], num_decode_seqs=3, decode_context_tokens=900
    )
    assert p.batch_size == 5 and p.has_prefill and not Point.step([], 2, 10).has_prefill
    assert Point.from_dict(p.as_dict()) == p


def test_step_rows_round_trip_through_csv_and_mix_with_uniform_rows(tmp_path: Path) -> None:
    points = [
        Point.step([(256, 0), (31, 480)], 3, 900, 0.3125),
        Point.step([], 2, 64, 0.04),
        Point(1, "decode", 8, 0, 512, None),
    ]
    path = write_points(points, tmp_path / "steps.csv")
    assert path.read_text().splitlines()[:2] == [
        "tp,phase,batch_size,prompt_tokens,context_tokens,time_s,prefill_chunks,num_decode_seqs,decode_context_tokens",
        "1,step,5,,,0.3125,256+0 31+480,3,900",
    ]
    assert read_points(path) == points


def test_step_row_errors(tmp_path: Path) -> None:
    header = "tp,phase,batch_size,prompt_tokens,context_tokens,time_s,prefill_chunks,num_decode_seqs,decode_context_tokens\n"
    cases = {
        header + "1,step,,,,0.1,256,0,0\n": "prefill_chunks: '256' is not 'q+c'",
        header + "1,step,,,,0.1,0+5,0,0\n": "prefill_chunks: '0+5' is not 'q+c'",
        header + "1,step,,,,0.1,,3,2\n": "each of the 3 decodes attends to >= 1 token",
        header + "1,step,,,,0.1,,,\n": "a step needs a prefill chunk or a decode",
        header + "1,step,4,,,0.1,8+0,2,20\n": "batch_size: 4 but the step has 3 sequences",
        "tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n1,step,1,,,0.1\n": "a step row needs column(s)",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(KvsimError, match=re.escape(message)):
            read_points(bad)


def test_fit_recovers_a_sum_roofline_from_mixed_steps() -> None:
    points = timed_with(mixed_steps(300, 1), CPU_TRUE, np.ones(300))
    result = fit_roofline(points, model=SMALL, gpu=CPU, combine="sum")
    for name in ("compute_efficiency", "kv_memory_efficiency"):
        assert getattr(result.config, name) == pytest.approx(getattr(CPU_TRUE, name), rel=1e-3), name
    # In the sum form the weight reads are the same time every step, as is the fixed
    # overhead: only their sum is determined (the module docstring says so).
    weights_s = RooflineCostModel(SMALL, CPU, CPU_TRUE).terms(
        Batch(num_decode_seqs=1, decode_context_tokens=1)
    )

    def constant_s(cfg: RooflineCostConfig) -> float:
        return weights_s.weight_bytes / (CPU.hbm_bandwidth_bytes_per_s * cfg.memory_efficiency) + (
            cfg.per_iteration_overhead_s + SMALL.num_layers * cfg.per_layer_overhead_s
        )

    assert constant_s(result.config) == pytest.approx(constant_s(CPU_TRUE), rel=1e-6)
    assert result.config.combine == "sum"
    assert result.median_abs_rel_error_prefill < 1e-6 and result.median_abs_rel_error_decode < 1e-6


def test_robust_fit_follows_the_undisturbed_majority_and_match_total_the_mean() -> None:
    # 80% of steps exact, 20% stretched 1.3x-3x (another process took the core).
    rng = np.random.default_rng(3)
    n = 400
    factors = np.where(rng.random(n) < 0.2, rng.uniform(1.3, 3.0, n), 1.0)
    points = timed_with(mixed_steps(n, 2), CPU_TRUE, factors)
    plain = fit_roofline(points, model=SMALL, gpu=CPU, combine="sum").config
    robust = fit_roofline(points, model=SMALL, gpu=CPU, combine="sum", robust_scale=0.05).config
    undisturbed = [p for p, f in zip(points, factors, strict=True) if f == 1.0]

    def median_error(cfg: RooflineCostConfig) -> float:
        m = RooflineCostModel(SMALL, CPU, cfg)
        return float(np.median([abs(point_time_s(m, p) / (p.time_s or 1.0) - 1) for p in undisturbed]))

    assert median_error(robust) < 0.02 and median_error(plain) > 0.1  # 1.0% and 12.7% when written
    assert abs(robust.compute_efficiency / CPU_TRUE.compute_efficiency - 1) < 0.02
    assert abs(robust.kv_memory_efficiency or 0.0) / 0.35 == pytest.approx(1.0, abs=0.02)
    matched = fit_roofline(points, model=SMALL, gpu=CPU, combine="sum", robust_scale=0.05, match_total=True)
    m = RooflineCostModel(SMALL, CPU, matched.config)
    total = sum(point_time_s(m, p) for p in points)
    assert total == pytest.approx(sum(p.time_s or 0.0 for p in points), rel=1e-6)
    ratio = robust.compute_efficiency / matched.config.compute_efficiency
    assert ratio == pytest.approx(float(np.mean(factors)), rel=0.05)  # one factor: the mean stretch
