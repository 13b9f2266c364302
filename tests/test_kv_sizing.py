"""KV sizing: bytes per token and block, TP sharding, sliding windows, capacity by hand."""

from __future__ import annotations

import pytest

from kvsim.model.kv_sizing import (
    GIB,
    NON_TORCH_ALLOWANCE_BYTES,
    activation_reserve_estimate,
    kv_bytes_for_context,
    kv_bytes_per_token,
    kv_capacity,
    kv_dtype_bytes,
    kv_heads_per_shard,
    kv_tokens_held,
    weight_bytes,
)
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.model.specs import ModelSpec


def test_llama_2_70b_fp16_is_320_kib_per_token() -> None:
    # 2 (K, V) x 80 layers x 8 KV heads x 128 dim x 2 bytes
    assert kv_bytes_per_token(resolve_model("llama-2-70b"), "fp16") == 327_680 == 320 * 1024


def test_32_layers_8_kv_heads_4096_tokens_fp16_is_half_a_gib() -> None:
    llama3 = resolve_model("llama-3-8b")  # 32 layers x 8 KV heads x 128 dim
    assert kv_bytes_per_token(llama3, "fp16") == 131_072
    assert kv_bytes_for_context(llama3, 4096, "fp16") == 0.5 * GIB


def test_32k_context_of_llama_2_70b_is_10_gib() -> None:
    assert kv_bytes_for_context(resolve_model("llama-2-70b"), 32 * 1024, "fp16") == 10 * GIB


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama-2-7b", 2 * 32 * 32 * 128 * 2),  # MHA: 512 KiB
        ("llama-2-13b", 2 * 40 * 40 * 128 * 2),  # MHA: 800 KiB
        ("mixtral-8x7b", 2 * 32 * 8 * 128 * 2),  # experts do not change the KV cache
        ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),  # 57,344
        ("falcon-7b", 2 * 32 * 1 * 64 * 2),  # MQA: 8,192
        ("starcoder", 2 * 40 * 1 * 128 * 2),  # MQA: 20,480
    ],
)
def test_bytes_per_token_of_presets(name: str, expected: int) -> None:
    assert kv_bytes_per_token(resolve_model(name)) == expected


def test_mla_stores_the_latent_not_per_head_kv() -> None:
    lite = resolve_model("deepseek-v2-lite")
    assert lite.num_layers == 27
    # 27 layers x (512 latent + 64 rope) x 2 bytes (bf16)
    assert kv_bytes_per_token(lite, "bf16") == 27 * 576 * 2 == 31_104
    # Had it stored 16 heads of K (192) and V (128) per layer it would be ~16x more.
    assert kv_bytes_per_token(lite, "fp8") == 15_552


def test_mla_latent_is_replicated_not_sharded_by_tp() -> None:
    lite = resolve_model("deepseek-v2-lite")
    assert kv_bytes_per_token(lite, "bf16", tp=2) == 31_104
    assert kv_bytes_per_token(lite, "bf16", tp=16) == 31_104


