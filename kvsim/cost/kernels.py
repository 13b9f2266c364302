"""Iteration times from measured kernels: the ``kernels`` cost model.

One engine iteration of a dense transformer on one tensor-parallel shard runs, per layer
(T tokens in the step, S sequences, B of them decoding; h hidden, q/kv heads per GPU):

    add + RMSNorm ─ QKV GEMM (T x h -> (q + 2 kv) x head_dim) ─ RoPE, KV write ─ attention
    ─ O GEMM (T x q head_dim -> h) ─ all-reduce (T x h, tp > 1) ─ add + RMSNorm
    ─ gate/up GEMM (T x h -> 2 i/tp) ─ SiLU x mul ─ down GEMM (T x i/tp -> h) ─ all-reduce

then the LM head (S x h -> vocab/tp, logits only for each sequence's last position).

A mixture of experts (issue 22) replaces, in each MoE layer, the gate/up and down GEMMs
by the router GEMM (T x h -> experts, 16 bits), its shared experts' GEMMs if any, and the
routed experts' fused kernel at T tokens from the ``moe`` table (aiconfigurator-core
0.12.0: per expert dtype, bf16 / fp8 / fp8_block / int4 weight-only / MXFP4 / NVFP4 where
measured; `moe_curve`); its dense first layers are priced at the active width. An MLA
model (DeepSeek-V3's layer) takes its whole attention block, projections included, from
the engine's ``mla`` module tables (vLLM, TensorRT-LLM; `mla_module_grid`) in place of the
QKV / O GEMMs and the attention tables, or (SGLang, granular tables only) its projections
from the GEMM table, its attention kernel from ``generation_mla_perf`` /
``context_mla_perf`` and the absorbed BMMs from ``mla_bmm``.
Each GEMM, attention call and all-reduce is priced from NVIDIA's measured tables for that
GPU and engine (`kvsim.cost.tables`): the GEMM of the weight precision at m = T (m padded
to the engine's CUDA-graph size when the step is captured), decode attention at (B, mean
context), each prefill chunk's attention from a full prefill of its length scaled by the
share of attention pairs the chunk computes, the engine's custom all-reduce (its
CUDA-graph variant when captured). What the tables do not measure is modelled and named:

    elementwise   norms, RoPE, KV-cache write, SiLU x mul, residual adds: memory-bound
                  kernels, bytes / (HBM bandwidth x elementwise_memory_efficiency) plus
                  elementwise_kernel_s each (aiconfigurator-core's systems/*.yaml give 0.8
                  of datasheet bandwidth and 3 us, "nonofficial corrections")
    per layer     per_layer_overhead_s (launch gaps outside CUDA graphs)
    per step      per_iteration_overhead_s (the engine's CPU time: scheduling, input
                  preparation, sampling, output processing)

The two overheads are the only constants fitted to real deployments, on H200 rows only
(docs/validation.md, "Real GPU deployments"); the defaults per backend are those fits.

A decode-only iteration's time depends on (B, total context) only, and
``decode_steps_s`` computes it with the same operations as ``step_time_s``: the
fast-forwarded engine and the stepped one agree bit for bit.
"""

from __future__ import annotations

import contextlib
import functools
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kvsim.backends.defaults import parse_version, sglang_memory_defaults, sglang_piecewise_max_tokens
from kvsim.cost.base import Batch
from kvsim.cost.config import KernelCostConfig
from kvsim.cost.moe_comm import all_to_all_curve, gather_scatter_curve
from kvsim.cost.table_layout import BACKEND as TORCH_TABLES  # the folder of the harness's own tables
from kvsim.cost.tables import (
    MS,
    Curve,
    Grid,
    TableIndex,
    package_tables_root,
    read_table,
    table_index,
)
from kvsim.errors import ProfileError
from kvsim.model.moe import num_moe_layers
from kvsim.model.specs import KV_DTYPE_BYTES, GpuSpec, ModelSpec, WeightModule

if TYPE_CHECKING:
    from kvsim.cost.linear_attention import GdnKernels

#: kvsim GPU presets -> aiconfigurator-core system names (the tables' folders).
GPU_SYSTEMS: dict[str, str] = {
    "a100-80gb": "a100_sxm",
    "a100-pcie": "a100_pcie",
    "a30": "a30",
    "h100-sxm": "h100_sxm",
    "h100-pcie": "h100_pcie",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l4": "l4",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
    "arc-pro-b60": "b60",
}

#: Weight precision -> the tables' gemm_dtype.
GEMM_DTYPES: dict[str, str] = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",  # same tensor-core rate; the tables measure bf16
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "int4": "int4_wo",
}
#: Expert weight precision -> the ``moe`` table's moe_dtype (aiconfigurator-core 0.12.0,
#: systems/data/<system>/moe/<backend>/<version>/moe_perf.parquet); nvfp4 only on Blackwell
#: systems. MXFP4 experts by the activations the engine feeds them: `MXFP4_MOE_DTYPES`.
MOE_DTYPES: dict[str, str] = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "mxfp4": "w4a16_mxfp4",
    "int4": "int4_wo",
}
#: MXFP4 experts: the moe table's dtype by activation precision (16-bit activations: the
#: weight-only kernels; MXFP8: activations quantized to MXFP8 before the expert GEMMs,
#: FlashInfer's / TensorRT-LLM's trtllm-gen kernel, about 1.3x-5x faster per layer on B200).
MXFP4_MOE_DTYPES: dict[str, str] = {"bf16": "w4a16_mxfp4", "mxfp8": "w4a8_mxfp4_mxfp8"}
#: Systems of compute capability 10.x (data-center Blackwell) and 12.x (RTX PRO 6000).
SM100_SYSTEMS = ("b200_sxm", "b300_sxm", "gb200", "gb300")
SM120_SYSTEMS = ("rtx_pro_6000_server",)


def mxfp4_moe_activation(backend: str, system: str, requested: str = "auto") -> str:
    """The activation precision (bf16 or mxfp8) of an engine's MXFP4 expert kernel on a system.

    - TensorRT-LLM: ``ModelConfig.get_mxfp4_quant_algo`` (tensorrt_llm/_torch/model_config.py,
      NVIDIA/TensorRT-LLM at 1a0dc5f): W4A8_MXFP4_MXFP8 when get_sm_version() >= 100 and the
      MoE backend is not TRITON (W4A8_MXFP4_FP8 then: not measured), else W4A16_MXFP4
      (Hopper); OVERRIDE_QUANT_ALGO can force another.
    - SGLang: on Blackwell its FlashInfer MXFP4 MoE quantizes the input with mxfp8_quantize
      unless --flashinfer-mxfp4-moe-precision bf16 (default "default";
      python/sglang/srt/layers/quantization/mxfp4.py, Mxfp4MoEMethod.apply); Hopper: 16 bits.
    - vLLM: 16-bit activations by default on every GPU (0.1x get_mxfp4_backend,
      vllm/model_executor/layers/quantization/mxfp4.py: SM100_FI_MXFP4_BF16 unless
      VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1; 0.32.0's oracle/mxfp4.py puts
      FLASHINFER_TRTLLM_MXFP4_BF16 first for gpt-oss); MXFP8 only when asked (``requested``).
    """
    if requested != "auto":
        return requested
    if backend == "trtllm" and system in SM100_SYSTEMS + SM120_SYSTEMS:
        return "mxfp8"
    if backend == "sglang" and system in SM100_SYSTEMS:
        return "mxfp8"
    return "bf16"


#: Whose ``gemm`` table prices an engine's block-scaled fp8 GEMMs when not its own. vLLM
#: 0.24.0's fp8_block rows (aiconfigurator-core 0.12.0) time its Python op, host work
#: included: flat floors of 58 us (FlashInferFp8BlockScaledMMKernel, m < 32), 85 us
#: (DeepGemmFp8BlockScaledMMKernel, m >= 32) and 175 us (CutlassFp8BlockScaledMMKernel) on
#: h200_sxm at every shape up to n = k = 8,192 (180-260 us for DeepGEMM on b200_sxm), where
#: its own per-tensor fp8 GEMM takes 6-9 us; the same DeepGEMM kernel in SGLang 0.5.14's
#: table (sglang_deepgemm_gemm_nt_f8f8bf16) takes 7-11 us at m 1-64, n 2,048, k 3,072 on
#: h200_sxm (TensorRT-LLM 1.3.0rc20's deepgemm 8 us on b200_sxm). A captured decode step
#: (vLLM's CUDA graphs) pays the kernel, not the host: SGLang's rows stand in for vLLM's.
FP8_BLOCK_GEMM_TABLES: dict[str, str] = {"vllm": "sglang"}
#: Expert routing the MoE tables were measured with that kvsim reads: aiconfigurator's
#: default workload (``workload_distribution = "power_law"``, alpha 1.01), the tokens'
#: experts drawn from a power law, so the busiest expert sets the kernel's time.
MOE_DISTRIBUTION = "power_law_1.01"
#: The one MLA layer the ``mla`` module tables measure (vLLM 0.24.0,
#: mla_{context,generation}_module_perf.parquet, model deepseek-ai/DeepSeek-V3): hidden
#: 7168, kv_lora_rank 512, qk_rope_head_dim 64, 128-wide nope/value heads (q_lora_rank 1536).
MLA_MODULE_SHAPE = {"hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "head_dim": 128}
#: An MLA layer of another shape (GLM-5: hidden 6144, q_lora 2048, 192-wide nope and 256-wide
#: value heads; zai-org/GLM-5 config.json) is priced granularly where the engine has the
#: granular tables: its projections from the GEMM tables at its own shapes, the attention
#: kernels from DeepSeek-V3's (the only MLA the ``mla`` / ``mla_bmm`` tables measure) scaled
#: by their work per head (`mla_kernel_scales`).
MLA_KERNEL_SHAPE = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


def mla_dims(model: ModelSpec) -> dict[str, int]:
    """An MLA model's per-head widths, named as in its config (`MLA_KERNEL_SHAPE`)."""
    assert model.kv_lora_rank is not None and model.qk_rope_head_dim is not None
    return {
        "kv_lora_rank": model.kv_lora_rank,
        "qk_rope_head_dim": model.qk_rope_head_dim,
        "qk_nope_head_dim": model.qk_nope_head_dim or model.head_dim,
        "v_head_dim": model.head_dim,
    }


def mla_kernel_scales(model: ModelSpec) -> dict[str, float]:
    """How much more work a head of ``model``'s MLA does than DeepSeek-V3's, per kernel: the
    decode kernel over the latent (scores over kv_lora + rope, values over kv_lora), the
    prefill kernel over the heads' own widths (scores over nope + rope, values over v), the
    absorbed BMMs before it (nope -> kv_lora) and after it (kv_lora -> v). All 1.0 for
    DeepSeek-V3/R1 and Kimi-K2.5; GLM-5: decode 1.0, prefill (256 + 256) / (192 + 128) = 1.6,
    BMMs 1.5 and 2.0. Their times scale so (compute-bound FLOPs, or bytes in proportion)."""
    d, m = mla_dims(model), MLA_KERNEL_SHAPE
    return {
        "decode": (2 * d["kv_lora_rank"] + d["qk_rope_head_dim"])
        / (2 * m["kv_lora_rank"] + m["qk_rope_head_dim"]),
        "prefill": (d["qk_nope_head_dim"] + d["qk_rope_head_dim"] + d["v_head_dim"])
        / (m["qk_nope_head_dim"] + m["qk_rope_head_dim"] + m["v_head_dim"]),
        "bmm_pre": d["qk_nope_head_dim"] * d["kv_lora_rank"] / (m["qk_nope_head_dim"] * m["kv_lora_rank"]),
        "bmm_post": d["kv_lora_rank"] * d["v_head_dim"] / (m["kv_lora_rank"] * m["v_head_dim"]),
    }


#: KV-cache dtype -> the tables' kv_cache_dtype ("auto" is the model's 16-bit dtype).
KV_DTYPES: dict[str, str] = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}

