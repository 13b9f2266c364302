"""Mixture-of-experts arithmetic: expert parameter counts and the experts a batch activates.

A decode step of a dense model reads every weight once, whatever the batch size. A
mixture-of-experts layer reads only the experts its tokens are routed to: with E routed
experts and top-k routing, one token touches k of them, a large batch nearly all. The
expected number of *distinct* experts B tokens activate in one layer is

    uniform routing   E x (1 - (1 - k/E)^B)               (exact: each token picks k of E)
    skewed routing    sum_i 1 - (1 - q_i)^B,  q_i = min(1, k p_i) redistributed,
                      p_i proportional to (i + 1)^-s       (Zipf popularity, s = 0: uniform)

where q_i is the chance that one token's top-k includes expert i. Shared experts
(DeepSeek) are always read. E.g. Mixtral (E = 8, k = 2): 2 experts at batch 1,
8 x (1 - 0.75^3) = 4.625 at batch 3, 7.9995 at batch 32.

    one MoE layer, 3 tokens, top-2 of 8:
      token 0 -> e1 e5     token 1 -> e5 e7     token 2 -> e2 e5     distinct: e1 e2 e5 e7 = 4

Parameter counts assume gated MLP experts (gate, up and down projections: 3 x hidden x
intermediate each), as in Mixtral, DeepSeek and gpt-oss.
"""

from __future__ import annotations

import numpy as np

from kvsim.model.specs import WEIGHT_DTYPE_BYTES, ModelSpec, WeightModule


def expert_params_per_layer(model: ModelSpec) -> float:
    """Parameters of one expert in one layer (gate, up and down projections)."""
    return 3.0 * model.hidden_size * model.intermediate_size


def num_moe_layers(model: ModelSpec) -> int:
    """Layers whose MLP is a mixture of experts (0 for a dense model)."""
    return model.num_layers - model.num_dense_layers if model.is_moe else 0


def routed_expert_params(model: ModelSpec) -> float:
    """Parameters of all routed experts of all MoE layers (0 for a dense model)."""
    if not model.is_moe:
        return 0.0
    assert model.num_experts is not None
    return num_moe_layers(model) * model.num_experts * expert_params_per_layer(model)


def shared_expert_params(model: ModelSpec) -> float:
    """Parameters of the shared experts of all MoE layers (read by every token)."""
    return num_moe_layers(model) * model.num_shared_experts * expert_params_per_layer(model)


def embedding_params(model: ModelSpec) -> float:
    """Parameters of the embedding and the LM head (one matrix when they are tied)."""
    return model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)


def non_expert_layer_params(model: ModelSpec) -> float:
    """Parameters of the transformer layers outside the experts: attention, router, norms, and
    the dense layers' MLPs (``num_params`` less experts and embeddings; never negative)."""
    rest = model.num_params - routed_expert_params(model) - shared_expert_params(model)
    return max(rest - embedding_params(model), 0.0)


def dense_mlp_width(model: ModelSpec) -> int:
    """The intermediate width of a dense MLP: a dense model's ``intermediate_size``; a mixture
    of experts' dense first layers at the active width, ``intermediate_size`` x (top-k +
    shared): DeepSeek-V3's and Kimi-K2.5's real 18,432 = 2,048 x 9 (the spec has no field for
    it; GLM-5's 12,288 is taken as 18,432)."""
    if not model.is_moe:
        return model.intermediate_size
    assert model.num_experts_per_token is not None
    return model.intermediate_size * (model.num_experts_per_token + model.num_shared_experts)


def module_params(model: ModelSpec, module: WeightModule) -> float:
    """Parameters of one part of the model over all its layers (`WeightModule`).

    Attention (the softmax-attention layers): q/k/v = hidden x (query heads + 2 x KV heads) x
    head_dim (queries twice as wide with an output gate); MLA's q_a (hidden x q_lora_rank) and
    q_b (q_lora_rank x heads x (head_dim + rope)), or one hidden x heads x (head_dim + rope)
    projection without q_lora_rank, kv_a (hidden x (kv_lora_rank + rope)) and kv_b (kv_lora_rank
    x heads x 2 head_dim); the output projection heads x head_dim x hidden. The MLPs are gated
    (3 x hidden x width; `dense_mlp_width`)."""
    h, hd, heads = model.hidden_size, model.head_dim, model.num_attention_heads
    layers = model.num_kv_layers
    if module == "attention_o":
        return float(layers * heads * hd * h)
    if module == "attention_qkv":
        if model.is_mla:
            assert model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
            rope, q_rank = model.qk_rope_head_dim, model.q_lora_rank
            q = h * q_rank + q_rank * heads * (hd + rope) if q_rank else h * heads * (hd + rope)
            kv = h * (model.kv_lora_rank + rope) + model.kv_lora_rank * heads * 2 * hd
            return float(layers * (q + kv))
        q_out = 2 * heads if model.attn_output_gate else heads
        return float(layers * h * (q_out + 2 * model.num_kv_heads) * hd)
    if module == "shared_experts":
        return shared_expert_params(model)
    dense_layers = model.num_dense_layers if model.is_moe else model.num_layers
    return 3.0 * h * dense_mlp_width(model) * dense_layers


def module_weight_bytes_delta(model: ModelSpec) -> float:
    """Bytes the parts stored at their own precision (``module_weight_dtypes``) add to (or take
    from) the model's weights counted at ``weight_dtype``."""
    base = WEIGHT_DTYPE_BYTES[model.weight_dtype]
    return sum(
        module_params(model, module) * (WEIGHT_DTYPE_BYTES[dtype] - base)
        for module, dtype in model.module_weight_dtypes.items()
    )


def active_layer_params(model: ModelSpec) -> float:
    """Layer parameters one token uses: the non-expert ones, the shared and its top-k experts."""
    assert model.num_experts_per_token is not None
    routed = num_moe_layers(model) * model.num_experts_per_token * expert_params_per_layer(model)
    return non_expert_layer_params(model) + shared_expert_params(model) + routed


def inclusion_probabilities(num_experts: int, top_k: int, zipf_exponent: float = 0.0) -> np.ndarray:
    """Chance that one token's top-k includes each expert; sums to ``top_k``.

    Popularity p_i is proportional to (i + 1)^-zipf_exponent; the inclusion chance is k p_i,
    capped at 1 with the excess spread over the others in proportion to their popularity
    (a token cannot pick an expert twice). Uniform routing gives exactly k / E each.
    """
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be in [1, {num_experts}], got {top_k}")
    if zipf_exponent < 0:
        raise ValueError(f"zipf_exponent must be >= 0, got {zipf_exponent}")
    if zipf_exponent == 0:
        return np.full(num_experts, top_k / num_experts)
    p = np.arange(1, num_experts + 1, dtype=np.float64) ** -zipf_exponent
    q = np.zeros(num_experts)
    capped = np.zeros(num_experts, dtype=bool)
    for _ in range(num_experts):
        free = ~capped
        left = top_k - capped.sum()
        q[free] = left * p[free] / p[free].sum()
        over = free & (q >= 1.0)
        if not over.any():
            break
        capped |= over
        q[capped] = 1.0
    return q


def expected_distinct_experts(
    num_experts: int, top_k: int, num_tokens: float, zipf_exponent: float = 0.0
) -> float:
    """Expected number of distinct experts ``num_tokens`` tokens activate in one layer."""
    if num_tokens <= 0:
        return 0.0
    if zipf_exponent == 0:
        return float(num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens))
    q = inclusion_probabilities(num_experts, top_k, zipf_exponent)
    return float(np.sum(1.0 - (1.0 - q) ** num_tokens))
