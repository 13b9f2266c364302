"""Engine flags InferenceX / InferenceMAX launched each MoE single-node aggregated row with.

The rows of aiconfigurator-core's silicon_sample.csv that SemiAnalysis' InferenceX (earlier
InferenceMAX) measured on one node ran a launch script from SemiAnalysisAI/InferenceX; the script
sets engine flags that change TTFT and TPOT (SGLang's --scheduler-recv-interval, running-request
caps, chunk sizes; TensorRT-LLM's --max_num_tokens, batch waiting and attention-DP balancing;
vLLM's --max-num-seqs ...).
`launch_flags` returns those a kvsim engine has a knob for, for the script version in force when
the row was measured; `describe` says which script and commit that is.

How a row finds its script (all of it checked against the repository's history):

* name: ``<model>_<precision>_<gpu>[_trt]`` -- DeepSeek-R1/V3 -> dsr1, gpt-oss-120b -> gptoss,
  Kimi-K2.5 -> kimik2.5, MiniMax-M2.5 -> minimaxm2.5, Qwen3.5-397B -> qwen3.5, GLM-5 -> glm5;
  ``_trt`` for TensorRT-LLM. The plain name runs SGLang for dsr1 / qwen3.5 / glm5 and vLLM for
  gptoss / kimik2.5 / minimaxm2.5 (checked in every version below). GLM-5's fp4 script was
  ``glm5_nvfp4_b200.sh`` until 800f57aaf (2026-04-02).
* version: the content at the script's path on main (first-parent history) as of the row's
  measurement time: the ``measured=`` timestamp where the source gives a time of day, else the end
  (23:59:59 UTC) of the measured day (a date-only row takes the last commit of that day). The
  paths moved: ``benchmarks/<name>_docker.sh`` / ``_slurm.sh`` (until 2025-11/2026-01),
  ``benchmarks/<name>.sh``, ``benchmarks/single_node/<name>.sh`` (from 2026-02),
  ``benchmarks/single_node/fixed_seq_len/<name>.sh`` (later). Where a docker and a slurm twin
  both existed (different runners), they set the same engine flags at those commits.
* the image in the row's source (``image=...``) was checked to appear in the repository's
  ``.github/configs/nvidia-master.yaml`` at that commit for every row with an image.
* ``wip=True`` rows (2026-04-03, from unmerged branches): mapped only where the branch commit is
  in the snapshot and its config names the row's image (`WIP_RUNS`); the B300 ones are not (no
  B300 single-node script existed on any branch then) and give {}.
* GB200 rows labelled single-node (TP 36 / 72, 2025-11-16/17) ran the Dynamo scripts
  (benchmarks/dsr1_fp*_gb200_dynamo-*), not a single-node launch script: {}.

Only versions that measured rows use are transcribed; a row in force of another version gives {}.
Keys (kvsim's names): max_num_seqs, max_num_batched_tokens, gpu_memory_utilization,
enable_prefix_caching, scheduler_recv_interval, batch_wait_timeout_iters,
batch_wait_max_tokens_ratio, attention_dp_balance (TensorRT-LLM's attention_dp_config with
enable_balance, on rows with attention DP), cuda_graph_max_size (vLLM's largest CUDA-graph
capture size, a kernels cost-model knob `benchmarks/silicon.py` moves there) -- present only
where the script sets the flag. The KV cache's dtype, which every script fixes one way or the
other (passed, or left to the checkpoint), is `launch_kv_cache_dtype`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

REPO = "SemiAnalysisAI/InferenceX"
HARNESSES = ("inferencex-single-node", "inferencemax-single-node")
MODEL_KEY = {
    "deepseek-ai/DeepSeek-R1": "dsr1",
    "deepseek-ai/DeepSeek-V3": "dsr1",
    "openai/gpt-oss-120b": "gptoss",
    "moonshotai/Kimi-K2.5": "kimik2.5",
    "MiniMaxAI/MiniMax-M2.5": "minimaxm2.5",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5",
    "zhipuai/GLM-5": "glm5",
}
#: The engine the plain (suffix-less) script name runs, per model key.
PLAIN_ENGINE = {"dsr1": "sglang", "qwen3.5": "sglang", "glm5": "sglang",
                "gptoss": "vllm", "kimik2.5": "vllm", "minimaxm2.5": "vllm"}  # fmt: skip


@dataclass(frozen=True)
class Ctx:
    """What the scripts branch on: the row's shape and the benchmark concurrency."""

    isl: int
    osl: int
    tp: int
    ep: int
    dp_attention: bool
    conc: int


Rule = Callable[[Ctx], dict[str, Any]]


@dataclass(frozen=True)
class Version:
    """One script content on main: in force from ``since`` (commit ``commit``) until ``until``."""

    script: str
    path: str
    commit: str
    since: str
    until: str | None
    rule: Rule
    other: str = ""


# ---------------------------------------------------------------------------------------------
# Shell arithmetic and the rules (one small function per script family; `c` is the row's Ctx).


