"""Serving-engine defaults per backend and version: what vLLM, SGLang and TensorRT-LLM fill in
for the knobs a deployment leaves unset.

    engine: {backend: sglang, backend_version: 0.5.9}     # a replica group's engine section
    resolve_engine(engine, gpu=H100, tp=1, model=qwen3-32b)
        -> block_size 1, max_num_batched_tokens 8192, max_num_seqs 2048, gpu_memory_utilization
           0.835 (SGLang's mem_fraction_static), activation_reserve_gib 0.0, ...

Knobs keep vLLM's names (`DEFAULTED_KNOBS`); each backend's own name is in `KNOB_NAMES`.
A knob the scenario sets always wins; the others take the backend's default for that
version, on that GPU and TP degree, as its online server (``vllm serve``, ``python -m
sglang.launch_server``, ``trtllm-serve``) sets it. Every figure is cited in `DEFAULTS_TABLE`
(the same table is in docs/backends.md) with the file and the versions checked.

``backend_version`` None: for vLLM, kvsim's own defaults (`LEGACY_VLLM`), which every
scenario written before backends existed was run with: they are vLLM 0.8.5-0.19's on a
GPU below 70 GiB except max_num_batched_tokens (8,192 there, 2,048 in vLLM), and on an
H100/H200 except max_num_seqs (1,024 in vLLM); docs/backends.md lists the differences.
For SGLang and TensorRT-LLM, None means the newest version tabulated here.

Memory: vLLM budgets ``memory x gpu_memory_utilization`` for weights, activations and KV;
SGLang's ``mem_fraction_static`` is the same kind of fraction (weights + KV, activations
and CUDA graphs live in the rest), so its default is written into gpu_memory_utilization
and the activation reserve is 0; TensorRT-LLM gives the KV cache ``free_gpu_memory_fraction``
of what weights and activations leave (`kvsim.model.kv_sizing.kv_capacity`, ``backend="trtllm"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kvsim.model.specs import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvsim.scenario.schema import EngineConfig

Backend = Literal["vllm", "sglang", "trtllm"]
BACKENDS: tuple[Backend, ...] = ("vllm", "sglang", "trtllm")

#: Engine knobs that take a backend's default when a scenario leaves them unset.
DEFAULTED_KNOBS = (
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "enable_prefix_caching",
    "gpu_memory_utilization",
    "activation_reserve_gib",
)

#: Each knob's name in each engine (docs and error messages).
KNOB_NAMES: dict[str, dict[Backend, str]] = {
    "block_size": {"vllm": "block_size", "sglang": "page_size", "trtllm": "kv_cache_config.tokens_per_block"},
    "max_num_seqs": {"vllm": "max_num_seqs", "sglang": "max_running_requests", "trtllm": "max_batch_size"},
    "max_num_batched_tokens": {
        "vllm": "max_num_batched_tokens",
        "sglang": "chunked_prefill_size",
        "trtllm": "max_num_tokens",
    },
    "enable_chunked_prefill": {
        "vllm": "enable_chunked_prefill",
        "sglang": "chunked_prefill_size > 0",
        "trtllm": "enable_chunked_prefill",
    },
    "long_prefill_token_threshold": {
        "vllm": "long_prefill_token_threshold",
        "sglang": "(none)",
        "trtllm": "(none)",
    },
    "enable_prefix_caching": {
        "vllm": "enable_prefix_caching",
        "sglang": "not disable_radix_cache",
        "trtllm": "kv_cache_config.enable_block_reuse",
    },
    "gpu_memory_utilization": {
        "vllm": "gpu_memory_utilization",
        "sglang": "mem_fraction_static",
        "trtllm": "kv_cache_config.free_gpu_memory_fraction",
    },
    "activation_reserve_gib": {
        "vllm": "(profiled at start-up)",
        "sglang": "(inside 1 - mem_fraction_static)",
        "trtllm": "(profiled at start-up)",
    },
}

#: kvsim's defaults for vLLM without a backend_version: EngineConfig's field defaults.
LEGACY_VLLM: dict[str, Any] = {
    "block_size": 16,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "enable_prefix_caching": True,
    "gpu_memory_utilization": 0.9,
    "activation_reserve_gib": None,
}

#: The versions tabulated for each backend, oldest first; a version between two entries
#: takes the older one's rules, a newer one the newest's.
TABLE_VERSIONS: dict[Backend, tuple[str, ...]] = {
    "vllm": ("0.8.5", "0.9.0", "0.11.2", "0.20.0", "0.29.0"),
    "sglang": ("0.5.1", "0.5.3", "0.5.5", "0.5.10"),
    "trtllm": ("1.0.0",),
}

_VLLM = "vllm/engine/arg_utils.py (EngineArgs default batch sizes for UsageContext.OPENAI_API_SERVER)"
_SGL = "python/sglang/srt/server_args.py"
_TRT = "tensorrt_llm/llmapi/llm_args.py"


@dataclass(frozen=True)
class DefaultRule:
    """One row of `DEFAULTS_TABLE`: a knob's default in one backend over a version range."""

    backend: Backend
    knob: str
    versions: str
    rule: str
    source: str