#: The engine's all-reduce table and its CUDA-graph / eager variants (column ``backend``).
ALLREDUCE_VARIANTS: dict[str, tuple[str, str]] = {
    "vllm": ("vllm_graph", "vllm_eager"),
    "sglang": ("sglang_graph", "sglang_eager"),
    "trtllm": ("trtllm", "trtllm"),
}


@dataclass(frozen=True)
class Overheads:
    """The kernels model's three constants for one engine (see the module docstring)."""

    per_iteration_overhead_s: float
    per_layer_overhead_s: float
    elementwise_kernel_s: float


#: Each engine's constants, fitted on h200_sxm deployments only (issue 20's rule: every
#: other GPU is held out) by `python benchmarks/silicon.py --fit BACKEND`; docs/validation.md
#: has the command, the objective and the figures. A config's own values win.
#: - vllm: 81 H200 rows (60 Llama-3.1-70B InferenceMAX, 21 Llama-3.1-8B gap analysis);
#:   objective (median |TTFT error| + median |TPOT error|) 0.2236 at (0, 0, 3 us) -> 0.2182.
#: - sglang: not fitted. Its 46 H200 rows (Llama-3.1-8B) run at SGLang's page size of 1
#:   token, about 15 minutes per evaluation of the grid on two cores; it takes vLLM's values
#:   (the same CUDA kernels' launch and host costs, a documented stand-in).
#: - trtllm: 72 H200 rows (Llama-3.1-70B InferenceMAX); objective 0.3556 -> 0.3017, every
#:   term at zero, consistent with TensorRT-LLM fusing the elementwise kernels into its GEMMs
#:   and attention and its overlap scheduler hiding the host work behind the GPU.
FITTED: dict[str, Overheads] = {
    "vllm": Overheads(0.5e-3, 5e-6, 1.5e-6),
    "sglang": Overheads(0.5e-3, 5e-6, 1.5e-6),
    "trtllm": Overheads(0.0, 0.0, 0.0),
}

#: Host time per mixture-of-experts layer of a step that runs without CUDA graphs, seconds:
#: SGLang and TensorRT-LLM capture decode batches only, so a step with a prompt in it runs
#: eagerly, each kernel launched from Python, and takes at least (MoE layers x this) however
#: few its tokens (`KernelCostModel.step_time_s`). The measured TTFT at 4 clients says as
#: much: DeepSeek-R1 on 8 B200s with TensorRT-LLM takes 210 ms for a 1k prompt and 224 ms
#: for an 8k one (silicon_sample.csv), where the kernels of the 1k prefill take ~40 ms.
#: Fitted on h200_sxm rows only, each engine's MoE rows of InferenceX's launch scripts
#: (`benchmarks/silicon.py`, `--set replicas.0.cost_model.eager_moe_layer_host_s=X`, every
#: 3rd of 120 SGLang rows, every 2nd of 185 TensorRT-LLM rows; objective median |TTFT error|
#: + median |TPOT error|, docs/validation.md): SGLang 0.698 at 0 -> 0.294 at 4.5 ms (grid
#: 0, 2, 3, 4, 4.5, 5, 6 ms) while kvsim mixed SGLang's prompts into decode iterations; refitted
#: once it prefilled them alone (`Scheduler._prefill_batch`; every 3rd of the 105 InferenceX
#: H200 SGLang MoE rows; 0, 2.5, 3, 3.5, 4, 4.5, 5.5 ms): 0.82 at 0 -> 0.34 at 4 ms (4.5 ms:
#: 0.43), and held out (the every-8th sample's SGLang rows) TTFT p90 88% -> 81%. TensorRT-LLM's fit, 0.961 -> 0.484 at 3.5 ms (0, 2, 3, 3.5, 4,
#: 4.5, 5, 6, 8 ms), is not adopted: the same launch scripts' rows at 4 clients take 2-3x less
#: on B200 than on H200 (gpt-oss-120b 1k prompts: 39-41 ms against 81-117 ms), a host that
#: one constant per layer does not carry; with it the held-out gpt-oss B200 rows went from
#: -68% to +150% TTFT. vLLM runs eagerly only the steps beyond its CUDA-graph sizes (a prompt's
#: step within them replays piecewise graphs), so only those pay its floor: 1.25 ms, fitted on
#: every 3rd of the 255 H200 vLLM MoE rows (0, 0.5, 1, 1.25, 1.375, 1.5, 1.75, 2 ms): objective
#: 0.490 at 0 -> 0.337 (1.5 ms: 0.343), TTFT median 37% -> 22%, TPOT 12% / 30% unchanged. A
#: first fit (1.75 ms) was not adopted: it took every launch script's capture ceiling for vLLM's
#: default (1,024 tokens on Blackwell), so the MiniMax-M2.5 B200 / B300 mixed steps at 128-512
#: clients, which those scripts capture up to 2,048 tokens (`cuda_graph_max_size`), paid ~110 ms.
#: The step takes the larger of this floor and its kernels' time, the host launching ahead of
#: the GPU -- except SGLang's hybrid models (linear-attention layers: Qwen3.5), whose prompt
#: steps take both: on H200 (Qwen3.5-397B, SGLang 0.5.9, TP 8 / EP 8, 4 clients) the measured
#: TTFT grows 117 ms from 1k to 8k prompts (308 -> 425 ms) where the kernels' time grows 114
#: ms and the floor (60 MoE layers x 4 ms = 240 ms) covered both under the larger-of rule;
#: adding them took its 30 InferenceX rows from TTFT 17% / 37% / -17% (median / p90 / bias;
#: 8k prompts -36%) to 5% / 31% / +5%, while DeepSeek-R1 on the same GPUs and release, with
#: no linear layers, fits the larger-of rule (8k prompts at 4 clients: 441 ms, measured 447;
#: the sum would add ~230 ms). The lead on why: SGLang's Gated DeltaNet prefill runs flash-
#: linear-attention's varlen kernels, which read chunk indices off the device on the host
#: (``prepare_chunk_indices``: ``.tolist()``), a wait for the GPU wherever its small cache
#: misses; how often that is in 0.5.9 was not measured here.
#: docs/validation.md, nineteenth pass.
EAGER_MOE_LAYER_HOST_S: dict[str, float] = {"vllm": 1.25e-3, "sglang": 4e-3, "trtllm": 0.0}


#: vLLM's CUDA-graph capture sizes (vllm/config/vllm.py, _set_cudagraph_sizes, 0.32.0):
#: 1, 2, 4, multiples of 8 below 256, then multiples of 16 up to the largest size
#: (`vllm_default_capture` when the launch sets none).
_GRAPH_SIZES = [1, 2, 4, *range(8, 256, 8), *range(256, 1024 + 1, 16)]

#: SGLang's decode CUDA-graph batch sizes (python/sglang/srt/model_executor/cuda_graph_runner.py,
#: get_batch_sizes_to_capture, 0.5.x): 1, 2, 4, 8, multiples of 8 from 16 (up to 256 on GPUs
#: above 96 GiB), then multiples of 16 up to 512 (above 160 GB), cut at cuda_graph_max_bs.
_SGLANG_GRAPH_SIZES = [1, 2, 4, 8, *range(16, 257, 8), *range(272, 512 + 1, 16)]


def graph_padded(tokens: int, max_graph_tokens: int, sizes: list[int] = _GRAPH_SIZES) -> int:
    """The token count a CUDA-graph-captured step runs at (unchanged when not captured)."""
    if tokens > max_graph_tokens:
        return tokens
    i = np.searchsorted(sizes, tokens)
    return int(sizes[int(i)]) if i < len(sizes) else tokens


def graph_capture(
    backend: str,
    system: str,
    gpu: GpuSpec,
    tp: int,
    max_num_seqs: int,
    largest: int | None = None,
    *,
    version: str | None = None,
    model_name: str = "",
) -> tuple[int, list[int]]:
    """(largest CUDA-graph-captured token count, capture sizes) of an engine's steps; 0: none.

    vLLM captures every step up to ``largest`` (its --max-cudagraph-capture-size); left
    unset, `vllm_default_capture` (by release, GPU and model). SGLang captures its decode
    batches up to ``largest`` (its --cuda-graph-max-bs), by default the one for the GPU's
    memory and TP (`sglang_memory_defaults`: 256 below 160 GiB at tp < 4, else 512), and no
    more than it runs at once; a prefill batch of as few tokens is priced as captured too
    (the step's token count is all this model sees). TensorRT-LLM is priced uncaptured: its
    all-reduce table has one variant and its fitted constants are zero (`FITTED`)."""
    if backend == "vllm":
        if largest is None:
            largest = vllm_default_capture(system, max_num_seqs, version, model_name)
        sizes = _graph_sizes(largest)
        return sizes[-1], sizes  # vLLM truncates a size off its grid to the grid's last
    if backend == "sglang":
        if largest is None:
            # On GPUs above 35 GiB the capture size follows only the GPU's memory and TP;
            # the 0.5.5 rules stand for the releases the kernel tables were measured on.
            _, largest, _ = sglang_memory_defaults("0.5.5", gpu, tp)
        return min(largest, max_num_seqs), _SGLANG_GRAPH_SIZES
    return 0, _GRAPH_SIZES


#: The first vLLM release whose default capture ceiling is 1,024 tokens on data-center
#: Blackwell (vllm-project/vllm#49390, merged 2026-07-22; vllm/config/vllm.py
#: _set_cudagraph_sizes: ``1024 if current_platform.is_device_capability_family(100) else
#: 512`` in the 0.28.0 sdist, plain ``512`` in 0.27.0's and every earlier one checked: 0.11.2,
#: 0.19.0, 0.26.0).
VLLM_BLACKWELL_1024_SINCE = "0.28.0"


def vllm_default_capture(system: str, max_num_seqs: int, version: str | None, model_name: str = "") -> int:
    """vLLM's largest CUDA-graph capture size when the launch sets none.

    - gpt-oss (``GptOssForCausalLMConfig.verify_and_update_config``,
      vllm/model_executor/models/config.py, 0.11.2 to 0.32.0): 1,024 whatever the batch limit
      ("for performance"); kvsim knows the model by its name (``gpt-oss`` / ``gpt_oss``).
    - Otherwise min(2 x max_num_seqs, 512), and from `VLLM_BLACKWELL_1024_SINCE` min(2 x
      max_num_seqs, 1,024) on data-center Blackwell (`_BLACKWELL`). ``version`` None is kvsim's
      legacy vLLM (`kvsim.backends.defaults.LEGACY_VLLM`, vLLM 0.8.5-0.19): 512.
    """
    name = model_name.lower()
    if "gpt-oss" in name or "gpt_oss" in name:
        return 1024
    blackwell = False
    if system in _BLACKWELL and version is not None:
        blackwell = parse_version(version) >= parse_version(VLLM_BLACKWELL_1024_SINCE)
    return min(2 * max_num_seqs, 1024 if blackwell else 512)


#: The tables' data-center Blackwell systems, whose vLLM captures up to 1,024 tokens by default
#: from 0.28.0 (`vllm_default_capture`).
_BLACKWELL = ("b200_sxm", "b300_sxm", "gb200", "gb300")


def _graph_sizes(largest: int) -> list[int]:
    """vLLM's capture sizes up to ``largest`` tokens (`_GRAPH_SIZES`' grid)."""
    return [n for n in (1, 2, 4) if n <= largest] + [
        *range(8, min(largest + 1, 256), 8),
        *range(256, largest + 1, 16),
    ]


