"""Hardware and model descriptions: what a model is and what a GPU can do.

`ModelSpec` and `GpuSpec` are plain, frozen pydantic models. Presets live in
`kvsim.model.presets`; a scenario may name a preset or define its own spec inline.
KV element sizes for each `kv_cache_dtype` are in `KV_DTYPE_BYTES`, bytes per weight
(scales included) for each `WeightDtype` in `WEIGHT_DTYPE_BYTES`, and which tensor-core
rate a weight precision computes at on a GPU in `compute_dtype`.
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
#: Weight precisions (vLLM's ``--quantization`` families). fp32 is for CPUs (vLLM's CPU build
#: serves float32 models; see benchmarks/vllm_latency.py). fp8: e4m3 with one scale per
#: tensor (or per output channel); fp8_block: e4m3 with one scale per 128 x 128 block
#: (DeepSeek-V3, Qwen3-*-FP8); int8: W8A8 with per-channel scales; int4: weight-only int4
#: (AWQ / GPTQ, groups of 128, 16-bit activations); nvfp4: e2m1 with an fp8 scale per 16
#: elements; mxfp4: e2m1 with an e8m0 scale per 32 (OCP MX; gpt-oss's experts).
WeightDtype = Literal["fp32", "fp16", "bf16", "fp8", "fp8_block", "int8", "int4", "nvfp4", "mxfp4"]
#: The parts of a model whose weights a checkpoint may keep at another precision than its
#: ``weight_dtype`` (`ModelSpec.module_weight_dtypes`): the attention's query/key/value
#: projections (MLA's down- and up-projections: q_a, q_b, kv_a, kv_b), its output projection,
#: the MLP of a dense model or of a mixture of experts' dense first layers, the shared experts.
WeightModule = Literal["attention_qkv", "attention_o", "dense_mlp", "shared_experts"]
#: What a weight precision computes in (`compute_dtype`): the key of `GpuSpec.peak_flops`.
ComputeDtype = Literal["fp32", "fp16", "bf16", "fp8", "int8", "fp4"]

#: Bytes per stored element for each KV-cache dtype ("auto" means the model's dtype).
KV_DTYPE_BYTES: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp32": 4.0,  # CPUs (last: error messages list the GPU dtypes first)
}

#: Bytes of one stored weight, its share of the quantization scales included. Scale
#: overheads per format (derivations; the formats' papers and the engines' checkpoint
#: layouts):
WEIGHT_DTYPE_BYTES: dict[str, float] = {
    "fp16": 2.0,
    "bf16": 2.0,
    # One fp32 scale per weight matrix (or per output channel): 4 bytes over >= 10^6
    # weights, below 1e-5 of the weights; counted as 0 (vLLM's Fp8LinearMethod).
    "fp8": 1.0,
    # One fp32 scale per 128 x 128 block (DeepSeek-V3 technical report, arXiv:2412.19437,
    # section 3.3.2; `weight_block_size: [128, 128]` in the checkpoints' config.json):
    # 1 + 4 / 16,384 bytes.
    "fp8_block": 1.0 + 4.0 / (128 * 128),
    # W8A8 with one fp32 scale per output channel: below 0.1% for widths >= 4,096; counted as 0.
    "int8": 1.0,
    # AWQ / GPTQ, groups of 128 along the input dimension: per group one fp16 scale and one
    # packed 4-bit zero point (AutoAWQ's `qzeros`, GPTQ's `qzeros`): 0.5 + (2 + 0.5) / 128.
    "int4": 0.5 + 2.5 / 128,
    # NVFP4: e2m1 values, one fp8 (e4m3) scale per 16 elements (plus one fp32 scale per
    # tensor, negligible): 0.5 + 1 / 16 (NVIDIA, "Introducing NVFP4", 2025; ModelOpt's
    # `group_size: 16` in hf_quant_config.json).
    "nvfp4": 0.5 + 1.0 / 16,
    # MXFP4: e2m1 values, one e8m0 scale per 32 elements, 4.25 bits (OCP Microscaling
    # Formats (MX) v1.0 spec, 2023, section 5; gpt-oss model card, arXiv:2508.10925).
    "mxfp4": 0.5 + 1.0 / 32,
    "fp32": 4.0,  # CPUs
}


def compute_dtype(weight_dtype: str, gpu: GpuSpec) -> ComputeDtype:
    """The tensor-core precision the GEMMs of ``weight_dtype`` weights run at on ``gpu``.

    The one place this rule lives (the roofline, `GpuSpec.peak_flops` and the kernel cost
    models call it):

    - fp32, fp16, bf16: themselves;
    - fp8, fp8_block: fp8 where the GPU has fp8 tensor cores (Ada, Hopper, Blackwell);
      elsewhere the engines dequantize to 16 bits (vLLM's Marlin W8A16 path on Ampere);
    - int8 (W8A8): int8 where the GPU has int8 tensor cores, else 16-bit;
    - nvfp4, mxfp4: fp4 on GPUs with fp4 tensor cores (Blackwell, ``fp4_flops`` set);
      elsewhere weight-only, computed in 16 bits (vLLM's Marlin FP4 kernels on Hopper);
    - int4 (AWQ / GPTQ): weight-only, 16-bit activations everywhere.

    "16-bit" is reported as bf16 (every preset has equal fp16 and bf16 rates).
    """
    if weight_dtype in ("fp32", "fp16", "bf16"):
        return weight_dtype  # type: ignore[return-value]
    if weight_dtype in ("fp8", "fp8_block"):
        return "fp8" if gpu.fp8_flops is not None else "bf16"
    if weight_dtype == "int8":
        return "int8" if gpu.int8_ops is not None else "bf16"
    if weight_dtype in ("nvfp4", "mxfp4"):
        return "fp4" if gpu.fp4_flops is not None else "bf16"
    if weight_dtype == "int4":
        return "bf16"
    known = ", ".join(WEIGHT_DTYPE_BYTES)
    raise ValueError(f"weight dtype {weight_dtype!r} is not one of: {known}")


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
    weight_dtype: WeightDtype = Field(
        default="bf16",
        description="Precision of the weights as served: fp32, fp16, bf16, fp8 (per-tensor "
        "scales), fp8_block (128 x 128 block scales), int8 (W8A8), int4 (AWQ/GPTQ, weight-only), "
        "nvfp4, mxfp4 (bytes per weight with scales: kvsim.model.specs.WEIGHT_DTYPE_BYTES).",
    )
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
    qk_nope_head_dim: int | None = Field(
        default=None,
        gt=0,
        le=MAX_HEADS,
        description="MLA: the non-rotary part of each head's query and key (qk_nope_head_dim; "
        "None: head_dim, as DeepSeek-V3's 128). head_dim is an MLA model's value head width "
        "(v_head_dim): GLM-5's 192 and 256.",
    )
    index_topk: int | None = Field(
        default=None,
        gt=0,
        le=MAX_TOKENS,
        description="DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): the tokens each query "
        "attends to, chosen by its lightning indexer (config.json index_topk); None: dense. Needs "
        "MLA. The kernels model prices such a layer from the measured DSA module tables where they "
        "hold the model.",
    )
    index_head_dim: int | None = Field(
        default=None,
        gt=0,
        le=MAX_HEADS,
        description="DSA: the width of the lightning indexer's keys (config.json index_head_dim; "
        "GLM-5 and DeepSeek-V3.2: 128). Each layer caches them beside the latent, fp8 with an "
        "fp32 scale per 128 (`kv_sizing.dsa_index_bytes`). Needs index_topk.",
    )
    q_lora_rank: int | None = Field(
        default=None,
        gt=0,
        le=MAX_WIDTH,
        description="MLA: rank of the compressed query (DeepSeek-V3's 1536); None: queries are "
        "projected from the hidden state directly (DeepSeek-V2-Lite). Counts the attention's weights "
        "(module_weight_dtypes).",
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
        "(gpt-oss ships them in mxfp4); None: weight_dtype.",
    )
    module_weight_dtypes: dict[WeightModule, WeightDtype] = Field(
        default_factory=dict,
        max_length=4,
        description="Parts of the model stored at another precision than weight_dtype, as a "
        "checkpoint's quantization exclusions leave them (nvidia/DeepSeek-V3.1-NVFP4: bf16 weights "
        "with attention_o, dense_mlp and shared_experts in nvfp4, the q/kv projections in bf16): "
        "attention_qkv, attention_o (softmax-attention layers; linear-attention layers keep "
        "weight_dtype), dense_mlp (every MLP of a dense model, the dense first layers of a mixture "
        "of experts), shared_experts. Weights and GEMMs are sized and priced at these; the routed "
        "experts have expert_weight_dtype.",
    )
    tie_word_embeddings: bool = Field(
        default=False,
        description="Whether the LM head shares the embedding matrix (counted once in num_params).",
    )
    num_mtp_layers: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="Multi-token-prediction layers the checkpoint carries beside its decoder "
        "(DeepSeek-V3's num_nextn_predict_layers, MiniMax's MTP modules): engines load them only "
        "as a speculative-decoding draft, so they are not in num_params, num_layers or the KV cache.",
    )

    num_linear_attention_layers: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="Linear-attention layers (Gated DeltaNet: Qwen3.5, Qwen3-Next): each keeps a "
        "constant-size state per request (a causal-conv window and a recurrent state) instead of a "
        "KV cache; the other layers are full attention and alone fill the paged KV cache. 0: none.",
    )
    linear_num_key_heads: int | None = Field(
        default=None,
        gt=0,
        le=MAX_HEADS,
        description="Linear attention: query/key heads (linear_num_key_heads).",
    )
    linear_num_value_heads: int | None = Field(
        default=None,
        gt=0,
        le=MAX_HEADS,
        description="Linear attention: value heads (linear_num_value_heads).",
    )
    linear_key_head_dim: int | None = Field(
        default=None, gt=0, le=MAX_HEADS, description="Linear attention: dimension of one query/key head."
    )
    linear_value_head_dim: int | None = Field(
        default=None, gt=0, le=MAX_HEADS, description="Linear attention: dimension of one value head."
    )
    linear_conv_kernel_dim: int | None = Field(
        default=None,
        gt=1,
        le=MAX_HEADS,
        description="Linear attention: width of the causal convolution over q, k and v (its state "
        "keeps the last kernel - 1 inputs).",
    )
    linear_state_dtype: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32",
        description="Linear attention: dtype of the recurrent state (the config's mamba_ssm_dtype; "
        "the conv window is kept in the model's 16-bit dtype).",
    )
    attn_output_gate: bool = Field(
        default=False,
        description="Full-attention layers gate their output by a sigmoid of a second query-wide "
        "projection (Qwen3.5's attn_output_gate): q_proj is twice as wide.",
    )
    qk_norm_across_heads: bool = Field(
        default=False,
        description="Attention normalizes q and k with RMSNorms over all the layer's heads "
        "(MiniMax-M2's per-layer q/k norms), not one head at a time: under tensor parallelism "
        "they need the sums of squares over every GPU's heads, one more all-reduce per layer of "
        "two values a token (vLLM and SGLang fuse q's and k's since vLLM #31493 and SGLang #14416, "
        "December 2025; before, one all-reduce each).",
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
        if "shared_experts" in self.module_weight_dtypes and not self.num_shared_experts:
            raise ValueError(
                "module_weight_dtypes: shared_experts given, but the model has no shared experts"
            )
        if (
            "dense_mlp" in self.module_weight_dtypes
            and self.num_experts is not None
            and not self.num_dense_layers
        ):
            raise ValueError("module_weight_dtypes: dense_mlp given, but every layer is a mixture of experts")
        for name in ("q_lora_rank", "qk_nope_head_dim", "index_topk"):
            if getattr(self, name) is not None and not self.is_mla:
                raise ValueError(f"{name} describes MLA: set kv_lora_rank")
        if self.index_head_dim is not None and self.index_topk is None:
            raise ValueError("index_head_dim describes DeepSeek sparse attention: set index_topk")
        if self.num_experts is not None and self.num_dense_layers >= self.num_layers:
            raise ValueError(f"num_dense_layers ({self.num_dense_layers}) must be < num_layers")
        self._check_linear_attention()
        return self

    def _check_linear_attention(self) -> None:
        """Linear-attention fields come together, leave at least one full-attention layer
        (the paged KV cache is sized by them) and do not mix with windows or MLA."""
        fields = {
            name: getattr(self, name)
            for name in (
                "linear_num_key_heads",
                "linear_num_value_heads",
                "linear_key_head_dim",
                "linear_value_head_dim",
                "linear_conv_kernel_dim",
            )
        }
        if not self.num_linear_attention_layers:
            given = [k for k, v in fields.items() if v is not None]
            if given:
                raise ValueError(
                    f"{', '.join(given)} describe linear attention: set num_linear_attention_layers"
                )
            return
        missing = [k for k, v in fields.items() if v is None]
        if missing:
            raise ValueError(f"num_linear_attention_layers needs {', '.join(missing)}")
        if self.num_linear_attention_layers >= self.num_layers:
            raise ValueError(
                f"num_linear_attention_layers ({self.num_linear_attention_layers}) must be < num_layers "
                f"({self.num_layers}): at least one full-attention layer holds the KV cache"
            )
        if self.sliding_window is not None or self.is_mla:
            raise ValueError("unsupported: linear-attention layers beside sliding-window or MLA layers")
        nk, nv = fields["linear_num_key_heads"], fields["linear_num_value_heads"]
        if nv % nk:
            raise ValueError(
                f"linear_num_value_heads ({nv}) must be a multiple of linear_num_key_heads ({nk})"
            )

    def dtype_of(self, module: WeightModule) -> WeightDtype:
        """The precision of one part of the model's weights (`module_weight_dtypes`, else
        ``weight_dtype``)."""
        return self.module_weight_dtypes.get(module, self.weight_dtype)

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
        """Layers attending to every earlier token (the paged KV cache's layers, with the window ones)."""
        return self.num_layers - self.num_window_layers - self.num_linear_attention_layers

    @property
    def num_kv_layers(self) -> int:
        """Layers with a paged KV cache: all but the linear-attention ones."""
        return self.num_layers - self.num_linear_attention_layers

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
    fp4_flops: float | None = Field(
        default=None,
        ge=MIN_FLOPS,
        le=MAX_FLOPS,
        description="Dense fp4 (NVFP4 / MXFP4) tensor peak, FLOP/s; None if the GPU has no fp4 "
        "tensor cores (before Blackwell).",
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
    sm_version: int | None = Field(
        default=None,
        ge=10,
        le=1000,
        description="CUDA compute capability x 10 (80 Ampere, 89 Ada, 90 Hopper, 100/103 "
        "Blackwell data center, 120 Blackwell workstation); engines pick kernels and page "
        "sizes by it. None: unknown.",
    )
    source: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS, default="", description="Datasheet the figures come from."
    )

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak for a compute dtype or a weight dtype, falling back to bf16.

        A weight dtype (nvfp4, fp8_block, int4, ...) is first mapped to the precision its
        GEMMs run at on this GPU by `compute_dtype`.
        """
        if dtype in WEIGHT_DTYPE_BYTES:
            dtype = compute_dtype(dtype, self)
        if dtype == "fp32" and self.fp32_flops is not None:
            return self.fp32_flops
        if dtype == "fp4" and self.fp4_flops is not None:
            return self.fp4_flops
        if dtype == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        if dtype == "int8" and self.int8_ops is not None:
            return self.int8_ops
        if dtype == "fp16":
            return self.fp16_flops
        return self.bf16_flops
