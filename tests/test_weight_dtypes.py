"""Weight precisions: bytes per weight with their scales, the compute each runs at, and an
engine's ``quantization`` applied to the model it serves."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.cost.base import Batch
from kvsim.cost.roofline import RooflineCostModel
from kvsim.model.kv_sizing import GIB, kv_dtype_bytes, weight_bytes
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS, resolve_gpu, resolve_model
from kvsim.model.specs import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES, compute_dtype
from kvsim.scenario.resolved import resolve_plan


def test_bytes_per_weight_include_the_scales() -> None:
    assert WEIGHT_DTYPE_BYTES["bf16"] == WEIGHT_DTYPE_BYTES["fp16"] == 2
    assert WEIGHT_DTYPE_BYTES["fp8"] == 1  # one scale per tensor: nothing per weight
    assert WEIGHT_DTYPE_BYTES["fp8_block"] == 1 + 4 / 16_384  # an fp32 scale per 128 x 128 block
    assert WEIGHT_DTYPE_BYTES["int4"] == 0.5 + 2.5 / 128  # fp16 scale + 4-bit zero per group of 128
    assert WEIGHT_DTYPE_BYTES["nvfp4"] == 4.5 / 8  # 4 bits + an 8-bit scale per 16
    assert WEIGHT_DTYPE_BYTES["mxfp4"] == 4.25 / 8  # 4 bits + an 8-bit scale per 32


def test_the_dtypes_kvsim_had_keep_their_bytes_and_peaks() -> None:
    """bf16 / fp16 / fp8 / fp32 scenarios give the same results as before the new precisions:
    the same bytes per weight, and the same peak as peak_flops(weight_dtype) gave."""
    for dtype in ("fp16", "bf16", "fp8", "fp32", "int8"):
        assert WEIGHT_DTYPE_BYTES[dtype] == KV_DTYPE_BYTES[dtype]
    old = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16"}
    for gpu in GPU_PRESETS.values():
        for dtype, before in old.items():
            expected = {
                "fp32": gpu.fp32_flops or gpu.bf16_flops,
                "fp16": gpu.fp16_flops,
                "bf16": gpu.bf16_flops,
                "fp8": gpu.fp8_flops or gpu.bf16_flops,
                "int8": gpu.int8_ops or gpu.bf16_flops,
            }[before]
            assert gpu.peak_flops(dtype) == expected, (gpu.name, dtype)


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        ("a100-80gb", {"fp8": "bf16", "fp8_block": "bf16", "int8": "int8", "int4": "bf16", "nvfp4": "bf16"}),
        ("h100-sxm", {"fp8": "fp8", "fp8_block": "fp8", "int4": "bf16", "nvfp4": "bf16", "mxfp4": "bf16"}),
        ("b200", {"fp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4", "int4": "bf16", "bf16": "bf16"}),
        ("rtx-pro-6000", {"nvfp4": "fp4", "fp8_block": "fp8"}),
        ("arc-pro-b60", {"fp8": "bf16", "int8": "int8"}),
    ],
)
def test_compute_dtype_of_each_precision(gpu: str, expected: dict[str, str]) -> None:
    spec = resolve_gpu(gpu)
    for weight, compute in expected.items():
        assert compute_dtype(weight, spec) == compute, (gpu, weight)


def test_peak_flops_takes_weight_precisions() -> None:
    b200, h100 = resolve_gpu("b200"), resolve_gpu("h100-sxm")
    assert b200.peak_flops("nvfp4") == b200.fp4_flops == 9e15
    assert b200.peak_flops("fp8_block") == 4.5e15
    assert h100.peak_flops("nvfp4") == h100.bf16_flops  # weight-only on Hopper (Marlin)
    assert h100.peak_flops("fp4") == h100.bf16_flops  # no fp4 tensor cores
    with pytest.raises(ValueError, match="weight dtype 'fp6' is not one of"):
        compute_dtype("fp6", h100)


def test_quantization_sets_the_served_model_of_a_group() -> None:
    scenario = kvsim.load_scenario(
        {
            "model": "llama-3.1-70b",
            "replicas": [
                {"name": "fp4", "gpu": "b200", "tp": 1, "engine": {"quantization": "nvfp4"}},
                {"name": "bf16", "gpu": "b200", "tp": 1, "engine": {"max_model_len": 32768}},
            ],
        }
    )
    plan = resolve_plan(scenario)
    fp4, bf16 = plan.groups
    assert plan.model.weight_dtype == "bf16"  # the scenario's model is unchanged
    assert plan.model_of(fp4).weight_dtype == "nvfp4" and plan.model_of(bf16) is plan.model
    assert fp4.capacity.weight_bytes_per_shard == 70_553_706_496 * 0.5625
    assert bf16.capacity.weight_bytes_per_shard == 70_553_706_496 * 2
    assert fp4.capacity.num_blocks > bf16.capacity.num_blocks
    # auto KV stays 16-bit: weight quantization does not quantize the cache
    assert kv_dtype_bytes(plan.model_of(fp4), "auto") == 2.0


def test_quantization_changes_the_roofline_compute_rate_and_weight_reads() -> None:
    model, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("b200")
    fp4 = model.model_copy(update={"weight_dtype": "nvfp4"})
    prefill = Batch(prefill_chunks=[(8192, 0)])
    decode = Batch(num_decode_seqs=1, decode_context_tokens=2048)
    bf16_cost, fp4_cost = RooflineCostModel(model, gpu), RooflineCostModel(fp4, gpu)
    assert fp4_cost.terms(decode).weight_bytes == pytest.approx(
        bf16_cost.terms(decode).weight_bytes * 0.5625 / 2
    )
    assert fp4_cost.step_time_s(prefill) < bf16_cost.step_time_s(prefill) / 2  # fp4 tensor cores: 4x bf16


def test_gpt_oss_experts_are_mxfp4() -> None:
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        assert MODEL_PRESETS[name].expert_weight_dtype == "mxfp4"
    assert weight_bytes(MODEL_PRESETS["gpt-oss-120b"]) < 65 * GIB  # "fits a single 80 GB GPU"
