"""Calibrated cost model: interpolation on synthetic profiles with known answers, the shipped
H200 profiles, profile matching in the factory, and fast-forward parity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cost.base import Batch, ConstantCostModel
from kvsim.cost.calibrated import CalibratedCostModel, Curve1D
from kvsim.cost.config import ConstantCostConfig, ProfileCostConfig, RooflineCostConfig
from kvsim.cost.factory import build_cost_model
from kvsim.cost.fit import point_time_s, read_points
from kvsim.cost.profile import load_profile, model_shape, validate_profile
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import ProfileError
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.scenario.checks import check_cost_references
from kvsim.scenario.schema import Scenario

LLAMA3 = MODEL_PRESETS["llama-3-8b"]
H100 = GPU_PRESETS["h100-sxm"]
H200 = GPU_PRESETS["h200"]

TOKENS = [1, 16, 256, 4096]
OPS = {
    "qkv": (1e-5, 1e-8),
    "o": (1e-5, 1e-8),
    "gate_up": (2e-5, 4e-8),
    "down": (1e-5, 2e-8),
    "lm_head": (1e-4, 1e-7),
}


def dense(t: float) -> float:  # qkv + o + gate_up + down + elementwise, one layer
    return 5.5e-5 + 8.1e-8 * t


def prefill(q: float, c: float) -> float:
    return 1e-5 + 1e-8 * q + 1e-9 * c + 1e-12 * q * c


def decode(b: float, c: float) -> float:
    return 5e-6 + 1e-7 * b + 1e-9 * c + 1e-10 * b * c


def synthetic_profile(tp: int = 1, gpu: str | None = "h100-sxm") -> dict[str, Any]:
    """Linear and bilinear curves, which piecewise-(bi)linear interpolation reproduces exactly."""
    chunks, pctx = [16, 256, 2048], [0, 1024, 8192]
    batches, dctx = [1, 8, 64], [16, 1024, 8192]
    return {
        "format": "kvsim-profile",
        "version": 1,
        "kind": "kernels",
        "created": "2026-11-29T00:00:00Z",
        "command": "synthetic",
        "model": model_shape(LLAMA3),
        "dtype": "bf16",
        "tp": tp,
        "gpu": gpu,
        "device": {"type": "synthetic"},
        "settings": {},
        "per_iteration_overhead_s": 2e-4,
        "gemm": {
            "tokens": TOKENS,
            "shapes": {op: [1, 1] for op in OPS},
            "time_s": {op: [a + b * t for t in TOKENS] for op, (a, b) in OPS.items()},
        },
        "elementwise": {"tokens": TOKENS, "time_s": [5e-6 + 1e-9 * t for t in TOKENS]},
        "prefill_attention": {
            "chunk_tokens": chunks,
            "context_tokens": pctx,
            "time_s": [[prefill(q, c) for c in pctx] for q in chunks],
        },
        "decode_attention": {
            "bf16": {
                "batch_sizes": batches,
                "context_tokens": dctx,
                "time_s": [[decode(b, c) for c in dctx] for b in batches],
            }
        },
        "hbm_copy": {"bytes": [1], "time_s": [1.0], "bandwidth_bytes_per_s": 3e12},
        "host_transfer": {"status": "measured", "bandwidth_bytes_per_s": 5e10},
        "allreduce": {"status": "skipped", "reason": "synthetic"},
    }


@pytest.fixture
def profile_path(tmp_path: Path) -> Path:
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps(synthetic_profile()))
    return path


def calibrated(path: Path, **kw: Any) -> CalibratedCostModel:
    model = build_cost_model(
        ProfileCostConfig(profile=str(path), **kw), model=LLAMA3, gpu=H100, tp=1, kv_cache_dtype="auto"
    )
    assert isinstance(model, CalibratedCostModel)
    return model


def test_mixed_iteration_matches_the_known_curves(profile_path: Path) -> None:
    m = calibrated(profile_path)
    batch = Batch(prefill_chunks=[(100, 500)], num_decode_seqs=4, decode_context_tokens=8000)
    expected = (
        32 * dense(104)  # 104 tokens through the layers
        + (1e-4 + 1e-7 * 5)  # LM head: 4 decodes + 1 chunk
        + 32 * prefill(100, 500)
        + 32 * decode(4, 2000)  # mean context 8000 / 4
        + 2e-4
    )
    assert m.step_time_s(batch) == pytest.approx(expected, rel=1e-12)
    assert m.pcie_transfer_s(5e10) == 1.0


def test_extrapolation_is_proportional_to_work_and_flat_below_the_grid(profile_path: Path) -> None:
    m = calibrated(profile_path)
    assert m.dense(8192) == pytest.approx(2 * dense(4096), rel=1e-12)
    assert m.decode(128, 1024) == pytest.approx(2 * decode(64, 1024), rel=1e-12)
    assert m.decode(8, 16384) == pytest.approx(2 * decode(8, 8192), rel=1e-12)
    assert m.decode(4, 8) == pytest.approx(decode(4, 16), rel=1e-12)
    pairs = lambda q, c: q * c + q * (q + 1) / 2  # noqa: E731
    assert m.prefill(4096, 0) == pytest.approx(prefill(2048, 0) * pairs(4096, 0) / pairs(2048, 0), rel=1e-12)
    assert m.prefill(256, 16384) == pytest.approx(
        prefill(256, 8192) * pairs(256, 16384) / pairs(256, 8192), rel=1e-12
    )


def test_noisy_curves_are_made_monotone() -> None:
    curve = Curve1D([1, 2, 3], [1.0, 0.5, 2.0])
    assert [curve(x) for x in (1, 1.5, 2, 2.5, 3)] == [1.0, 1.0, 1.0, 1.5, 2.0]


def test_per_iteration_overhead_override(profile_path: Path) -> None:
    batch = Batch(num_decode_seqs=1, decode_context_tokens=100)
    assert calibrated(profile_path).step_time_s(batch) - calibrated(
        profile_path, per_iteration_overhead_s=0.0
    ).step_time_s(batch) == pytest.approx(2e-4)


def test_factory_builds_each_kind(profile_path: Path) -> None:
    kw: dict[str, Any] = {"model": LLAMA3, "gpu": H100, "tp": 1, "kv_cache_dtype": "auto"}
    assert isinstance(build_cost_model(ConstantCostConfig(step_time_s=0.01), **kw), ConstantCostModel)
    assert isinstance(build_cost_model(RooflineCostConfig(), **kw), RooflineCostModel)
    relative = build_cost_model(
        ProfileCostConfig(profile="synthetic.json"), base_dir=profile_path.parent, **kw
    )
    assert isinstance(relative, CalibratedCostModel)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model": MODEL_PRESETS["llama-2-7b"]}, "profile is for model 'llama-3-8b' (num_kv_heads=8)"),
        ({"tp": 2}, "measured for tp=1, the scenario uses tp=2"),
        ({"kv_cache_dtype": "fp8"}, "KV dtypes ['bf16'], not kv_cache_dtype='fp8'"),
        ({"gpu": GPU_PRESETS["a100-80gb"]}, "measured on GPU 'h100-sxm', the scenario uses 'a100-80gb'"),
    ],
)
def test_mismatched_profiles_are_refused(profile_path: Path, overrides: dict[str, Any], message: str) -> None:
    kw: dict[str, Any] = {"model": LLAMA3, "gpu": H100, "tp": 1, "kv_cache_dtype": "auto", **overrides}
    with pytest.raises(ProfileError) as err:
        build_cost_model(ProfileCostConfig(profile=str(profile_path)), **kw)
    assert message in str(err.value)


def test_missing_and_malformed_profiles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no shipped profile named 'nope'"):
        load_profile("nope")
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "absent.json")
    bad = synthetic_profile()
    bad["gemm"]["time_s"]["qkv"][0] = -1.0
    del bad["decode_attention"]["bf16"]["batch_sizes"]
    with pytest.raises(ProfileError) as err:
        validate_profile(bad, "bad.json")
    assert "gemm.time_s.qkv.0: must be a finite time > 0, got -1.0" in str(err.value)
    assert "decode_attention.bf16.batch_sizes: is missing" in str(err.value)
    newer = {**synthetic_profile(), "version": 2}
    with pytest.raises(ProfileError, match="this kvsim reads profile version 1, got 2"):
        validate_profile(newer, "new.json")


def test_check_cost_references_reports_the_field(profile_path: Path) -> None:
    ok = Scenario(replicas=[{"name": "a", "cost_model": {"profile": str(profile_path)}}])
    assert check_cost_references(ok) == []
    wrong_tp = Scenario(replicas=[{"name": "a", "tp": 4, "cost_model": {"profile": str(profile_path)}}])
    [(path, rule)] = check_cost_references(wrong_tp)
    assert path == "replicas.0.cost_model.profile" and "tp=4" in rule


# The shipped H200 profiles (measured with calibration/ on an NVIDIA H200, see docs/cost-model.md).


def shipped(tp: int, kv: str = "auto") -> CalibratedCostModel:
    m = build_cost_model(
        ProfileCostConfig(profile=f"h200-llama-3-8b-bf16-tp{tp}"),
        model=LLAMA3,
        gpu=H200,
        tp=tp,
        kv_cache_dtype=kv,
    )
    assert isinstance(m, CalibratedCostModel)
    return m


def test_shipped_prefill_grows_with_chunk_and_context_decode_with_batch_and_context() -> None:
    m = shipped(1)
    chunks = [m.step_time_s(Batch(prefill_chunks=[(q, 1000)])) for q in (16, 100, 700, 3000, 12000, 30000)]
    contexts = [m.step_time_s(Batch(prefill_chunks=[(1500, c)])) for c in (0, 300, 3000, 9000, 20000, 60000)]
    batches = [
        m.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=b * 3000))
        for b in (1, 3, 20, 100, 300, 900)
    ]
    ctx = [
        m.step_time_s(Batch(num_decode_seqs=48, decode_context_tokens=48 * c))
        for c in (700, 3000, 12000, 40000)
    ]
    for series in (chunks, contexts, batches, ctx):
        assert series == sorted(series) and len(set(series)) == len(series)


def test_shipped_tp2_lowers_per_gpu_compute_and_adds_communication() -> None:
    one, two = shipped(1), shipped(2)
    assert two.dense(8192) < 0.6 * one.dense(8192)
    assert one._allreduce_s(8192) == 0.0
    # no measured all-reduce (one GPU): NVLink latency + ring bandwidth from the GPU spec
    assert two._allreduce_s(8192) == pytest.approx(2 * 32 * (5e-6 + 0.5 * 2 * 8192 * 4096 * 2 / 450e9))
    big_prefill = Batch(prefill_chunks=[(8192, 0)])
    assert two.step_time_s(big_prefill) < one.step_time_s(big_prefill)


@settings(max_examples=60, deadline=None)
@given(
    num_seqs=st.integers(1, 1024),
    tp=st.sampled_from([1, 2]),
    kv=st.sampled_from(["auto", "fp8"]),
    contexts=st.lists(st.integers(1, 100_000), min_size=1, max_size=20),
)
def test_decode_steps_equal_step_time_bit_for_bit(
    num_seqs: int, tp: int, kv: str, contexts: list[int]
) -> None:
    m = shipped(tp, kv)
    ctx = np.array([num_seqs * c for c in contexts], dtype=np.int64)
    fast = m.decode_steps_s(num_seqs, ctx)
    slow = [m.step_time_s(Batch(num_decode_seqs=num_seqs, decode_context_tokens=int(c))) for c in ctx]
    assert fast.tolist() == slow


def test_context_sums_not_divisible_by_the_batch_agree_too() -> None:
    m = shipped(1)
    ctx = np.array([1, 7, 1001, 33333], dtype=np.int64)  # not multiples of num_seqs
    assert m.decode_steps_s(3, ctx).tolist() == [
        m.step_time_s(Batch(num_decode_seqs=3, decode_context_tokens=int(c))) for c in ctx
    ]


@pytest.mark.parametrize(
    ("name", "dtype", "tolerance"), [("llama-3-8b", "bf16", 0.11), ("llama-2-7b", "fp16", 0.13)]
)
def test_calibrated_model_reproduces_end_to_end_h200_iterations(
    name: str, dtype: str, tolerance: float
) -> None:
    """Whole forward passes timed on the H200 (calibration/endtoend.py) against the sum of the
    shipped profile's kernel curves; the forward passes have no CPU scheduling cost."""
    csv = Path(__file__).resolve().parents[1] / "calibration" / "measurements" / f"e2e-h200-{name}.csv"
    model = build_cost_model(
        ProfileCostConfig(profile=f"h200-{name}-{dtype}-tp1", per_iteration_overhead_s=0.0),
        model=MODEL_PRESETS[name],
        gpu=H200,
        tp=1,
        kv_cache_dtype="auto",
    )
    errors = [point_time_s(model, p) / p.time_s - 1 for p in read_points(csv) if p.time_s is not None]
    assert len(errors) == 8 and max(abs(e) for e in errors) < tolerance