def _trt_tokens(c: Ctx, floor: int = 0) -> int:
    """MAX_NUM_TOKENS=$(( ($CONC+$ISL+64+63)/64*64 )), then (from 2026-01) max with 8192."""
    return max((c.conc + c.isl + 64 + 63) // 64 * 64, floor)


def _sri(c: Ctx) -> int:
    """if [[ $CONC -ge 16 ]]; SCHEDULER_RECV_INTERVAL=30 else 10."""
    return 30 if c.conc >= 16 else 10


def sgl(max_seqs: int | None, chunk: int | None, mem: float | None, *, radix_off: bool = True,
        sri: int | Callable[[Ctx], int] | None = None, seqs_conc: bool = False) -> Rule:  # fmt: skip
    """SGLang: --max-running-requests (or $CONC), --chunked-prefill-size, --mem-fraction-static,
    --disable-radix-cache, --scheduler-recv-interval."""

    def rule(c: Ctx) -> dict[str, Any]:
        f: dict[str, Any] = {}
        if seqs_conc:
            f["max_num_seqs"] = c.conc
        elif max_seqs is not None:
            f["max_num_seqs"] = max_seqs
        if chunk is not None:
            f["max_num_batched_tokens"] = chunk
        if mem is not None:
            f["gpu_memory_utilization"] = mem
        if radix_off:
            f["enable_prefix_caching"] = False
        if sri is not None:
            f["scheduler_recv_interval"] = sri(c) if callable(sri) else sri
        return f

    return rule


def dsr1_fp8_b200_tp(c: Ctx) -> dict[str, Any]:
    """dsr1_fp8_b200.sh / _b300.sh from 2026-03: TP 8 as before; TP 4 (8k/1k only) smaller."""
    if c.tp == 8:
        return sgl(128, 32768, 0.82, sri=_sri)(c)
    if c.tp == 4 and (c.isl, c.osl) == (8192, 1024):
        return sgl(32, 8192, 0.95, sri=10)(c)
    return {}  # the script exits ("TP=4 not yet supported", "Unrecognized TP size")


def dsr1_fp8_h200_sgl(c: Ctx) -> dict[str, Any]:
    """dsr1_fp8_h200.sh: --max-running-requests 512 at 1k/1k, 256 otherwise."""
    return sgl(512 if (c.isl, c.osl) == (1024, 1024) else 256, 32768, 0.82)(c)


#: attention_dp_config the TensorRT-LLM scripts write when DP_ATTENTION is true: DeepSeek-R1's
#: (dsr1_*_trt*.sh) batching_wait_iters 0, enable_balance, timeout_iters 60; gpt-oss-120b's
#: (gptoss_fp4_b200_trt*.sh) enable_balance alone, at TensorRT-LLM's defaults (50, 10).
_DSR1_BALANCE = {"timeout_iters": 60, "batching_wait_iters": 0}
_GPTOSS_BALANCE: dict[str, int] = {}


def trt(mem: float, *, floor: int = 0, tokens: int | None = None, batch: int | None = None,
        batch_conc: bool = False, balance: dict[str, int] | None = None) -> Rule:  # fmt: skip
    """TensorRT-LLM: --max_num_tokens (formula or fixed), free_gpu_memory_fraction,
    enable_block_reuse: false, --max_batch_size (fixed or $CONC), attention_dp_config's
    balancing (``balance``) with attention DP."""

    def rule(c: Ctx) -> dict[str, Any]:
        f: dict[str, Any] = {
            "max_num_batched_tokens": tokens if tokens is not None else _trt_tokens(c, floor),
            "gpu_memory_utilization": mem,
            "enable_prefix_caching": False,
        }
        if batch_conc:
            f["max_num_seqs"] = c.conc
        elif batch is not None:
            f["max_num_seqs"] = batch
        if balance is not None and c.dp_attention:
            f["attention_dp_balance"] = dict(balance)
        return f

    return rule


def dsr1_fp8_b200_trt_jan(c: Ctx) -> dict[str, Any]:
    """dsr1_fp8_b200_trt.sh at ec7bafaae: KV fraction 0.7 at 1k/8k C>=256, 0.75 at 8k/1k TP 4;
    DELAY_BATCHING (batch_wait_timeout_iters 40, batch_wait_max_tokens_ratio 0.8) at 1k/1k C>=64."""
    mem = 0.8
    if (c.isl, c.osl) == (1024, 8192) and c.conc >= 256:
        mem = 0.7
    elif (c.isl, c.osl) == (8192, 1024) and c.tp == 4:
        mem = 0.75
    f = trt(mem, floor=8192, balance=_DSR1_BALANCE)(c)
    if (c.isl, c.osl) == (1024, 1024) and c.conc >= 64:
        f["batch_wait_timeout_iters"] = 40
        f["batch_wait_max_tokens_ratio"] = 0.8
    return f


def vllm(max_seqs: int | None = None, *, seqs_conc: bool = False, batched: int | None = None,
         batched_2isl: bool = False, gmu: float | None = None, prefix_off: bool = False,
         capture: int | None = None) -> Rule:  # fmt: skip
    """vLLM: --max-num-seqs (fixed or $CONC), --max-num-batched-tokens (fixed or $((ISL * 2))),
    --gpu-memory-utilization, --no-enable-prefix-caching, --max-cudagraph-capture-size (or the
    older --cuda-graph-sizes N: its largest size)."""

    def rule(c: Ctx) -> dict[str, Any]:
        f: dict[str, Any] = {}
        if seqs_conc:
            f["max_num_seqs"] = c.conc
        elif max_seqs is not None:
            f["max_num_seqs"] = max_seqs
        if batched_2isl:
            f["max_num_batched_tokens"] = c.isl * 2
        elif batched is not None:
            f["max_num_batched_tokens"] = batched
        if gmu is not None:
            f["gpu_memory_utilization"] = gmu
        if prefix_off:
            f["enable_prefix_caching"] = False
        if capture is not None:
            f["cuda_graph_max_size"] = capture
        return f

    return rule


# ---------------------------------------------------------------------------------------------
# The table: every script version a measured row falls in. `since` / `until`: the main commits
# (first-parent) that put this content at `path` and next changed it (commit time, UTC offset as
# committed). `other`: flags and env the script sets that kvsim has no knob for.

B = "benchmarks/"
SN = "benchmarks/single_node/"
_SGL_DSR1_FP4 = ("cuda-graph-max-bs 256; stream-interval 10; fp8 KV; trtllm_mla attention; flashinfer_trtllm "
                 "MoE; enable-symm-mem; flashinfer allreduce fusion; ep-size $EP_SIZE")  # fmt: skip
_SGL_DSR1_FP8 = ("max-prefill-tokens 32768; cuda-graph-max-bs 128; stream-interval 30; fp8 KV; trtllm_mla; "
                 "flashinfer_trtllm MoE; allreduce fusion; SGL_ENABLE_JIT_DEEPGEMM=false, "
                 "SGLANG_ENABLE_FLASHINFER_GEMM=true")  # fmt: skip
_SGL_QWEN = ("max-prefill-tokens 32768; cuda-graph-max-bs $CONC; stream-interval 30; tokenizer-worker-num 6; "
             "trtllm_mha; flashinfer_trtllm MoE; NCCL_NVLS_ENABLE=1; context-length ISL+OSL+20")  # fmt: skip
_TRT_DSR1 = "stream_interval 10; cuda_graph max_batch_size {cg}; fp8 KV; moe backend {moe}"
_TRT_GPTOSS = ("stream_interval 20; num_postprocess_workers 4; cuda_graph max_batch_size $CONC; "
               "TRTLLM_ENABLE_PDL=1")  # fmt: skip
_VLLM_GPTOSS = "fp8 KV (B200)"

VERSIONS: tuple[Version, ...] = (
    # --- DeepSeek-R1 / V3, SGLang ---------------------------------------------------------
    Version(
        "dsr1_fp4_b200",
        B + "dsr1_fp4_b200_docker.sh",
        "4b860b78e",
        "2025-10-01T15:18:14-05:00",
        "2025-11-10T14:55:00-05:00",
        sgl(256, 16384, 0.85, sri=_sri),
        _SGL_DSR1_FP4.replace("ep-size $EP_SIZE", "enable-ep-moe"),
    ),
    Version(
        "dsr1_fp4_b200",
        B + "dsr1_fp4_b200_docker.sh",
        "d8fe8f73e",
        "2025-11-10T14:55:00-05:00",
        "2025-11-21T15:44:54-06:00",
        sgl(256, 16384, 0.85, sri=_sri),
        _SGL_DSR1_FP4,
    ),
    Version(
        "dsr1_fp4_b200",
        SN + "dsr1_fp4_b200.sh",
        "64c20b6b5",
        "2026-03-11T16:28:08-04:00",
        "2026-03-27T23:38:24-07:00",
        sgl(256, 16384, 0.85, sri=_sri),
        _SGL_DSR1_FP4,
    ),
    Version(
        "dsr1_fp4_b300",
        SN + "dsr1_fp4_b300.sh",
        "9ebeafb4e",
        "2026-04-17T04:18:11-04:00",
        "2026-05-12T14:13:22-05:00",
        sgl(256, 16384, 0.85, sri=_sri),
        _SGL_DSR1_FP4,
    ),
    Version(
        "dsr1_fp8_b200",
        B + "dsr1_fp8_b200_docker.sh",
        "d8fe8f73e",
        "2025-11-10T14:55:00-05:00",
        "2025-11-21T15:44:54-06:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_DSR1_FP8,
    ),
    Version(
        "dsr1_fp8_b200",
        B + "dsr1_fp8_b200_docker.sh (slurm twin: same flags)",
        "d22bf9ca9",
        "2025-11-21T15:44:54-06:00",
        "2026-01-12T20:32:21+00:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_DSR1_FP8,
    ),
    Version(
        "dsr1_fp8_b200",
        SN + "dsr1_fp8_b200.sh",
        "64c20b6b5",
        "2026-03-11T16:28:08-04:00",
        "2026-03-27T23:38:24-07:00",
        dsr1_fp8_b200_tp,
        _SGL_DSR1_FP8 + "; TP 4: cuda-graph-max-bs 32",
    ),
    Version(
        "dsr1_fp8_b300",
        SN + "dsr1_fp8_b300.sh",
        "5b302f147",
        "2026-04-17T05:57:40-04:00",
        "2026-05-12T14:13:22-05:00",
        dsr1_fp8_b200_tp,
        _SGL_DSR1_FP8 + "; TP 4: cuda-graph-max-bs 32",
    ),
    Version(
        "dsr1_fp8_h200",
        SN + "dsr1_fp8_h200.sh",
        "41aff0afc",
        "2026-03-06T20:11:15-05:00",
        "2026-03-27T23:38:24-07:00",
        dsr1_fp8_h200_sgl,
        "max-prefill-tokens 32768; cuda-graph-max-bs = max-running-requests; stream-interval 10; "
        "flashinfer attention; decode-log-interval 1; no scheduler-recv-interval",
    ),
    # --- DeepSeek-R1 / V3, TensorRT-LLM ---------------------------------------------------
    Version(
        "dsr1_fp4_b200_trt",
        B + "dsr1_fp4_b200_trt_slurm.sh",
        "9596d23d7",
        "2025-10-29T17:37:58-05:00",
        "2025-11-03T12:05:50-06:00",
        trt(0.8, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=512, moe="TRTLLM, CUTLASS with DP") + "; the script sets EP_SIZE / "
        "DP_ATTENTION itself from TP, ISL/OSL and CONC",
    ),
    Version(
        "dsr1_fp4_b200_trt",
        B + "dsr1_fp4_b200_trt_slurm.sh",
        "d22bf9ca9",
        "2025-11-21T15:44:54-06:00",
        "2026-01-12T20:32:21+00:00",
        trt(0.8, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=512, moe="TRTLLM or CUTLASS by C"),
    ),
    Version(
        "dsr1_fp4_b200_trt",
        B + "dsr1_fp4_b200_trt_slurm.sh",
        "2ee1e0018",
        "2026-01-12T20:32:21+00:00",
        "2026-01-21T15:05:08-08:00",
        trt(0.8, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=512, moe="TRTLLM or CUTLASS by C"),
    ),
    Version(
        "dsr1_fp4_b200_trt",
        B + "dsr1_fp4_b200_trt.sh",
        "6eecc0e66",
        "2026-02-03T09:34:14-08:00",
        "2026-02-19T14:06:23-08:00",
        trt(0.8, floor=8192, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg="$CONC ($CONC/4 with DP)", moe="TRTLLM, CUTLASS with DP")
        + "; piecewise CUDA graphs at 1k/1k TP 8 EP 8",
    ),
    Version(
        "dsr1_fp8_b200_trt",
        B + "dsr1_fp8_b200_trt_slurm.sh",
        "9596d23d7",
        "2025-10-29T17:37:58-05:00",
        "2025-11-03T12:05:50-06:00",
        trt(0.8, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=256, moe="DEEPGEMM") + "; the script sets EP_SIZE=TP and DP_ATTENTION by C",
    ),
    Version(
        "dsr1_fp8_b200_trt",
        B + "dsr1_fp8_b200_trt_slurm.sh",
        "d22bf9ca9",
        "2025-11-21T15:44:54-06:00",
        "2026-01-12T20:32:21+00:00",
        trt(0.8, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=256, moe="DEEPGEMM"),
    ),
    Version(
        "dsr1_fp8_b200_trt",
        B + "dsr1_fp8_b200_trt_slurm.sh",
        "2ee1e0018",
        "2026-01-12T20:32:21+00:00",
        "2026-01-21T15:05:08-08:00",
        trt(0.8, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=256, moe="DEEPGEMM"),
    ),
    Version(
        "dsr1_fp8_b200_trt",
        B + "dsr1_fp8_b200_trt.sh",
        "ec7bafaae",
        "2026-01-29T15:27:25+00:00",
        "2026-02-19T14:06:23-08:00",
        dsr1_fp8_b200_trt_jan,
        _TRT_DSR1.format(cg="$CONC ($CONC/8 at 1k/8k C>=256)", moe="TRTLLM (DEEPGEMM at 1k/8k C>=256)")
        + "; piecewise CUDA graphs at 1k/1k C>=64, 1k/8k C 128-255, 8k/1k C>=64; TLLM_OVERRIDE_LAYER_NUM=61",
    ),
    Version(
        "dsr1_fp8_h200_trt",
        B + "dsr1_fp8_h200_trt_slurm.sh",
        "9596d23d7",
        "2025-10-29T17:37:58-05:00",
        "2025-11-03T12:05:50-06:00",
        trt(0.75, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=128, moe="CUTLASS") + "; the script sets EP_SIZE=TP and DP_ATTENTION by C",
    ),
    Version(
        "dsr1_fp8_h200_trt",
        B + "dsr1_fp8_h200_trt_slurm.sh",
        "d22bf9ca9",
        "2025-11-21T15:44:54-06:00",
        "2026-01-12T20:32:21+00:00",
        trt(0.75, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=128, moe="CUTLASS"),
    ),
    Version(
        "dsr1_fp8_h200_trt",
        B + "dsr1_fp8_h200_trt_slurm.sh",
        "2ee1e0018",
        "2026-01-12T20:32:21+00:00",
        "2026-01-21T15:05:08-08:00",
        trt(0.75, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=128, moe="CUTLASS"),
    ),
    Version(
        "dsr1_fp8_h200_trt",
        B + "dsr1_fp8_h200_trt.sh",
        "b30c3398a",
        "2026-01-27T21:37:42+00:00",
        "2026-02-19T14:06:23-08:00",
        trt(0.75, floor=8192, balance=_DSR1_BALANCE),
        _TRT_DSR1.format(cg=128, moe="CUTLASS"),
    ),
    # --- gpt-oss-120b, TensorRT-LLM -------------------------------------------------------
    Version(
        "gptoss_fp4_b200_trt",
        B + "gptoss_fp4_b200_trt_slurm.sh",
        "ac1998a50",
        "2025-10-20T19:08:25-04:00",
        "2025-11-03T12:05:50-06:00",
        trt(0.85, tokens=20000, batch=512, balance=_GPTOSS_BALANCE),
        _TRT_GPTOSS + "; the script sets EP_SIZE=TP and DP_ATTENTION at C>=256; NCCL_GRAPH_REGISTER=0",
    ),
    Version(
        "gptoss_fp4_b200_trt",
        B + "gptoss_fp4_b200_trt_slurm.sh",
        "17d5e204f",
        "2025-11-03T12:05:50-06:00",
        "2025-11-21T15:44:54-06:00",
        trt(0.85, tokens=20000, batch=512, balance=_GPTOSS_BALANCE),
        _TRT_GPTOSS + "; NCCL_GRAPH_REGISTER=0",
    ),
    Version(
        "gptoss_fp4_b200_trt",
        B + "gptoss_fp4_b200_trt_slurm.sh",
        "06667a51e",
        "2025-12-02T17:01:04-06:00",
        "2026-01-07T15:36:40+00:00",
        trt(0.85, tokens=20000, batch=512, balance=_GPTOSS_BALANCE),
        _TRT_GPTOSS + "; with DP: TRTLLM_MOE_ALLTOALL_BACKEND=mnnvlthroughput",
    ),
    Version(
        "gptoss_fp4_b200_trt",
        B + "gptoss_fp4_b200_trt_docker.sh (slurm twin: same flags)",
        "156fef3fc",
        "2025-12-17T09:55:29-06:00",
        "2026-01-12T20:32:21+00:00",
        trt(0.85, tokens=20000, batch=512, balance=_GPTOSS_BALANCE),
        _TRT_GPTOSS + "; NCCL_GRAPH_REGISTER=0 (docker)",
    ),
    Version(
        "gptoss_fp4_b200_trt",
        B + "gptoss_fp4_b200_trt.sh",
        "b30c3398a",
        "2026-01-27T21:37:42+00:00",
        "2026-02-19T14:06:23-08:00",
        trt(0.85, tokens=20000, batch=512, balance=_GPTOSS_BALANCE),
        _TRT_GPTOSS,
    ),
    Version(
        "gptoss_fp4_h200_trt",
        B + "gptoss_fp4_h200_trt_slurm.sh",
        "9596d23d7",
        "2025-10-29T17:37:58-05:00",
        "2025-11-03T12:05:50-06:00",
        trt(0.85, tokens=20000, batch_conc=True),
        _TRT_GPTOSS + "; TRITON MoE; ep_size=$TP; no attention DP",
    ),
    Version(
        "gptoss_fp4_h200_trt",
        B + "gptoss_fp4_h200_trt_slurm.sh",
        "d22bf9ca9",
        "2025-11-21T15:44:54-06:00",
        "2026-01-12T20:32:21+00:00",
        trt(0.85, tokens=20000, batch_conc=True),
        _TRT_GPTOSS + "; TRITON MoE",
    ),
    Version(
        "gptoss_fp4_h200_trt",
        B + "gptoss_fp4_h200_trt.sh",
        "e28c038f8",
        "2026-01-27T22:18:41-08:00",
        "2026-02-19T14:06:23-08:00",
        trt(0.85, tokens=20000, batch_conc=True),
        _TRT_GPTOSS + "; TRITON MoE",
    ),
    # --- gpt-oss-120b, vLLM ---------------------------------------------------------------
    Version(
        "gptoss_fp4_b200",
        B + "gptoss_fp4_b200_docker.sh",
        "4b860b78e",
        "2025-10-01T15:18:14-05:00",
        "2025-11-21T15:44:54-06:00",
        vllm(512, batched=8192, gmu=0.9, prefix_off=True, capture=2048),
        _VLLM_GPTOSS + "; async-scheduling; VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1; FULL_AND_PIECEWISE graphs",
    ),
    Version(
        "gptoss_fp4_b200",
        SN + "gptoss_fp4_b200.sh",
        "d2c2acb19",
        "2026-02-25T13:02:08-06:00",
        "2026-03-11T16:28:08-04:00",
        vllm(512, batched=8192, gmu=0.9, prefix_off=True, capture=2048),
        _VLLM_GPTOSS + "; VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1",
    ),
    Version(
        "gptoss_fp4_h100",
        B + "gptoss_fp4_h100_docker.sh (slurm twin: same flags)",
        "af4ccd03f",
        "2025-09-23T15:29:20-04:00",
        "2025-11-04T10:27:55-05:00",
        vllm(seqs_conc=True, batched=8192, gmu=0.9, prefix_off=True, capture=2048),
        "async-scheduling",
    ),
    Version(
        "gptoss_fp4_h100",
        B + "gptoss_fp4_h100_docker.sh (slurm twin: same flags)",
        "25506e87c",
        "2025-12-05T15:49:06-06:00",
        "2025-12-08T16:20:13-06:00",
        vllm(seqs_conc=True, batched=8192, gmu=0.9, prefix_off=True),
        "async-scheduling",
    ),
    Version(
        "gptoss_fp4_h100",
        B + "gptoss_fp4_h100_docker.sh (slurm twin: same flags)",
        "4e135fd3f",
        "2025-12-08T16:20:13-06:00",
        "2026-01-02T22:24:06+00:00",
        vllm(seqs_conc=True, batched=8192, gmu=0.9, prefix_off=True),
        "async-scheduling",
    ),
    Version(
        "gptoss_fp4_h100",
        SN + "gptoss_fp4_h100.sh",
        "cec542a9a",
        "2026-03-27T04:01:48-04:00",
        "2026-03-27T23:38:24-07:00",
        vllm(seqs_conc=True, batched=8192, gmu=0.9, prefix_off=True, capture=2048),
        "VLLM_MXFP4_USE_MARLIN=1",
    ),
    Version(
        "gptoss_fp4_h200",
        B + "gptoss_fp4_h200_slurm.sh",
        "9596d23d7",
        "2025-10-29T17:37:58-05:00",
        "2025-11-04T10:27:55-05:00",
        vllm(seqs_conc=True, batched=8192, gmu=0.9, prefix_off=True, capture=2048),
        "async-scheduling",
    ),
    Version(
        "gptoss_fp4_h200",
        SN + "gptoss_fp4_h200.sh",
        "cec542a9a",
        "2026-03-27T04:01:48-04:00",
        "2026-03-27T23:38:24-07:00",
        vllm(seqs_conc=True, batched=8192, gmu=0.9, prefix_off=True, capture=2048),
        "VLLM_MXFP4_USE_MARLIN=1",
    ),
    # --- Kimi-K2.5, vLLM ------------------------------------------------------------------
    Version(
        "kimik2.5_fp4_b200",
        SN + "kimik2.5_fp4_b200.sh",
        "a58dedd5a",
        "2026-03-11T11:59:36-05:00",
        "2026-03-11T16:28:08-04:00",
        vllm(seqs_conc=True, gmu=0.90),
        "fuse_allreduce_rms",
    ),
    Version(
        "kimik2.5_fp4_b200",
        SN + "kimik2.5_fp4_b200.sh",
        "79a42e20a",
        "2026-03-27T15:21:53-07:00",
        "2026-03-27T23:38:24-07:00",
        vllm(seqs_conc=True, gmu=0.90, prefix_off=True),
        "fuse_allreduce_rms",
    ),
    Version(
        "kimik2.5_fp4_b200",
        SN + "kimik2.5_fp4_b200.sh",
        "6c3acebfa",
        "2026-04-20T09:22:32-05:00",
        "2026-05-12T14:13:22-05:00",
        vllm(seqs_conc=True, batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; fp8 KV; fuse_allreduce_rms",
    ),
    Version(
        "kimik2.5_fp4_b300",
        SN + "kimik2.5_fp4_b300.sh",
        "f34a83b25",
        "2026-04-20T19:22:50-04:00",
        "2026-05-12T14:13:22-05:00",
        vllm(seqs_conc=True, gmu=0.90, prefix_off=True),
        "fuse_allreduce_rms",
    ),
    Version(
        "kimik2.5_int4_b200",
        SN + "kimik2.5_int4_b200.sh",
        "79ea3651a",
        "2026-03-24T13:03:05-07:00",
        "2026-03-27T23:38:24-07:00",
        vllm(seqs_conc=True, gmu=0.95, prefix_off=True),
        "VLLM_USE_FLASHINFER_MOE_INT4=1; fuse_allreduce_rms",
    ),
    Version(
        "kimik2.5_int4_h200",
        SN + "kimik2.5_int4_h200.sh",
        "749096c4c",
        "2026-03-02T18:25:01-05:00",
        "2026-03-11T16:28:08-04:00",
        vllm(seqs_conc=True, gmu=0.95),
        "fuse_allreduce_rms",
    ),
    Version(
        "kimik2.5_int4_h200",
        SN + "kimik2.5_int4_h200.sh",
        "79a42e20a",
        "2026-03-27T15:21:53-07:00",
        "2026-03-27T23:38:24-07:00",
        vllm(seqs_conc=True, gmu=0.95, prefix_off=True),
        "fuse_allreduce_rms",
    ),
    # --- MiniMax-M2.5, vLLM ---------------------------------------------------------------
    Version(
        "minimaxm2.5_fp4_b200",
        SN + "minimaxm2.5_fp4_b200.sh",
        "79bd988e9",
        "2026-04-08T13:55:08-05:00",
        "2026-04-21T21:01:04-07:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; fp8 KV; DP attention: --data-parallel-size=$TP",
    ),
    Version(
        "minimaxm2.5_fp4_b200",
        SN + "minimaxm2.5_fp4_b200.sh",
        "13962fcfa",
        "2026-04-21T21:01:04-07:00",
        "2026-05-12T14:13:22-05:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; fp8 KV; VLLM_FLOAT32_MATMUL_PRECISION=high",
    ),
    Version(
        "minimaxm2.5_fp4_b300",
        SN + "minimaxm2.5_fp4_b300.sh",
        "22d0f12f7",
        "2026-04-17T08:43:53-04:00",
        "2026-04-21T15:46:19-07:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; fp8 KV",
    ),
    Version(
        "minimaxm2.5_fp4_b300",
        SN + "minimaxm2.5_fp4_b300.sh",
        "633fd2377",
        "2026-04-21T15:46:19-07:00",
        "2026-05-12T14:13:22-05:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; fp8 KV; VLLM_FLOAT32_MATMUL_PRECISION=high",
    ),
    Version(
        "minimaxm2.5_fp8_b200",
        SN + "minimaxm2.5_fp8_b200.sh",
        "f342df18e",
        "2026-03-11T11:39:27-07:00",
        "2026-03-11T16:28:08-04:00",
        vllm(gmu=0.95),
        "block-size 32",
    ),
    Version(
        "minimaxm2.5_fp8_b200",
        SN + "minimaxm2.5_fp8_b200.sh",
        "626932a11",
        "2026-03-27T23:38:24-07:00",
        "2026-04-03T11:31:35-05:00",
        vllm(gmu=0.95, prefix_off=True),
        "block-size 32; expert parallel always on (`-ge 1`); VLLM_MOE_USE_DEEP_GEMM=0, VLLM_USE_FLASHINFER_MOE_FP8=0",
    ),
    Version(
        "minimaxm2.5_fp8_b200",
        SN + "minimaxm2.5_fp8_b200.sh",
        "bddbf4031",
        "2026-04-03T11:31:35-05:00",
        "2026-04-21T17:00:33-07:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; block-size 32; fp8 KV; VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl",
    ),
    Version(
        "minimaxm2.5_fp8_b200",
        SN + "minimaxm2.5_fp8_b200.sh",
        "41ed82dc1",
        "2026-04-21T17:00:33-07:00",
        "2026-05-12T14:13:22-05:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; block-size 32; fp8 KV; VLLM_FLOAT32_MATMUL_PRECISION=high",
    ),
    Version(
        "minimaxm2.5_fp8_b300",
        SN + "minimaxm2.5_fp8_b300.sh",
        "340d7854c",
        "2026-04-17T08:47:21-04:00",
        "2026-04-21T15:41:34-07:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; block-size 32; fp8 KV",
    ),
    Version(
        "minimaxm2.5_fp8_b300",
        SN + "minimaxm2.5_fp8_b300.sh",
        "0c2467c15",
        "2026-04-21T15:41:34-07:00",
        "2026-05-12T14:13:22-05:00",
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; block-size 32; fp8 KV",
    ),
    Version(
        "minimaxm2.5_fp8_h100",
        SN + "minimaxm2.5_fp8_h100.sh",
        "1d5cae141",
        "2026-03-27T03:59:46-04:00",
        "2026-03-27T19:17:39-07:00",
        vllm(256, gmu=0.90),
        "cudagraph_mode PIECEWISE",
    ),
    Version(
        "minimaxm2.5_fp8_h100",
        SN + "minimaxm2.5_fp8_h100.sh",
        "626932a11",
        "2026-03-27T23:38:24-07:00",
        "2026-05-12T14:13:22-05:00",
        vllm(256, gmu=0.90, prefix_off=True),
        "cudagraph_mode PIECEWISE",
    ),
    Version(
        "minimaxm2.5_fp8_h200",
        SN + "minimaxm2.5_fp8_h200.sh",
        "a36346339",
        "2026-03-01T15:34:03-05:00",
        "2026-03-11T16:28:08-04:00",
        vllm(gmu=0.95),
    ),
    Version(
        "minimaxm2.5_fp8_h200",
        SN + "minimaxm2.5_fp8_h200.sh",
        "1d5cae141",
        "2026-03-27T03:59:46-04:00",
        "2026-03-27T19:17:39-07:00",
        vllm(gmu=0.95),
        "expert parallel always on (`-ge 1`)",
    ),
    Version(
        "minimaxm2.5_fp8_h200",
        SN + "minimaxm2.5_fp8_h200.sh",
        "626932a11",
        "2026-03-27T23:38:24-07:00",
        "2026-05-12T14:13:22-05:00",
        vllm(gmu=0.95, prefix_off=True),
        "expert parallel always on (`-ge 1`)",
    ),
    # --- Qwen3.5-397B, SGLang -------------------------------------------------------------
    Version(
        "qwen3.5_bf16_b200",
        SN + "qwen3.5_bf16_b200.sh",
        "9dc87a68c",
        "2026-02-20T00:32:41-05:00",
        "2026-02-22T17:15:26-05:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_QWEN + "; allreduce fusion",
    ),
    Version(
        "qwen3.5_bf16_b200",
        SN + "qwen3.5_bf16_b200.sh",
        "c21776093",
        "2026-02-22T17:15:26-05:00",
        "2026-03-11T16:28:08-04:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_QWEN + "; allreduce fusion",
    ),
    Version(
        "qwen3.5_bf16_b300",
        SN + "qwen3.5_bf16_b300.sh",
        "32274d6c1",
        "2026-04-17T21:52:29-04:00",
        "2026-05-12T14:13:22-05:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_QWEN + "; allreduce fusion",
    ),
    Version(
        "qwen3.5_fp4_b200",
        SN + "qwen3.5_fp4_b200.sh",
        "48d35c480",
        "2026-04-08T14:51:33-05:00",
        "2026-05-01T14:03:14-07:00",
        sgl(128, 32768, 0.85, sri=_sri),
        _SGL_QWEN + "; allreduce fusion at TP 8",
    ),
    Version(
        "qwen3.5_fp4_b300",
        SN + "qwen3.5_fp4_b300.sh",
        "8acbd08b7",
        "2026-04-17T21:22:10-04:00",
        "2026-05-12T14:13:22-05:00",
        sgl(128, 32768, 0.8, sri=_sri),
        _SGL_QWEN + "; allreduce fusion at TP 8; mamba-scheduler-strategy no_buffer",
    ),
    Version(
        "qwen3.5_fp8_b200",
        SN + "qwen3.5_fp8_b200.sh",
        "efd49e50b",
        "2026-03-03T09:20:50-08:00",
        "2026-03-11T16:28:08-04:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_QWEN,
    ),
    Version(
        "qwen3.5_fp8_b200",
        SN + "qwen3.5_fp8_b200.sh",
        "64c20b6b5",
        "2026-03-11T16:28:08-04:00",
        "2026-03-23T17:52:18-07:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_QWEN,
    ),
    Version(
        "qwen3.5_fp8_b200",
        SN + "qwen3.5_fp8_b200.sh",
        "6a5dad463",
        "2026-03-23T17:52:18-07:00",
        "2026-03-27T23:38:24-07:00",
        sgl(128, 32768, 0.82, sri=_sri),
        _SGL_QWEN + "; allreduce fusion at TP 8",
    ),
    Version(
        "qwen3.5_fp8_b300",
        SN + "qwen3.5_fp8_b300.sh",
        "c0f62a2ef",
        "2026-04-17T03:20:01-04:00",
        "2026-05-21T15:45:26-07:00",
        sgl(None, 16384, 0.8, sri=10, seqs_conc=True),
        "max-prefill-tokens 16384; cuda-graph-max-bs $CONC; stream-interval 50; enable-symm-mem; "
        "tokenizer-worker-num 6; trtllm_mha; flashinfer_trtllm MoE",
    ),
    Version(
        "qwen3.5_fp8_h200",
        SN + "qwen3.5_fp8_h200.sh",
        "f65d6b4b1",
        "2026-03-04T10:52:58-08:00",
        "2026-03-11T16:28:08-04:00",
        sgl(128, 16384, 0.8),
        "cuda-graph-max-bs $CONC; stream-interval 50; flashinfer attention; allreduce fusion; "
        "tokenizer-worker-num 6; no scheduler-recv-interval",
    ),
    # --- GLM-5, SGLang --------------------------------------------------------------------
    Version(
        "glm5_fp4_b200",
        SN + "glm5_nvfp4_b200.sh",
        "d43805fc3",
        "2026-03-28T23:54:25-04:00",
        "2026-04-02T14:23:08-07:00",
        sgl(None, 131072, 0.80, radix_off=False, seqs_conc=True),
        "cuda-graph-max-bs $CONC; stream-interval 30; radix cache left on (engine default)",
    ),
    Version(
        "glm5_fp8_b200",
        SN + "glm5_fp8_b200.sh",
        "13930ca61",
        "2026-03-20T10:45:21-07:00",
        "2026-03-27T23:38:24-07:00",
        sgl(None, 32768, 0.85, seqs_conc=True),
        "max-prefill-tokens 32768; cuda-graph-max-bs $CONC; stream-interval 30; nsa attention (trtllm "
        "decode/prefill); flashinfer_trtllm MoE; allreduce fusion; SGL_ENABLE_JIT_DEEPGEMM=1",
    ),
    Version(
        "glm5_fp8_h200",
        SN + "glm5_fp8_h200.sh",
        "ebb48d4bc",
        "2026-03-18T23:26:37-07:00",
        "2026-03-27T23:38:24-07:00",
        sgl(None, None, 0.85, radix_off=False),
        "only --tp-size and --mem-fraction-static 0.85: every other flag is SGLang's default",
    ),
)

#: wip=True rows (2026-04-03) measured from a branch before the script reached main: the branch
#: commit, found in the snapshot, whose .github/configs/nvidia-master.yaml names the row's image.
WIP_RUNS: dict[tuple[str, str], Version] = {
    # PR #947's branch: beb6a6b18 ("typo", 2026-04-03T02:34:46Z) put the v0.19.0-cu130 image in the
    # config 9 s before the run; the script there is the content main got at bddbf4031.
    ("minimaxm2.5_fp8_b200", "vllm/vllm-openai:v0.19.0-cu130"): Version(
        "minimaxm2.5_fp8_b200",
        SN + "minimaxm2.5_fp8_b200.sh (branch of #947)",
        "beb6a6b18",
        "2026-04-02T19:34:46-07:00",
        None,
        vllm(batched_2isl=True, gmu=0.90, prefix_off=True, capture=2048),
        "stream-interval 20; block-size 32; fp8 KV",
    ),
    # PR #996's branch: 08bcde8f1 (2026-04-02) "Use vLLM nightly image ..." -- the row's image.
    ("minimaxm2.5_fp4_b200", "vllm/vllm-openai:nightly-5b8c30d62b754b575e043ce2fc0dcbf8a64f6306"): Version(
        "minimaxm2.5_fp4_b200",
        SN + "minimaxm2.5_fp4_b200.sh (branch of #996)",
        "08bcde8f1",
        "2026-04-02T14:50:30-07:00",
        None,
        vllm(gmu=0.95, prefix_off=True),
        "stream-interval 20; block-size 32; fp8 KV; VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl",
    ),
}


# ---------------------------------------------------------------------------------------------


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _measured(row: dict[str, str], harness: dict[str, str]) -> float | None:
    """The row's measurement time: the source's time of day if it has one, else the day's end."""
    m = re.search(r"measured=([^;\s]+)", row.get("silicon_data_source", ""))
    stamp = m.group(1) if m else ""
    if "T" in stamp and not stamp.endswith("T00:00:00.000Z"):
        return _ts(stamp)
    day = harness.get("measured") or stamp[:10]
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day or ""):
        return None
    return datetime.fromisoformat(day + "T23:59:59").replace(tzinfo=UTC).timestamp()


def _image(row: dict[str, str]) -> str:
    src = row.get("silicon_data_source", "")
    m = re.search(r"image=([^;]+)", src)
    last = src.split(";")[-1].strip()
    img = m.group(1).strip() if m else (last if "/" in last and "=" not in last else "")
    return img.replace("nvcr.io#", "nvcr.io/")


def script_name(row: dict[str, str]) -> str | None:
    """``<model>_<precision>_<gpu>[_trt]``, or None for a model / engine without a script."""
    key = MODEL_KEY.get(row.get("model_path", ""))
    backend = row.get("backend", "")
    if key is None:
        return None
    if backend == "trtllm":
        suffix = "_trt"
    elif backend == PLAIN_ENGINE[key]:
        suffix = ""
    else:
        return None
    gpu = row.get("system", "").removesuffix("_sxm")
    return f"{key}_{row.get('precision', '')}_{gpu}{suffix}"


def resolve(row: dict[str, str], harness: dict[str, str]) -> tuple[Version | None, str]:
    """The script version a row ran, or None and the reason."""
    if harness.get("harness") not in HARNESSES:
        return None, f"harness {harness.get('harness')!r} is not InferenceX single-node"
    if row.get("mode") != "agg":
        return None, "not an aggregated row"
    name = script_name(row)
    if name is None:
        return None, f"no InferenceX script for {row.get('model_path')} on {row.get('backend')}"
    if row.get("system", "").startswith("gb"):
        return None, "GB200 rows ran the Dynamo scripts (benchmarks/dsr1_fp*_gb200_dynamo-*), not single-node"
    t = _measured(row, harness)
    if t is None:
        return None, "no measured date"
    if "wip=True" in row.get("silicon_data_source", ""):
        v = WIP_RUNS.get((name, _image(row)))
        if v is None:
            return (
                None,
                f"wip=True run of {name} from a branch not in the snapshot (no script with its image)",
            )
        return v, "wip branch"
    best = None
    for v in VERSIONS:
        if v.script == name and _ts(v.since) <= t and (best is None or _ts(v.since) > _ts(best.since)):
            best = v
    if best is None:
        return None, f"{name}: no script on main at the measured time"
    if best.until is not None and t >= _ts(best.until):
        return None, f"{name}: the version in force at the measured time is not transcribed"
    cap = best.rule(_ctx(row, harness)).get("max_num_seqs")
    conc = _ctx(row, harness).conc
    if cap is not None and cap < conc:
        # dsr1_fp8_b200.sh and qwen3.5_fp8_b200.sh (64c20b6b5) set --max-running-requests 128 "as
        # the maximum concurrency", and nvidia-master.yaml at the commits in force runs them up to
        # 64 clients (128 for qwen3.5): a row above the cap was measured by another configuration.
        return (
            None,
            f"{name}: {conc} clients exceed the script's running cap {cap}: run from another configuration",
        )
    return best, "main"


def _ctx(row: dict[str, str], harness: dict[str, str]) -> Ctx:
    def num(s: str | None, default: int = 1) -> int:
        try:
            return int(float(s)) if s not in (None, "") else default
        except ValueError:
            return default

    return Ctx(isl=num(row.get("isl")), osl=num(row.get("osl")), tp=num(row.get("tp_size")),
               ep=num(row.get("moe_ep_size")), dp_attention=num(row.get("attention_dp_size")) > 1,
               conc=num(harness.get("concurrency") or row.get("batch_size")))  # fmt: skip


def launch_flags(row: dict[str, str], harness: dict[str, str]) -> dict[str, Any]:
    """kvsim engine knobs the row's launch script set; {} when unknown (see `describe`)."""
    v, _ = resolve(row, harness)
    return v.rule(_ctx(row, harness)) if v is not None else {}


#: The transcribed script versions that pass no KV-cache dtype, read with ``git show
#: <commit>:<path>`` for ``--kv-cache-dtype``, a vLLM config's ``kv-cache-dtype:`` and
#: TensorRT-LLM's ``kv_cache_config: dtype:`` (gptoss_fp4_h200_trt writes ``dtype: auto``).
#: Every other version here, the branches' (`WIP_RUNS`) too, passes fp8: SGLang
#: ``--kv-cache-dtype fp8_e4m3``, vLLM ``fp8``, TensorRT-LLM ``dtype: fp8``.
NO_KV_DTYPE = frozenset({
    ("dsr1_fp8_h200", "41aff0afc"),
    ("gptoss_fp4_b200", "4b860b78e"),
    *(("gptoss_fp4_h100", c) for c in ("af4ccd03f", "25506e87c", "4e135fd3f", "cec542a9a")),
    *(("gptoss_fp4_h200", c) for c in ("9596d23d7", "cec542a9a")),
    *(("gptoss_fp4_h200_trt", c) for c in ("9596d23d7", "d22bf9ca9", "e28c038f8")),
    *(("kimik2.5_fp4_b200", c) for c in ("a58dedd5a", "79a42e20a")),
    ("kimik2.5_fp4_b300", "f34a83b25"),
    ("kimik2.5_int4_b200", "79ea3651a"),
    *(("kimik2.5_int4_h200", c) for c in ("749096c4c", "79a42e20a")),
    *(("minimaxm2.5_fp8_b200", c) for c in ("f342df18e", "626932a11")),
    *(("minimaxm2.5_fp8_h100", c) for c in ("1d5cae141", "626932a11")),
    *(("minimaxm2.5_fp8_h200", c) for c in ("a36346339", "1d5cae141", "626932a11")),
    *(("qwen3.5_bf16_b200", c) for c in ("9dc87a68c", "c21776093")),
    ("qwen3.5_bf16_b300", "32274d6c1"),
    ("glm5_fp4_b200", "d43805fc3"),
    ("glm5_fp8_h200", "ebb48d4bc"),
})  # fmt: skip


def launch_kv_cache_dtype(row: dict[str, str], harness: dict[str, str]) -> str | None:
    """The KV cache the row's launch ran with, as kvsim's ``kv_cache_dtype``; None when the
    script is unknown. A script that passes none leaves it to the checkpoint: NVIDIA's NVFP4
    exports declare an fp8 cache (``kv_cache_quant_algo: FP8`` in their hf_quant_config.json,
    aiconfigurator-core 0.12.0 model_configs), which vLLM from 0.13 (vllm-project/vllm#30785),
    SGLang and TensorRT-LLM follow; DeepSeek's, MiniMax's and Qwen's own fp8 checkpoints,
    OpenAI's MXFP4 gpt-oss and Moonshot's int4 Kimi declare none, and the engines then cache in
    the model's 16 bits ("auto")."""
    v, _ = resolve(row, harness)
    if v is None:
        return None
    if (v.script, v.commit) not in NO_KV_DTYPE:
        return "fp8"
    declared = row.get("precision") == "fp4" and "gpt-oss" not in row.get("model_path", "")
    return "fp8" if declared else "auto"


def describe(row: dict[str, str], harness: dict[str, str]) -> str:
    """Which script and commit a row's flags come from, or why it has none."""
    v, why = resolve(row, harness)
    if v is None:
        return f"no launch flags: {why}"
    flags = v.rule(_ctx(row, harness))
    if not flags:
        return f"{REPO} {v.path} @ {v.commit}: the script exits for this shape (no run)"
    where = "unmerged branch" if why == "wip branch" else f"main since {v.since}"
    tail = f"; also: {v.other}" if v.other else ""
    kv = f"; KV cache {launch_kv_cache_dtype(row, harness)}"
    return f"{REPO} {v.path} @ {v.commit} ({where}): {flags}{kv}{tail}"