@dataclass(frozen=True)
class KernelSource:
    """Which measured tables price a replica: a system, an engine and its version."""

    index: TableIndex
    system: str
    backend: str
    version: str | None

    def table(self, op: str, name: str) -> pd.DataFrame:
        path = self.index.folder(self.system, op, self.backend, self.version_for(op)) / f"{name}.parquet"
        return read_table(path)

    def version_for(self, op: str) -> str | None:
        """The requested version if this op was measured for it, else the newest measured."""
        versions = self.index.versions(self.system, op, self.backend)
        return self.version if self.version in versions else None


def resolve_source(
    config: KernelCostConfig, gpu: GpuSpec, backend: str, base_dir: Path | None = None
) -> KernelSource:
    """The tables a config names, or those of the GPU preset and the engine's backend."""
    if config.backend == TORCH_TABLES and config.tables is None:
        raise ProfileError(
            "cost_model.backend torch reads the tables `kvsim calibrate --tables DIR` measured: give "
            "cost_model.tables: DIR"
        )
    if config.tables is not None:
        root = Path(config.tables).expanduser()
        if not root.is_absolute() and base_dir is not None:
            root = base_dir / root
        if not root.is_dir():
            raise ProfileError(f"kernel tables folder {str(root)!r} does not exist")
    else:
        found = package_tables_root()
        if found is None:
            raise ProfileError(
                "cost_model kind kernels needs NVIDIA's measured kernel tables: install the kernels extra "
                "(pip install -e '.[kernels]', aiconfigurator-core 0.12.0) or give cost_model.tables"
            )
        root = found
    index = table_index(root.resolve())
    system = config.system or GPU_SYSTEMS.get(gpu.name)
    if system is None:
        raise ProfileError(
            f"no kernel tables are known for GPU {gpu.name!r}: set cost_model.system to one of "
            f"{', '.join(index.systems())}"
        )
    if system not in index.systems():
        raise ProfileError(
            f"{root}: no kernel tables for system {system!r} (measured: {', '.join(index.systems())})"
        )
    chosen = config.backend or backend
    if config.version is not None and config.version not in index.versions(system, "gemm", chosen):
        index.folder(system, "gemm", chosen, config.version)  # raises, listing the versions
    return KernelSource(index, system, chosen, config.version)


def _weights(x: float, keys: list[float]) -> list[tuple[float, float]]:
    """(key, weight) pairs interpolating ``x`` linearly among sorted ``keys``: the nearest key
    held below the smallest, scaled by x / key above the largest."""
    if x <= keys[0]:
        return [(keys[0], 1.0)]
    if x >= keys[-1]:
        return [(keys[-1], x / keys[-1])]
    i = int(np.searchsorted(keys, x, side="right"))
    k0, k1 = keys[i - 1], keys[i]
    w = (x - k0) / (k1 - k0)
    return [(k0, 1.0 - w), (k1, w)] if w > 0 else [(k0, 1.0)]


def _quantization_hint(have: list[str], names: dict[str, str]) -> str:
    """The engine.quantization values whose table dtype is among ``have``, for an error."""
    usable = sorted({q for q, d in names.items() if d in have and q != "fp16"})
    if not usable:
        return ""
    return f"; engine.quantization values priced from this system's tables: {', '.join(usable)}"


def gemm_curve(frame: pd.DataFrame, dtype: str, n: int, k: int, what: str, warn: list[str]) -> Curve:
    """Latency (s) of an (m x k) @ (k x n) GEMM of ``dtype`` as a function of m.

    Where several kernels were measured for the dtype (fp8 block scaling: DeepGEMM,
    CUTLASS, FlashInfer), each shape takes the fastest, as the engines dispatch by shape.
    """
    rows = frame[frame["gemm_dtype"] == dtype]
    if rows.empty:
        measured = sorted(frame["gemm_dtype"].astype(str).unique())
        raise ProfileError(
            f"no {dtype} GEMM was measured on this system (measured: {', '.join(measured)})"
            + _quantization_hint(measured, GEMM_DTYPES)
        )
    best = rows.groupby(["n", "k", "m"], sort=True)["latency"].min()
    ns = sorted(float(v) for v in best.index.get_level_values("n").unique())
    ks = sorted(float(v) for v in best.index.get_level_values("k").unique())
    for name, value, keys in (("n", n, ns), ("k", k, ks)):
        if not keys[0] <= value <= keys[-1]:
            warn.append(f"{what} GEMM: {name}={value} outside the measured {keys[0]:g}..{keys[-1]:g}")
    parts: list[tuple[Curve, float]] = []
    expected = 0.0
    for n_key, wn in _weights(n, ns):
        for k_key, wk in _weights(k, ks):
            expected += wn * wk
            try:
                measured = best.loc[(int(n_key), int(k_key))]
            except KeyError:
                continue
            parts.append((Curve(measured.index.to_numpy(float), measured.to_numpy(float) * MS), wn * wk))
    if not parts:
        raise ProfileError(f"{what} GEMM: no measurement near n={n}, k={k}")
    # Weights sum to 1 inside the grid and scale past its end; a corner never measured
    # leaves its weight to the others.
    scale = expected / sum(w for _, w in parts)
    m_grid = np.unique(np.concatenate([c.sizes for c, _ in parts]))
    ys = np.zeros(len(m_grid))
    for curve, w in parts:
        ys += curve.at(m_grid) * (w * scale)
    return Curve(m_grid, ys)