#: Every default kvsim applies, with where it comes from (reproduced in docs/backends.md).
DEFAULTS_TABLE: tuple[DefaultRule, ...] = (
    # -- vLLM (V1 engine, CUDA, the OpenAI-compatible server) ---------------------------
    DefaultRule(
        "vllm",
        "block_size",
        "0.8.5-0.32.0",
        "16",
        "vllm/platforms/cuda.py (block_size None -> 16) up to 0.16; vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE = 16 in 0.32 (MLA attention backends may raise it; kvsim does not)",
    ),
    DefaultRule(
        "vllm", "max_num_batched_tokens", "0.8.5", "8,192 on a GPU of >= 70 GiB, else 2,048", f"{_VLLM} 0.8.5"
    ),
    DefaultRule(
        "vllm",
        "max_num_batched_tokens",
        "0.9.0-0.28",
        "8,192 on a GPU of >= 70 GiB whose name does not contain 'a100', else 2,048",
        f"{_VLLM} 0.9.0-0.27.0 (the A100 exception: vLLM PR #17885)",
    ),
    DefaultRule(
        "vllm",
        "max_num_batched_tokens",
        "0.29.0-0.32.0",
        "16,384 on a GPU of >= 160 GiB; 8,192 on >= 70 GiB without 'a100' in its name; else 2,048",
        f"{_VLLM} 0.29.0-0.32.0, get_batch_defaults",
    ),
    DefaultRule(
        "vllm",
        "max_num_seqs",
        "0.8.5-0.32.0",
        "1,024 where max_num_batched_tokens defaults to 8,192 or 16,384, else 256",
        _VLLM,
    ),
    DefaultRule(
        "vllm",
        "max_num_batched_tokens, max_num_seqs",
        "0.11.2-0.32.0",
        "then max_num_batched_tokens = min(it, max_num_seqs x max_model_len) and max_num_seqs = min(it, max_num_batched_tokens)",
        f"{_VLLM} _set_default_max_num_seqs_and_batched_tokens_args (0.11.0 has not these clamps)",
    ),
    DefaultRule(
        "vllm",
        "max_num_batched_tokens",
        "0.8.5-0.32.0",
        "with enable_chunked_prefill false: max(max_model_len, the default above)",
        _VLLM,
    ),
    DefaultRule(
        "vllm",
        "enable_chunked_prefill",
        "0.8.5-0.32.0",
        "true (V1 engine)",
        "vllm/engine/arg_utils.py (V1: chunked prefill always on); vllm/config/scheduler.py enable_chunked_prefill = True in 0.32",
    ),
    DefaultRule(
        "vllm",
        "long_prefill_token_threshold",
        "0.8.5-0.32.0",
        "0 (no cap; only max_num_partial_prefills > 1 sets one)",
        "vllm/config/scheduler.py SchedulerConfig.long_prefill_token_threshold = 0",
    ),
    DefaultRule(
        "vllm",
        "enable_prefix_caching",
        "0.8.5-0.32.0",
        "true for generative models (V1)",
        "vllm/config/cache.py enable_prefix_caching = True in 0.32; arg_utils V1 default in 0.8.5-0.11",
    ),
    DefaultRule(
        "vllm",
        "gpu_memory_utilization",
        "0.8.5-0.19",
        "0.9",
        "vllm/config/cache.py CacheConfig.gpu_memory_utilization (vllm/config.py before 0.10)",
    ),
    DefaultRule(
        "vllm",
        "gpu_memory_utilization",
        "0.20.0-0.32.0",
        "0.92",
        "vllm/config/cache.py CacheConfig.gpu_memory_utilization = Field(default=0.92)",
    ),
    DefaultRule(
        "vllm",
        "activation_reserve_gib",
        "0.8.5-0.32.0",
        "None: kvsim's estimate of the profiled peak (docs/presets.md)",
        "vllm/v1/worker/gpu_worker.py determine_available_memory (a profile run; CUDA graph memory only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)",
    ),
    # -- SGLang -------------------------------------------------------------------------
    DefaultRule(
        "sglang",
        "block_size",
        "0.5.1-0.5.10",
        "1 (page_size); 64 on Blackwell data-center GPUs (sm_version 100/103), whose default attention backends (trtllm_mha, trtllm_mla) need pages of 16-64",
        f"{_SGL} _handle_page_size and the attention-backend checks",
    ),
    DefaultRule(
        "sglang",
        "max_num_batched_tokens",
        "0.5.1-0.5.2",
        "chunked_prefill_size: 2,048 below 35 GiB, 8,192 below 160 GiB, else 16,384",
        f"{_SGL} __post_init__ 0.5.1.post1, 0.5.2",
    ),
    DefaultRule(
        "sglang",
        "max_num_batched_tokens",
        "0.5.3-0.5.10",
        "chunked_prefill_size: 2,048 below 35 GiB, 4,096 below 60 GiB, 8,192 below 160 GiB, else 16,384",
        f"{_SGL} _handle_gpu_memory_settings 0.5.3-0.5.10.post1",
    ),
    DefaultRule(
        "sglang",
        "max_num_seqs",
        "0.5.1-0.5.10",
        "max_running_requests: min(pool tokens // 2, clamp(pool tokens / context_len x 512, 2,048, 4,096)); "
        "linear-attention models (Qwen3.5): at most the state slots // 3 (all of them with the radix cache off), the states taking 0.9 / 1.9 of the KV memory",
        "python/sglang/srt/model_executor/model_runner.py init_memory_pool (model_runner_kv_cache_mixin.py _resolve_max_num_reqs in 0.5.10)",
    ),
    DefaultRule(
        "sglang",
        "gpu_memory_utilization",
        "0.5.1-0.5.2",
        "mem_fraction_static = (M - R) / M, M the GPU's MiB, R = (2.8 + tp/10) GiB below 35 GiB, (9.5 + tp/2) GiB below 90 GiB, (12 + tp/2) GiB below 160 GiB, else 32 GiB",
        f"{_SGL} __post_init__ 0.5.1.post1",
    ),
    DefaultRule(
        "sglang",
        "gpu_memory_utilization",
        "0.5.3-0.5.9",
        "mem_fraction_static = (M - R) / M, R = 512 MiB + 1.5 MiB x max(chunked_prefill_size, 2,048) + 2 MiB x cuda_graph_max_bs + 128 MiB x tp, at least 10 GiB on GPUs above 60 GiB; cuda_graph_max_bs 8 (< 20 GiB), 16 (0.5.3-0.5.4) / 24 (0.5.5+) or 80 at tp >= 4 (< 35 GiB), 32 / 160 (< 60 GiB), 256 / 512 (< 160 GiB), 512",
        f"{_SGL} _handle_gpu_memory_settings 0.5.3-0.5.9",
    ),
    DefaultRule(
        "sglang",
        "gpu_memory_utilization",
        "0.5.10",
        "as 0.5.9, plus piecewise CUDA graphs (on by default): 8 MiB per captured size for attention without MLA, 1.5 GiB with MLA, before the 10 GiB floor",
        f"{_SGL} _handle_gpu_memory_settings 0.5.10.post1",
    ),
    DefaultRule(
        "sglang",
        "activation_reserve_gib",
        "0.5.1-0.5.10",
        "0 (activations and CUDA graphs are in 1 - mem_fraction_static)",
        "python/sglang/srt/model_executor/model_runner.py profile_max_num_token: KV = available memory - total x (1 - mem_fraction_static)",
    ),
    DefaultRule("sglang", "enable_chunked_prefill", "0.5.1-0.5.10", "true (chunked_prefill_size > 0)", _SGL),
    DefaultRule(
        "sglang",
        "enable_prefix_caching",
        "0.5.1-0.5.10",
        "true (radix cache on: disable_radix_cache = False)",
        _SGL,
    ),
    DefaultRule("sglang", "long_prefill_token_threshold", "0.5.1-0.5.10", "0 (no such knob)", _SGL),
    # -- TensorRT-LLM (PyTorch backend, trtllm-serve / LLM API) ---------------------------
    DefaultRule(
        "trtllm", "block_size", "1.0-1.3", "32", f"{_TRT} KvCacheConfig.tokens_per_block = Field(default=32)"
    ),
    DefaultRule(
        "trtllm",
        "max_num_seqs",
        "1.0-1.3",
        "2,048",
        f"{_TRT} BaseLlmArgs.max_batch_size = Field(default=2048)",
    ),
    DefaultRule(
        "trtllm",
        "max_num_batched_tokens",
        "1.0-1.3",
        "8,192",
        f"{_TRT} BaseLlmArgs.max_num_tokens = Field(default=8192)",
    ),
    DefaultRule(
        "trtllm",
        "enable_chunked_prefill",
        "1.0-1.3",
        "false",
        f"{_TRT} BaseLlmArgs.enable_chunked_prefill = Field(default=False)",
    ),
    DefaultRule(
        "trtllm",
        "enable_prefix_caching",
        "1.0-1.3",
        "true",
        f"{_TRT} KvCacheConfig.enable_block_reuse = Field(default=True)",
    ),
    DefaultRule(
        "trtllm",
        "gpu_memory_utilization",
        "1.0-1.3",
        "0.9 of the memory left after weights and the profiled activations",
        f"{_TRT} KvCacheConfig.free_gpu_memory_fraction (None means 0.9: tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator, available_kv_mem = (total - peak) x fraction)",
    ),
    DefaultRule(
        "trtllm",
        "activation_reserve_gib",
        "1.0-1.3",
        "None: kvsim's estimate of the profiled peak",
        "tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator (a dry run of max_num_tokens)",
    ),
    DefaultRule("trtllm", "long_prefill_token_threshold", "1.0-1.3", "0 (no such knob)", _TRT),
)


