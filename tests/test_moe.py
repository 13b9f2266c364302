"""Mixture of experts: the experts a batch activates, the weights a step reads, expert parallelism."""

from __future__ import annotations

import numpy as np
import pytest
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.cost.base import Batch
from kvsim.cost.roofline import RooflineCostModel
from kvsim.model.kv_sizing import weight_bytes
from kvsim.model.moe import (
    expected_distinct_experts,
    expert_params_per_layer,
    inclusion_probabilities,
    module_params,
    routed_expert_params,
    shared_expert_params,
)
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.model.specs import WEIGHT_DTYPE_BYTES, ModelSpec
from kvsim.scenario.loading import load_scenario

MIXTRAL = resolve_model("mixtral-8x7b")
H100 = resolve_gpu("h100-sxm")


def test_expected_distinct_experts_by_hand() -> None:
    # Top-2 of 8, uniform: a given expert is missed by one token with probability 6/8, by
    # three tokens (3/4)^3 = 27/64, so 8 x (1 - 27/64) = 37/8 = 4.625 distinct experts.
    assert expected_distinct_experts(8, 2, 3) == 4.625
    assert expected_distinct_experts(8, 2, 1) == 2.0  # one token: exactly its top-k
    assert expected_distinct_experts(8, 2, 0) == 0.0
    assert expected_distinct_experts(64, 6, 256) == pytest.approx(64.0, abs=1e-9)


def test_brute_force_agrees_on_a_small_case() -> None:
    # Enumerate every way 2 tokens pick 2 of 4 experts (6 x 6 equally likely pairs).
    from itertools import combinations

    picks = list(combinations(range(4), 2))
    mean = np.mean([len(set(a) | set(b)) for a in picks for b in picks])
    assert expected_distinct_experts(4, 2, 2) == pytest.approx(mean) == pytest.approx(4 * (1 - 0.25))


def test_skewed_routing_activates_fewer_experts() -> None:
    q = inclusion_probabilities(8, 2, 1.5)
    assert q.sum() == pytest.approx(2.0) and (q <= 1.0).all() and q[0] == 1.0  # the top expert: always
    assert expected_distinct_experts(8, 2, 4, 1.5) < expected_distinct_experts(8, 2, 4)
    assert expected_distinct_experts(8, 2, 1, 1.5) == pytest.approx(2.0)


def test_mixtral_parameter_structure() -> None:
    per_expert = 3 * 4096 * 14336  # gate, up, down
    assert expert_params_per_layer(MIXTRAL) == per_expert
    assert routed_expert_params(MIXTRAL) == 32 * 8 * per_expert  # 45.1B of the 46.7B
    lite = resolve_model("deepseek-v2-lite")  # 26 MoE layers (first dense), 2 shared experts
    assert shared_expert_params(lite) == 26 * 2 * 3 * 2048 * 1408


def test_decode_weight_traffic_grows_with_the_batch_until_every_expert_is_read() -> None:
    cost = RooflineCostModel(MIXTRAL, H100, tp=2)
    read = {
        b: cost.terms(Batch(num_decode_seqs=b, decode_context_tokens=b)).weight_bytes for b in (1, 3, 64, 256)
    }
    per_expert = 32 * 3 * 4096 * 14336 * 2 / 2  # all MoE layers, bf16, per GPU of 2
    assert read[3] - read[1] == pytest.approx((4.625 - 2.0) * per_expert)
    assert read[1] < read[3] < read[64] == pytest.approx(read[256], rel=1e-6)
    # Every weight once but the embedding table, of which a step reads only its tokens' rows.
    assert read[256] == pytest.approx((MIXTRAL.num_params - 32000 * 4096) * 2 / 2, rel=1e-9)
    assert 12.5e9 < read[1] < 13e9  # batch 1 reads the top-2 experts only: 12.75 GB per shard
    # The fast-forward prices runs with the same arithmetic, bit for bit.
    ctx = np.array([1000, 1064, 1128])
    run = cost.decode_steps_s(64, ctx)
    assert list(run) == [
        cost.step_time_s(Batch(num_decode_seqs=64, decode_context_tokens=int(c))) for c in ctx
    ]


