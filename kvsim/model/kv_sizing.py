"""KV-cache sizing: bytes per token, per block, and how many blocks fit on a GPU.

Everything here is closed-form arithmetic on a `ModelSpec` and a `GpuSpec`, so the
numbers can be checked by hand (docs/presets.md walks through them):

    KV bytes per token (MHA/GQA/MQA) = 2 (K and V) x layers x KV heads x head_dim x bytes
    KV bytes per token (MLA)         = layers x (kv_lora_rank + qk_rope_head_dim) x bytes

Linear-attention layers (Gated DeltaNet: Qwen3.5, Qwen3-Next) hold no KV: "layers" above
counts only the full-attention ones, and each running request keeps, per linear layer and
shard, a constant state (`linear_state_bytes_per_seq`)::

    conv window     (conv_kernel - 1) x (2 nk dk + nv dv) / tp x 2 bytes (the model's 16 bits)
    recurrent state nv / tp x dk x dv x state bytes (mamba_ssm_dtype, fp32 in Qwen3.5)

The engines reserve those states beside the KV pool (`linear_state_pool_bytes`).

With tensor parallelism each shard holds ``max(1, kv_heads // tp)`` KV heads: the heads
are split across shards and replicated once ``tp`` exceeds their number. An MLA latent
is not split at all; vLLM stores the full latent on every TP rank.

Capacity follows vLLM's profiling rule, per TP shard::

    kv_bytes   = memory x gpu_memory_utilization - weights / tp - activation reserve
    num_blocks = floor(kv_bytes / (block_size x KV bytes per token per shard))

SGLang's mem_fraction_static is the same kind of fraction (its default activation reserve
is 0); TensorRT-LLM gives the KV cache a fraction of what is left (``backend="trtllm"``)::

    kv_bytes   = free_gpu_memory_fraction x (memory - weights / tp - activation reserve)

    one block (block_size = 4), one shard:
    ┌──────── token 0 ───────┬──────── token 1 ───────┬─ ... ─┬──────── token 3 ───────┐
    │ K,V of layer 0..L-1    │ K,V of layer 0..L-1    │       │ K,V of layer 0..L-1    │
    └────────────────────────┴────────────────────────┴─ ... ─┴────────────────────────┘
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from kvsim.model.moe import module_weight_bytes_delta, routed_expert_params
from kvsim.model.specs import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES, GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvsim.scenario.schema import EngineConfig

GIB = 1024**3

#: Activations are computed in 16-bit floats even when weights are quantized (fp8,
#: int8, int4 weight-only schemes dequantize into bf16/fp16 matmuls).
ACTIVATION_BYTES = 2

#: Bytes per logit: vLLM's sampler works on fp32 logits.
LOGIT_BYTES = 4

#: Memory a serving engine holds outside the profiled forward pass: cuBLAS and NCCL
#: workspaces, the CUDA-graph memory pool, allocator fragmentation. A judgement call
#: (vLLM measures it at start-up; its logs typically show a few hundred MiB of
#: non-torch memory plus a fraction of a GiB for CUDA graphs), documented in
#: docs/presets.md; override with ``activation_reserve_bytes``.
NON_TORCH_ALLOWANCE_BYTES = 1 * GIB


def kv_dtype_bytes(model: ModelSpec, kv_cache_dtype: str) -> float:
    """Bytes per stored KV element for ``kv_cache_dtype`` ("auto": the model's float dtype).

    As in vLLM, "auto" means the dtype the model computes in (fp32, fp16 or bf16). For
    weight-only quantized models (fp8/int8/int4 weights) that is still a 16-bit float, so
    "auto" is 2 bytes.
    """
    if kv_cache_dtype == "auto":
        computes_in_weights = model.weight_dtype in ("fp32", "fp16", "bf16")
        return KV_DTYPE_BYTES[model.weight_dtype] if computes_in_weights else 2.0
    try:
        return KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError:
        known = ", ".join(["auto", *KV_DTYPE_BYTES])
        raise ValueError(f"kv_cache_dtype {kv_cache_dtype!r} is not one of: {known}") from None


def kv_heads_per_shard(model: ModelSpec, tp: int = 1) -> int:
    """KV heads stored on one TP shard: split evenly, replicated when tp > num_kv_heads."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    return max(1, model.num_kv_heads // tp)


def kv_bytes_per_token(model: ModelSpec, kv_cache_dtype: str = "auto", tp: int = 1) -> float:
    """KV bytes one token occupies on one tensor-parallel shard (tp=1: the whole model).

    MLA models store one compressed latent per layer, replicated on every shard, so
    their per-shard size does not shrink with ``tp``.
    """
    elem = kv_dtype_bytes(model, kv_cache_dtype)
    if model.kv_lora_rank is not None and model.qk_rope_head_dim is not None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        latent = (model.kv_lora_rank + model.qk_rope_head_dim) * elem
        return model.num_layers * (latent + dsa_index_bytes(model))
    return 2 * model.num_kv_layers * kv_heads_per_shard(model, tp) * model.head_dim * elem


def dsa_index_bytes(model: ModelSpec) -> float:
    """Bytes one token's DeepSeek-sparse-attention indexer key takes in one layer's cache,
    beside the latent and whatever the KV cache's dtype: ``index_head_dim`` fp8 values and an
    fp32 scale per 128 of them (132 for GLM-5 and DeepSeek-V3.2: vLLM's
    ``DeepseekV32IndexerCache``, SGLang's NSA token pool ``index_k_with_scale_buffer``); 0 for
    a model without one."""
    d = model.index_head_dim
    return 0.0 if d is None else float(d + 4 * -(-d // 128))


def kv_bytes_per_token_per_layer(model: ModelSpec, kv_cache_dtype: str = "auto", tp: int = 1) -> float:
    """KV bytes one token occupies in one KV layer on one TP shard (every KV layer is alike)."""
    return kv_bytes_per_token(model, kv_cache_dtype, tp) / model.num_kv_layers


#: Bytes of a linear-attention recurrent state element by ``ModelSpec.linear_state_dtype``.
_STATE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}

#: SGLang's default ``mamba_full_memory_ratio`` (python/sglang/srt/server_args.py, 0.5.9):
#: the state pool takes ratio / (1 + ratio) of the memory left after the weights, the KV
#: pool the rest; and ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`` (model_runner
#: kv-cache mixin, 0.5.9): with the radix cache on, max_running_requests is at most a third
#: of the state slots (a request may hold its state plus cached prefix states).
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
SGLANG_MAMBA_SLOTS_PER_REQUEST = 3


def linear_state_bytes_per_seq(model: ModelSpec, tp: int = 1) -> float:
    """Bytes of one request's linear-attention state over all linear layers on one TP shard
    (0 without such layers): see the module docstring. Heads split over ``tp`` (replicated
    past their count, as KV heads are)."""
    if not model.num_linear_attention_layers:
        return 0.0
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    nk, nv = model.linear_num_key_heads, model.linear_num_value_heads
    dk, dv, kernel = model.linear_key_head_dim, model.linear_value_head_dim, model.linear_conv_kernel_dim
    assert nk is not None and nv is not None and dk is not None and dv is not None and kernel is not None
    nk_shard, nv_shard = max(1, nk // tp), max(1, nv // tp)
    conv = (kernel - 1) * (2 * nk_shard * dk + nv_shard * dv) * kv_dtype_bytes(model, "auto")
    recurrent = nv_shard * dk * dv * _STATE_BYTES[model.linear_state_dtype]
    return model.num_linear_attention_layers * (conv + recurrent)


def linear_state_pool_bytes(
    model: ModelSpec, tp: int, free_bytes: float, max_num_seqs: int, backend: str
) -> float:
    """Memory one shard reserves for linear-attention states out of ``free_bytes`` (what the
    weights and activations leave for KV and states).

    SGLang (0.5.9, radix cache on, its default) splits that memory by
    `SGLANG_MAMBA_FULL_MEMORY_RATIO` (``handle_max_mamba_cache``); vLLM and TensorRT-LLM are
    modelled as keeping one state per running request, ``max_num_seqs`` states (an
    approximation: vLLM 0.10+ pages the states in the KV pool's blocks, one block per request
    and linear layer group, which this matches at full concurrency).
    """
    per_seq = linear_state_bytes_per_seq(model, tp)
    if not per_seq:
        return 0.0
    if backend == "sglang":
        ratio = SGLANG_MAMBA_FULL_MEMORY_RATIO
        return max(free_bytes, 0.0) * ratio / (1 + ratio)
    return max_num_seqs * per_seq


def sglang_linear_max_running_requests(
    model: ModelSpec, tp: int, state_pool_bytes: float, *, radix_cache: bool = True
) -> int | None:
    """SGLang's cap on running requests for a linear-attention model: the state slots the pool
    holds over `SGLANG_MAMBA_SLOTS_PER_REQUEST`, or all of them with the radix cache off
    (``--disable-radix-cache``: one slot per request); None without linear layers."""
    per_seq = linear_state_bytes_per_seq(model, tp)
    if not per_seq:
        return None
    return max(1, int(state_pool_bytes // per_seq) // (SGLANG_MAMBA_SLOTS_PER_REQUEST if radix_cache else 1))


def kv_tokens_held(model: ModelSpec, num_tokens: int) -> int:
    """Tokens whose KV a sliding-window layer keeps for a request of ``num_tokens`` tokens:
    the window plus the attention sinks (all of them without a window).

    Token granularity: a block-based engine frees a block only once all its tokens have
    left the window, so it may hold up to ``block_size - 1`` more.
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    if model.sliding_window is None:
        return num_tokens
    return min(num_tokens, model.sliding_window + model.num_sink_tokens)


def kv_bytes_for_context(
    model: ModelSpec, num_tokens: int, kv_cache_dtype: str = "auto", tp: int = 1
) -> float:
    """KV bytes on one TP shard for a context of ``num_tokens`` (sliding window applied).

    Full-attention layers keep every token, sliding-window layers the window and sinks.
    """
    if not model.is_hybrid:
        return kv_tokens_held(model, num_tokens) * kv_bytes_per_token(model, kv_cache_dtype, tp)
    per_layer = kv_bytes_per_token_per_layer(model, kv_cache_dtype, tp)
    held = model.num_full_layers * num_tokens + model.num_window_layers * kv_tokens_held(model, num_tokens)
    return held * per_layer


@dataclass(frozen=True)
class KvLayerGroups:
    """How the KV cache of a model's layers is grouped into block tables (vLLM's hybrid allocator).

    Every group has ``layers_per_group`` layers of one attention kind and one block table
    per request; one pool block holds a block of tokens for one group, so all blocks have
    the same size. A model of one kind has one group of all its layers. Gemma-3-1B (22
    sliding-window, 4 full layers): groups of 4 layers, 1 full and 6 sliding-window
    groups, 2 padding layers (vLLM's ``_get_kv_cache_groups_uniform_page_size``: the group
    size is the smaller layer count, or the larger one when it is under 1.5 times the
    smaller, as gpt-oss's 12 + 12).
    """

    layers_per_group: int
    num_full_groups: int
    num_window_groups: int

    @property
    def num_groups(self) -> int:
        return self.num_full_groups + self.num_window_groups

    def num_padding_layers(self, model: ModelSpec) -> int:
        """Layers the last group of each kind is padded with (memory reserved, unused)."""
        return self.num_groups * self.layers_per_group - model.num_kv_layers


def kv_layer_groups(model: ModelSpec) -> KvLayerGroups:
    """The block-table groups of ``model``'s layers (one group unless it mixes kinds)."""
    full, window = model.num_full_layers, model.num_window_layers
    if not model.is_hybrid:
        return KvLayerGroups(model.num_kv_layers, 1 if window == 0 else 0, 1 if window else 0)
    small, large = min(full, window), max(full, window)
    size = large if large < small * 1.5 else small
    return KvLayerGroups(size, -(-full // size), -(-window // size))


def window_blocks_needed(model: ModelSpec, block_size: int, chunk_tokens: int = 1) -> int:
    """Most blocks one sliding-window group of a request holds while ``chunk_tokens`` are computed.

    The chunk's first token attends to the ``sliding_window - 1`` tokens before it, so the
    group holds those, the chunk (one more block for the misalignment) and the sinks'
    blocks: ``cdiv(window - 1 + chunk, block_size) + 1 + cdiv(sinks, block_size)``, vLLM's
    ``SlidingWindowSpec.max_memory_usage_bytes`` plus the sinks.
    """
    assert model.sliding_window is not None
    sinks = -(-model.num_sink_tokens // block_size)
    return -(-(model.sliding_window - 1 + chunk_tokens) // block_size) + 1 + sinks


def blocks_per_sequence(model: ModelSpec, num_tokens: int, block_size: int, chunk_tokens: int = 1) -> int:
    """Most pool blocks one request of ``num_tokens`` tokens holds at once, all groups together.

    ``chunk_tokens`` is the largest number of tokens computed in one iteration (1 while
    decoding; max_num_batched_tokens for vLLM's start-up check), which a sliding window
    must hold beside the window.
    """
    groups = kv_layer_groups(model)
    full = -(-num_tokens // block_size)
    if not groups.num_window_groups:
        return groups.num_full_groups * full
    window = min(full, window_blocks_needed(model, block_size, chunk_tokens))
    return groups.num_full_groups * full + groups.num_window_groups * window


def bytes_per_block_per_shard(model: ModelSpec, kv_cache_dtype: str, tp: int, block_size: int) -> float:
    """Bytes of one pool block on one TP shard: one block of tokens of one layer group."""
    if not model.is_hybrid:
        return kv_bytes_per_token(model, kv_cache_dtype, tp) * block_size
    layers = kv_layer_groups(model).layers_per_group
    return kv_bytes_per_token_per_layer(model, kv_cache_dtype, tp) * layers * block_size


def weight_bytes(model: ModelSpec) -> float:
    """Bytes of all weights at the model's weight dtype, quantization scales included
    (`kvsim.model.specs.WEIGHT_DTYPE_BYTES`).

    A mixture of experts whose routed experts have their own dtype (``expert_weight_dtype``,
    gpt-oss's MXFP4) counts them at that dtype and the rest at ``weight_dtype``; the parts a
    checkpoint stores at their own precision (``module_weight_dtypes``) at theirs.
    """
    delta = module_weight_bytes_delta(model)
    if model.expert_weight_dtype is None:
        return model.num_params * WEIGHT_DTYPE_BYTES[model.weight_dtype] + delta
    experts = routed_expert_params(model)
    rest = model.num_params - experts
    return (
        rest * WEIGHT_DTYPE_BYTES[model.weight_dtype]
        + experts * WEIGHT_DTYPE_BYTES[model.expert_weight_dtype]
        + delta
    )


def weight_bytes_per_gpu(model: ModelSpec, tp: int, attention_dp: int = 1) -> float:
    """Weight bytes on one GPU of a rank of ``tp`` GPUs in an instance of ``attention_dp`` ranks.

    Without attention data parallelism every weight is split over tp (``weight_bytes / tp``).
    With it, each rank holds the attention, dense-layer and embedding weights split over its
    own tp GPUs, while the routed experts are split over all tp x attention_dp GPUs of the
    instance (moe_tp x moe_ep: how they are split does not change the bytes per GPU).
    """
    if attention_dp == 1:
        return weight_bytes(model) / tp
    experts = (
        routed_expert_params(model) * WEIGHT_DTYPE_BYTES[model.expert_weight_dtype or model.weight_dtype]
    )
    return (weight_bytes(model) - experts) / tp + experts / (tp * attention_dp)


def activation_reserve_estimate(
    model: ModelSpec,
    *,
    tp: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
) -> float:
    """Estimated memory one shard keeps free for activations and runtime buffers, bytes.

    vLLM measures this by running one forward pass over ``max_num_batched_tokens`` dummy
    tokens and a sampler pass over ``max_num_seqs`` rows. We estimate the same peak:

    - forward pass: the widest point of a layer is the MLP, holding per token the
      residual stream and the normed input (2 x hidden) plus the gate/up projection
      output (2 x intermediate / tp) and the activated product (intermediate / tp);
      mixture-of-experts layers hold these for each of the top-k experts a token visits;
    - sampler: fp32 logits and the probabilities derived from them, max_num_seqs x
      vocab x 4 bytes each (the vocabulary is gathered whole on the sampling rank);
    - a fixed allowance `NON_TORCH_ALLOWANCE_BYTES` for workspaces and CUDA graphs.
    """
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    mlp_width = model.intermediate_size * (model.num_experts_per_token or 1) / tp
    forward = max_num_batched_tokens * (2 * model.hidden_size + 3 * mlp_width) * ACTIVATION_BYTES
    sampler = 2 * max_num_seqs * model.vocab_size * LOGIT_BYTES
    return forward + sampler + NON_TORCH_ALLOWANCE_BYTES


@dataclass(frozen=True)
class KvCapacity:
    """How one TP shard's memory splits into weights, activations and KV blocks.

    All ``*_bytes`` figures are per shard except ``bytes_per_token``, the whole-model
    (tp=1) size of one token's KV.
    """

    bytes_per_token: float
    bytes_per_token_per_shard: float
    block_size: int
    bytes_per_block_per_shard: float
    weight_bytes_per_shard: float
    activation_reserve_bytes: float
    kv_bytes_per_shard: float
    num_blocks: int
    tp: int = 1
    memory_bytes: int = 0
    gpu_memory_utilization: float = 0.9
    #: Block tables per request (`KvLayerGroups`): 1 unless sliding-window and full layers mix,
    #: in which case a block holds one group's layers and a token takes a block per group.
    num_kv_groups: int = 1
    #: Whose memory rule sized the pool (`kvsim.backends.defaults`): "trtllm" takes
    #: gpu_memory_utilization of what weights and activations leave, the others of the memory.
    backend: str = "vllm"
    #: Linear-attention models: one request's state on one shard, and the memory reserved for
    #: the states out of what would otherwise be KV (`linear_state_pool_bytes`); 0 otherwise.
    linear_state_bytes_per_seq_per_shard: float = 0.0
    linear_state_pool_bytes_per_shard: float = 0.0

    @property
    def num_tokens(self) -> int:
        """Token slots in the pool (every block full; a hybrid model's token needs one per group)."""
        return self.num_blocks * self.block_size

    @property
    def budget_bytes(self) -> float:
        """Memory the engine may use on one shard: memory x gpu_memory_utilization (TensorRT-LLM:
        all of it but the (1 - fraction) share of what weights and activations leave)."""
        if self.backend == "trtllm":
            free = self.memory_bytes - self.weight_bytes_per_shard - self.activation_reserve_bytes
            return self.memory_bytes - (1 - self.gpu_memory_utilization) * max(free, 0.0)
        return self.memory_bytes * self.gpu_memory_utilization

    def to_dict(self) -> dict[str, float | int | str]:
        """Plain fields plus the derived figures, for JSON output."""
        out = asdict(self)
        out["num_tokens"] = self.num_tokens
        out["budget_bytes"] = self.budget_bytes
        return out


def engine_kv_capacity(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    engine: EngineConfig,
    *,
    use_override: bool = True,
    draft_model: ModelSpec | None = None,
    attention_dp: int = 1,
) -> KvCapacity:
    """`kv_capacity` with the knobs of a replica group's ``engine`` section.

    ``draft_model``: the speculative draft model whose weights and KV share the GPU;
    ``attention_dp``: the ranks of an instance sharing its experts (`weight_bytes_per_gpu`).
    """
    reserve = engine.activation_reserve_gib
    return kv_capacity(
        model,
        gpu,
        draft_model=draft_model,
        tp=tp,
        attention_dp=attention_dp,
        kv_cache_dtype=engine.kv_cache_dtype,
        block_size=engine.block_size,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        max_num_seqs=engine.max_num_seqs,
        activation_reserve_bytes=None if reserve is None else reserve * GIB,
        num_gpu_blocks_override=engine.num_gpu_blocks_override if use_override else None,
        backend=engine.backend,
        max_total_tokens=engine.max_total_tokens,
    )


def kv_capacity(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    activation_reserve_bytes: float | None = None,
    num_gpu_blocks_override: int | None = None,
    draft_model: ModelSpec | None = None,
    backend: str = "vllm",
    attention_dp: int = 1,
    max_total_tokens: int | None = None,
) -> KvCapacity:
    """KV blocks one TP shard can hold after weights and activations (vLLM's rule; with
    ``backend="trtllm"``, TensorRT-LLM's: gpu_memory_utilization of what is left).
    ``max_total_tokens`` caps the blocks that hold KV at that many tokens (SGLang's
    --max-total-tokens, the smaller of it and the profiled pool, floored to whole blocks).

    ``activation_reserve_bytes`` None uses `activation_reserve_estimate`;
    ``num_gpu_blocks_override`` fixes the block count regardless of memory (as vLLM's
    option of that name does), while the other figures are still reported. A speculative
    ``draft_model`` adds its weights, and its KV to every block (vLLM keeps the draft's
    layers in the same KV cache, one block table for both). A linear-attention model's
    request states are reserved first (`linear_state_pool_bytes`, by ``backend``).
    ``attention_dp`` > 1: one rank of an instance whose experts span tp x attention_dp GPUs
    (`weight_bytes_per_gpu`).
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    per_token_shard = kv_bytes_per_token(model, kv_cache_dtype, tp)
    weights = weight_bytes_per_gpu(model, tp, attention_dp)
    if draft_model is not None:
        per_token_shard += kv_bytes_per_token(draft_model, kv_cache_dtype, tp)
        weights += weight_bytes(draft_model) / tp
    if activation_reserve_bytes is None:
        activation_reserve_bytes = activation_reserve_estimate(
            model, tp=tp, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
        )
    if backend == "trtllm":
        free = gpu.memory_bytes - weights - activation_reserve_bytes
        kv_bytes = gpu_memory_utilization * free if free > 0 else free
    else:
        kv_bytes = gpu.memory_bytes * gpu_memory_utilization - weights - activation_reserve_bytes
    state_pool = linear_state_pool_bytes(model, tp, kv_bytes, max_num_seqs, backend)
    kv_bytes -= state_pool
    per_block = bytes_per_block_per_shard(model, kv_cache_dtype, tp, block_size)
    if draft_model is not None:
        per_block = per_token_shard * block_size
    if num_gpu_blocks_override is not None:
        num_blocks = num_gpu_blocks_override
    else:
        num_blocks = max(0, math.floor(kv_bytes / per_block))
        if max_total_tokens is not None:  # + the null block, which holds no KV (NULL_BLOCKS)
            num_blocks = min(num_blocks, max_total_tokens // block_size + 1)
    return KvCapacity(
        bytes_per_token=kv_bytes_per_token(model, kv_cache_dtype, 1),
        bytes_per_token_per_shard=per_token_shard,
        block_size=block_size,
        bytes_per_block_per_shard=per_block,
        weight_bytes_per_shard=weights,
        activation_reserve_bytes=activation_reserve_bytes,
        kv_bytes_per_shard=kv_bytes,
        num_blocks=num_blocks,
        tp=tp,
        memory_bytes=gpu.memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        num_kv_groups=kv_layer_groups(model).num_groups,
        backend=backend,
        linear_state_bytes_per_seq_per_shard=linear_state_bytes_per_seq(model, tp),
        linear_state_pool_bytes_per_shard=state_pool,
    )
