"""Scenario configuration of the cost model (how long one engine iteration takes).

A scenario's ``cost_model`` is one of:

- ``roofline`` (or ``{kind: roofline, ...}``): analytic, from the GPU's datasheet figures;
- ``{kind: constant, step_time_s: ...}``: every iteration takes the same time (tests, theory);
- ``{profile: NAME_OR_PATH}`` (or ``{kind: profile, ...}``): curves measured by ``calibration/``;
- ``{kind: kernels, ...}``: NVIDIA's measured kernel tables for the GPU and engine
  (aiconfigurator-core, the ``kernels`` extra), or a folder of the same tables;
- ``{kind: NAME, ...}``: a cost model registered in `kvsim.registry.COST_MODELS` with its
  own config class (docs/engine.md, "Extending kvsim").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from kvsim.frozen import FrozenModel
from kvsim.limits import (
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_STEP_TIME_S,
    MAX_TOKENS,
    MAX_YAML_SCALAR_CHARS,
    MIN_BANDWIDTH_BYTES_PER_S,
)
from kvsim.registry import COST_MODELS, REGISTERED_TAG, RegisteredKinds, kind_tag


class RooflineCostConfig(FrozenModel):
    """Analytic roofline: linear layers and attention each take max(FLOPs / peak, bytes / bandwidth).

    Defaults (sources in docs/cost-model.md): compute 0.6 of dense peak, between large
    GEMMs (0.71-0.83 of 989 TFLOP/s measured on an H200) and attention (torch SDPA reached
    0.33 there; FlashAttention-2 reports 50-73% of A100 peak); memory 0.8 of datasheet HBM
    bandwidth, near the device-copy ceiling (0.79-0.90 measured on an H200); no per-layer
    overhead; 0.5 ms of CPU per iteration (an assumption of the order vLLM reports for its
    scheduling and input preparation). The H200 measurements favour memory 0.7 and 20 us
    per layer for torch kernels (docs/cost-model.md); fit your own with ``kvsim calibrate``.
    """

    kind: Literal["roofline"] = Field(default="roofline", description="Selects this variant (roofline).")
    compute_efficiency: float = Field(
        default=0.6,
        gt=0,
        le=1,
        description="Fraction of dense tensor-core peak achieved by GEMMs and attention.",
    )
    memory_efficiency: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Fraction of peak HBM bandwidth achieved when streaming weights and KV.",
    )
    kv_memory_efficiency: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "Fraction of peak HBM bandwidth achieved when attention reads the KV cache; "
            "None uses memory_efficiency."
        ),
    )
    combine: Literal["max", "sum"] = Field(
        default="max",
        description="How the compute and memory times of the linear layers, and of attention, "
        "combine: max (they overlap: the roofline, as on GPUs) or sum (they do not: one CPU core "
        "streaming weights and computing small batches in turn; see docs/cost-model.md).",
    )
    per_layer_overhead_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Fixed time per transformer layer per iteration (small kernels, launch gaps), seconds.",
    )
    per_iteration_overhead_s: float = Field(
        default=0.0005,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Fixed CPU time per iteration (scheduling, sampling, input preparation), seconds.",
    )
    allreduce_latency_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Latency of one all-reduce; None uses the GPU's interconnect_latency_s.",
    )
    allreduce_bandwidth_bytes_per_s: float | None = Field(
        default=None,
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description=(
            "All-reduce bandwidth per GPU (a ring sends 2(tp-1)/tp of the message through it); "
            "None uses the GPU's interconnect bandwidth."
        ),
    )
    expert_routing_zipf_exponent: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description=(
            "Mixture of experts: skew of the router's expert popularity, p_i proportional to "
            "(i + 1)^-s; 0 routes uniformly. Sets how many distinct experts a batch activates, "
            "hence the expert weights a step reads (kvsim.model.moe)."
        ),
    )


class ConstantCostConfig(FrozenModel):
    """Every iteration takes ``step_time_s`` whatever it does (for tests and queueing theory)."""

    kind: Literal["constant"] = Field(default="constant", description="Selects this variant (constant).")
    step_time_s: float = Field(
        gt=0, le=MAX_STEP_TIME_S, description="Duration of every engine iteration, seconds."
    )


class ProfileCostConfig(FrozenModel):
    """Cost curves measured on a real GPU by ``kvsim calibrate``."""

    kind: Literal["profile"] = Field(default="profile", description="Selects this variant (profile).")
    profile: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS,
        description="Name of a shipped profile (see `kvsim profiles`) or a path to one.",
    )
    per_iteration_overhead_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="CPU time per iteration; None uses the profile's value.",
    )


class KernelCostConfig(FrozenModel):
    """Each iteration priced kernel by kernel from tables measured on the GPU (`kvsim.cost.kernels`).

    The GEMMs, attention and all-reduces come from the tables; the elementwise kernels
    from the GPU's bandwidth; two overheads are fitted (on H200 deployments only, see
    docs/validation.md): per layer and per iteration.
    """

    kind: Literal["kernels"] = Field(default="kernels", description="Selects this variant (kernels).")
    system: str | None = Field(
        default=None,
        max_length=MAX_YAML_SCALAR_CHARS,
        description="The tables' system (h100_sxm, h200_sxm, b200_sxm, gb200, ...; `kvsim profiles` "
        "lists them); None: the one of the replica's GPU preset.",
    )
    backend: Literal["vllm", "sglang", "trtllm", "torch"] | None = Field(
        default=None,
        description="Whose kernels: vllm, sglang or trtllm; torch: your own, measured by `kvsim calibrate "
        "--tables` (give `tables`; the engine's overheads and CUDA-graph sizes still follow "
        "engine.backend); None: the replica's engine.backend.",
    )
    version: str | None = Field(
        default=None,
        max_length=MAX_YAML_SCALAR_CHARS,
        description="Engine version of the tables (e.g. 0.24.0); None: the newest measured for each kernel.",
    )
    tables: str | None = Field(
        default=None,
        max_length=MAX_YAML_SCALAR_CHARS,
        description="A folder of tables in the same layout (<system>/<op>/<backend>/<version>/*.parquet, "
        "e.g. written by kvsim calibrate); None: those of the installed aiconfigurator-core.",
    )
    per_iteration_overhead_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Fixed time per iteration the kernels do not show: the engine's scheduling, input "
        "preparation, sampling and output processing, seconds; None: the backend's value fitted on "
        "H200 deployments (docs/validation.md).",
    )
    per_layer_overhead_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Fixed time per transformer layer per iteration beyond the measured kernels "
        "(launch gaps), seconds; None: the backend's fitted value.",
    )
    eager_moe_layer_host_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Mixture of experts: host time per MoE layer of a step with a prompt in it, which "
        "SGLang and TensorRT-LLM run without CUDA graphs, kernel by kernel from Python (vLLM: a step "
        "beyond its CUDA-graph sizes); such a step takes at least MoE layers x this, seconds. None: "
        "the backend's value fitted on H200 deployments (kvsim.cost.kernels.EAGER_MOE_LAYER_HOST_S; "
        "vLLM 1.25 ms, SGLang 4 ms, TensorRT-LLM 0).",
    )
    cuda_graph_max_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="The largest iteration the engine replays from a CUDA graph: vLLM's "
        "--max-cudagraph-capture-size (tokens; --cuda-graph-sizes N before 0.11), SGLang's "
        "--cuda-graph-max-bs (decode requests). Larger iterations run uncaptured (vLLM: they pay "
        "eager_moe_layer_host_s). None: the engine's default, vLLM's min(2 x max_num_seqs, 512), "
        "1,024 on data-center Blackwell from vLLM 0.28.0 and for gpt-oss, SGLang's for the GPU's "
        "memory and TP.",
    )
    piecewise_cuda_graph_max_tokens: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TOKENS,
        description="SGLang only: the largest step with a prompt in it (tokens) that replays piecewise "
        "CUDA graphs (--piecewise-cuda-graph-max-tokens) and so pays no eager_moe_layer_host_s; 0: "
        "none (--disable-piecewise-cuda-graph). None: SGLang's default, from 0.5.10 2,048 tokens for "
        "MLA models and the chunk size (max_num_batched_tokens) otherwise, none before 0.5.10, for "
        "hybrid linear-attention models, or with attention DP, speculative decoding or on a "
        "disaggregated prefill/decode worker. SGLang also turns them off for what kvsim does not "
        "see (set 0): multimodal checkpoints, --enable-symm-mem, a MoE all-to-all backend (DeepEP), "
        "LoRA, torch.compile, the hierarchical cache, EPLB.",
    )
    elementwise_memory_efficiency: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Fraction of HBM bandwidth the elementwise kernels (norms, RoPE, KV write, SiLU) "
        "reach; aiconfigurator-core's systems/*.yaml use 0.8.",
    )
    elementwise_kernel_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Shortest time of one elementwise kernel, seconds (aiconfigurator-core's "
        "mem_empirical_constant_latency is 3 us); None: the backend's fitted value.",
    )
    expert_load: Literal["balanced", "power_law_1.01", "power_law_1.2"] = Field(
        default="power_law_1.01",
        description="Mixture of experts: how tokens spread over the experts, as the moe tables were "
        "measured (their distribution column): balanced, or drawn from a power law of exponent 1.01 "
        "or 1.2 (a few hot experts). Each row times the expert-parallel rank the routing loads most, "
        "so with expert parallelism the slowest rank sets the step. Default: aiconfigurator's own "
        "default workload (power_law_1.01).",
    )
    mxfp4_moe_activation: Literal["auto", "bf16", "mxfp8"] = Field(
        default="auto",
        description="MXFP4 experts (gpt-oss): the precision of the activations the expert kernel "
        "multiplies them with, which picks the moe table's rows (w4a16_mxfp4 or w4a8_mxfp4_mxfp8). "
        "auto: the engine's default on the GPU (kvsim.cost.kernels.mxfp4_moe_activation: MXFP8 for "
        "TensorRT-LLM and SGLang on Blackwell, 16 bits elsewhere and for vLLM, which quantizes to "
        "MXFP8 only with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: set mxfp8 then).",
    )
    fp8_block_gemm_backend: Literal["vllm", "sglang", "trtllm"] | None = Field(
        default=None,
        description="Whose gemm table prices block-scaled fp8 GEMMs (fp8_block weights); None: the "
        "engine's own, except vLLM's, whose fp8_block rows time the host's work too (58-260 us at any "
        "small shape): SGLang's table of the same DeepGEMM kernel (kvsim.cost.kernels.FP8_BLOCK_GEMM_TABLES).",
    )
    moe_kernel: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[a-z0-9_]+$",
        description="Mixture of experts: price the routed experts by one kernel of the moe table, named "
        "by a word of its kernel_source (marlin: vLLM's Marlin experts, which VLLM_MXFP4_USE_MARLIN=1 "
        "selects for MXFP4 on Hopper), where the engine runs that one rather than the fastest measured. "
        "Where the kernel was measured at other expert shapes only, its time is carried to the model's "
        "at equal tokens per expert, in proportion to the experts' weights, with a warning. None: the "
        "fastest kernel measured at the model's shape.",
    )
    moe_tables_backend: Literal["vllm", "sglang", "trtllm"] | None = Field(
        default=None,
        description="Whose moe table prices the routed experts (its newest version with the experts' "
        "dtype at the model's shape); None: the engine's own. For an engine whose table lacks a kernel "
        "it runs (vLLM 0.24.0's lacks MXFP4 x MXFP8 experts at gpt-oss's shape: the same FlashInfer "
        "kernel SGLang's table measures).",
    )


#: The built-in kinds (their builders are registered in `kvsim.cost.factory`).
BUILTIN_COST_MODELS = ("roofline", "constant", "profile", "kernels")

# Any other kind registered in kvsim.registry.COST_MODELS is read by its config class.
CostModelConfig = Annotated[
    Annotated[RooflineCostConfig, Tag("roofline")]
    | Annotated[ConstantCostConfig, Tag("constant")]
    | Annotated[ProfileCostConfig, Tag("profile")]
    | Annotated[KernelCostConfig, Tag("kernels")]
    | Annotated[Any, RegisteredKinds(COST_MODELS, BUILTIN_COST_MODELS), Tag(REGISTERED_TAG)],
    Discriminator(kind_tag(BUILTIN_COST_MODELS, None)),
]


def normalize_cost_model(value: Any) -> Any:
    """Accept the shorthands ``roofline`` and ``{profile: X}`` before validation."""
    if isinstance(value, str):
        return {"kind": value}
    if isinstance(value, dict) and "kind" not in value and "profile" in value:
        return {"kind": "profile", **value}
    return value


class _CostHolder(FrozenModel):
    """Mixin for config models holding a ``cost_model`` field (applies the shorthands)."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cost_model" in data:
            data = {**data, "cost_model": normalize_cost_model(data["cost_model"])}
        return data