def _pick_kernel(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the kernel an engine runs by default: the one measured on the most shapes."""
    if "kernel_source" not in rows.columns or rows.empty:
        return rows
    counts = rows["kernel_source"].value_counts()
    return rows[rows["kernel_source"] == counts.index[0]]


def attention_grid(
    frame: pd.DataFrame,
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kv_dtype: str,
    length_column: str,
    what: str,
    warn: list[str],
) -> Grid:
    """Attention latency (s) over (batch size, length) for one head layout per GPU.

    ``length_column`` is ``step`` (decode: the tokens already cached) or ``isl`` (prefill).
    Query-head counts between measured ones interpolate linearly.
    """
    rows = frame[
        (frame["kv_cache_dtype"] == kv_dtype)
        & (frame["num_key_value_heads"] == kv_heads)
        & (frame["head_dim"] == head_dim)
    ]
    for column, value in (("window_size", 0), ("beam_width", 1), ("attn_dtype", "bfloat16")):
        if column in rows.columns and (rows[column] == value).any():
            rows = rows[rows[column] == value]
    rows = _pick_kernel(rows)
    if rows.empty:
        raise ProfileError(
            f"{what}: no measurement for {kv_heads} KV heads of dimension {head_dim} with a {kv_dtype} KV cache"
        )
    keys = sorted(float(h) for h in rows["num_heads"].unique())
    if not keys[0] <= heads <= keys[-1]:
        warn.append(f"{what}: {heads} query heads outside the measured {keys[0]:g}..{keys[-1]:g}")
    by_heads = {
        key: rows[rows["num_heads"] == key].pivot_table(
            index="batch_size", columns=length_column, values="latency", aggfunc="median"
        )
        for key, _ in _weights(float(heads), keys)
    }
    parts = [(by_heads[key], w) for key, w in _weights(float(heads), keys)]
    xs = sorted(set().union(*(p.index for p, _ in parts)))
    ys = sorted(set().union(*(p.columns for p, _ in parts)))
    total = np.zeros((len(xs), len(ys)))
    for pivot, w in parts:
        grid = Grid(pivot.index.to_numpy(float), pivot.columns.to_numpy(float), pivot.to_numpy(float) * MS)
        total += w * np.stack([grid.at(float(x), np.asarray(ys, dtype=np.float64)) for x in xs])
    return Grid(xs, ys, total)


def moe_curve(
    frame: pd.DataFrame,
    dtype: str,
    *,
    hidden: int,
    inter: int,
    topk: int,
    num_experts: int,
    moe_tp: int,
    moe_ep: int,
    what: str,
    warn: list[str],
    distribution: str = MOE_DISTRIBUTION,
    kernel: str | None = None,
) -> Curve:
    """Latency (s) of one MoE layer's routed experts as a function of the step's tokens.

    The ``moe`` table (aiconfigurator-core 0.12.0) times the fused expert kernel (routing
    permute, gate/up GEMM, activation, down GEMM, un-permute) of a whole model's layer,
    keyed by hidden size, expert width (``inter_size``, before the moe_tp split), top-k,
    expert count and the moe_tp x moe_ep layout. Hidden size, top-k, experts and layout
    must be measured as they are: routing changes with them in ways no interpolation
    knows. The expert width interpolates linearly between measured widths (and scales in
    proportion past them, with a warning), as a GEMM's n does. Where several kernels were
    measured for the dtype, each token count takes the fastest, as for the dense GEMMs;
    routing follows ``distribution`` (the table's column: balanced, power_law_1.01,
    power_law_1.2; default `MOE_DISTRIBUTION`) where measured, else the balanced rows.
    With expert parallelism (moe_ep > 1) ``num_tokens`` counts the tokens of every rank that
    shares the experts, and a row times the expert-parallel rank the routing loads most: the
    slowest rank sets the layer's time. A moe_tp > 1 layout the table lacks is priced from
    its moe_tp 1 rows, with a warning: each GPU's share of the width (1/moe_tp of their time)
    plus the rest of the kernel's fixed time, which no split shrinks (`_split_floor_ms`).
    ``kernel`` keeps the rows of one kernel (a word of their ``kernel_source``) instead of the
    fastest; where that kernel was measured at other shapes only, it is carried to this one
    (`_carried_moe_curve`).
    """
    rows = frame[frame["moe_dtype"] == dtype]
    if rows.empty:
        measured = sorted(frame["moe_dtype"].astype(str).unique())
        raise ProfileError(
            f"no {dtype} MoE was measured on this system (measured: {', '.join(measured)})"
            + _quantization_hint(measured, MOE_DTYPES)
        )
    if kernel is not None:
        sources = rows["kernel_source"].astype(str) if "kernel_source" in rows.columns else None
        named = sources.str.contains(kernel, regex=False) if sources is not None else None
        if named is None or not named.any():
            have = ", ".join(sorted(set(sources))) if sources is not None else "no kernel_source column"
            raise ProfileError(f"{what}: no {dtype} MoE kernel {kernel!r} was measured (measured: {have})")
        own_shape = (
            (rows["hidden_size"] == hidden) & (rows["topk"] == topk) & (rows["num_experts"] == num_experts)
        )
        rows = rows[named]
    key = (rows["hidden_size"] == hidden) & (rows["topk"] == topk) & (rows["num_experts"] == num_experts)
    if not key.any() and kernel is not None:

        def read(
            shape: tuple[int, int, int, int], table: pd.DataFrame, name: str | None, into: list[str]
        ) -> Curve:
            h, i, k, e = shape
            return moe_curve(
                table, dtype, hidden=h, inter=i, topk=k, num_experts=e, moe_tp=moe_tp, moe_ep=moe_ep, what=what,
                warn=into, distribution=distribution, kernel=name,
            )  # fmt: skip

        own = None
        if own_shape.any():
            with contextlib.suppress(ProfileError):  # no kernel at this shape and layout: no bound
                own = read((hidden, inter, topk, num_experts), frame, None, [])
        shapes = rows.groupby(["hidden_size", "inter_size", "topk", "num_experts"]).size().index
        nearest = min(shapes, key=lambda sh: abs(math.log(sh[0] * sh[1] / (hidden * inter))))
        h, i, k, e = (int(v) for v in nearest)
        carried = read((h, i, k, e), rows, kernel, warn)
        shape = (hidden, inter, topk, num_experts)
        return _carried_moe_curve(carried, (h, i, k, e), shape, own, f"{what}: the {kernel} kernel", warn)
    if not key.any():
        shapes = rows.groupby(["hidden_size", "topk", "num_experts"]).size().index
        have = "; ".join(f"hidden {h}, top-{k} of {e}" for h, k, e in shapes)
        raise ProfileError(
            f"{what}: no {dtype} MoE measured for hidden {hidden}, top-{topk} of {num_experts} experts "
            f"(measured: {have})"
        )
    rows = rows[key]
    layout = (rows["moe_tp_size"] == moe_tp) & (rows["moe_ep_size"] == moe_ep)
    unsplit = (rows["moe_tp_size"] == 1) & (rows["moe_ep_size"] == moe_ep)
    share, floor_ms = 1.0, 0.0
    if not layout.any() and moe_tp > 1 and unsplit.any():
        # Each GPU of a moe_tp x moe_ep layout runs moe_tp 1's kernel on 1/moe_tp of every
        # expert's width (the table's inter_size is the width before the split): its weights
        # read and its FLOPs in proportion, its fixed time not (`_split_floor_ms`).
        share, floor_ms = 1.0 / moe_tp, _split_floor_ms(rows, distribution)
        warn.append(
            f"{what}: moe_tp {moe_tp} x moe_ep {moe_ep} not measured; priced as 1/{moe_tp} of "
            f"moe_tp 1 x moe_ep {moe_ep} (each GPU's share of the expert width) plus "
            f"{1 - share:.3g} x the kernel's fixed {floor_ms * 1e3:.1f} us"
        )
        layout = unsplit
    if not layout.any():
        pairs = sorted(
            {(int(t), int(e)) for t, e in zip(rows["moe_tp_size"], rows["moe_ep_size"], strict=True)}
        )
        raise ProfileError(
            f"{what}: moe_tp {moe_tp} x moe_ep {moe_ep} not measured for this MoE "
            f"(measured tp x ep: {', '.join(f'{t}x{e}' for t, e in pairs)})"
        )
    rows = rows[layout]
    if "distribution" in rows.columns:
        for choice in (distribution, "balanced"):
            if (rows["distribution"] == choice).any():
                rows = rows[rows["distribution"] == choice]
                break
    best = rows.groupby(["inter_size", "num_tokens"], sort=True)["latency"].min()
    widths = sorted(float(v) for v in best.index.get_level_values("inter_size").unique())
    if not widths[0] <= inter <= widths[-1]:
        warn.append(f"{what}: expert width {inter} outside the measured {widths[0]:g}..{widths[-1]:g}")
    parts = [(best.loc[int(w_key)], w) for w_key, w in _weights(float(inter), widths)]
    m_grid = np.unique(np.concatenate([p.index.to_numpy(float) for p, _ in parts]))
    ys = np.zeros(len(m_grid))
    for measured, w in parts:
        ys += Curve(measured.index.to_numpy(float), measured.to_numpy(float) * MS).at(m_grid) * w
    return Curve(m_grid, ys * share + (1.0 - share) * floor_ms * MS)  # share 1, floor 0: as measured


def _carried_moe_curve(
    source: Curve,
    measured: tuple[int, int, int, int],
    shape: tuple[int, int, int, int],
    own: Curve | None,
    what: str,
    warn: list[str],
) -> Curve:
    """One kernel's MoE layer at a shape (hidden, width, top-k, experts) the table did not
    measure it at, from ``source``, its curve at the ``measured`` shape whose experts are
    nearest in size (hidden x width, by ratio; `moe_curve` picks it, at the same moe_tp x
    moe_ep layout): read at the same tokens per expert (tokens x top-k / experts: each
    expert's GEMMs the same height, so the same efficiency, and the same share of the experts
    in use) and scaled by the experts' weights (hidden x width x experts: the FLOPs and the
    bytes at equal tokens per expert). A kernel as fast per weight at every expert shape is
    the assumption, said in a warning. It holds where the experts' GEMMs dominate; at a few
    tokens per expert a kernel's launches and routing do not scale with the weights, and the
    carried time is no evidence there: the layer takes at least what the fastest kernel
    measured at the model's own shape takes (``own``, when the table has one). The case it
    serves: vLLM's Marlin MXFP4 experts, which InferenceX's Hopper gpt-oss-120b scripts select
    (VLLM_MXFP4_USE_MARLIN=1) and vLLM 0.24.0's tables measure at one other model's shape only
    (hidden 3,584, width 3,072, top-16 of 896 experts; aiconfigurator-core 0.12.0, h100_sxm and
    h200_sxm)."""
    h, i, k, e = measured
    hidden, inter, topk, num_experts = shape
    stretch = (k / e) / (topk / num_experts)  # this model's tokens at the source's tokens per expert
    weight = (hidden * inter * num_experts) / (h * i * e)
    warn.append(
        f"{what} was measured at hidden {h}, width {i}, top-{k} of {e} experts only; carried to "
        f"hidden {hidden}, width {inter}, top-{topk} of {num_experts} at equal tokens per expert, "
        f"x {weight:.3g} for the experts' weights"
        + (", and no faster than the fastest kernel measured at this shape" if own is not None else "")
    )
    carried = Curve(source.sizes * stretch, source.at(source.sizes) * weight)
    if own is None:
        return carried
    grid = np.union1d(carried.sizes, own.sizes)
    return Curve(grid, np.maximum(carried.at(grid), own.at(grid)))


def _split_floor_ms(rows: pd.DataFrame, distribution: str) -> float:
    """The fixed time of one MoE kernel (ms): the least the table measured for this MoE at any
    layout (one token at the widest expert parallelism, about no work at all).

    A moe_tp split divides a kernel's weights and FLOPs, not its launches, routing and
    synchronisation: priced as the unsplit time x share + this x (1 - share). Checked where
    the tables measure both layouts (aiconfigurator-core 0.12.0, gpt-oss-120b's mxfp4 MoE,
    power_law_1.01, moe_tp 2-8 x moe_ep 1 against moe_tp 1 x moe_ep 1): vLLM 0.24.0 on h200_sxm
    and b200_sxm, SGLang 0.5.14 on both: the share alone misses by -4% to -82% (by 2-5x at one
    token, -13% to -62% at 16-64 decode tokens), the share plus this floor by -37% to +77%
    (-27% to +30% at 16-64 tokens; its largest misses at one token, over, and at 8k tokens).
    """
    if "distribution" in rows.columns and (rows["distribution"] == distribution).any():
        rows = rows[rows["distribution"] == distribution]
    return float(rows["latency"].min())


#: SGLang's wide expert parallelism (attention DP, moe_tp 1, moe_ep > 1, DeepEP): its
#: ``wideep_generation_moe_perf`` / ``wideep_context_moe_perf`` tables (aiconfigurator-core
#: 0.12.0, SGLang 0.5.10, kernel_source ``deepepmoe``: DeepGEMM's grouped GEMMs behind DeepEP's
#: low-latency (decode) and normal (prefill) dispatch) time what such deployments run: the
#: srt-slurm recipes InferenceX launched (NVIDIA/srt-slurm, recipes/gb200-fp8/8k1k/max_tpt.yaml:
#: ``moe-a2a-backend: deepep``, ``deepep-mode: low_latency`` on the decode workers, ``normal``
#: on the prefill ones). The ``moe_perf`` rows at the same layout time SGLang's single-GPU fused
#: MoE instead, whose time grows with every token of the instance (1.26 ms at 6,144 tokens,
#: moe_ep 32, fp8_block, gb200, power_law_1.01; the deepepmoe kernel 0.16 ms at 4,096).
WIDE_EP_TABLES = {"generation": "wideep_generation_moe_perf", "context": "wideep_context_moe_perf"}
#: The wide-EP tables' name of kvsim's ``expert_load`` choices (they say ``uniform``).
_WIDE_EP_DISTRIBUTION = {"balanced": "uniform"}


def wide_ep_moe_curves(
    source: KernelSource,
    *,
    hidden: int,
    inter: int,
    topk: int,
    num_experts: int,
    moe_ep: int,
    expert_dtype: str,
    distribution: str,
    warn: list[str],
) -> tuple[Curve, Curve] | None:
    """(decode, prefill) latency (s) of one MoE layer's routed experts under SGLang's DeepEP,
    by the instance's tokens (every rank's, as ``moe_perf``'s ``num_tokens``: the rows' token
    ranges grow with moe_ep), from the newest SGLang version whose wide-EP tables have the
    model's shape at ``moe_ep`` (`WIDE_EP_TABLES`); None where none has. They hold fp8_block
    experts only: other expert dtypes are priced at the fp8_block kernel with a warning (an
    upper bound for nvfp4, whose grouped GEMMs read half the bytes). Between and past the
    measured token counts: `Curve`'s rule."""
    versions = source.index.versions(source.system, "moe", "sglang")
    for version in reversed(versions):
        folder = source.index.folder(source.system, "moe", "sglang", version)
        paths = {kind: folder / f"{name}.parquet" for kind, name in WIDE_EP_TABLES.items()}
        if not all(p.is_file() for p in paths.values()):
            continue
        curves: list[Curve] = []
        for kind in ("generation", "context"):
            frame = read_table(paths[kind])
            rows = frame[
                (frame["hidden_size"] == hidden) & (frame["inter_size"] == inter) & (frame["topk"] == topk)
                & (frame["num_experts"] == num_experts) & (frame["moe_tp_size"] == 1)
                & (frame["moe_ep_size"] == moe_ep)
            ]  # fmt: skip
            if rows.empty:
                break
            wanted = _WIDE_EP_DISTRIBUTION.get(distribution, distribution)
            for choice in (wanted, "uniform"):
                if (rows["distribution"] == choice).any():
                    rows = rows[rows["distribution"] == choice]
                    break
            if (rows["moe_dtype"] == expert_dtype).any():
                rows = rows[rows["moe_dtype"] == expert_dtype]
            elif kind == "generation":
                have = ", ".join(sorted(rows["moe_dtype"].astype(str).unique()))
                warn.append(
                    f"MoE experts: SGLang's wide-EP tables measured {have} experts, not {expert_dtype}; "
                    f"priced as {have}"
                )
            best = rows.groupby("num_tokens", sort=True)["latency"].min()
            curves.append(Curve(best.index.to_numpy(float), best.to_numpy(float) * MS))
        if len(curves) == 2:
            return curves[0], curves[1]
    return None


