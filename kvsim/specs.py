"""Hardware and model descriptions: what a model is and what a GPU can do.

`ModelSpec` and `GpuSpec` are plain, frozen pydantic models. Presets live in
`kvsim.presets`; a scenario may name a preset or define its own spec inline.
KV element sizes for each `kv_cache_dtype` are in `KV_DTYPE_BYTES`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kvsim.frozen import FrozenModel, Name
from kvsim.limits import (
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_EXPERTS,
    MAX_FLOPS,
    MAX_GPU_MEMORY_BYTES,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_NUM_PARAMS,
    MAX_STEP_TIME_S,
    MAX_TOKENS,
    MAX_WIDTH,
    MAX_YAML_SCALAR_CHARS,
    MIN_BANDWIDTH_BYTES_PER_S,
    MIN_FLOPS,
)

KvDtype = Literal["auto", "fp32", "fp16", "bf16", "fp8", "int8", "int4"]
#: fp32 is for CPUs (vLLM's CPU build serves float32 models; see benchmarks/vllm_latency.py).
WeightDtype = Literal["fp32", "fp16", "bf16", "fp8", "int8", "int4"]

#: Bytes per stored element for each KV-cache dtype ("auto" means the model's dtype).
KV_DTYPE_BYTES: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp32": 4.0,  # CPUs (last: error messages list the GPU dtypes first)
}


class ModelSpec(FrozenModel):
    """Shape of a decoder-only transformer, enough to size its KV cache and its FLOPs."""

    name: Name = Field(max_length=MAX_YAML_SCALAR_CHARS, description="Model name, e.g. 'llama-2-70b'.")
    num_layers: int = Field(gt=0, le=MAX_LAYERS, description="Number of transformer layers.")
    hidden_size: int = Field(gt=0, le=MAX_WIDTH, description="Model (residual stream) width.")
    num_attention_heads: int = Field(gt=0, le=MAX_HEADS, description="Query heads per layer.")
    num_kv_heads: int = Field(
        gt=0, le=MAX_HEADS, description="Key/value heads per layer (== query heads for MHA, 1 for MQA)."
    )
    head_dim: int = Field(gt=0, le=MAX_HEADS, description="Dimension of one attention head.")
    intermediate_size: int = Field(
        gt=0, le=MAX_WIDTH, description="MLP inner width (per expert for mixture-of-experts models)."
    )
    vocab_size: int = Field(gt=0, le=MAX_WIDTH, description="Vocabulary size (LM head columns).")
    num_params: float = Field(gt=0, le=MAX_NUM_PARAMS, description="Total parameter count.")
    num_active_params: float | None = Field(
        default=None,
        gt=0,
        le=MAX_NUM_PARAMS,
        description="Parameters used per token (mixture-of-experts); None means num_params.",
    )
    weight_dtype: WeightDtype = Field(default="bf16", description="Dtype of the weights.")
    max_model_len: int = Field(gt=0, le=MAX_TOKENS, description="Maximum context length (positions).")
    sliding_window: int | None = Field(
        default=None,
        gt=0,
        le=MAX_TOKENS,
        description="Sliding-window attention span in tokens; KV older than this is dropped.",
    )
    num_sliding_window_layers: int | None = Field(
        default=None,
        ge=0,
        le=MAX_LAYERS,
        description="Layers that attend within sliding_window; the others attend to everything "
        "(Gemma 2/3 interleave them 1:1 / 5:1, gpt-oss alternates them). None: every layer, when "
        "sliding_window is set.",
    )
    num_sink_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_TOKENS,
        description="Attention sinks (StreamingLLM, Xiao et al. 2023): the first tokens every token "
        "attends to besides its window; their KV is kept while older window blocks are freed. "
        "Needs sliding_window.",
    )
    kv_lora_rank: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WIDTH,
        description="MLA: rank of the compressed KV latent stored in the cache (None: not MLA).",
    )
    qk_rope_head_dim: int | None = Field(
        default=None,
        gt=0,
        le=MAX_HEADS,
        description="MLA: decoupled RoPE key dimension stored beside the latent.",
    )
    num_experts: int | None = Field(default=None, gt=0, le=MAX_EXPERTS, description="MoE: experts per layer.")
    num_experts_per_token: int | None = Field(
        default=None, gt=0, le=MAX_EXPERTS, description="MoE: experts routed per token."
    )
    source: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS,
        default="",
        description="Where these numbers come from (model card, config).",
    )
    num_shared_experts: int = Field(
        default=0,
        ge=0,
        le=MAX_EXPERTS,
        description="MoE: experts every token goes through besides its routed ones (DeepSeek), "
        "each intermediate_size wide.",
    )
    num_dense_layers: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="MoE: leading layers with a dense MLP instead of experts (DeepSeek's "
        "first_k_dense_replace); the others are mixture-of-experts layers.",
    )
    expert_weight_dtype: WeightDtype | None = Field(
        default=None,
        description="MoE: dtype of the routed experts' weights when it differs from weight_dtype "
        "(gpt-oss ships them in MXFP4, about int4); None: weight_dtype.",
    )
    tie_word_embeddings: bool = Field(
        default=False,
        description="Whether the LM head shares the embedding matrix (counted once in num_params).",
    )

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if (self.kv_lora_rank is None) != (self.qk_rope_head_dim is None):
            raise ValueError("kv_lora_rank and qk_rope_head_dim must be given together (MLA)")
        if self.num_active_params is not None and self.num_active_params > self.num_params:
            raise ValueError("num_active_params must be <= num_params")
        if (
            self.num_experts is not None
            and self.num_experts_per_token is not None
            and self.num_experts_per_token > self.num_experts
        ):
            raise ValueError("num_experts_per_token must be <= num_experts")
        if self.sliding_window is None and (self.num_sliding_window_layers or self.num_sink_tokens):
            raise ValueError("num_sliding_window_layers and num_sink_tokens need a sliding_window")
        if self.num_sliding_window_layers is not None and self.num_sliding_window_layers > self.num_layers:
            raise ValueError(
                f"num_sliding_window_layers ({self.num_sliding_window_layers}) exceeds num_layers "
                f"({self.num_layers})"
            )
        moe_fields = self.num_shared_experts or self.num_dense_layers or self.expert_weight_dtype
        if moe_fields and (self.num_experts is None or self.num_experts_per_token is None):
            raise ValueError(
                "num_shared_experts, num_dense_layers and expert_weight_dtype describe a mixture of "
                "experts: set num_experts and num_experts_per_token"
            )
        if self.num_experts is not None and self.num_dense_layers >= self.num_layers:
            raise ValueError(f"num_dense_layers ({self.num_dense_layers}) must be < num_layers")
        return self

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def active_params(self) -> float:
        return self.num_active_params if self.num_active_params is not None else self.num_params

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.num_experts_per_token is not None

    @property
    def num_window_layers(self) -> int:
        """Layers attending within the sliding window (0 without one)."""
        if self.sliding_window is None:
            return 0
        return self.num_layers if self.num_sliding_window_layers is None else self.num_sliding_window_layers

    @property
    def num_full_layers(self) -> int:
        """Layers attending to every earlier token."""
        return self.num_layers - self.num_window_layers

    @property
    def is_hybrid(self) -> bool:
        """Both sliding-window and full-attention layers (vLLM's hybrid KV cache groups)."""
        return 0 < self.num_window_layers < self.num_layers

    @property
    def attention_kind(self) -> str:
        if self.is_mla:
            return "mla"
        if self.num_kv_heads == self.num_attention_heads:
            return "mha"
        if self.num_kv_heads == 1:
            return "mqa"
        return "gqa"


class GpuSpec(FrozenModel):
    """Datasheet figures of one accelerator."""

    name: Name = Field(max_length=MAX_YAML_SCALAR_CHARS, description="GPU name, e.g. 'h100-sxm'.")
    memory_bytes: int = Field(gt=0, le=MAX_GPU_MEMORY_BYTES, description="HBM capacity in bytes.")
    hbm_bandwidth_bytes_per_s: float = Field(
        ge=MIN_BANDWIDTH_BYTES_PER_S, le=MAX_BANDWIDTH_BYTES_PER_S, description="Peak HBM bandwidth, bytes/s."
    )
    bf16_flops: float = Field(
        ge=MIN_FLOPS, le=MAX_FLOPS, description="Dense bf16 tensor-core peak, FLOP/s (no sparsity)."
    )
    fp16_flops: float = Field(
        ge=MIN_FLOPS, le=MAX_FLOPS, description="Dense fp16 tensor-core peak, FLOP/s (no sparsity)."
    )
    fp32_flops: float | None = Field(
        default=None,
        ge=MIN_FLOPS,
        le=MAX_FLOPS,
        description="Dense fp32 peak, FLOP/s (CPUs; fp32 models); None uses bf16_flops.",
    )
    fp8_flops: float | None = Field(
        default=None,
        ge=MIN_FLOPS,
        le=MAX_FLOPS,
        description="Dense fp8 peak, FLOP/s; None if the GPU has no fp8.",
    )
    int8_ops: float | None = Field(
        default=None, ge=MIN_FLOPS, le=MAX_FLOPS, description="Dense int8 peak, OP/s."
    )
    interconnect_bandwidth_bytes_per_s: float = Field(
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="GPU-to-GPU bandwidth per GPU per direction (NVLink, or PCIe when none), bytes/s.",
    )
    interconnect_latency_s: float = Field(
        default=5e-6,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Latency of one collective step between GPUs, seconds.",
    )
    pcie_bandwidth_bytes_per_s: float = Field(
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="Host<->device bandwidth per direction (swap, CPU offload), bytes/s.",
    )
    source: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS, default="", description="Datasheet the figures come from."
    )

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak for a compute dtype, falling back to bf16."""
        if dtype == "fp32" and self.fp32_flops is not None:
            return self.fp32_flops
        if dtype == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        if dtype == "int8" and self.int8_ops is not None:
            return self.int8_ops
        if dtype == "fp16":
            return self.fp16_flops
        return self.bf16_flops