def test_sliding_window_caps_the_tokens_held() -> None:
    mistral = resolve_model("mistral-7b")
    assert mistral.sliding_window == 4096
    assert kv_bytes_per_token(mistral) == 131_072
    assert kv_tokens_held(mistral, 1000) == 1000
    assert kv_tokens_held(mistral, 32_768) == 4096
    assert kv_bytes_for_context(mistral, 32_768) == 0.5 * GIB
    # Mixtral has the same per-token size but no window: a 32k context is 8x more.
    assert kv_bytes_for_context(resolve_model("mixtral-8x7b"), 32_768) == 4 * GIB


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        ("auto", 327_680),
        ("fp16", 327_680),
        ("bf16", 327_680),
        ("fp8", 163_840),
        ("int8", 163_840),
        ("int4", 81_920),
    ],
)
def test_kv_dtypes(dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(resolve_model("llama-2-70b"), dtype) == expected


def test_fp8_halves_every_preset() -> None:
    for name in ("llama-2-7b", "llama-3-70b", "falcon-7b", "deepseek-v2-lite", "mistral-7b"):
        model = resolve_model(name)
        assert kv_bytes_per_token(model, "fp8") * 2 == kv_bytes_per_token(model, "fp16")


def test_auto_kv_dtype_of_weight_quantized_model_is_16_bit() -> None:
    awq = resolve_model("llama-2-7b").model_copy(update={"weight_dtype": "int4"})
    assert kv_dtype_bytes(awq, "auto") == 2.0
    # Packed 4-bit weights plus, per group of 128, one fp16 scale and one 4-bit zero point
    # (AWQ/GPTQ): 0.5 + 2.5 / 128 bytes per weight (kvsim.model.specs.WEIGHT_DTYPE_BYTES).
    assert weight_bytes(awq) == 6_738_415_616 * (0.5 + 2.5 / 128)


def test_unknown_kv_dtype_names_the_choices() -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp4' is not one of: auto, fp16"):
        kv_dtype_bytes(resolve_model("llama-2-7b"), "fp4")


def test_tp_splits_kv_heads() -> None:
    llama70 = resolve_model("llama-2-70b")  # 8 KV heads
    assert [kv_heads_per_shard(llama70, tp) for tp in (1, 2, 4, 8)] == [8, 4, 2, 1]
    assert kv_bytes_per_token(llama70, "fp16", tp=2) == 163_840
    assert kv_bytes_per_token(llama70, "fp16", tp=8) == 40_960


def test_tp_beyond_kv_heads_replicates_them() -> None:
    llama70 = resolve_model("llama-2-70b")
    # 16 shards, 8 KV heads: each head lives on two shards, each shard holds one.
    assert kv_heads_per_shard(llama70, 16) == 1
    assert kv_bytes_per_token(llama70, "fp16", tp=16) == 40_960
    # MQA: the single KV head is on every shard.
    starcoder = resolve_model("starcoder")
    assert kv_bytes_per_token(starcoder, tp=4) == kv_bytes_per_token(starcoder) == 20_480


def test_tp_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tp must be >= 1"):
        kv_bytes_per_token(resolve_model("llama-2-7b"), tp=0)


def test_weight_bytes() -> None:
    assert weight_bytes(resolve_model("llama-2-70b")) == 68_976_648_192 * 2
    assert weight_bytes(resolve_model("deepseek-v2-lite")) == 31.4e9


def test_activation_reserve_estimate_by_hand() -> None:
    llama3 = resolve_model("llama-3-8b")
    forward = 8192 * (2 * 4096 + 3 * 14336) * 2  # residual + normed input, gate/up + act
    sampler = 2 * 256 * 128_256 * 4  # fp32 logits and probabilities
    expected = forward + sampler + NON_TORCH_ALLOWANCE_BYTES
    assert expected == 2_175_270_912
    assert activation_reserve_estimate(llama3, max_num_batched_tokens=8192, max_num_seqs=256) == expected


def test_activation_reserve_shrinks_with_tp_and_grows_with_moe_top_k() -> None:
    llama3 = resolve_model("llama-3-8b")
    tp1 = activation_reserve_estimate(llama3, tp=1)
    tp2 = activation_reserve_estimate(llama3, tp=2)
    assert tp1 - tp2 == 8192 * 3 * 14336 / 2 * 2  # only the MLP slice is sharded
    mixtral = resolve_model("mixtral-8x7b")  # same widths as Llama-3-8B, top-2 routing
    moe_forward = 8192 * (2 * 4096 + 3 * 14336 * 2) * 2
    sampler = 2 * 256 * 32000 * 4
    assert activation_reserve_estimate(mixtral) == moe_forward + sampler + NON_TORCH_ALLOWANCE_BYTES


def test_capacity_by_hand_llama_2_7b_on_a100_80gb() -> None:
    cap = kv_capacity(
        resolve_model("llama-2-7b"),
        resolve_gpu("a100-80gb"),
        kv_cache_dtype="fp16",
        block_size=16,
        gpu_memory_utilization=0.9,
        activation_reserve_bytes=2 * GIB,
    )
    budget = 77_309_411_328  # 0.9 x 80 GiB
    weights = 13_476_831_232  # 6,738,415,616 params x 2 bytes
    kv = budget - weights - 2 * GIB
    assert kv == 61_685_096_448
    per_block = 16 * 524_288  # 8 MiB
    assert cap.bytes_per_block_per_shard == per_block
    assert cap.weight_bytes_per_shard == weights
    assert cap.kv_bytes_per_shard == kv
    assert cap.num_blocks == 7353  # 7353 x 8 MiB = 61,681,434,624 <= kv < 7354 x 8 MiB
    assert cap.num_tokens == 7353 * 16
    assert cap.budget_bytes == budget


def test_capacity_per_shard_with_tp() -> None:
    model, gpu = resolve_model("llama-2-70b"), resolve_gpu("h100-sxm")
    cap = kv_capacity(model, gpu, tp=8, kv_cache_dtype="fp16", activation_reserve_bytes=GIB)
    assert cap.bytes_per_token == 327_680
    assert cap.bytes_per_token_per_shard == 40_960
    assert cap.bytes_per_block_per_shard == 655_360
    assert cap.weight_bytes_per_shard == 68_976_648_192 * 2 / 8
    expected_kv = 0.9 * 80 * GIB - 68_976_648_192 * 2 / 8 - GIB
    assert cap.num_blocks == int(expected_kv // 655_360)
    assert cap.tp == 8


def test_capacity_uses_the_estimate_by_default() -> None:
    model, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100-sxm")
    cap = kv_capacity(model, gpu, max_num_batched_tokens=8192, max_num_seqs=256)
    assert cap.activation_reserve_bytes == 2_175_270_912


def test_capacity_never_negative_and_override_wins() -> None:
    model, gpu = resolve_model("llama-2-70b"), resolve_gpu("a100-40gb")
    cap = kv_capacity(model, gpu)
    assert cap.kv_bytes_per_shard < 0
    assert cap.num_blocks == 0
    assert kv_capacity(model, gpu, num_gpu_blocks_override=100).num_blocks == 100


def test_max_total_tokens_caps_the_pool_below_memory_but_never_raises_it() -> None:
    """SGLang's --max-total-tokens: the fewer of it and the profiled pool, whole blocks, plus
    the null block that holds no KV; the override still fixes the pool."""
    model, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100-sxm")
    free = kv_capacity(model, gpu).num_blocks
    assert free > 2000
    assert kv_capacity(model, gpu, max_total_tokens=8192).num_blocks == 8192 // 16 + 1 == 513
    assert kv_capacity(model, gpu, max_total_tokens=8200).num_blocks == 513  # floored to blocks
    assert kv_capacity(model, gpu, max_total_tokens=10**9).num_blocks == free
    assert kv_capacity(model, gpu, max_total_tokens=64, num_gpu_blocks_override=100).num_blocks == 100


def test_fp8_kv_doubles_capacity_blocks_roughly() -> None:
    model, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100-sxm")
    fp16 = kv_capacity(model, gpu, kv_cache_dtype="fp16")
    fp8 = kv_capacity(model, gpu, kv_cache_dtype="fp8")
    assert fp8.num_blocks in (2 * fp16.num_blocks, 2 * fp16.num_blocks + 1)


def test_capacity_rejects_bad_knobs() -> None:
    model, gpu = resolve_model("llama-3-8b"), resolve_gpu("h100-sxm")
    with pytest.raises(ValueError, match="gpu_memory_utilization must be in"):
        kv_capacity(model, gpu, gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        kv_capacity(model, gpu, block_size=0)


def test_inline_model_is_sized_like_a_preset() -> None:
    tiny = ModelSpec(
        name="tiny",
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_kv_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=100,
        num_params=1e6,
        max_model_len=256,
    )
    assert kv_bytes_per_token(tiny, "fp16") == 2 * 2 * 2 * 16 * 2
    assert kv_capacity(tiny, resolve_gpu("t4"), block_size=4).to_dict()["num_tokens"] % 4 == 0


# --------------------------------------------------------------------------- mixed layers, sinks


def test_gemma_3_1b_keeps_the_window_in_22_layers_and_everything_in_4() -> None:
    gemma = resolve_model("gemma-3-1b")  # 26 layers x 1 KV head x 256 dim x 2 (K, V) x 2 bytes
    assert (gemma.num_window_layers, gemma.num_full_layers, gemma.is_hybrid) == (22, 4, True)
    assert kv_bytes_per_token(gemma) == 26 * 1024
    # 32k tokens: 4 full layers hold all of them, 22 sliding layers the last 512.
    assert kv_bytes_for_context(gemma, 32768) == (4 * 32768 + 22 * 512) * 1024 == 145_752_064
    assert kv_bytes_for_context(gemma, 300) == 300 * 26 * 1024  # inside the window: every layer


def test_layer_groups_follow_vllms_hybrid_allocator() -> None:
    from kvsim.model.kv_sizing import kv_layer_groups

    gemma = kv_layer_groups(resolve_model("gemma-3-1b"))
    assert (gemma.layers_per_group, gemma.num_full_groups, gemma.num_window_groups) == (4, 1, 6)
    assert gemma.num_padding_layers(resolve_model("gemma-3-1b")) == 2  # 28 layer slots for 26
    oss = kv_layer_groups(resolve_model("gpt-oss-20b"))  # 12 + 12: one group of each
    assert (oss.layers_per_group, oss.num_full_groups, oss.num_window_groups) == (12, 1, 1)
    # 12 sliding + 13 full (a drafter layer added): under 1.5x, so groups of 13 (vLLM's example)
    spec = resolve_model("gpt-oss-20b").model_copy(update={"num_layers": 25})
    assert kv_layer_groups(spec).layers_per_group == 13
    assert kv_layer_groups(resolve_model("llama-3-8b")).num_groups == 1
    assert kv_layer_groups(resolve_model("mistral-7b")).num_window_groups == 1


def test_blocks_per_sequence_counts_a_block_table_per_group() -> None:
    from kvsim.model.kv_sizing import blocks_per_sequence, bytes_per_block_per_shard

    gemma = resolve_model("gemma-3-1b")
    # One block holds 16 tokens of 4 layers: 16 x 4 x 1,024 bytes.
    assert bytes_per_block_per_shard(gemma, "auto", 1, 16) == 65_536
    # 32k tokens: the full group 2,048 blocks, each window group cdiv(511 + 1, 16) + 1 = 33.
    assert blocks_per_sequence(gemma, 32768, 16) == 2048 + 6 * 33
    # vLLM's start-up check holds a whole 8,192-token chunk beside the window.
    assert blocks_per_sequence(gemma, 32768, 16, chunk_tokens=8192) == 2048 + 6 * (-(-(511 + 8192) // 16) + 1)
    mistral = resolve_model("mistral-7b")  # one window group: ceil(4096 / 16) + 1 = 257
    assert blocks_per_sequence(mistral, 20000, 16) == 257
    assert blocks_per_sequence(mistral, 1000, 16) == 63
    assert blocks_per_sequence(resolve_model("llama-3-8b"), 1000, 16) == 63


def test_sinks_stay_beside_the_window() -> None:
    from kvsim.model.kv_sizing import blocks_per_sequence

    spec = resolve_model("mistral-7b").model_copy(update={"num_sink_tokens": 4})
    assert kv_tokens_held(spec, 10_000) == 4096 + 4
    assert kv_tokens_held(spec, 3000) == 3000
    assert blocks_per_sequence(spec, 20000, 16) == 257 + 1  # one more block for the sinks


def test_mixed_layer_fields_are_checked() -> None:
    base = resolve_model("llama-3-8b").model_dump()
    with pytest.raises(ValueError, match="need a sliding_window"):
        ModelSpec(**{**base, "num_sink_tokens": 4})
    with pytest.raises(ValueError, match="exceeds num_layers"):
        ModelSpec(**{**base, "sliding_window": 512, "num_sliding_window_layers": 33})
    with pytest.raises(ValueError, match="set num_experts"):
        ModelSpec(**{**base, "num_shared_experts": 2})


def test_gpt_oss_counts_its_mxfp4_experts_at_4_25_bits() -> None:
    oss = resolve_model("gpt-oss-20b")
    experts = 24 * 32 * 3 * 2880 * 2880  # layers x experts x (gate, up, down) x hidden x intermediate
    # MXFP4: 4-bit values and one 8-bit scale per 32 of them, 4.25 bits per weight.
    assert weight_bytes(oss) == (20.9e9 - experts) * 2 + experts * 4.25 / 8
    assert 12.5 * GIB < weight_bytes(oss) < 13 * GIB  # "runs within 16 GB of memory"


def test_hybrid_capacity_sizes_blocks_per_group() -> None:
    gemma = resolve_model("gemma-3-1b")
    cap = kv_capacity(gemma, resolve_gpu("rtx-3070"), activation_reserve_bytes=1 * GIB)
    assert cap.bytes_per_block_per_shard == 65_536 and cap.num_kv_groups == 7
    assert cap.num_blocks == int(cap.kv_bytes_per_shard // 65_536)