def mla_module_grid(
    frame: pd.DataFrame,
    *,
    heads: int,
    kv_dtype: str,
    gemm_dtype: str | None,
    length_column: str,
    what: str,
    scale: float = 1.0,
) -> Grid:
    """An MLA module's latency (s) over (batch size, length) at ``heads`` query heads per GPU.

    vLLM's ``mla`` module tables (aiconfigurator-core 0.12.0, h200_sxm/mla/vllm/0.24.0/
    mla_{context,generation}_module_perf.parquet) time DeepSeek-V3's whole attention block:
    the q/kv down-projections, their norms, q_b, the absorbed k/v BMMs, RoPE, the KV-cache
    write, the attention kernel and o_proj, with the projections in ``gemm_dtype``. Head
    counts are measured at powers of two (DeepSeek's 128 split over tp 1..128): not
    interpolated, a count not measured is refused by name. With ``gemm_dtype`` None it reads
    the granular attention-kernel tables (``generation_mla_perf``, ``context_mla_perf``: the
    attention alone, keyed the same way without projections), times ``scale`` for an MLA of
    another shape (`mla_kernel_scales`).
    """
    if gemm_dtype is None:
        rows = frame[frame["kv_cache_dtype"] == kv_dtype]
        if rows.empty:
            kv_have = ", ".join(sorted(frame["kv_cache_dtype"].astype(str).unique()))
            raise ProfileError(
                f"{what}: no MLA kernel measured with a {kv_dtype} KV cache (measured: {kv_have})"
            )
    else:
        rows = frame[(frame["kv_cache_dtype"] == kv_dtype) & (frame["gemm_type"] == gemm_dtype)]
    if rows.empty:
        have = sorted(
            {(str(k), str(g)) for k, g in zip(frame["kv_cache_dtype"], frame["gemm_type"], strict=True)}
        )
        raise ProfileError(
            f"{what}: no MLA module measured with a {kv_dtype} KV cache and {gemm_dtype} projections "
            f"(measured KV cache / projections: {', '.join(f'{k}/{g}' for k, g in have)})"
        )
    if not (rows["num_heads"] == heads).any():
        measured = ", ".join(str(int(h)) for h in sorted(rows["num_heads"].unique()))
        raise ProfileError(f"{what}: {heads} query heads per GPU not measured (measured: {measured})")
    rows = _pick_kernel(rows[rows["num_heads"] == heads])
    pivot = rows.pivot_table(index="batch_size", columns=length_column, values="latency", aggfunc="median")
    values = pivot.to_numpy(float) * MS
    return Grid(
        pivot.index.to_numpy(float), pivot.columns.to_numpy(float), values * scale if scale != 1.0 else values
    )


def dsa_name(name: str) -> str:
    """A DSA checkpoint's family name as the ``sparse_attention`` tables and kvsim's presets
    spell it: ``zai-org/GLM-5-FP8`` and ``glm-5`` are both ``glm-5``."""
    return name.rsplit("/", 1)[-1].lower().removesuffix("-fp8")


def dsa_module_grid(frame: pd.DataFrame, *, heads: int, kv_dtype: str, length_column: str, what: str) -> Grid:
    """A DeepSeek-sparse-attention block's latency (s) over (batch size, length) at ``heads``
    query heads per GPU, from one model's rows of the ``sparse_attention`` module tables
    (aiconfigurator-core 0.12.0, e.g. h200_sxm/sparse_attention/sglang/0.5.14/
    dsa_{context,generation}_module_perf.parquet: the q/kv projections, the indexer, the
    attention kernel and o_proj, measured for zai-org/GLM-5 and DeepSeek-V3.2 themselves).
    Each shape takes the fastest kernel measured at it: SGLang's prefill runs a prompt within
    the indexer's top-k through dense MHA (``sglang_dsa_dense_mha_*``, measured up to 2,048
    tokens) and a longer one through the indexer and the sparse kernel (GLM-5 at 8 heads on
    h200_sxm: 0.84 ms at 1,024 tokens, 5.44 ms at 8,192)."""
    rows = frame[frame["kv_cache_dtype"] == kv_dtype]
    if rows.empty:
        have = ", ".join(sorted(frame["kv_cache_dtype"].astype(str).unique()))
        raise ProfileError(f"{what}: no DSA module measured with a {kv_dtype} KV cache (measured: {have})")
    if not (rows["num_heads"] == heads).any():
        measured = ", ".join(str(int(h)) for h in sorted(rows["num_heads"].unique()))
        raise ProfileError(f"{what}: {heads} query heads per GPU not measured (measured: {measured})")
    best = rows[rows["num_heads"] == heads].groupby(["batch_size", length_column])["latency"].min().unstack()
    if length_column == "step":
        # Decode lengths measured at batch 1 only (1,536, 3,072, ...) would fill their column
        # proportionally to the batch (`Grid`): left out. (A prompt is priced at batch 1,
        # where the context table measures every length.)
        measured = best.notna().sum()
        best = best.loc[:, measured >= measured.max() / 2]
    return Grid(best.index.to_numpy(float), best.columns.to_numpy(float), best.to_numpy(float) * MS)