def test_expert_parallelism_trades_all_reduces_for_all_to_alls() -> None:
    tp = RooflineCostModel(MIXTRAL, H100, tp=4)
    ep = RooflineCostModel(MIXTRAL, H100, tp=4, expert_parallel=True)
    batch = Batch(num_decode_seqs=128, decode_context_tokens=128 * 500)
    t, e = tp.terms(batch), ep.terms(batch)
    assert t.weight_bytes == e.weight_bytes  # the same expected experts per GPU
    assert (t.num_allreduces, e.num_allreduces) == (64, 32 + 2 * 32)
    h, k = 4096, 2
    attention = 32 * 2 * 3 / 4 * h * 2  # one all-reduce per layer, ring: 2 (tp-1)/tp
    all_to_all = 2 * 32 * k * h * 2 * 3 / 4 / 4  # dispatch + combine, 1/tp of the tokens each
    assert e.allreduce_bus_bytes == pytest.approx(128 * (attention + all_to_all))
    with pytest.raises(ValueError, match="mixture-of-experts"):
        RooflineCostModel(resolve_model("llama-3-8b"), H100, expert_parallel=True)


def test_expert_parallel_scenarios_are_checked() -> None:
    load_scenario({"model": "mixtral-8x7b", "replicas": [{"tp": 4, "expert_parallel": True}]})
    with pytest.raises(Exception, match="not a mixture of experts"):
        load_scenario({"model": "llama-3-8b", "replicas": [{"tp": 2, "expert_parallel": True}]})
    with pytest.raises(Exception, match="8 experts, not a multiple of tp=16"):
        load_scenario({"model": "mixtral-8x7b", "replicas": [{"tp": 16, "expert_parallel": True}]})


@pytest.mark.parametrize("expert_parallel", [False, True])
def test_fast_forward_equals_stepping_for_moe(expert_parallel: bool) -> None:
    # A decode run prices its steps in one vectorised call: the expected experts of a batch
    # (constant over the run) must give each step what stepping would.
    scenario = {
        "seed": 1,
        "model": "mixtral-8x7b",
        "replicas": [{"gpu": "h100-sxm", "tp": 2, "expert_parallel": expert_parallel}],
        "workload": {"num_requests": 80, "arrival": {"kind": "poisson", "rate_per_s": 8.0}},
    }
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    assert len(fast.iterations) == len(slow.iterations)
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(fast, attr), getattr(slow, attr))


def test_the_parts_of_deepseek_v3_by_hand() -> None:
    """DeepSeek-V3's config (61 layers, hidden 7,168, 128 heads, q_lora_rank 1,536, kv_lora_rank
    512, rope 64, head 128, 3 dense layers of 18,432, one shared expert of 2,048): q_a 7,168 x
    1,536 + q_b 1,536 x 128 x 192 + kv_a 7,168 x 576 + kv_b 512 x 128 x 256 per layer; o_proj
    128 x 128 x 7,168."""
    v3 = resolve_model("deepseek-v3")
    qkv = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
    assert module_params(v3, "attention_qkv") == 61 * qkv == 4_249_550_848
    assert module_params(v3, "attention_o") == 61 * 128 * 128 * 7168
    assert module_params(v3, "dense_mlp") == 3 * 3 * 7168 * 18432
    assert module_params(v3, "shared_experts") == 58 * 3 * 7168 * 2048
    # A GQA model with an output gate (Qwen3.5's full-attention layers): q twice as wide.
    gqa = ModelSpec(name="g", num_layers=4, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16,
                    intermediate_size=128, vocab_size=256, num_params=1e6, max_model_len=4096)  # fmt: skip
    assert module_params(gqa, "attention_qkv") == 4 * 64 * (4 + 2 * 2) * 16
    assert (
        module_params(gqa.model_copy(update={"attn_output_gate": True}), "attention_qkv")
        == 4 * 64 * (8 + 4) * 16
    )
    assert module_params(gqa, "dense_mlp") == 4 * 3 * 64 * 128


