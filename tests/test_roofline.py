"""Roofline cost model: hand-computed iterations, monotonicity, tensor parallelism, fast-forward parity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.cost.base import Batch
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.roofline import RooflineCostModel
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.model.specs import GpuSpec, ModelSpec

# Round numbers so every term can be computed by hand: 1e8 layer parameters plus an
# embedding and an LM head of 1000 x 1024 each.
MODEL = ModelSpec(
    name="round",
    num_layers=2,
    hidden_size=1024,
    num_attention_heads=8,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=4096,
    vocab_size=1000,
    num_params=1e8 + 2 * 1000 * 1024,
    max_model_len=8192,
)
GPU = GpuSpec(
    name="round-gpu",
    memory_bytes=10**11,
    hbm_bandwidth_bytes_per_s=1e12,
    bf16_flops=1e15,
    fp16_flops=1e15,
    interconnect_bandwidth_bytes_per_s=1e11,
    interconnect_latency_s=1e-5,
    pcie_bandwidth_bytes_per_s=1e10,
)
CFG = RooflineCostConfig(
    compute_efficiency=0.5, memory_efficiency=0.5, per_layer_overhead_s=1e-5, per_iteration_overhead_s=1e-4
)


def test_decode_step_by_hand() -> None:
    m = RooflineCostModel(MODEL, GPU, CFG, tp=1)
    # linear: weights (1e8 + 1.024e6) x 2 bytes at 0.5 TB/s = 4.04096e-4 s (memory-bound)
    # attention: 8192 KV bytes/token x 4000 tokens at 0.5 TB/s = 6.5536e-5 s (memory-bound)
    # fixed: 2 layers x 10 us + 100 us
    batch = Batch(num_decode_seqs=4, decode_context_tokens=4000)
    assert m.step_time_s(batch) == pytest.approx(4.04096e-4 + 6.5536e-5 + 1.2e-4, rel=1e-12)


def test_sum_form_adds_compute_and_memory_times_by_hand() -> None:
    m = RooflineCostModel(MODEL, GPU, CFG.model_copy(update={"combine": "sum"}), tp=1)
    # linear: 4 tokens x 2e8 FLOP + 4 x 2 x 1.024e6 (LM head) at 0.5 PFLOP/s = 1.616384e-6 s
    #         plus the weights, 4.04096e-4 s (as in the max form)
    # attention: 4000 pairs x 4 x 2 layers x 8 heads x 128 at 0.5 PFLOP/s = 6.5536e-8 s
    #         plus the KV reads, 6.5536e-5 s
    batch = Batch(num_decode_seqs=4, decode_context_tokens=4000)
    expected = 1.616384e-6 + 4.04096e-4 + 6.5536e-8 + 6.5536e-5 + 1.2e-4
    assert m.step_time_s(batch) == pytest.approx(expected, rel=1e-12)


def test_fp32_weights_and_kv_take_four_bytes_and_the_fp32_peak() -> None:
    fp32 = MODEL.model_copy(update={"weight_dtype": "fp32"})
    cpu = GPU.model_copy(update={"fp32_flops": 1e12})
    m = RooflineCostModel(fp32, cpu, CFG, tp=1)
    batch = Batch(prefill_chunks=[(512, 0)])
    t = m.terms(batch)
    assert t.weight_bytes == (1e8 + 1.024e6) * 4
    assert t.kv_bytes == 2 * 2 * 8 * 128 * 4 * 512  # K and V, 2 layers, 8 heads of 128, fp32
    assert cpu.peak_flops("fp32") == 1e12 and GPU.peak_flops("fp32") == GPU.bf16_flops


def test_tensor_parallel_halves_work_and_adds_two_allreduces_per_layer() -> None:
    one, two = RooflineCostModel(MODEL, GPU, CFG, tp=1), RooflineCostModel(MODEL, GPU, CFG, tp=2)
    batch = Batch(num_decode_seqs=4, decode_context_tokens=4000)
    t1, t2 = one.terms(batch), two.terms(batch)
    assert t2.linear_flops == t1.linear_flops / 2
    assert t2.weight_bytes == t1.weight_bytes / 2
    assert t2.kv_bytes == t1.kv_bytes / 2
    assert (t1.num_allreduces, t2.num_allreduces) == (0, 4)
    # ring all-reduce: 2 (tp-1)/tp x 4 tokens x 1024 x 2 bytes, 4 times
    assert t2.allreduce_bus_bytes == 4 * 1.0 * 4 * 1024 * 2
    comm = 4 * 1e-5 + 32768 / 1e11
    assert two.step_time_s(batch) == pytest.approx(2.02048e-4 + 3.2768e-5 + comm + 1.2e-4, rel=1e-12)


def test_q_and_k_norms_over_all_heads_add_an_all_reduce_per_layer_under_tp() -> None:
    normed = MODEL.model_copy(update={"qk_norm_across_heads": True})
    batch = Batch(num_decode_seqs=4, decode_context_tokens=4000)
    plain, more = (RooflineCostModel(m, GPU, CFG, tp=2).terms(batch) for m in (MODEL, normed))
    assert more.num_allreduces == plain.num_allreduces + 2  # 2 layers, q's and k's sums in one
    # ring: 2 (tp-1)/tp x 4 tokens x two float32, twice
    assert more.allreduce_bus_bytes - plain.allreduce_bus_bytes == 2 * 1.0 * 4 * 2 * 4
    assert RooflineCostModel(normed, GPU, CFG, tp=1).terms(batch).num_allreduces == 0


def test_tp_lowers_compute_bound_prefill_but_pays_communication() -> None:
    model, gpu = MODEL_PRESETS["llama-3-8b"], GPU_PRESETS["h100-sxm"]
    batch = Batch(prefill_chunks=[(8192, 0)])
    times = {tp: RooflineCostModel(model, gpu, tp=tp).step_time_s(batch) for tp in (1, 2, 4)}
    assert times[1] > times[2] > times[4]
    no_comm = RooflineCostConfig(allreduce_latency_s=0.0, allreduce_bandwidth_bytes_per_s=1e30)
    assert RooflineCostModel(model, gpu, no_comm, tp=4).step_time_s(batch) < times[4]


def test_prefill_grows_with_chunk_and_context_decode_with_batch_and_context() -> None:
    m = RooflineCostModel(MODEL_PRESETS["llama-3-8b"], GPU_PRESETS["h100-sxm"])
    chunks = [m.step_time_s(Batch(prefill_chunks=[(q, 512)])) for q in (16, 256, 2048, 8192)]
    contexts = [m.step_time_s(Batch(prefill_chunks=[(2048, c)])) for c in (0, 4096, 32768, 131072)]
    batches = [
        m.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=b * 2048)) for b in (1, 64, 256, 1024)
    ]
    decode_ctx = [
        m.step_time_s(Batch(num_decode_seqs=8, decode_context_tokens=8 * c)) for c in (128, 8192, 65536)
    ]
    for series in (chunks, contexts, batches, decode_ctx):
        assert series == sorted(series) and len(set(series)) == len(series)


def test_empty_batch_costs_nothing_and_host_transfer_uses_pcie() -> None:
    m = RooflineCostModel(MODEL, GPU, CFG)
    assert m.step_time_s(Batch()) == 0.0
    assert m.pcie_transfer_s(2e10) == 2.0


@settings(max_examples=60, deadline=None)
@given(
    num_seqs=st.integers(1, 512),
    tp=st.sampled_from([1, 2, 4, 8]),
    kv=st.sampled_from(["auto", "fp8"]),
    contexts=st.lists(st.integers(1, 200_000), min_size=1, max_size=20),
    combine=st.sampled_from(["max", "sum"]),
)
def test_decode_steps_equal_step_time_bit_for_bit(
    num_seqs: int, tp: int, kv: str, contexts: list[int], combine: str
) -> None:
    cfg = RooflineCostConfig(combine=combine)  # type: ignore[arg-type]
    m = RooflineCostModel(MODEL_PRESETS["llama-3-8b"], GPU_PRESETS["h100-sxm"], cfg, tp=tp, kv_cache_dtype=kv)
    ctx = np.array([num_seqs * c for c in contexts], dtype=np.int64)
    fast = m.decode_steps_s(num_seqs, ctx)
    slow = [m.step_time_s(Batch(num_decode_seqs=num_seqs, decode_context_tokens=int(c))) for c in ctx]
    assert fast.tolist() == slow