class BackendVersionError(ValueError):
    """A backend_version kvsim has no defaults table for."""


_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release string: "0.5.8.post1", "1.2.0rc6", "v0.11.2"."""
    m = _VERSION.match(text.strip())
    if not m:
        raise BackendVersionError(
            f"backend_version {text!r} is not a release number (like 0.11.2, 0.5.9 or 1.2.0rc6)"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def table_version(backend: Backend, version: str | None) -> str | None:
    """The tabulated version whose rules ``version`` follows (None: vLLM's legacy defaults).

    A version older than the first entry is refused: its defaults are not tabulated.
    """
    versions = TABLE_VERSIONS[backend]
    if version is None:
        return None if backend == "vllm" else versions[-1]
    wanted = parse_version(version)
    if wanted < parse_version(versions[0]):
        raise BackendVersionError(
            f"{backend} {version} is older than the first version kvsim tabulates ({versions[0]}); "
            "set the engine knobs explicitly, or name a newer backend_version"
        )
    return [v for v in versions if parse_version(v) <= wanted][-1]


def _at_least(table: str | None, version: str) -> bool:
    return table is not None and parse_version(table) >= parse_version(version)


_GIB = 1024**3
_MIB = 1024**2


# -- vLLM -------------------------------------------------------------------------------


def vllm_batch_defaults(table: str, gpu: GpuSpec | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's API server picks on ``gpu`` (None: no GPU
    known, vLLM's fallback for a device it cannot query)."""
    memory = gpu.memory_bytes if gpu is not None else 0
    a100 = gpu is not None and "a100" in gpu.name.lower()
    if _at_least(table, "0.29.0") and memory >= 160 * _GIB:
        return 16384, 1024
    if memory >= 70 * _GIB and (not a100 or not _at_least(table, "0.9.0")):
        return 8192, 1024
    return 2048, 256


def _vllm(
    table: str | None, engine: EngineConfig, gpu: GpuSpec | None, max_model_len: int | None
) -> dict[str, Any]:
    if table is None:
        return dict(LEGACY_VLLM)
    tokens, seqs = vllm_batch_defaults(table, gpu)
    explicit = engine.model_fields_set
    chunked = engine.enable_chunked_prefill if "enable_chunked_prefill" in explicit else True
    if "max_num_batched_tokens" not in explicit:
        if not chunked and max_model_len is not None:
            tokens = max(max_model_len, tokens)
        if _at_least(table, "0.11.2") and max_model_len is not None:
            tokens = min(
                tokens, (engine.max_num_seqs if "max_num_seqs" in explicit else seqs) * max_model_len
            )
    else:
        tokens = engine.max_num_batched_tokens
    if "max_num_seqs" not in explicit and _at_least(table, "0.11.2"):
        seqs = min(seqs, tokens)
    return {
        "block_size": 16,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "enable_chunked_prefill": True,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.92 if _at_least(table, "0.20.0") else 0.9,
        "activation_reserve_gib": None,
    }


# -- SGLang -----------------------------------------------------------------------------


def sglang_memory_defaults(
    table: str, gpu: GpuSpec | None, tp: int, *, mla: bool = False
) -> tuple[int, int, float]:
    """(chunked_prefill_size, cuda_graph_max_bs, mem_fraction_static) SGLang derives from the
    GPU's memory (nvidia-smi's MiB; None: unknown, SGLang's fallback) and the TP degree."""
    if gpu is None:
        return 4096, 160, 0.88
    mem = gpu.memory_bytes / _MIB
    if not _at_least(table, "0.5.3"):  # 0.5.1-0.5.2: reserved memory by GPU class
        if mem < 35 * 1024:
            chunk, reserved = 2048, (2.8 + tp / 10) * 1024
        elif mem < 90 * 1024:
            chunk, reserved = 8192, (9.5 + tp / 2) * 1024
        elif mem < 160 * 1024:
            chunk, reserved = 8192, (12 + tp / 2) * 1024
        else:
            chunk, reserved = 16384, 32 * 1024
        graphs = (8 if tp < 4 else 80) if mem < 35 * 1024 else 160
        return chunk, graphs, round((mem - reserved) / mem, 3)
    small_tp = tp < 4
    if mem < 20 * 1024:
        chunk, graphs = 2048, 8
    elif mem < 35 * 1024:
        chunk, graphs = 2048, ((24 if _at_least(table, "0.5.5") else 16) if small_tp else 80)
    elif mem < 60 * 1024:
        chunk, graphs = 4096, (32 if small_tp else 160)
    elif mem < 160 * 1024:
        chunk, graphs = 8192, (256 if small_tp else 512)
    else:
        chunk, graphs = 16384, 512
    return chunk, graphs, sglang_mem_fraction(table, mem, tp, chunk, graphs, mla=mla)


def sglang_mem_fraction(
    table: str, mem_mib: float, tp: int, chunk: int, graphs: int, *, mla: bool = False
) -> float:
    """SGLang's default mem_fraction_static (0.5.3+) for a chunk size and CUDA-graph batch."""
    reserved = 512 + max(chunk, 2048) * 1.5 + graphs * 2 + tp / 8 * 1024
    if _at_least(table, "0.5.10"):  # piecewise CUDA graphs, on by default
        reserved += 1.5 * 1024 if mla else len(_piecewise_sizes(chunk)) * 8
    if mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem_mib - reserved) / mem_mib, 3)