def test_an_nvfp4_export_counts_each_part_at_its_own_precision() -> None:
    """nvidia/DeepSeek-R1-0528-FP4-V2: 16-bit weights, nvfp4 routed experts, and o_proj, the
    dense layers and the shared experts nvfp4 too: only the q/kv projections, the router, the
    norms and the embeddings stay 16-bit."""
    v2 = resolve_model("nvidia/DeepSeek-R1-0528-FP4-V2")
    fp4, bf16 = WEIGHT_DTYPE_BYTES["nvfp4"], WEIGHT_DTYPE_BYTES["bf16"]
    quantized = sum(module_params(v2, m) for m in ("attention_o", "dense_mlp", "shared_experts"))
    experts = routed_expert_params(v2)
    expected = (v2.num_params - experts - quantized) * bf16 + (experts + quantized) * fp4
    assert weight_bytes(v2) == pytest.approx(expected, rel=1e-12)
    whole_attention = resolve_model("nvidia/DeepSeek-R1-0528-FP4")  # o_proj in 16 bits too
    gap = module_params(v2, "attention_o") * (bf16 - fp4)
    assert weight_bytes(whole_attention) - weight_bytes(v2) == pytest.approx(gap, rel=1e-9)


def test_parts_at_their_own_precision_are_checked() -> None:
    v3 = resolve_model("deepseek-v3")
    with pytest.raises(ValueError, match="shared_experts given, but the model has no shared experts"):
        ModelSpec.model_validate(
            v3.model_dump() | {"num_shared_experts": 0, "module_weight_dtypes": {"shared_experts": "bf16"}}
        )
    with pytest.raises(ValueError, match="dense_mlp given, but every layer is a mixture of experts"):
        ModelSpec.model_validate(
            v3.model_dump() | {"num_dense_layers": 0, "module_weight_dtypes": {"dense_mlp": "bf16"}}
        )
    with pytest.raises(ValueError, match="module_weight_dtypes"):
        ModelSpec.model_validate(v3.model_dump() | {"module_weight_dtypes": {"lm_head": "bf16"}})
    with pytest.raises(ValueError, match="q_lora_rank describes MLA"):
        ModelSpec.model_validate(resolve_model("qwen3-235b-a22b").model_dump() | {"q_lora_rank": 64})
    for field, value in (("qk_nope_head_dim", 192), ("index_topk", 2048)):
        with pytest.raises(ValueError, match=f"{field} describes MLA"):
            ModelSpec.model_validate(resolve_model("qwen3-235b-a22b").model_dump() | {field: value})
    with pytest.raises(ValueError, match="index_head_dim describes DeepSeek sparse attention"):
        ModelSpec.model_validate(v3.model_dump() | {"index_head_dim": 128})
    assert v3.dtype_of("attention_o") == "fp8_block"
    assert resolve_model("nvidia/DeepSeek-V3.1-NVFP4").dtype_of("attention_qkv") == "bf16"


def test_the_roofline_reads_each_part_at_its_own_precision() -> None:
    """A decode step of one sequence reads the weights once: nvidia/DeepSeek-R1-0528-FP4-V2
    reads its nvfp4 o_proj, dense layers and shared experts in fewer bytes than the
    whole-attention export's 16-bit o_proj: the gap is o_proj's bytes saved over the HBM rate."""
    gpu = resolve_gpu("b200")
    v2 = RooflineCostModel(resolve_model("nvidia/DeepSeek-R1-0528-FP4-V2"), gpu, tp=8)
    v1 = RooflineCostModel(resolve_model("nvidia/DeepSeek-R1-0528-FP4"), gpu, tp=8)
    gap = (
        module_params(v2.model, "attention_o")
        * (WEIGHT_DTYPE_BYTES["bf16"] - WEIGHT_DTYPE_BYTES["nvfp4"])
        / 8
    )
    assert v1._weight_bytes - v2._weight_bytes == pytest.approx(gap, rel=1e-9)