class KernelCostModel:
    """Iteration time of a dense, MoE or MLA model from measured kernel tables (module docstring)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        config: KernelCostConfig,
        *,
        tp: int = 1,
        kv_cache_dtype: str = "auto",
        backend: str = "vllm",
        max_num_seqs: int = 256,
        base_dir: Path | None = None,
        attention_dp: int = 1,
        moe_tp: int | None = None,
        moe_ep: int = 1,
        backend_version: str | None = None,
        max_num_batched_tokens: int | None = None,
        speculative: bool = False,
        disaggregated: bool = False,
    ) -> None:
        if tp < 1 or attention_dp < 1 or moe_ep < 1:
            raise ValueError('"tp", "attention_dp" and "moe_ep" must be >= 1')
        self.model, self.gpu, self.config, self.tp = model, gpu, config, tp
        # The parallel layout (`kvsim.cost.moe_comm`): this model prices one rank of tp GPUs;
        # its MoE layers run on the instance's tp x attention_dp GPUs, split moe_tp x moe_ep.
        self.attention_dp, self.moe_ep = attention_dp, moe_ep
        self.moe_tp = tp * attention_dp // moe_ep if moe_tp is None else moe_tp
        if self.moe_tp * moe_ep != tp * attention_dp:
            raise ValueError(
                f"moe_tp x moe_ep = {self.moe_tp} x {moe_ep} must equal tp x attention_dp = {tp} x {attention_dp}"
            )
        if moe_ep > 1 and not model.is_moe:
            raise ValueError(f"moe_ep {moe_ep}: {model.name} is not a mixture of experts")
        self.source = resolve_source(config, gpu, backend, base_dir)
        # What the engine does around the kernels (overheads, CUDA graphs, eager MoE steps) is the
        # tables' engine's, or with the harness's own tables (backend torch) the replica's engine's.
        self.engine = backend if self.source.backend == TORCH_TABLES else self.source.backend
        self.warnings: list[str] = []
        gemm_dtype = GEMM_DTYPES.get(model.weight_dtype)
        kv_dtype = KV_DTYPES.get(kv_cache_dtype)
        if gemm_dtype is None:
            raise ProfileError(f"no kernel tables for {model.weight_dtype} weights")
        # Each part's GEMMs at its own precision (`ModelSpec.module_weight_dtypes`).
        dtypes = {module: GEMM_DTYPES.get(model.dtype_of(module)) for module in typing.get_args(WeightModule)}
        for module, dtype in dtypes.items():
            if dtype is None:
                raise ProfileError(f"no kernel tables for {model.dtype_of(module)} weights ({module})")
        qkv_dtype, o_dtype = str(dtypes["attention_qkv"]), str(dtypes["attention_o"])
        if kv_dtype is None:
            raise ProfileError(f"no kernel tables for a {kv_cache_dtype} KV cache")
        if model.num_attention_heads % tp or model.intermediate_size % tp:
            raise ProfileError(f"{model.name} cannot be split over tp {tp}")
        h, hd = model.hidden_size, model.head_dim
        q_heads = model.num_attention_heads // tp
        kv_heads = max(1, model.num_kv_heads // tp)
        inter = model.intermediate_size // tp
        self.max_graph_tokens, self._graph_sizes = graph_capture(
            self.engine, self.source.system, gpu, tp, max_num_seqs, config.cuda_graph_max_size,
            version=backend_version, model_name=model.name,
        )  # fmt: skip

        gemm = self.source.table("gemm", "gemm_perf")
        w = self.warnings
        if "fp8_block" in (gemm_dtype, *dtypes.values()):
            gemm = self._fp8_block_rows(gemm)
        # A mixture of experts (`_moe_layer_gemms`, `_moe`): its dense first layers are
        # priced at the active width, intermediate_size x (top-k + shared): DeepSeek-V3's
        # and Kimi-K2.5's real 18,432 = 9 x 2,048 (ModelSpec has no field for it).
        self._moe: Curve | None = None
        self._moe_prefill: Curve | None = None  # a step with a prompt, where it differs (wide EP)
        self._moe_comm: Curve | None = None
        self._moe_layer_gemms: list[Curve] = []
        self._num_moe_layers = 0
        self._eager_floor_s = 0.0  # a step with a prompt takes at least this (`EAGER_MOE_LAYER_HOST_S`)
        # ... when it runs more tokens than this: vLLM runs a step within its CUDA-graph sizes
        # from a graph (piecewise for a prompt), SGLang and TensorRT-LLM none with a prompt.
        self._eager_above_tokens = self.max_graph_tokens if self.engine == "vllm" else 0
        # ... and a step with a prompt of at most this many tokens replays SGLang's piecewise
        # CUDA graphs (`sglang_piecewise_max_tokens`): no floor either.
        self._prompt_graph_tokens = self._piecewise_tokens(
            config, backend_version, max_num_batched_tokens, attention_dp, speculative, disaggregated
        )
        mlp_inter = inter
        if model.is_moe:
            assert model.num_experts is not None and model.num_experts_per_token is not None
            mlp_inter = inter * (model.num_experts_per_token + model.num_shared_experts)
        # MLA: vLLM's and TensorRT-LLM's module tables price the whole attention block
        # (`mla_module_grid`), so its layers have no QKV / O GEMMs of their own.
        self._mla = model.is_mla
        module_dtype = qkv_dtype if qkv_dtype == o_dtype else o_dtype  # `_check_mla`
        # DeepSeek sparse attention: the engine's DSA module tables, where they hold the model,
        # price its whole attention block as a module (`dsa_module_grid`).
        dsa = self._dsa_tables(model, module_dtype) if model.index_topk is not None else None
        if dsa is not None:
            mla_module = True
        else:
            mla_module = self._check_mla(model, tp, qkv_dtype, o_dtype) if self._mla else False
        self._mla_bmm: tuple[Curve, Curve] | None = None
        self._mla_kv_b: Curve | None = None
        if not self._mla:
            q_out = 2 * q_heads if model.attn_output_gate else q_heads  # Qwen3.5: q and its output gate
            attention_gemms = [
                gemm_curve(gemm, qkv_dtype, (q_out + 2 * kv_heads) * hd, h, "QKV", w),
                gemm_curve(gemm, o_dtype, h, q_heads * hd, "O", w),
            ]
        elif mla_module:
            attention_gemms = []
        else:
            # Granular MLA (aiconfigurator-core 0.12.0's wiring, sdk/models/deepseek.py
            # generation_mla_granular; SGLang's only, TensorRT-LLM's for a checkpoint whose
            # projections differ in precision): q/kv down-projection (n = q_lora 1536 + kv_lora
            # 512 + rope 64 = 2,112, k = hidden, not split by TP), q_b (n = heads x (128 + 64),
            # k 1,536), o_proj (k = heads x 128) at every token; kv_b (n = heads x 256, k 512)
            # for prefill tokens and the absorbed BMMs before and after the attention kernel
            # for decode tokens (`_chunk_extra_s`, `_decode_attention_s`).
            # At another MLA's shape (`MLA_KERNEL_SHAPE`), its own widths: DeepSeek-V2-Lite
            # (no q_lora) projects q from the hidden state, split by TP.
            d, q_lora = mla_dims(model), model.q_lora_rank
            kv_r, rope, nope, v = (
                d["kv_lora_rank"],
                d["qk_rope_head_dim"],
                d["qk_nope_head_dim"],
                d["v_head_dim"],
            )
            attention_gemms = [
                gemm_curve(gemm, qkv_dtype, (q_lora or 0) + kv_r + rope, h, "MLA q/kv down", w),
                gemm_curve(gemm, qkv_dtype, q_heads * (nope + rope), q_lora or h, "MLA q_b", w),
                gemm_curve(gemm, o_dtype, h, q_heads * v, "MLA o", w),
            ]
            self._mla_kv_b = gemm_curve(gemm, qkv_dtype, q_heads * (nope + v), kv_r, "MLA kv_b", w)
            self._mla_bmm = self._mla_bmm_curves(q_heads, qkv_dtype, mla_kernel_scales(model))
        dense_dtype = str(dtypes["dense_mlp"])
        self._gemms = [
            *attention_gemms,
            gemm_curve(gemm, dense_dtype, 2 * mlp_inter, h, "gate/up", w),
            gemm_curve(gemm, dense_dtype, h, mlp_inter, "down", w),
        ]
        if model.is_moe:
            self._init_moe(gemm, inter, attention_gemms)
            per_layer = config.eager_moe_layer_host_s
            if per_layer is None:
                per_layer = EAGER_MOE_LAYER_HOST_S.get(self.engine, 0.0)
            self._eager_floor_s = self._num_moe_layers * per_layer
        # Linear-attention layers (Qwen3.5): their projections replace the QKV / O GEMMs, their
        # conv and delta-rule kernels the attention (`kvsim.cost.linear_attention`).
        self._attention_gemms, self._attn_layers = attention_gemms, model.num_kv_layers
        self._gdn = self._init_linear(gemm, gemm_dtype) if model.num_linear_attention_layers else None
        self._eager_serial = self._gdn is not None and self.engine == "sglang"
        # Engines keep the LM head in 16 bits whatever the weights (aiconfigurator does too).
        self._lm_head = gemm_curve(gemm, "bfloat16", max(1, model.vocab_size // tp), h, "LM head", w)

        def attention(table: str, length_column: str, what: str) -> Grid:
            frame = self.source.table("attention", table)
            return attention_grid(
                frame, heads=q_heads, kv_heads=kv_heads, head_dim=hd, kv_dtype=kv_dtype,
                length_column=length_column, what=what, warn=w,
            )  # fmt: skip

        # MLA decode at other head counts (a verify pass folds its queries into the heads),
        # read on demand (`_folded_decode`).
        self._q_heads = q_heads
        self._folded: dict[int, Grid | None] = {}
        self._mla_decode_at: Callable[..., Grid] | None = None
        scales = mla_kernel_scales(model) if self._mla and not mla_module else {"decode": 1.0, "prefill": 1.0}
        if dsa is not None:
            self._mla_decode_at = functools.partial(
                dsa_module_grid, dsa[0], kv_dtype=kv_dtype, length_column="step", what="DSA verify"
            )
        elif self._mla:
            self._mla_decode_at = functools.partial(
                mla_module_grid,
                self.source.table("mla", "mla_generation_module_perf" if mla_module else "generation_mla_perf"),
                kv_dtype=kv_dtype, gemm_dtype=module_dtype if mla_module else None, length_column="step",
                what="MLA verify", scale=scales["decode"],
            )  # fmt: skip
        if dsa is not None:
            self._decode = dsa_module_grid(
                dsa[0], heads=q_heads, kv_dtype=kv_dtype, length_column="step", what="DSA decode module"
            )
            prefill = dsa_module_grid(
                dsa[1], heads=q_heads, kv_dtype=kv_dtype, length_column="isl", what="DSA prefill module"
            )
        elif self._mla and not mla_module:
            self._decode = mla_module_grid(
                self.source.table("mla", "generation_mla_perf"), heads=q_heads, kv_dtype=kv_dtype,
                gemm_dtype=None, length_column="step", what="MLA decode kernel", scale=scales["decode"],
            )  # fmt: skip
            prefill = mla_module_grid(
                self.source.table("mla", "context_mla_perf"), heads=q_heads, kv_dtype=kv_dtype,
                gemm_dtype=None, length_column="isl", what="MLA prefill kernel", scale=scales["prefill"],
            )  # fmt: skip
        elif self._mla:
            self._decode = mla_module_grid(
                self.source.table("mla", "mla_generation_module_perf"), heads=q_heads, kv_dtype=kv_dtype,
                gemm_dtype=module_dtype, length_column="step", what="MLA decode module",
            )  # fmt: skip
            prefill = mla_module_grid(
                self.source.table("mla", "mla_context_module_perf"), heads=q_heads, kv_dtype=kv_dtype,
                gemm_dtype=module_dtype, length_column="isl", what="MLA prefill module",
            )  # fmt: skip
        else:
            self._decode = attention("generation_attention_perf", "step", "decode attention")
            prefill = attention("context_attention_perf", "isl", "prefill attention")
        isl = prefill.ys
        self._prefill = Curve(isl, prefill.at(1.0, isl))  # one sequence of each length
        self._attention_floor = self._prefill(1.0)
        self._allreduce = self._allreduce_curves() if tp > 1 else None
        # Elementwise bytes per token per layer, 16-bit activations (see the docstring):
        # two fused add+RMSNorm (read 2h, write 2h), RoPE on q and k (read and write),
        # the KV write (read k and v, write them in the cache's dtype), SiLU x mul (read
        # 2 i, write i). MLA's RoPE and KV write are inside its module; a MoE layer's
        # activations inside its fused expert kernel (its shared expert's are counted).
        kv_bytes = KV_DTYPE_BYTES["bf16" if kv_cache_dtype == "auto" else kv_cache_dtype]
        rope_and_kv_write = 0.0 if self._mla else (
            2 * (q_heads + kv_heads) * hd * 2.0 + 2 * kv_heads * hd * (2.0 + kv_bytes)
        )  # fmt: skip
        self._elementwise_bytes_per_token = 2 * 4 * h * 2.0 + rope_and_kv_write + 3 * mlp_inter * 2.0
        self._elementwise_kernels = 3 if self._mla else 5
        # A MoE layer: the dense layer's SiLU x mul replaced by its shared experts' (if any).
        self._moe_elementwise_bytes = 3 * inter * model.num_shared_experts * 2.0 - 3 * mlp_inter * 2.0
        self._moe_elementwise_kernels = 0 if model.num_shared_experts else -1
        self._hbm_rate = gpu.hbm_bandwidth_bytes_per_s * config.elementwise_memory_efficiency
        fitted = FITTED[self.engine] if self.engine in FITTED else Overheads(0.0, 0.0, 3e-6)
        self.overheads = Overheads(
            *(
                fitted_value if given is None else given
                for given, fitted_value in (
                    (config.per_iteration_overhead_s, fitted.per_iteration_overhead_s),
                    (config.per_layer_overhead_s, fitted.per_layer_overhead_s),
                    (config.elementwise_kernel_s, fitted.elementwise_kernel_s),
                )
            )
        )
        self._per_step_s = self.overheads.per_iteration_overhead_s
        self._by_tokens: dict[int | tuple[int, int] | tuple[int, int | None, bool], float] = {}
        self._by_seqs: dict[int, float] = {}
        self._pcie_bw = gpu.pcie_bandwidth_bytes_per_s

    def _fp8_block_rows(self, gemm: pd.DataFrame) -> pd.DataFrame:
        """The engine's GEMM table with its fp8_block rows from ``fp8_block_gemm_backend``'s
        table (default `FP8_BLOCK_GEMM_TABLES`: SGLang's for vLLM), its newest version on the
        same system; the engine's own rows, with a warning, where that table lacks them."""
        src = self.source
        other = self.config.fp8_block_gemm_backend or FP8_BLOCK_GEMM_TABLES.get(src.backend, src.backend)
        if other == src.backend:
            return gemm
        rows = pd.DataFrame()
        if src.index.versions(src.system, "gemm", other):
            frame = KernelSource(src.index, src.system, other, None).table("gemm", "gemm_perf")
            rows = frame[frame["gemm_dtype"] == "fp8_block"]
        if rows.empty:
            self.warnings.append(
                f"fp8_block GEMMs: no {other} table with them on {src.system}; {src.backend}'s own"
            )
            return gemm
        self.warnings.append(
            f"fp8_block GEMMs: priced from {other}'s gemm table (cost_model.fp8_block_gemm_backend)"
        )
        return pd.concat([gemm[gemm["gemm_dtype"] != "fp8_block"], rows], ignore_index=True)

    def _dsa_tables(self, model: ModelSpec, gemm_dtype: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """The model's rows of the engine's DSA module tables (generation, context), at its
        projections' precision where measured (else the model's other one, with a warning);
        None, with a warning, where the tables do not hold the model: its attention is then
        priced as dense MLA (`_check_mla`)."""
        try:
            frames = [
                self.source.table("sparse_attention", f"dsa_{t}_module_perf")
                for t in ("generation", "context")
            ]
        except ProfileError:
            self.warnings.append(
                f"DSA: no sparse_attention tables for {self.source.system} / {self.source.backend}: "
                f"{model.name}'s sparse attention priced as dense MLA"
            )
            return None
        mine = [f[f["model"].map(dsa_name) == dsa_name(model.name)] for f in frames]
        if any(f.empty for f in mine):
            have = ", ".join(sorted({dsa_name(m) for m in frames[0]["model"].astype(str)}))
            self.warnings.append(
                f"DSA: the sparse_attention tables do not measure {model.name} (measured: {have}); "
                "its sparse attention priced as dense MLA"
            )
            return None
        measured = sorted(set(mine[0]["gemm_type"].astype(str)) & set(mine[1]["gemm_type"].astype(str)))
        pick = gemm_dtype if gemm_dtype in measured else measured[0]
        if pick != gemm_dtype:
            self.warnings.append(
                f"DSA: {model.name}'s module measured with {', '.join(measured)} projections, not "
                f"{gemm_dtype}; priced at {pick}"
            )
        return mine[0][mine[0]["gemm_type"] == pick], mine[1][mine[1]["gemm_type"] == pick]

    def _check_mla(self, model: ModelSpec, tp: int, qkv_dtype: str, o_dtype: str) -> bool:
        """True when the engine's module tables price the model's MLA (vLLM, TensorRT-LLM),
        False for the granular ones (SGLang's; any engine's for an MLA of another shape than
        DeepSeek-V3's, which the module tables measure alone); refused, by name, where neither
        holds it.

        A module row has one precision for all its projections, so a checkpoint whose q/kv and
        o projections differ (nvidia/DeepSeek-V3.1-NVFP4: bf16 q/kv, nvfp4 o_proj) is priced
        granularly where the engine's granular tables exist (TensorRT-LLM's), as
        aiconfigurator-core 0.12.0 does (sdk/models/deepseek.py, "mixed checkpoints bypass the
        module row"), else by the module at o_proj's precision, the largest projection, with a
        warning."""
        folder = self.source.index.folder(
            self.source.system, "mla", self.source.backend, self.source.version_for("mla")
        )
        module = (folder / "mla_generation_module_perf.parquet").is_file()
        granular = (folder / "generation_mla_perf.parquet").is_file()
        shape = {name: getattr(model, name) for name in MLA_MODULE_SHAPE}
        if model.qk_nope_head_dim not in (None, model.head_dim):
            shape["qk_nope_head_dim"] = model.qk_nope_head_dim
        if shape != MLA_MODULE_SHAPE:
            differ = ", ".join(
                f"{k} {v} (measured {MLA_MODULE_SHAPE.get(k, MLA_KERNEL_SHAPE.get(k))})"
                for k, v in shape.items()
                if v != MLA_MODULE_SHAPE.get(k, MLA_KERNEL_SHAPE.get(k))
            )
            if not granular:
                raise ProfileError(
                    f"{model.name}: the MLA module tables measure DeepSeek-V3's layer only and "
                    f"{self.source.backend} has no granular MLA tables; this one differs: {differ}"
                )
            self.warnings.append(
                f"MLA: {model.name}'s layer differs from DeepSeek-V3's ({differ}): its projections "
                "from the GEMM tables at its shapes, its attention kernels from DeepSeek-V3's scaled "
                "by their work per head (kvsim.cost.kernels.mla_kernel_scales)"
            )
            return False
        if module and qkv_dtype != o_dtype:
            if granular:
                return False
            self.warnings.append(
                f"MLA: {qkv_dtype} q/kv and {o_dtype} o projections; {self.source.backend}'s module tables "
                f"have one precision for all, priced at o_proj's ({o_dtype})"
            )
        if module:
            return True
        if not granular:
            raise ProfileError(
                f"MLA on {self.source.backend}: neither module tables (mla_generation_module_perf) nor granular "
                f"ones (generation_mla_perf) in {folder}"
            )
        return False

    def _mla_bmm_curves(self, heads: int, gemm_dtype: str, scales: dict[str, float]) -> tuple[Curve, Curve]:
        """The absorbed k / v BMMs around a decode's MLA kernel (``mla_bmm`` table,
        mla_gen_pre / mla_gen_post) by decode tokens, at ``heads`` per GPU: fp8 when the kv
        projections are (``gemm_dtype``) and it was measured, else bf16; the fastest kernel at
        each size; times ``scales["bmm_pre"]`` / ``["bmm_post"]`` (`mla_kernel_scales`)."""
        frame = self.source.table("mla_bmm", "mla_bmm_perf")
        want = (
            "fp8"
            if gemm_dtype in ("fp8", "fp8_block") and (frame["bmm_dtype"] == "fp8").any()
            else "bfloat16"
        )
        rows = frame[(frame["bmm_dtype"] == want) & (frame["num_heads"] == heads)]
        curves = []
        for op, scale in (("mla_gen_pre", scales["bmm_pre"]), ("mla_gen_post", scales["bmm_post"])):
            sub = rows[rows["op_name"] == op]
            if sub.empty:
                raise ProfileError(f"MLA {op} BMM: no {want} measurement at {heads} heads per GPU")
            best = sub.groupby("num_tokens")["latency"].min()
            ms = best.to_numpy(float) * MS
            curves.append(Curve(best.index.to_numpy(float), ms * scale if scale != 1.0 else ms))
        return curves[0], curves[1]

    def _moe_source(self) -> KernelSource:
        """Whose moe table: the engine's, or ``moe_tables_backend``'s (its newest versions)."""
        other = self.config.moe_tables_backend
        if other is None or other == self.source.backend:
            return self.source
        self.warnings.append(f"MoE experts: priced from {other}'s moe table (cost_model.moe_tables_backend)")
        return KernelSource(self.source.index, self.source.system, other, None)

    def _moe_table(self, src: KernelSource, moe_dtype: str) -> pd.DataFrame:
        """The ``moe`` table of the engine's version (else the newest). When that version's
        folder has no ``moe_perf`` (SGLang 0.5.16 on b200_sxm measured only its wide-EP
        tables) or, no version having been asked for, lacks ``moe_dtype`` at the model's
        hidden size, top-k and expert count (TensorRT-LLM 1.3.0rc23 on h200_sxm re-measured
        only bf16 and fp8 experts; on b200_sxm MXFP4 x MXFP8 experts at two other models'
        shapes, not gpt-oss's), the newest version whose table has it, with a warning. With
        ``cost_model.moe_kernel``, a table has it where that kernel was measured for the dtype
        at any shape (`moe_curve` carries it to the model's)."""
        model, kernel = self.model, self.config.moe_kernel

        def has(frame: pd.DataFrame) -> bool:
            if kernel is not None:
                return "kernel_source" in frame.columns and bool(
                    (
                        (frame["moe_dtype"] == moe_dtype)
                        & frame["kernel_source"].astype(str).str.contains(kernel, regex=False)
                    ).any()
                )
            return bool(
                (
                    (frame["moe_dtype"] == moe_dtype)
                    & (frame["hidden_size"] == model.hidden_size)
                    & (frame["topk"] == model.num_experts_per_token)
                    & (frame["num_experts"] == model.num_experts)
                ).any()
            )

        versions = src.index.versions(src.system, "moe", src.backend)
        chosen = src.version_for("moe") or (versions[-1] if versions else None)
        first = src.index.folder(src.system, "moe", src.backend, chosen) / "moe_perf.parquet"
        if first.is_file():
            frame = read_table(first)
            if has(frame) or src.version_for("moe") is not None:
                return frame
        for version in reversed(versions):
            path = src.index.folder(src.system, "moe", src.backend, version) / "moe_perf.parquet"
            if version != chosen and path.is_file():
                other = read_table(path)
                if has(other):
                    self.warnings.append(
                        f"MoE experts: no {moe_dtype} at this shape in {src.backend} {chosen}'s moe table; "
                        f"read from {version}'s"
                    )
                    return other
        return read_table(first)  # refused by name below, or reported missing by the reader

    def _init_moe(self, gemm: pd.DataFrame, inter: int, attention_gemms: list[Curve]) -> None:
        """The MoE layers' pieces: the attention GEMMs, the router (16 bits, as the engines
        keep it), the shared experts (the weights' dtype) and the routed experts' kernel."""
        model, w = self.model, self.warnings
        assert model.num_experts is not None and model.num_experts_per_token is not None
        expert_dtype = model.expert_weight_dtype or model.weight_dtype
        src = self._moe_source()
        moe_dtype = MOE_DTYPES.get(expert_dtype)
        if expert_dtype == "mxfp4":
            activation = mxfp4_moe_activation(src.backend, src.system, self.config.mxfp4_moe_activation)
            moe_dtype = MXFP4_MOE_DTYPES[activation]
        if moe_dtype is None:
            raise ProfileError(f"no MoE kernel tables for {expert_dtype} experts")
        try:
            self._moe = moe_curve(
                self._moe_table(src, moe_dtype), moe_dtype, hidden=model.hidden_size,
                inter=model.intermediate_size, topk=model.num_experts_per_token, num_experts=model.num_experts,
                moe_tp=self.moe_tp, moe_ep=self.moe_ep, what="MoE experts", warn=w,
                distribution=self.config.expert_load, kernel=self.config.moe_kernel,
            )  # fmt: skip
        except ProfileError as err:
            hint = (
                " (MXFP4 experts: cost_model.mxfp4_moe_activation picks the activations, "
                "cost_model.moe_tables_backend another engine's table)"
                if expert_dtype == "mxfp4"
                else ""
            )
            raise ProfileError(f"{src.backend}'s moe tables on {src.system}: {err}{hint}") from err
        wide = self._wide_ep_curves(src, moe_dtype)
        if wide is not None:
            self._moe, self._moe_prefill = wide
        self._moe_comm = self._moe_comm_curve(expert_dtype)
        shared_dtype = GEMM_DTYPES[model.dtype_of("shared_experts")]
        h, shared = model.hidden_size, model.num_shared_experts * inter
        self._moe_layer_gemms = [
            *attention_gemms,
            gemm_curve(gemm, "bfloat16", model.num_experts, h, "router", w),
            *(
                [
                    gemm_curve(gemm, shared_dtype, 2 * shared, h, "shared gate/up", w),
                    gemm_curve(gemm, shared_dtype, h, shared, "shared down", w),
                ]
                if shared
                else []
            ),
        ]
        self._num_moe_layers = num_moe_layers(model)

    def _wide_ep_curves(self, src: KernelSource, moe_dtype: str) -> tuple[Curve, Curve] | None:
        """SGLang's experts under DeepEP (`wide_ep_moe_curves`): an SGLang instance with
        attention DP whose experts are whole on their GPUs (moe_tp 1, moe_ep > 1), where its
        wide-EP tables have the layout; else None (the ``moe_perf`` curve stands)."""
        model = self.model
        if src.backend != "sglang" or self.attention_dp == 1 or self.moe_tp != 1 or self.moe_ep == 1:
            return None
        assert model.num_experts is not None and model.num_experts_per_token is not None
        curves = wide_ep_moe_curves(
            src, hidden=model.hidden_size, inter=model.intermediate_size, topk=model.num_experts_per_token,
            num_experts=model.num_experts, moe_ep=self.moe_ep, expert_dtype=moe_dtype,
            distribution=self.config.expert_load, warn=self.warnings,
        )  # fmt: skip
        if curves is None:
            self.warnings.append(
                f"MoE experts: SGLang's wide-EP tables lack moe_ep {self.moe_ep} for this MoE; "
                "priced from moe_perf (SGLang's fused MoE, not DeepEP's kernels)"
            )
        return curves

    def _init_linear(self, gemm: pd.DataFrame, gemm_dtype: str) -> GdnKernels:
        """The Gated DeltaNet layers' GEMMs (the weights' dtype) and measured kernels."""
        from kvsim.cost.linear_attention import GdnKernels

        def build(n: int, k: int, what: str) -> Curve:
            return gemm_curve(gemm, gemm_dtype, n, k, what, self.warnings)

        return GdnKernels(self.model, self.tp, self.source, build, self.warnings)

    def _moe_comm_curve(self, expert_dtype: str) -> Curve | None:
        """What a MoE layer exchanges beyond the rank's all-reduce, by the rank's tokens
        (`kvsim.cost.moe_comm`): nothing without attention DP (the all-reduce after the
        experts sums them, as after a dense MLP); all-to-alls with expert parallelism alone;
        all-gather + reduce-scatter when the experts are also split (moe_tp > 1)."""
        if self.attention_dp == 1:
            return None
        model, w = self.model, self.warnings
        assert model.num_experts is not None and model.num_experts_per_token is not None
        if self.moe_tp == 1:
            return all_to_all_curve(
                self.source, ep=self.moe_ep, tp=self.tp, hidden=model.hidden_size,
                topk=model.num_experts_per_token, num_experts=model.num_experts,
                expert_dtype=expert_dtype, warn=w,
            )  # fmt: skip
        return gather_scatter_curve(self.source, ranks=self.attention_dp, hidden=model.hidden_size, warn=w)

    def _allreduce_curves(self) -> tuple[Curve, Curve]:
        """(CUDA graph, eager) all-reduce latency by message elements on ``tp`` GPUs."""
        graph, eager = ALLREDUCE_VARIANTS.get(self.source.backend, ("", ""))
        index = self.source.index
        if index.versions(self.source.system, "comm", self.source.backend):
            frame = self.source.table("comm", "custom_allreduce_perf")
            rows = frame[frame["num_gpus"] == self.tp]
            column = "backend" if "backend" in frame.columns else "implementation"
            if not rows.empty:
                picked = []
                for variant in (graph, eager):
                    sub = rows[rows[column] == variant] if column in rows.columns else rows
                    sub = sub if not sub.empty else rows
                    med = sub.groupby("message_size")["latency"].median()
                    picked.append(Curve(med.index.to_numpy(float), med.to_numpy(float) * MS))
                return picked[0], picked[1]
        nccl_versions = index.versions(self.source.system, "comm", "nccl")
        if not nccl_versions:
            raise ProfileError(f"no all-reduce was measured on {self.source.system} for tp {self.tp}")
        frame = read_table(
            index.folder(self.source.system, "comm", "nccl", nccl_versions[-1]) / "nccl_perf.parquet"
        )
        gpus = sorted(int(g) for g in frame["num_gpus"].unique())
        n = self.tp if self.tp in gpus else gpus[-1]
        if n != self.tp:
            self.warnings.append(f"all-reduce: tp {self.tp} not measured; priced as {n} GPUs")
        rows = frame[(frame["op_name"] == "all_reduce") & (frame["num_gpus"] == n)]
        med = rows.groupby("message_size")["latency"].median()
        curve = Curve(med.index.to_numpy(float), med.to_numpy(float) * MS)
        return curve, curve

    # -- the pieces of a step ---------------------------------------------------------------

    def _token_terms_s(self, tokens: int, moe_tokens: int | None = None, prompt: bool = False) -> float:
        """Everything in a step that depends only on its token count: GEMMs, elementwise
        kernels and all-reduces of every layer, and the per-layer overhead. ``moe_tokens``:
        the tokens the experts run on across the instance's ranks in lockstep (None: this
        rank's x attention_dp); ``prompt``: the step computes a prompt (chunk), whose experts
        may run another kernel (`_moe_prefill`)."""
        prompt = prompt and self._moe_prefill is not None
        key: int | tuple[int, int] | tuple[int, int | None, bool] = (
            (tokens, moe_tokens, True) if prompt else (tokens if moe_tokens is None else (tokens, moe_tokens))
        )
        cached = self._by_tokens.get(key)
        if cached is not None:
            return cached
        m = graph_padded(tokens, self.max_graph_tokens, self._graph_sizes)
        one_allreduce = norms = 0.0
        if self._allreduce is not None:
            curve = self._allreduce[0] if m <= self.max_graph_tokens else self._allreduce[1]
            # The tables' message_size counts elements (aiconfigurator's collector,
            # collector/network/collect_all_reduce.py, allocates [tokens, 4096] tensors of it).
            one_allreduce = curve(float(m * self.model.hidden_size))
            if self.model.qk_norm_across_heads:  # q's and k's sums of squares, fused: 2 values a token
                norms = curve(float(2 * m))
        allreduce = 2 * one_allreduce + norms  # after attention and after the MLP (+ the norms')
        layer = self._layer_s(m, self._gemms, 0.0, 0, allreduce)
        if self._moe is None:
            t = self.model.num_layers * layer
        else:
            # The experts run on the tokens of every rank of the instance (ranks in lockstep,
            # as many tokens each); with attention DP their exchange replaces the MLP's all-reduce.
            kernel = self._moe_prefill if prompt and self._moe_prefill is not None else self._moe
            experts = kernel(m * self.attention_dp if moe_tokens is None else max(moe_tokens, m))
            comm = allreduce if self._moe_comm is None else one_allreduce + norms + self._moe_comm(m)
            moe_layer = self._layer_s(
                m,
                self._moe_layer_gemms,
                self._moe_elementwise_bytes,
                self._moe_elementwise_kernels,
                comm,
                experts,
            )
            num_moe = self._num_moe_layers
            t = (self.model.num_layers - num_moe) * layer + num_moe * moe_layer
        if self._gdn is not None:  # linear layers: their projections in place of QKV / O
            t += self._gdn.layers * (self._gdn.gemms_s(m) - sum(c(m) for c in self._attention_gemms))
        self._by_tokens[key] = t
        return t

    def _layer_s(
        self,
        m: int,
        gemms: list[Curve],
        extra_bytes: float,
        extra_kernels: int,
        comm: float,
        experts: float = 0.0,
    ) -> float:
        """One layer's token-count terms at m tokens: its GEMMs and expert kernel, its
        elementwise kernels, its all-reduces (and MoE exchange) and the per-layer overhead."""
        layer = sum(curve(m) for curve in gemms) + experts
        layer += (
            m * (self._elementwise_bytes_per_token + extra_bytes) / self._hbm_rate
            + (self._elementwise_kernels + extra_kernels) * self.overheads.elementwise_kernel_s
        )
        layer += comm
        layer += self.overheads.per_layer_overhead_s
        return layer

    def _lm_head_s(self, seqs: int) -> float:
        cached = self._by_seqs.get(seqs)
        if cached is None:
            cached = self._by_seqs[seqs] = self._lm_head(seqs)
        return cached

    def _chunk_extra_s(self, q: int, c: int) -> float:
        """A prefill chunk of q tokens after c cached ones, beyond the attention launch.

        The tables measure whole prompts; a chunk computes q c + q (q + 1) / 2 of the
        (q + c)(q + c + 1) / 2 query-key pairs of its whole prompt."""
        n = q + c
        full = self._prefill(float(n)) - self._attention_floor
        extra = max(full, 0.0) * ((q * c + q * (q + 1) / 2) / (n * (n + 1) / 2))
        if self._mla_kv_b is not None:  # granular MLA: the chunk's latent expanded to k and v
            extra += self._mla_kv_b(q)
        return extra

    def _decode_attention_1(self, num_seqs: int, context: int) -> float:
        """`_decode_attention_s` at one context, in plain floats (the same operations)."""
        step = max(context / num_seqs - 1.0, 1.0)
        if self._mla_bmm is not None:
            pre, post = self._mla_bmm
            return self._decode(float(num_seqs), step) + (pre(num_seqs) + post(num_seqs))
        return self._decode(float(num_seqs), step)

    def _decode_attention_s(self, num_seqs: int, context: np.ndarray) -> np.ndarray:
        """Decode attention for ``num_seqs`` requests at a total ``context`` (each row)."""
        step = np.maximum(context / num_seqs - 1.0, 1.0)  # the tables' step: tokens before this one
        if self._mla_bmm is not None:  # granular MLA: the absorbed BMMs around the kernel
            pre, post = self._mla_bmm
            return self._decode.at(float(num_seqs), step) + (pre(num_seqs) + post(num_seqs))
        return self._decode.at(float(num_seqs), step)

    def _folded_decode(self, heads: int) -> Grid | None:
        """The MLA decode grid at ``heads`` query heads per GPU, None where not measured."""
        if heads not in self._folded:
            assert self._mla_decode_at is not None
            try:
                self._folded[heads] = self._mla_decode_at(heads=heads)
            except ProfileError:
                self._folded[heads] = None
        return self._folded[heads]

    def _verify_attention_s(self, verifies: list[tuple[int, int]]) -> float:
        """Attention of speculative verify passes of q tokens after c each (`step_time_s`).

        The kernels read each request's KV once for its q queries: FlashInfer's decode folds
        them into a GQA group, FlashMLA (and TensorRT-LLM's MLA generation kernels) into the
        query heads, so q queries of h heads cost about one query of q x h heads. A GQA model:
        one decode row per request. MLA: the decode table at q x h heads per GPU where it is
        measured (DeepSeek's tables: 128 heads split over tp 1..128), the absorbed BMMs at
        every token; else q rows of h heads (the compute-bound case: no smaller TP to read).
        """
        n = len(verifies)
        context = sum(c + 1 for _, c in verifies)
        if not self._mla:
            return self._decode_attention_1(n, context)
        q = max(q for q, _ in verifies)  # the engines draft the same k for every request
        grid = self._folded_decode(self._q_heads * q)
        if grid is None:
            return self._decode_attention_1(n * q, q * context)
        t = grid(float(n), max(context / n - 1.0, 1.0))
        if self._mla_bmm is not None:
            pre, post = self._mla_bmm
            t += pre(n * q) + post(n * q)
        return t

    def _piecewise_tokens(
        self,
        config: KernelCostConfig,
        version: str | None,
        chunk: int | None,
        attention_dp: int,
        speculative: bool,
        disaggregated: bool,
    ) -> int:
        """The most tokens a step with a prompt replays from SGLang's piecewise CUDA graphs
        (`KernelCostConfig.piecewise_cuda_graph_max_tokens`, else SGLang's default for the
        release and layout); 0 for the other engines (vLLM's prompt steps follow its capture
        sizes, `_eager_above_tokens`)."""
        chosen = config.piecewise_cuda_graph_max_tokens
        if self.engine != "sglang":
            if chosen is not None:
                raise ProfileError(
                    f"piecewise_cuda_graph_max_tokens is SGLang's; {self.engine} does not have it "
                    "(vLLM replays prompt steps up to cuda_graph_max_size)"
                )
            return 0
        if chosen is not None:
            return chosen
        if chunk is None:  # SGLang's default chunk for the GPU (the rule of 0.5.3 to 0.5.10)
            chunk = sglang_memory_defaults("0.5.10", self.gpu, self.tp, mla=self.model.is_mla)[0]
        return sglang_piecewise_max_tokens(
            version, mla=self.model.is_mla, chunk=chunk, attention_dp=attention_dp,
            speculative=speculative, disaggregated=disaggregated,
            linear_attention=self.model.num_linear_attention_layers > 0,
        )  # fmt: skip

    # -- the CostModel protocol -----------------------------------------------------------

    def step_time_s(self, batch: Batch) -> float:
        n = batch.num_decode_seqs
        if not batch.prefill_chunks:  # decode_steps_s at one context, in plain floats
            if n == 0:
                return 0.0
            t = self._token_terms_s(n, batch.moe_tokens) + self._lm_head_s(n)
            if self._gdn is not None:
                t += self._gdn.decode_s(n)
            return (
                t
                + self._attn_layers * self._decode_attention_1(n, batch.decode_context_tokens)
                + self._per_step_s
            )
        tokens, seqs = batch.num_decode_seqs, batch.num_decode_seqs
        extra = linear = 0.0
        chunks = batch.prefill_chunks
        num_prompts = len(chunks) - batch.num_verify_chunks
        for q, c in chunks[:num_prompts]:
            tokens += q
            seqs += 1
            extra += self._chunk_extra_s(q, c)
            linear += self._gdn.chunk_s(q) if self._gdn is not None else 0.0
        # Speculative verify passes (q = 1 + drafts tokens after c): decode attention over
        # their KV (`_verify_attention_s`), every token through the GEMMs and the LM head.
        verifies = chunks[num_prompts:]
        verify_tokens = sum(q for q, _ in verifies)
        tokens += verify_tokens
        seqs += verify_tokens
        if verifies:
            attention = extra + self._verify_attention_s(verifies)
            if n:
                attention += self._decode_attention_1(n, batch.decode_context_tokens)
        elif n:
            attention = self._decode_attention_1(n, batch.decode_context_tokens) + extra
        else:
            attention = self._attention_floor + extra
        t = self._token_terms_s(tokens, batch.moe_tokens, num_prompts > 0) + self._lm_head_s(seqs)
        if self._gdn is not None:
            t += linear + self._gdn.decode_s(n + verify_tokens)
        t = t + self._attn_layers * attention + self._per_step_s  # (t + a) + b, as before
        # Decode and verify steps replay CUDA graphs; a step with a prompt runs eagerly (vLLM:
        # only beyond its graph sizes).
        if num_prompts > 0:
            eager = tokens > max(self._eager_above_tokens, self._prompt_graph_tokens)
        else:
            eager = 0 < self._eager_above_tokens < tokens
        if not eager:
            return t
        # SGLang's linear-attention layers keep its host from running ahead of the GPU: the
        # step takes the host's time and the kernels' (`EAGER_MOE_LAYER_HOST_S`), not the larger.
        return t + self._eager_floor_s if self._eager_serial else max(t, self._eager_floor_s)

    def decode_steps_s(
        self, num_seqs: int, context_tokens: np.ndarray, moe_tokens: int | None = None
    ) -> np.ndarray:
        ctx = np.asarray(context_tokens, dtype=np.float64)
        if num_seqs == 0:
            return np.zeros(len(ctx))
        t = self._token_terms_s(num_seqs, moe_tokens) + self._lm_head_s(num_seqs)
        if self._gdn is not None:
            t += self._gdn.decode_s(num_seqs)
        return t + self._attn_layers * self._decode_attention_s(num_seqs, ctx) + self._per_step_s

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return num_bytes / self._pcie_bw

    def describe(self) -> str:
        ops = (
            ["gemm", "attention", "comm"]
            + (["moe"] if self._moe is not None else [])
            + (["mla"] if self._mla else [])
        )
        versions = {op: self.source.version_for(op) or "newest" for op in ops}
        return (
            f"kernel tables {self.source.system} / {self.source.backend} "
            + ", ".join(f"{op} {v}" for op, v in versions.items())
            + f" ({self.source.index.root})"
        )