def _piecewise_sizes(max_tokens: int) -> list[int]:
    """SGLang 0.5.10's piecewise CUDA-graph capture sizes (_generate_piecewise_cuda_graph_tokens)."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


#: The first SGLang release that replays prompt steps from piecewise CUDA graphs by default
#: (sgl-project/sglang#16331; v0.5.10's release notes: "Piecewise CUDA Graph Enabled by Default").
SGLANG_PIECEWISE_SINCE = "0.5.10"


def sglang_piecewise_max_tokens(
    version: str | None,
    *,
    mla: bool,
    chunk: int,
    attention_dp: int = 1,
    speculative: bool = False,
    disaggregated: bool = False,
    linear_attention: bool = False,
) -> int:
    """The most tokens a step with a prompt replays from SGLang's piecewise CUDA graphs by
    default; 0: none (the step runs eagerly, kernel by kernel from Python).

    From `SGLANG_PIECEWISE_SINCE` (``version`` None: the newest tabulated, 0.5.10): 2,048 for an
    MLA model, else the chunk size (server_args.py ``piecewise_cuda_graph_max_tokens``: "for MLA
    backend ... we set the max tokens to 2048 by default"). ``_handle_piecewise_cuda_graph``
    (0.5.10.post1) turns them off with attention DP, speculative decoding (allowed again by
    sgl-project/sglang#22128, after 0.5.10.post1) and PD disaggregation, among conditions kvsim
    does not see (KernelCostConfig.piecewise_cuda_graph_max_tokens lists them). The hybrid
    linear-attention models SGLang serves run none either: Qwen3-Next's architecture is in
    ``piecewise_cuda_graph_disabled_model_archs`` and Qwen3.5's in ``multimodal_model_archs``
    (configs/model_config.py, 0.5.10.post1)."""
    if version is not None and parse_version(version) < parse_version(SGLANG_PIECEWISE_SINCE):
        return 0
    if attention_dp > 1 or speculative or disaggregated or linear_attention:
        return 0
    return 2048 if mla else chunk


def sglang_max_running_requests(pool_tokens: int, context_len: int) -> int:
    """SGLang's default max_running_requests for a KV pool of ``pool_tokens`` tokens."""
    estimated = max(min(int(pool_tokens / context_len * 512), 4096), 2048)
    return max(1, min(estimated, pool_tokens // 2))


def _sglang(
    table: str, engine: EngineConfig, gpu: GpuSpec | None, tp: int, model: ModelSpec | None
) -> dict[str, Any]:
    explicit = engine.model_fields_set
    chunk, graphs, fraction = sglang_memory_defaults(table, gpu, tp, mla=model is not None and model.is_mla)
    if "max_num_batched_tokens" in explicit and gpu is not None and _at_least(table, "0.5.3"):
        chunk = engine.max_num_batched_tokens  # mem_fraction_static follows the chunk size set
        fraction = sglang_mem_fraction(
            table, gpu.memory_bytes / _MIB, tp, chunk, graphs, mla=model is not None and model.is_mla
        )
    blackwell = gpu is not None and gpu.sm_version in (100, 103)
    return {
        "block_size": 64 if blackwell else 1,
        "max_num_seqs": 2048,  # replaced by the pool-sized default in resolve_engine when the model is known
        "max_num_batched_tokens": chunk,
        "enable_chunked_prefill": True,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": fraction,
        "activation_reserve_gib": 0.0,
    }


# -- TensorRT-LLM -----------------------------------------------------------------------


def _trtllm() -> dict[str, Any]:
    return {
        "block_size": 32,
        "max_num_seqs": 2048,
        "max_num_batched_tokens": 8192,
        "enable_chunked_prefill": False,
        "long_prefill_token_threshold": 0,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.9,
        "activation_reserve_gib": None,
    }


# -- resolution -------------------------------------------------------------------------


def backend_defaults(
    engine: EngineConfig,
    *,
    gpu: GpuSpec | None = None,
    tp: int = 1,
    model: ModelSpec | None = None,
) -> dict[str, Any]:
    """The backend's default for every knob in `DEFAULTED_KNOBS` (the engine's explicitly set
    knobs enter the rules that depend on them, e.g. SGLang's memory fraction on its chunk size)."""
    table = table_version(engine.backend, engine.backend_version)
    max_model_len = engine.max_model_len or (model.max_model_len if model is not None else None)
    if engine.backend == "vllm":
        return _vllm(table, engine, gpu, max_model_len)
    assert table is not None
    if engine.backend == "sglang":
        return _sglang(table, engine, gpu, tp, model)
    return _trtllm()


def resolve_engine(
    engine: EngineConfig,
    *,
    gpu: GpuSpec | None = None,
    tp: int = 1,
    model: ModelSpec | None = None,
    attention_dp: int = 1,
) -> EngineConfig:
    """``engine`` with every knob it leaves unset at its backend's default (``attention_dp``:
    the ranks of an instance sharing its experts, for the KV pool SGLang sizes from).

    The result keeps ``model_fields_set`` (what the user set), so resolving again, for
    another GPU, still knows which knobs are the user's. SGLang's max_running_requests
    depends on the KV pool, so it is sized last, once the memory knobs are known.
    """
    values = backend_defaults(engine, gpu=gpu, tp=tp, model=model)
    unset = {k: v for k, v in values.items() if k not in engine.model_fields_set}
    resolved = _with_values(engine, unset)
    if engine.backend == "sglang" and "max_num_seqs" in unset and gpu is not None and model is not None:
        from_pool = _sglang_pool_default(resolved, gpu, tp, model, attention_dp)
        if from_pool is not None:
            resolved = _with_values(resolved, {"max_num_seqs": from_pool})
    if (
        engine.backend == "sglang"
        and gpu is not None
        and model is not None
        and model.num_linear_attention_layers
    ):
        cap = _sglang_state_cap(resolved, gpu, tp, model, attention_dp)
        if cap is not None and cap < resolved.max_num_seqs:
            resolved = _with_values(resolved, {"max_num_seqs": cap})
    return resolved


def _sglang_state_cap(
    engine: EngineConfig, gpu: GpuSpec, tp: int, model: ModelSpec, attention_dp: int = 1
) -> int | None:
    """SGLang's cap on running requests of a linear-attention model, set or not: the state
    slots its pool holds over three, or all of them with prefix caching (the radix cache) off
    (`kvsim.model.kv_sizing.sglang_linear_max_running_requests`)."""
    from kvsim.model.kv_sizing import engine_kv_capacity, sglang_linear_max_running_requests

    try:
        cap = engine_kv_capacity(model, gpu, tp, engine, use_override=False, attention_dp=attention_dp)
    except ValueError:
        return None
    if cap.linear_state_pool_bytes_per_shard <= 0:
        return None  # does not fit: the scenario checks say so
    return sglang_linear_max_running_requests(
        model, tp, cap.linear_state_pool_bytes_per_shard, radix_cache=engine.enable_prefix_caching
    )


def _sglang_pool_default(
    engine: EngineConfig, gpu: GpuSpec, tp: int, model: ModelSpec, attention_dp: int = 1
) -> int | None:
    from kvsim.model.kv_sizing import engine_kv_capacity

    try:
        cap = engine_kv_capacity(model, gpu, tp, engine, use_override=False, attention_dp=attention_dp)
    except ValueError:
        return None
    pool = cap.num_blocks * cap.block_size
    if pool < 2:
        return None  # does not fit: the scenario checks say so
    return sglang_max_running_requests(pool, engine.max_model_len or model.max_model_len)


def _with_values(engine: EngineConfig, values: dict[str, Any]) -> EngineConfig:
    """A copy of ``engine`` with ``values`` written in, its record of set fields unchanged."""
    if all(getattr(engine, k) == v for k, v in values.items()):
        return engine
    copy = engine.model_copy()
    for key, value in values.items():
        object.__setattr__(copy, key, value)  # a resolved default, not a user's setting
    return copy
