"""kvsim against real GPU deployments: aiconfigurator-core's silicon_sample.csv replayed row by row.

    python benchmarks/silicon.py [--rows CSV] [--out JSON] [--report MD] [--jobs N]
                                 [--peer JSON] [--match TEXT ...] [--set key=value ...]
    python benchmarks/silicon.py --all --match _disagg_ --jobs 1    # the disaggregated rows

Each row of a CSV in ``silicon_sample.csv``'s format (aiconfigurator-core 0.12.0, NVIDIA,
Apache-2.0: a deployment's engine, version, model, GPU system, precision, tensor
parallelism, ISL, OSL, concurrency and its measured mean TTFT and mean TPOT) becomes one
kvsim scenario: the model and GPU presets the row names (aliases of its Hugging Face id and
aiconfigurator system), the engine (``engine.backend`` and ``backend_version``: that
release's default knobs; a nightly or custom build, the release in force on its build day,
`build_release`), the weight precision (``engine.quantization``) and the KV-cache
dtype (the launch script's where it is transcribed, `launch_kv_cache_dtype`, else by the
row's precision, `KV_DTYPE`), the ``kernels`` cost model (the measured kernel tables of that
GPU and engine), and the benchmark client as the row was measured (``workload: {kind:
bench_serve}``: C clients in a closed loop, the row's prompt count, warm-ups and length
ranges; benchmarks/silicon_harness.py and docs/validation.md say where each comes from). A
gap-analysis row that copies an InferenceX run runs as that run's row (`as_run`). kvsim
runs it and writes, per row,

    {"id", "status" ("ok" or "unsupported: why"), "mean_ttft_ms", "mean_tpot_ms"}

(a JSON list, the format of benchmarks/aiconfigurator_peer.py). Then it prints error
tables (predicted / measured - 1: median and p90 of its absolute value, and the median
signed error as the bias) per (model, GPU, backend), for the rows constants were fitted on
(h200_sxm) and the held-out rest apart, beside NVIDIA's estimator on the same rows when its
predictions are there (``--peer``, default benchmarks/results/aiconfigurator_silicon.json.gz).

A row's parallel layout becomes the replica group's: ``tp`` = tp_size, ``attention_dp`` =
attention_dp_size (an instance of that many ranks, each its own batch and KV pool, stepping
together, the router spreading the client's requests over them as the engine does,
`rank_dispatch`) and, for a mixture of experts, ``moe_tp``
/ ``moe_ep`` = moe_tp_size / moe_ep_size (`parallel_layout`; rows whose columns count X x Y
GPUs for the ``tpX_epY`` launch their id names run on X GPUs, a defect of the data the
function documents).

A disaggregated row (``mode`` disagg, `disagg_scenario_for`) becomes two replica groups:
``prefill_num_workers`` replicas of role prefill and ``decode_num_workers`` of role decode,
each with its stage's tp (and attention_dp / moe_tp / moe_ep where the layout is not plain
tensor parallelism), decode workers holding ceil(C / decode workers) sequences (each rank at most the
TensorRT-LLM recipe's ``batchN``, its ``decode_batch``); the KV link
between them from the system file of aiconfigurator-core (NVLink inside one node or NVL72
rack, else the network; `kv_link`); the same benchmark client. Its per-row JSON gives the
TTFT and TPOT the client sees (`client_times`: the first token comes from the decode
worker, after the KV transfer) and kvsim's own, which end at the prefill
(``prefill_ttft_ms``, ``prefill_tpot_ms``). An aggregated TensorRT-LLM row whose launch
script set ``stream_interval`` N gives the client's times too (`streamed_times`: the first
token shown with the request's N-th iteration on an instance of 8 GPUs or more, about GPUs / 8
of the way there on a smaller one, `first_chunk_iterations`) and kvsim's own
(``engine_ttft_ms``, ``engine_tpot_ms``).

Rows kvsim does not model are "unsupported", with the reason: pipeline parallelism, a
disaggregated row without worker counts or concurrency, InferenceX's MTP
speculative-decoding runs (`mtp_run`, from benchmarks/inferencex_spec.py's classification)
whose draft length is not known (the single-node ones run with the draft length of their
launch script, `mtp_draft_tokens`, the multi-node ones with their recipe's, the decode workers
drafting; both with `MTP_ACCEPTANCE`), and what the kernels cost model
refuses by name (an MoE shape, precision or moe_tp x moe_ep layout its ``moe`` table lacks,
MLA outside its tables). A mixture-of-experts row runs at its
checkpoint's own precision when the row's moe_quant_mode names it (`moe_quantization`), an
nvfp4 row of a model NVIDIA exported at that export's (`served_moe`: 16-bit attention).
"""

from __future__ import annotations

import argparse
import csv
import functools
import gc
import gzip
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from launch_flags import describe, launch_flags, launch_kv_cache_dtype  # noqa: E402

from kvsim.backends.defaults import SGLANG_PIECEWISE_SINCE  # noqa: E402
from kvsim.cost.tables import package_tables_root  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
HARNESS = RESULTS / "silicon_harness.csv.gz"
#: Which InferenceX rows may have run MTP speculative decoding (benchmarks/inferencex_spec.py).
SPEC_DECODING = RESULTS / "silicon_spec_decoding.csv.gz"
#: The SGLang flags of the srt-slurm recipes the multi-node rows ran (benchmarks/srt_slurm_recipes.py).
SRT_SLURM_SGLANG = RESULTS / "srt_slurm_sglang.csv.gz"
PEER = RESULTS / "aiconfigurator_silicon.json.gz"
#: The only GPU constants may be fitted on (issue 20's rule); every other GPU is held out.
FIT_SYSTEM = "h200_sxm"
DENSE_FAMILIES = ("Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B")

#: The tables' gemm_quant_mode -> engine.quantization (empty: the checkpoint's 16 bits).
QUANTIZATION = {"": None, "bfloat16": None, "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4",
                "mxfp4": "mxfp4", "int4_wo": "int4"}  # fmt: skip
#: The row's precision -> engine.kv_cache_dtype. InferenceMAX's Llama-3.1-70B fp8 runs pass
#: --kv-cache-dtype fp8 (benchmarks/70b_fp8_h200_slurm.sh at ac1998a50, docs/validation.md);
#: fp4 deployments keep an fp8 cache (no fp4 KV in these engines); 16-bit ones the model's.
#: A MoE single-node row whose launch script is transcribed takes the script's instead
#: (`launch_kv_cache_dtype`: several pass none and cache in 16 bits).
KV_DTYPE = {"": "auto", "bf16": "auto", "fp16": "auto", "fp8": "fp8", "fp4": "fp8"}


#: Engine flags the harness's launch scripts pass, where they are published: InferenceMAX's
#: Llama-3.1-70B scripts at SemiAnalysisAI/InferenceX ac1998a50 (2025-10-20), the October
#: 2025 runs of the 441 Llama-3.1-70B rows. vLLM (benchmarks/70b_fp8_h100_slurm.sh,
#: 70b_fp8_h200_slurm.sh, 70b_fp8_b200_docker.sh, 70b_fp4_b200_docker.sh): max-num-batched-
#: tokens 8192, no prefix caching, fp8 KV, max-num-seqs C (512 on B200). TensorRT-LLM
#: (70b_fp8_h200_trt_slurm.sh, 70b_fp8_b200_trt_slurm.sh, 70b_fp4_b200_trt_slurm.sh):
#: --max_num_tokens 16384, kv_cache_config dtype fp8 and enable_block_reuse false.
INFERENCEMAX_70B: dict[str, dict[str, Any]] = {
    "vllm": {"max_num_batched_tokens": 8192, "enable_prefix_caching": False, "kv_cache_dtype": "fp8"},
    "trtllm": {"max_num_batched_tokens": 16384, "enable_prefix_caching": False, "kv_cache_dtype": "fp8"},
}


def engine_flags(row: dict[str, str], harness: dict[str, str], concurrency: int) -> dict[str, Any]:
    """The engine knobs a row's harness set on the command line: the Llama-3.1-70B InferenceMAX
    scripts' (`INFERENCEMAX_70B`), the MoE single-node scripts' (`launch_flags`), else none."""
    if harness.get("harness") != "inferencemax-single-node" or "Llama-3.1-70B" not in row["model_path"]:
        flags = launch_flags(row, harness)
        if (kv := launch_kv_cache_dtype(row, harness)) is not None:
            flags["kv_cache_dtype"] = kv
        return flags
    flags = dict(INFERENCEMAX_70B.get(row["backend"], {}))
    if row["backend"] == "vllm":
        flags["max_num_seqs"] = 512 if row["system"] == "b200_sxm" else concurrency
    return flags


#: vLLM's MXFP4 experts with MXFP8 activations: SemiAnalysis' gpt-oss-120b vLLM scripts on B200
#: export VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (InferenceMAX benchmarks/gptoss_fp4_b200_docker.sh
#: at e06929c7 (2025-11-01), InferenceX benchmarks/single_node/gptoss_fp4_b200.sh at d2c2acb1
#: (2026-02-25, the v0.15.1 runs)), so vLLM runs FlashInfer's trtllm-gen MXFP4 x MXFP8 kernel
#: (SM100_FI_MXFP4_MXFP8_TRTLLM) instead of its 16-bit-activation default. vLLM 0.24.0's moe
#: table measures that kernel at two other models' shapes only; SGLang 0.5.14's, which calls
#: the same FlashInfer kernel, has gpt-oss's (at hidden 4,096, top-6 of 256, where both
#: measure it, SGLang's rows are 0.97x vLLM's, median over 27 token counts, on b300_sxm and gb200).
VLLM_MXFP8_MOE = {"mxfp4_moe_activation": "mxfp8", "moe_tables_backend": "sglang"}


#: TensorRT-LLM's block-fp8 experts on B200 with ``moe_config: backend: TRTLLM``: InferenceX's
#: 1.2.0rc6 runs of DeepSeek-R1 fp8 set it: benchmarks/dsr1_fp8_b200_trt.sh from ec7bafae
#: (2026-01-29, #594; the 1.2.0rc6.post2 rows) except at ISL 1,024 / OSL 8,192 with C >= 256,
#: and benchmarks/dsr1_fp8_b200_trt_mtp.sh from 5d517074 (2026-02-05, #632; the .post3 rows,
#: MTP speculative decoding) except with attention DP; DEEPGEMM otherwise and before. That is
#: the trtllm-gen FP8 block-scale MoE, which TensorRT-LLM 1.3.0rc20's moe table does not measure
#: (its fp8_block rows are DeepGEMM's, 2.7x slower at 4 tokens, moe_tp 8); FlashInfer exposes the
#: same kernel, measured in SGLang 0.5.14's table (sglang_flashinfer_trtllm_moe; vLLM 0.24.0's
#: trtllmfp8expertsmonolithic within 8% of it at moe_tp 8).
TRTLLM_GEN_FP8_MOE = {"moe_tables_backend": "sglang"}


#: vLLM's Marlin MXFP4 experts: InferenceX's gpt-oss-120b vLLM scripts for H100 and H200 export
#: VLLM_MXFP4_USE_MARLIN=1 from cec542a9a (2026-03-27, benchmarks/single_node/gptoss_fp4_h100.sh
#: and gptoss_fp4_h200.sh; the vLLM 0.18.0 rows), where vLLM would otherwise run the OpenAI
#: Triton kernel its moe table measures at gpt-oss's shape (vLLM 0.24.0 on h100_sxm / h200_sxm:
#: 540-570 TFLOPS at 4-16k tokens of gpt-oss, against Marlin's 195-230 at the one shape its
#: table has, hidden 3,584, top-16 of 896 experts). `moe_curve` carries Marlin to gpt-oss's
#: shape at equal tokens per expert.
VLLM_MARLIN_MXFP4_MOE = {"moe_kernel": "marlin"}


#: The first vLLM release that schedules asynchronously by default (``async_scheduling``):
#: 0.14.0; InferenceX removed its ``--async-scheduling`` flag when moving to it ("now enabled
#: by default since v0.14.0": SemiAnalysisAI/InferenceX #789, d2c2acb19, and #496).
VLLM_ASYNC_FROM = (0, 14)


def async_scheduling(row: dict[str, str], harness: dict[str, str], stage: str | None = None) -> bool:
    """Whether the row's engine decided each iteration while the previous one ran
    (``engine.async_scheduling``): SGLang's overlap scheduler and TensorRT-LLM's (both on by
    default; the scripts transcribed do not turn them off), vLLM from 0.14 or where the launch
    script passed ``--async-scheduling`` (`launch_flags.describe`). A TensorRT-LLM prefill
    worker of a disaggregated deployment runs without it (its context servers set
    ``disable_overlap_scheduler: true``, as TensorRT-LLM's disaggregated serving requires)."""
    backend = row.get("backend")
    if backend == "sglang":
        return True
    if backend == "trtllm":
        return stage != "prefill"
    if backend != "vllm":
        return False
    version = re.match(r"(\d+)\.(\d+)", engine_version(row) or "")
    if version is not None and (int(version[1]), int(version[2])) >= VLLM_ASYNC_FROM:
        return True
    return "async-scheduling" in describe(row, harness)


def trtllm_gen_fp8_moe(row: dict[str, str], harness: dict[str, str]) -> bool:
    """Whether a row ran `TRTLLM_GEN_FP8_MOE` (its launch script's MoE backend TRTLLM)."""
    version = row.get("backend_version") or ""
    if not (
        harness.get("harness") == "inferencex-single-node"
        and row["backend"] == "trtllm"
        and "DeepSeek" in row["model_path"]
        and row.get("moe_quant_mode") == "fp8"
        and row["system"] == "b200_sxm"
    ):
        return False
    if version.startswith("1.2.0rc6.post2"):
        long_decode = row.get("isl") == "1024" and row.get("osl") == "8192"
        return not (long_decode and (_int(harness.get("concurrency")) or 0) >= 256)
    if version.startswith("1.2.0rc6.post3"):
        return (_int(row.get("attention_dp_size")) or 1) == 1
    return False


def mtp_run(row: dict[str, str], harness: dict[str, str]) -> bool:
    """Whether a row ran multi-token prediction (DeepSeek's, Qwen3.5's) as speculative decoding:
    every row InferenceX measured only with a ``spec-decoding: mtp`` search space
    (``spec_decoding`` ``mtp`` in the harness record: benchmarks/inferencex_spec.py), among them
    the DeepSeek-R1 TensorRT-LLM B200 runs on the 1.2.0rc6.post3 image, launched by
    benchmarks/dsr1_fp8_b200_trt_mtp.sh (#632, 2026-02-05) and its nvfp4 twin (#642,
    2026-02-06), which are also recognised without the classification. Of a point InferenceX
    ran both with and without MTP (``both``), the run with its twin's lower TPOT, or a row
    without a twin in the file (``twin_run`` ``mtp``: inferencex_spec.twin_runs); a ``both``
    row whose point has three runs or more runs without."""
    if harness.get("spec_decoding") == "mtp" or harness.get("twin_run") == "mtp":
        return True
    return (
        harness.get("harness") == "inferencex-single-node"
        and row["backend"] == "trtllm"
        and "DeepSeek" in row["model_path"]
        and row["system"] == "b200_sxm"
        and (row.get("backend_version") or "").startswith("1.2.0rc6.post3")
    )


#: Chance each MTP draft token is accepted given the ones before it (``acceptance_rate``): the
#: rows do not record it. Fitted on the H200 MTP rows only (`--set
#: replicas.0.engine.speculative_config.acceptance_rate=X` on InferenceX's 12 DeepSeek-R1
#: TensorRT-LLM H200 rows, grid 0.5-0.9, objective median |TTFT error| + median |TPOT error|,
#: the client's times with TensorRT-LLM's stream interval (`streamed_times`): 0.5 0.234, 0.6
#: 0.229, 0.7 0.228, 0.8 0.300, 0.9 0.353; without it, before: 0.5 0.41, 0.6 0.46, 0.7 0.44;
#: docs/validation.md, "MTP runs simulated" and the ninth pass). For scale: DeepSeek-V3's
#: report (arXiv 2412.19437, section 5.4.3) measures 85-90% for its one MTP token on its own
#: evaluation text; InferenceX's prompts are random tokens.
MTP_ACCEPTANCE = 0.7

#: The same for SGLang's MTP drafts (its EAGLE worker, ``--speculative-algorithm EAGLE`` with
#: DeepSeek's MTP layer as the draft): fitted on the H200 SGLang MTP rows only, the 26
#: disaggregated ones below 2,048 clients (22 run; no aggregated SGLang MTP row is on H200),
#: launched with their srt-slurm recipes (`recipe_flags`), objective as above over them and the
#: 17 plain rows of the same set that run: 0.45 0.376, 0.5 0.365, 0.55 0.410, 0.7 0.584 (main's
#: launch at 0.7: 0.446; docs/validation.md, twenty-second pass). SGLang's runs gain less from the same drafts than TensorRT-LLM's (its 1k-prompt MTP
#: runs at 8-32 clients measure 1.13-1.15x their plain twins' TPOT; at 0.7 kvsim gave them
#: 1.35-1.9x): the draft step's own cost is not priced apart, so this is an effective rate.
#: SGLang's aggregated MTP runs take it too (an engine's drafts, whatever the deployment; no
#: H200 row to fit them on): held out, their TPOT goes 13% / 27% / -8% -> 17% / 33% / +13%.
SGLANG_MTP_ACCEPTANCE = 0.5


def mtp_acceptance(row: dict[str, str]) -> float:
    """The acceptance an MTP row's drafts run at (`MTP_ACCEPTANCE`, SGLang's its own)."""
    return SGLANG_MTP_ACCEPTANCE if row.get("backend") == "sglang" else MTP_ACCEPTANCE


#: Time vLLM's OpenAI-compatible server spends on a request before its scheduler sees it, as
#: the benchmark client measures TTFT (`kvsim.scenario.schema.FrontendConfig`, request_s):
#: set on every aggregated vLLM row (the client sends text to ``vllm serve``); kvsim's own
#: default stays 0 (an engine fed token ids in-process has none). Fitted on the h200_sxm vLLM
#: rows only (`--set replicas.0.engine.frontend.request_s=X` on the 81 dense ones and every
#: 3rd of the 255 MoE ones; objective median |TTFT error| + median |TPOT error|): 0 ms 0.256,
#: 5 ms 0.254, 10 ms 0.239, 15 ms 0.218, 20 ms 0.195, 25 ms 0.224, 30 ms 0.216
#: (docs/validation.md, sixteenth pass). For scale: vLLM's own serving benchmark sees the
#: client's TTFT 8-12 ms above the server's ``vllm:time_to_first_token_seconds`` with
#: 512-token prompts (vllm-project/vllm#54628, a small model on one laptop GPU); the rest of
#: the fitted 20 ms (HTTP, tokenizing up to 8k-token prompts, the hand-off to the engine and
#: its TP workers on these nodes) is not measured apart. Dynamo-served (disaggregated) rows
#: take none: their front end is another server.
VLLM_FRONTEND_REQUEST_S = 0.020


def mtp_draft_tokens(row: dict[str, str]) -> int | None:
    """Draft tokens per step of an aggregated MTP row, as its launch script set them (every
    version measured rows use, SemiAnalysisAI/InferenceX): TensorRT-LLM
    (dsr1_fp{4,8}_{b200,h200}_trt_mtp.sh, ``speculative_config: decoding_type: MTP``)
    ``num_nextn_predict_layers`` 3, 1 with attention DP; SGLang's EAGLE over the MTP layer
    (``--speculative-eagle-topk 1``) ``--speculative-num-steps`` 2 for DeepSeek-R1
    (dsr1_fp8_b200_mtp.sh), 3 for Qwen3.5 (qwen3.5_fp8_b200_mtp.sh). None for any other row."""
    model, backend = row.get("model_path", ""), row.get("backend")
    if backend == "trtllm" and "DeepSeek" in model:
        return 1 if (_int(row.get("attention_dp_size")) or 1) > 1 else 3
    if backend == "sglang" and "DeepSeek" in model:
        return 2
    if backend == "sglang" and "Qwen3.5" in model:
        return 3
    return None


def cost_model_flags(row: dict[str, str], harness: dict[str, str]) -> dict[str, Any]:
    """The kernels cost model's knobs a row's launch script implies (`VLLM_MXFP8_MOE`,
    `TRTLLM_GEN_FP8_MOE`, `VLLM_MARLIN_MXFP4_MOE`), else none."""
    single_node = harness.get("harness") in ("inferencemax-single-node", "inferencex-single-node")
    if trtllm_gen_fp8_moe(row, harness):
        return dict(TRTLLM_GEN_FP8_MOE)
    if row["backend"] == "vllm" and "VLLM_MXFP4_USE_MARLIN=1" in describe(row, harness):
        return dict(VLLM_MARLIN_MXFP4_MOE)
    if (
        single_node
        and row["backend"] == "vllm"
        and "gpt-oss" in row["model_path"]
        and row["system"] == "b200_sxm"
    ):
        return dict(VLLM_MXFP8_MOE)
    return {}


#: Checkpoints SGLang serves as multimodal models: their Hugging Face config has a vision tower
#: and an architecture in SGLang's ``multimodal_model_archs`` (Qwen3_5MoeForConditionalGeneration,
#: python/sglang/srt/configs/model_config.py, 0.5.10.post1). For those 0.5.10.post1 runs no
#: piecewise CUDA graphs (server_args.py ``_handle_piecewise_cuda_graph``: "Multimodal / VLM
#: models"), which kvsim's model spec does not tell (`sglang_prompt_graphs_off`).
SGLANG_MULTIMODAL_CHECKPOINTS = ("Qwen/Qwen3.5-397B-A17B",)


def sglang_prompt_graphs_off(row: dict[str, str], harness: dict[str, str]) -> str | None:
    """Why SGLang ran a row's prompt steps without piecewise CUDA graphs where kvsim's default
    (`KernelCostConfig.piecewise_cuda_graph_max_tokens`, from SGLang 0.5.10) would replay them:
    a multimodal checkpoint (`SGLANG_MULTIMODAL_CHECKPOINTS`) or a launch script with
    ``--enable-symm-mem`` (``_handle_piecewise_cuda_graph``, 0.5.10.post1: "Symmetric memory
    (torch.cuda.use_mem_pool is untraceable by dynamo)"); None otherwise. Attention DP,
    speculative decoding and disaggregation turn them off in kvsim's own default."""
    if row.get("backend") != "sglang":
        return None
    if not row.get("backend_version"):  # kvsim runs it at its newest SGLang: was that out yet?
        measured = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.get("silicon_data_source") or "")
        then = release_in_force("sglang", measured.group(1)) if measured else None
        if then is not None and _version_key(then) < _version_key(SGLANG_PIECEWISE_SINCE):
            return f"no release named; measured when SGLang {then} was the newest"
    if row.get("model_path") in SGLANG_MULTIMODAL_CHECKPOINTS:
        return "a multimodal checkpoint"
    if "enable-symm-mem" in describe(row, harness):
        return "--enable-symm-mem"
    return None


#: The harness whose settings are assumed, not documented (docs/validation.md): the
#: sensitivity runs (`--assume`) change only its rows.
ASSUMED_HARNESS = "nvidia-gap-analysis"


def assume(harness: dict[str, str], prompts_per_client: float | None, range_ratio: float | None,
           warmups_per_client: float | None) -> dict[str, str]:  # fmt: skip
    """One row's harness record under another assumption of the gap-analysis client: measured
    prompts and warm-ups per client, the lengths' range ratio (the legacy rule, U[floor(R L), L])."""
    if harness.get("harness") != ASSUMED_HARNESS:
        return harness
    out = dict(harness)
    c = _int(harness.get("concurrency")) or 0
    if prompts_per_client is not None:
        out["num_prompts"] = str(round(prompts_per_client * c))
    if warmups_per_client is not None:
        out["num_warmups"] = str(round(warmups_per_client * c))
    if range_ratio is not None:
        out["random_range_ratio"] = str(range_ratio)
    return out


def default_rows() -> Path:
    root = package_tables_root()
    if root is None:
        raise SystemExit("aiconfigurator-core is not installed (pip install -e '.[kernels]'); give --rows")
    return root.parent / "silicon_sample.csv"


def read_csv(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="", encoding="utf-8") as fh:  # type: ignore[operator]
        return list(csv.DictReader(fh))


def harness_by_id(
    path: Path, spec_decoding: Path | None = SPEC_DECODING, *, recipes: bool = True
) -> dict[str, dict[str, str]]:
    """Each row's harness record (silicon_harness.py), with its ``spec_decoding`` class (and
    which run a ``both`` row is taken for, ``twin_run``), a
    multi-node MTP row's recipe ``draft_tokens`` and a multi-node row's ``prefill_workers`` /
    ``decode_workers``, each side's ``*_dp_attn`` / ``*_ep``, the recipe's ``decode_batch`` and
    the srt-slurm ``recipes`` (unless ``recipes`` is false, ``--no-srt-slurm-recipes``:
    `recipe_flags` launches an SGLang row's sides with them) from InferenceX's configuration
    (inferencex_spec.py) where that file has the row."""
    harness = {row["id"]: row for row in read_csv(path)} if path.is_file() else {}
    if spec_decoding is not None and spec_decoding.is_file():
        keys = ("spec_decoding", "twin_run", "draft_tokens", "prefill_workers", "decode_workers",
                "prefill_dp_attn", "prefill_ep", "decode_dp_attn", "decode_ep", "decode_batch",
                "prefill_gpus", "decode_gpus", *(("recipes",) if recipes else ()))  # fmt: skip
        extras = {
            line["id"]: {key: line[key] for key in keys if line.get(key)} for line in read_csv(spec_decoding)
        }
        for rid, record in harness.items():
            # A copy of an InferenceX row (silicon_harness.copies) has its twin's configuration.
            extra = extras.get(rid) or extras.get(record.get("copy_of") or "", {})
            harness[rid] = {**record, **extra}
    return harness


def as_run(
    row: dict[str, str], harness: dict[str, str] | None, rows_by_id: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The row kvsim simulates for ``row``: itself, or, for a gap-analysis row that copies an
    InferenceX measurement (its record's ``copy_of``, `silicon_harness.copies`), the InferenceX
    row it copies under its own id: that row's layout, build and launch script are the ones
    measured. The row itself where the twin is not among ``rows_by_id``."""
    twin = rows_by_id.get((harness or {}).get("copy_of") or "")
    return {**twin, "id": row["id"]} if twin is not None else row


def _num(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _int(text: str | None) -> int | None:
    value = _num(text)
    return int(value) if value is not None else None


def moe_quantization(model: Any, row: dict[str, str]) -> str | None:
    """engine.quantization for a mixture-of-experts row: None (the checkpoint as published,
    the preset or its Hugging Face alias) when the row's moe_quant_mode names the
    checkpoint's own expert precision; aiconfigurator labels gpt-oss's MXFP4 experts
    "nvfp4" and block-scaled fp8 checkpoints "fp8". fp8_block when the row's experts are
    fp8_block and its GEMMs "fp8" (a block-scaled checkpoint named by its bf16 model's id).
    Otherwise the row's precision, as for a dense row."""
    native = model.expert_weight_dtype or model.weight_dtype
    label = QUANTIZATION.get(row.get("moe_quant_mode") or row.get("gemm_quant_mode") or "")
    same = (
        label in (None, native)
        or {label, native} <= {"fp8", "fp8_block"}
        or (label == "nvfp4" and native == "mxfp4")
    )
    gemm = QUANTIZATION.get(row.get("gemm_quant_mode") or "")
    if not same and {label, gemm} == {"fp8", "fp8_block"}:
        # A block-scaled checkpoint (Qwen3.5-397B-A17B-FP8) under the bf16 model's id: its
        # experts say fp8_block, its GEMMs aiconfigurator's "fp8" label.
        return "fp8_block"
    return None if same else gemm


#: NVIDIA's NVFP4 exports, by the preset of the model they quantize: the checkpoints
#: InferenceX served its fp4 rows from (.github/configs/nvidia-master.yaml at 843c6254ff69:
#: nvidia/DeepSeek-R1-0528-FP4-V2 / -NVFP4-v2, nvidia/Kimi-K2.5-NVFP4, nvidia/MiniMax-M2.5-NVFP4,
#: nvidia/GLM-5-NVFP4, nvidia/Qwen3.5-397B-A17B-NVFP4). silicon_sample.csv names InferenceMAX's
#: DeepSeek-R1 runs (ids dsr1_...) deepseek-ai/DeepSeek-V3 in its database rows: the same
#: architecture, served from the same export. The exports quantize the routed experts and keep
#: part of attention in 16 bits (kvsim.model.presets.MODEL_ALIASES gives each export's split
#: from its exclusion list: R1-0528-FP4-V2 keeps the q/kv projections, the others the whole
#: attention block; aiconfigurator-core 0.12.0 prices them per projection too,
#: sdk/models/deepseek.py). A row at nvfp4 of another model (Qwen3-235B, whose NVIDIA export
#: quantizes attention too) keeps every weight at nvfp4.
NVFP4_EXPORTS = {
    "deepseek-r1": "nvidia/DeepSeek-R1-0528-FP4-V2",
    "deepseek-v3": "nvidia/DeepSeek-R1-0528-FP4-V2",
    "kimi-k2.5": "nvidia/Kimi-K2.5-NVFP4",
    "minimax-m2.5": "nvidia/MiniMax-M2.5-NVFP4",
    "glm-5": "nvidia/GLM-5-NVFP4",
    "qwen3.5-397b-a17b": "nvidia/Qwen3.5-397B-A17B-NVFP4",
}


def served_moe(model: Any, row: dict[str, str]) -> tuple[Any, str | None]:
    """A mixture-of-experts row's model and engine.quantization: the row's precision
    (`moe_quantization`), except that an nvfp4 row of a model NVIDIA exported (`NVFP4_EXPORTS`)
    serves that export, its own precisions (16-bit attention, nvfp4 experts), unquantized
    further."""
    from kvsim.model.presets import resolve_model

    quantization = moe_quantization(model, row)
    if quantization == "nvfp4" and model.name in NVFP4_EXPORTS:
        return resolve_model(NVFP4_EXPORTS[model.name]), None
    return model, quantization


#: A launch the row's id names, ``..._tpX_epY_...`` or ``..._tpX_0_epY_0_...``.
_LAUNCH = re.compile(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_|$)")

#: GPUs in one NVLink node of the systems whose aggregated rows are single-node deployments
#: (aiconfigurator-core 0.12.0 systems/<system>.yaml ``num_gpus_per_node``; GB200 and GB300
#: racks span nodes and are left out).
NODE_GPUS = {"h100_sxm": 8, "h200_sxm": 8, "b200_sxm": 8, "b300_sxm": 8}


def parallel_layout(row: dict[str, str], is_moe: bool) -> dict[str, int]:
    """The replica group's tp, attention_dp, moe_tp and moe_ep: an instance of
    attention_dp_size ranks of tp_size GPUs, its experts moe_tp_size x moe_ep_size (the
    checks refuse a row whose two products differ), as the row's columns give them.

    One exception, a defect of the data: rows whose id names the launch ``tpX_epY`` while
    their columns multiply to X x Y GPUs (X > 1, Y > 1; aiconfigurator-core 0.12.0's
    2026_04_06_* single-node rows: tp 64 or attention DP 64 with moe 8 x 8 on one 8-GPU
    node). Each repeats, measurement for measurement, a 2026_03_25_* row whose columns give
    X GPUs: ``..._1024x1024_c64_tp8_ep8_953`` (tp 64, moe 8 x 8) and
    ``..._1024x1024_c64_tp8_0_ep8_0_1245`` (tp 8, moe 1 x 8) both measured TTFT 972.8 ms,
    TPOT 23.42 ms. They run as X GPUs: tp X (or attention DP X where tp_size is 1), moe
    X/Y x Y. Rows with both columns above 1 (tp 4, attention DP 4, moe 1 x 16 for
    ``tp4_ep4``: vLLM's Kimi-K2.5 and MiniMax-M2.5 rows) ran tensor-parallel attention: their
    scripts (InferenceX benchmarks/single_node/minimaxm2.5_fp8_b200.sh at bddbf4031,
    kimik2.5_fp4_b200.sh at 79a42e20a) pass ``--tensor-parallel-size`` and
    ``--enable-expert-parallel``, no data parallelism.

    The database dump's rows (``..._cfgN``) carry the same defect without naming the launch:
    151 aggregated MoE rows on 8-GPU nodes count 16 or 64 GPUs, and 89 of them repeat a
    ``tpX_epY`` row measurement for measurement (``minimaxm2_5_b200_vllm_fp8_agg_1024x1024_
    c64_cfg691`` and ``2026_04_06_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c64_tp4_ep4_
    1392``). Every named launch has X = Y, so a row of an 8-GPU node system (`NODE_GPUS`)
    whose columns count N > 8 GPUs, N = X x X, runs as the launch ``tpX_epX`` would.
    """
    tp = _int(row.get("tp_size")) or 1
    dp = _int(row.get("attention_dp_size")) or 1
    moe_tp, moe_ep = _int(row.get("moe_tp_size")) or tp * dp, _int(row.get("moe_ep_size")) or 1
    launch = _LAUNCH.search(row.get("id", ""))
    named = (int(launch[1]), int(launch[2])) if launch else None
    side, node = math.isqrt(tp * dp), NODE_GPUS.get(row.get("system", ""))
    if named is None and node is not None and node < tp * dp == side * side and side <= node:
        named = (side, side)
    if named and is_moe:
        x, y = named
        if x > 1 and y > 1 and tp * dp == moe_tp * moe_ep == x * y:
            tp, dp = (1, x) if tp == 1 else (x, 1)
            moe_tp, moe_ep = max(1, x // y), y
    layout = {"tp": tp, "attention_dp": dp}
    if is_moe:
        layout.update(moe_tp=moe_tp, moe_ep=moe_ep)
    return layout


def scenario_for(
    row: dict[str, str], harness: dict[str, str] | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """The kvsim scenario of one silicon row; ValueError("unsupported: ...") when kvsim cannot
    represent the deployment."""
    from kvsim.model.presets import resolve_gpu, resolve_model

    if row.get("mode") == "disagg":
        return disagg_scenario_for(row, harness, extra)
    if row.get("mode") != "agg":
        raise ValueError(f"unsupported: mode {row.get('mode')!r}")
    if (_int(row.get("pp_size")) or 1) > 1:
        raise ValueError("unsupported: pipeline parallelism")
    try:
        model = resolve_model(row["model_path"])
        gpu = resolve_gpu(row["system"])
    except Exception as exc:  # an unknown name: a preset kvsim does not have
        raise ValueError(f"unsupported: {exc}") from None
    drafts = None
    if mtp_run(row, harness or {}):
        drafts = mtp_draft_tokens(row)
        if drafts is None:
            raise ValueError(
                "unsupported: an MTP speculative-decoding run whose draft length kvsim does not know"
            )
    quant = row.get("gemm_quant_mode") or ""
    if quant not in QUANTIZATION:
        raise ValueError(f"unsupported: weight precision {quant!r}")
    quantization = QUANTIZATION[quant]
    if model.is_moe:
        model, quantization = served_moe(model, row)
    precision = row.get("precision") or ""
    concurrency = _int((harness or {}).get("concurrency")) or _int(row.get("batch_size"))
    isl, osl, tp = _int(row.get("isl")), _int(row.get("osl")), _int(row.get("tp_size")) or 1
    if not concurrency or not isl or not osl:
        raise ValueError("unsupported: the row has no concurrency, ISL or OSL")
    h = harness or {}
    ratio = _num(h.get("random_range_ratio"))
    num_prompts = _int(h.get("num_prompts")) or 10 * concurrency
    num_warmups = _int(h.get("num_warmups")) or 0
    engine: dict[str, Any] = {
        "backend": row["backend"],
        "quantization": quantization,
        "kv_cache_dtype": KV_DTYPE.get(precision, "auto"),
    }
    version = build_release(row)
    if version is not None:
        engine["backend_version"] = version
    flags = engine_flags(row, h, concurrency)
    # The script's CUDA-graph ceiling prices the steps (the kernels model's knob), not the scheduler.
    cost_model: dict[str, Any] = {"kind": "kernels", **cost_model_flags(row, h)}
    if "cuda_graph_max_size" in flags:
        cost_model["cuda_graph_max_size"] = flags.pop("cuda_graph_max_size")
    if sglang_prompt_graphs_off(row, h):
        cost_model["piecewise_cuda_graph_max_tokens"] = 0
    engine.update(flags)
    engine["async_scheduling"] = async_scheduling(row, h)
    if row["backend"] == "vllm":
        engine["frontend"] = {"request_s": VLLM_FRONTEND_REQUEST_S}
    layout = parallel_layout(row, model.is_moe)
    if drafts is not None:
        engine["speculative_config"] = {
            "method": "mtp",
            "num_speculative_tokens": drafts,
            "acceptance_rate": mtp_acceptance(row),
        }
        if row["backend"] == "trtllm":
            # The MTP scripts' token budget makes room for every request's drafts
            # (dsr1_fp{4,8}_{b200,h200}_trt_mtp.sh: MAX_NUM_TOKENS = ((MTP + 1) x
            # MAX_BATCH_SIZE + ISL + 64 + 63) / 64 x 64, MAX_BATCH_SIZE the clients, per rank
            # with attention DP); the plain script's (`engine_flags`) has no room for them.
            batch = max(concurrency // layout["attention_dp"], 1)
            engine["max_num_batched_tokens"] = ((drafts + 1) * batch + isl + 127) // 64 * 64
    scenario: dict[str, Any] = {
        "name": row["id"][:200],
        # A MoE row's model as its Hugging Face id resolved (an FP8 / NVFP4 repository's alias
        # carries its expert precision, which the preset's name alone would lose).
        "model": model.model_dump() if model.is_moe else model.name,
        "replicas": [
            {
                "gpu": gpu.name,
                "tp": tp,
                **layout,
                "engine": engine,
                "cost_model": cost_model,
            }
        ],
        "router": {"kind": rank_dispatch(row["backend"], layout["attention_dp"])},
        "workload": {
            "kind": "bench_serve",
            "max_concurrency": concurrency,
            "num_prompts": num_prompts,
            "num_warmups": num_warmups,
            "random_input_len": isl,
            "random_output_len": osl,
            "random_range_ratio": 1.0 if ratio is None else ratio,
            "random_range_ratio_rule": "legacy",
        },
        "seed": 0,
    }
    return _apply(scenario, extra)


def rank_dispatch(backend: str, attention_dp: int) -> str:
    """How the engine hands a new request to one of its attention-DP ranks, as a kvsim router:
    vLLM's front end picks the engine core with the least load (DPLBAsyncMPClient, waiting x 4
    + running, vllm/v1/engine/core_client.py) and TensorRT-LLM the rank with the fewest active
    requests and tokens (ExecutorRequestQueue._balance_requests_across_ranks,
    tensorrt_llm/_torch/pyexecutor/executor_request_queue.py): least_loaded. SGLang's data-
    parallel controller dispatches round_robin (--load-balance-method's default, 0.5.x), as
    does one replica alone."""
    return "least_loaded" if attention_dp > 1 and backend in ("vllm", "trtllm") else "round_robin"


# --------------------------------------------------------------------------- disaggregated rows

STAGES = ("prefill", "decode")
#: TensorRT-LLM's default token budget (BaseLlmArgs.max_num_tokens, kvsim.backends.defaults).
TRTLLM_MAX_NUM_TOKENS = 8192


def disagg_scenario_for(
    row: dict[str, str], harness: dict[str, str] | None, extra: dict[str, Any]
) -> dict[str, Any]:
    """The kvsim scenario of one disaggregated row: ``prefill_num_workers`` replicas of role
    prefill and ``decode_num_workers`` of role decode, each stage with its own parallel
    layout (`stage_group`), the KV link between them (`kv_link`), and the benchmark client
    as for an aggregated row. Worker counts the row leaves empty come from InferenceX's
    configuration (the harness record's ``prefill_workers`` / ``decode_workers``), each side's
    layout as launched (`launched_layout`) and the decode workers' batch as the TensorRT-LLM
    recipe caps it (``decode_batch``, the recipe's ``max_batch_size`` per rank: with fewer
    slots than clients a request waits at the decode worker for another to finish); an MTP run
    (`mtp_run`) drafts on its decode workers with its recipe's ``draft_tokens``; with the
    harness record's ``recipes`` an SGLang row's sides take their recipes' command line
    (`recipe_flags`); an srt-slurm
    row's requests go to decode workers in turn where each is one replica
    (`DYNAMO_DECODE_ROUTER`). ValueError("unsupported: ...") when kvsim cannot represent it."""
    from kvsim.model.presets import resolve_gpu, resolve_model

    h = harness or {}
    drafts = None
    if mtp_run(row, h):
        drafts = _int(h.get("draft_tokens"))
        if not drafts:
            raise ValueError(
                "unsupported: a disaggregated MTP speculative-decoding run whose recipe does not name its draft length"
            )
    for stage in STAGES:  # the configuration's count where the row leaves it empty
        if not _int(row.get(f"{stage}_num_workers")) and _int(h.get(f"{stage}_workers")):
            row = {**row, f"{stage}_num_workers": h[f"{stage}_workers"]}
        row = launched_layout(row, h, stage)
    missing = [f"{s}_num_workers" for s in STAGES if not _int(row.get(f"{s}_num_workers"))]
    if missing:
        raise ValueError(
            f"unsupported: the row has no {' or '.join(missing)} (how many workers of each stage)"
        )
    if any((_int(row.get(f"{s}_pp_size")) or 1) > 1 for s in STAGES):
        raise ValueError("unsupported: pipeline parallelism")
    try:
        model = resolve_model(row["model_path"])
        gpu = resolve_gpu(row["system"])
    except Exception as exc:  # an unknown name: a preset kvsim does not have
        raise ValueError(f"unsupported: {exc}") from None
    quant = row.get("gemm_quant_mode") or ""
    if quant not in QUANTIZATION:
        raise ValueError(f"unsupported: weight precision {quant!r}")
    quantization = QUANTIZATION[quant]
    if model.is_moe:
        model, quantization = served_moe(model, row)
    engine: dict[str, Any] = {
        "backend": row["backend"],
        "quantization": quantization,
        "kv_cache_dtype": KV_DTYPE.get(row.get("precision") or "", "auto"),
    }
    if engine_version(row) is not None:
        engine["backend_version"] = engine_version(row)
    concurrency, isl, osl = disagg_concurrency(row, h), _int(row.get("isl")), _int(row.get("osl"))
    if not concurrency or not isl or not osl:
        raise ValueError("unsupported: the row has no concurrency, ISL or OSL")
    groups = [stage_group(row, s, model.is_moe, gpu.name, engine, concurrency, isl) for s in STAGES]
    for group in groups:
        if wide_ep_balanced(group, model, gpu):
            group["cost_model"]["expert_load"] = SGLANG_WIDE_EP_EXPERT_LOAD
    if _int(h.get("decode_batch")):  # the recipe's max_batch_size, per rank
        groups[1]["engine"]["max_num_seqs"] = _int(h["decode_batch"])
    if row["backend"] == "sglang":  # the srt-slurm recipe's command line, each side
        for group, stage in zip(groups, STAGES, strict=True):
            flags, cost = recipe_flags(h, stage, group.get("attention_dp", 1))
            group["engine"].update(flags)
            group["cost_model"].update(cost)
    if drafts is not None:  # the decode workers draft; a prefill worker samples one token
        groups[1]["engine"]["speculative_config"] = {
            "method": "mtp",
            "num_speculative_tokens": drafts,
            "acceptance_rate": mtp_acceptance(row),
        }
    total = sum(g["count"] * worker_gpus(row, s) for g, s in zip(groups, STAGES, strict=True))
    scenario: dict[str, Any] = {
        "name": row["id"][:200],
        "model": model.model_dump() if model.is_moe else model.name,
        "replicas": groups,
        "kv_transfer": kv_link(row["system"], worker_gpus(row, "prefill"), worker_gpus(row, "decode"), total),
        "workload": bench_workload(h, concurrency, isl, osl),
        "seed": 0,
    }
    if h.get("harness") == "inferencex-multi-node-srt-slurm" and "attention_dp" not in groups[1]:
        scenario["decode_router"] = DYNAMO_DECODE_ROUTER
    return _apply(scenario, extra)


#: SGLang's --max-prefill-tokens where a recipe leaves it (ServerArgs.max_prefill_tokens, 0.5.x).
SGLANG_MAX_PREFILL_TOKENS = 16384
#: SGLang's --kv-cache-dtype -> engine.kv_cache_dtype ("auto", SGLang's default: the checkpoint's
#: activation dtype, 16 bits for the DeepSeek-R1 fp8 and fp4 checkpoints).
SGLANG_KV_CACHE_DTYPE = {"": "auto", "auto": "auto", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                         "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}  # fmt: skip


@functools.cache
def srt_slurm_sglang(path: Path = SRT_SLURM_SGLANG) -> dict[tuple[str, str], dict[str, str]]:
    """srt_slurm_recipes.py's lines by (recipe, side); empty where the file is missing."""
    return {(line["recipe"], line["side"]): line for line in read_csv(path)} if path.is_file() else {}


def recipe_flags(
    harness: dict[str, str], stage: str, attention_dp: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine knobs (and kernels cost-model knobs) an srt-slurm row's SGLang recipe set on
    one side, as kvsim's per-rank knobs. A flag is taken where every recipe holding the row (the
    harness record's ``recipes``) gives it the same value, set or unset; nothing where a recipe
    is not in `SRT_SLURM_SGLANG`.

    The worker's own figures, whatever its layout: ``max-running-requests`` as ``max_num_seqs``,
    divided over the side's ``attention_dp`` ranks as kvsim runs it (SGLang divides it over its
    DP ranks, ModelRunner.max_running_requests: the worker's total is the recipe's either way);
    ``mem-fraction-static`` as ``gpu_memory_utilization``; ``kv-cache-dtype`` (unset: the
    checkpoint's); ``scheduler-recv-interval``. A rank's figures, only where the recipes'
    attention-DP ranks are the side's ``attention_dp`` (under another layout they would be
    another batch's): ``chunked-prefill-size`` / dp ranks (SGLang divides it under attention
    DP, ServerArgs._handle_data_parallelism) capped at ``max-prefill-tokens`` (16,384 unset; the
    budget of whole prompts a prefill batch takes) as a prefill worker's
    ``max_num_batched_tokens``; ``max-total-tokens`` as ``max_total_tokens``; a decode worker's
    ``cuda-graph-max-bs`` as the cost model's ``cuda_graph_max_size``. (InferenceX's search
    spaces hold some points in two recipes of different layouts, a ``dep`` and a ``tp`` one,
    and its configuration does not say which ran: their worker figures still agree.)

    What is approximated: SGLang admits whole prompts while the batch's prompt tokens are
    under ``max-prefill-tokens`` (the last may overshoot it up to the chunk); kvsim fills the
    budget exactly. SGLang's admission keeps one token per request in reserve; kvsim's paged
    pool does not."""
    names = (harness.get("recipes") or "").split()
    table = srt_slurm_sglang()
    sides = [table.get((name, stage)) for name in names]
    if not sides or any(side is None for side in sides):
        return {}, {}

    def agreed(flag: str) -> str | None:
        values = {side[flag] for side in sides if side is not None}
        return values.pop() if len(values) == 1 else None

    engine: dict[str, Any] = {}
    kv = agreed("kv_cache_dtype")
    if kv is not None and kv in SGLANG_KV_CACHE_DTYPE:
        engine["kv_cache_dtype"] = SGLANG_KV_CACHE_DTYPE[kv]
    if mem := _num(agreed("mem_fraction_static")):
        engine["gpu_memory_utilization"] = mem
    if running := _int(agreed("max_running_requests")):
        engine["max_num_seqs"] = max(running // attention_dp, 1)
    if interval := _int(agreed("scheduler_recv_interval")):
        engine["scheduler_recv_interval"] = interval
    cost: dict[str, Any] = {}
    dp_attention, dp_size = agreed("enable_dp_attention"), agreed("dp_size")
    if dp_attention is None or dp_size is None:
        return engine, cost
    ranks = (_int(dp_size) or 1) if dp_attention == "true" else 1
    if ranks != attention_dp:
        return engine, cost
    if total := _int(agreed("max_total_tokens")):
        engine["max_total_tokens"] = total
    chunk, budget = _int(agreed("chunked_prefill_size")), agreed("max_prefill_tokens")
    if stage == "prefill" and chunk and chunk > 0 and budget is not None:
        engine["max_num_batched_tokens"] = max(
            min(chunk // ranks, _int(budget) or SGLANG_MAX_PREFILL_TOKENS), 1
        )
    if stage == "decode" and (graphs := _int(agreed("cuda_graph_max_bs"))):
        cost["cuda_graph_max_size"] = graphs
    return engine, cost


def launched_layout(row: dict[str, str], harness: dict[str, str], stage: str) -> dict[str, str]:
    """The row with one stage's layout columns as InferenceX launched it, where its
    configuration says (the harness record's ``{stage}_dp_attn`` and ``{stage}_ep``,
    inferencex_spec.side_layout): the worker's G = tp x attention DP GPUs become attention DP G
    (tp 1) or tp G, its experts moe_tp G / ep x moe_ep ep (G: the record's ``{stage}_gpus``
    where the row's columns count the whole deployment, else the columns'). The srt-slurm rows' columns do not
    say how a worker's GPUs split (a ``dep8`` decode worker, eight attention-DP ranks, appears
    as tp 8, attention DP 1); run as tensor-parallel attention, an MLA model's latent KV, which
    TP does not shard, overflows the worker at the clients the recipe gave it. The row
    unchanged where the record says nothing."""
    flag, ep = harness.get(f"{stage}_dp_attn"), _int(harness.get(f"{stage}_ep"))
    if flag not in ("true", "false") or not ep:
        return row
    gpus = _int(harness.get(f"{stage}_gpus")) or worker_gpus(row, stage)
    if gpus % ep:
        return row
    tp, dp = (1, gpus) if flag == "true" else (gpus, 1)
    return {**row, f"{stage}_tp_size": str(tp), f"{stage}_attention_dp_size": str(dp),
            f"{stage}_moe_tp_size": str(gpus // ep), f"{stage}_moe_ep_size": str(ep)}  # fmt: skip


def disagg_concurrency(row: dict[str, str], harness: dict[str, str]) -> int | None:
    """The clients C: the harness record's, else the row's ``silicon_concurrency=``; else
    None (the row is refused). The row's decode_batch_size is C / (decode workers x
    attention-DP ranks) within 1 on every disagg row that gives C, but on the seven rows
    without C it does not bear that out (a Qwen3-32B row measures 8.7 ms TPOT, too fast
    for the 224 x 4,000-token batch the identity gives), so C is not inferred from it."""
    given = _int(harness.get("concurrency"))
    if given:
        return given
    for part in (row.get("silicon_data_source") or "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == "silicon_concurrency" and _int(value):
            return _int(value)
    return None


#: Each engine's releases by the day PyPI received their first file (``upload_time`` in
#: https://pypi.org/pypi/{vllm,sglang,tensorrt-llm}/json, read 2026-12-04), over the months the
#: rows were measured: `release_in_force` runs a row of a build that is not a release at the
#: newest of these on or before its build day.
RELEASES: dict[str, str] = {
    "vllm": "2025-08-19 0.10.1, 2025-08-20 0.10.1.1, 2025-09-13 0.10.2, 2025-10-04 0.11.0, "
    "2025-11-19 0.11.1, 2025-11-20 0.11.2, 2025-12-03 0.12.0, 2025-12-19 0.13.0, 2026-01-20 0.14.0, "
    "2026-01-24 0.14.1, 2026-01-29 0.15.0, 2026-02-05 0.15.1, 2026-02-26 0.16.0, 2026-03-07 0.17.0, "
    "2026-03-11 0.17.1, 2026-03-20 0.18.0, 2026-03-31 0.18.1, 2026-04-03 0.19.0, 2026-04-18 0.19.1, "
    "2026-04-27 0.20.0, 2026-05-03 0.20.1, 2026-05-10 0.20.2, 2026-05-15 0.21.0, 2026-05-29 0.22.0",
    "sglang": "2025-08-23 0.5.1, 2025-08-24 0.5.1.post1, 2025-08-25 0.5.1.post2, 2025-08-27 0.5.1.post3, "
    "2025-09-01 0.5.2rc0, 2025-09-02 0.5.2rc1, 2025-09-05 0.5.2rc2, 2025-09-11 0.5.2, 2025-09-15 0.5.3rc0, "
    "2025-10-06 0.5.3rc2, 2025-10-06 0.5.3, 2025-10-09 0.5.3.post1, 2025-10-15 0.5.3.post2, "
    "2025-10-16 0.5.3.post3, 2025-10-24 0.5.4, 2025-10-27 0.5.4.post1, 2025-11-01 0.5.4.post2, "
    "2025-11-05 0.5.4.post3, 2025-11-06 0.5.5, 2025-11-10 0.5.5.post1, 2025-11-12 0.5.5.post2, "
    "2025-11-17 0.5.5.post3, 2025-12-03 0.5.6, 2025-12-08 0.5.6.post1, 2025-12-11 0.5.6.post2, "
    "2026-01-01 0.5.7, 2026-01-23 0.5.8, 2026-02-05 0.5.8.post1, 2026-02-23 0.5.9, 2026-03-27 0.5.10rc0, "
    "2026-04-05 0.5.10, 2026-04-08 0.5.10.post1, 2026-05-05 0.5.11, 2026-05-16 0.5.12, 2026-05-23 0.5.12.post1",
    "trtllm": "2025-08-04 1.0.0rc5, 2025-08-07 1.0.0rc6, 2025-08-15 1.1.0rc0, 2025-08-22 1.1.0rc1, "
    "2025-08-30 1.1.0rc2, 2025-09-04 1.1.0rc3, 2025-09-10 1.1.0rc4, 2025-09-17 1.1.0rc5, 2025-09-24 1.0.0, "
    "2025-09-30 1.2.0rc0, 2025-10-22 1.2.0rc1, 2025-11-07 1.2.0rc2, 2025-11-21 1.2.0rc3, 2025-11-25 1.2.0rc4, "
    "2025-12-10 1.2.0rc5, 2025-12-19 1.1.0, 2025-12-23 1.2.0rc6, 2026-01-08 1.2.0rc7, "
    "2026-01-11 1.2.0rc6.post1, 2026-01-15 1.2.0rc8, 2026-01-22 1.2.0rc6.post2, 2026-01-22 1.3.0rc0, "
    "2026-01-27 1.3.0rc1, 2026-02-03 1.3.0rc2, 2026-02-05 1.2.0rc2.post2, 2026-02-05 1.2.0rc6.post3, "
    "2026-02-12 1.3.0rc3, 2026-02-17 1.3.0rc4, 2026-02-24 1.3.0rc5, 2026-03-03 1.3.0rc6, "
    "2026-03-06 1.3.0rc5.post1, 2026-03-10 1.3.0rc7, 2026-03-12 1.2.0, 2026-03-17 1.3.0rc8, "
    "2026-03-24 1.3.0rc9, 2026-03-31 1.3.0rc10, 2026-04-09 1.3.0rc11, 2026-04-17 1.3.0rc12, "
    "2026-04-20 1.2.1, 2026-04-21 1.3.0rc5.post2, 2026-04-29 1.3.0rc13, 2026-05-07 1.3.0rc14, "
    "2026-05-16 1.3.0rc12.post1, 2026-05-21 1.3.0rc15",
}


def _version_key(version: str) -> tuple[int, int, int, int, int]:
    """Order of releases: 1.3.0rc2 < 1.3.0 < 1.3.0.post1 (rc n, final, post n)."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?(?:rc(\d+))?(?:\.post(\d+))?", version)
    if not m:
        raise ValueError(f"not a release: {version!r}")
    major, minor, patch, fourth, rc, post = m.groups()
    stage = (0, int(rc)) if rc is not None else (1, int(post or 0) + int(fourth or 0))
    return int(major), int(minor), int(patch), *stage


def release_in_force(backend: str, day: str) -> str | None:
    """The newest release (by version, not upload order: a backport uploaded later is older)
    of ``backend`` PyPI had received by ``day`` (YYYY-MM-DD; `RELEASES`), or None before them."""
    released = [tuple(item.split()) for item in RELEASES.get(backend, "").split(", ") if item]
    known = [version for when, version in released if when <= day]
    return max(known, key=_version_key) if known else None


def engine_version(row: dict[str, str]) -> str | None:
    """The row's engine version, or None where ``backend_version`` is the Dynamo runtime's
    (``nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2`` gives 0.8.1.post2, Dynamo's
    release, not TensorRT-LLM's): the engine then runs at kvsim's default version. A build that
    is not a release (``nightly-dev``, ``nightly-dev-20260216-d3bae71e``, ``nightly-<commit>``,
    ``gpt-oss-dev``, ``glm5-hopper``) runs at the release in force on its build day: the date
    its name gives, else the day it was measured (`release_in_force`)."""
    version = row.get("backend_version") or None
    source = row.get("silicon_data_source") or ""
    if version and re.search(rf"ai-dynamo/[\w-]+-runtime:{re.escape(version)}(\s|;|$)", source):
        return None
    return build_release(row)


def build_release(row: dict[str, str]) -> str | None:
    """``backend_version`` as kvsim takes it: a release number as it is; a build that is not
    one, the release in force on its build day (`engine_version`). Raises ValueError
    ("unsupported: ...") for a build without a day or older than `RELEASES`."""
    version = row.get("backend_version") or None
    if not version or re.match(r"v?\d+\.\d+", version):
        return version
    named = re.search(r"(20\d\d)(\d\d)(\d\d)", version)
    measured = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.get("silicon_data_source") or "")
    day = "-".join(named.groups()) if named else measured.group(1) if measured else None
    if day is None:
        raise ValueError(f"unsupported: engine build {version!r} is not a release and the row has no date")
    found = release_in_force(row.get("backend", ""), day)
    if found is None:
        raise ValueError(f"unsupported: engine build {version!r}: no {row.get('backend')} release by {day}")
    return found


def worker_gpus(row: dict[str, str], stage: str) -> int:
    """GPUs of one worker of a stage: its tensor-parallel x attention-data-parallel ranks."""
    return (_int(row.get(f"{stage}_tp_size")) or 1) * (_int(row.get(f"{stage}_attention_dp_size")) or 1)


#: SGLang's wide-EP workers balance their experts: every srt-slurm recipe that runs DeepEP
#: (``moe-a2a-backend: deepep``) also runs expert-parallel load balancing with redundant
#: experts (``eplb-algorithm: deepseek``, ``ep-num-redundant-experts: 32``), and the ones
#: that do not (the low-latency recipes) run tensor parallelism (NVIDIA/srt-slurm at c88ef731,
#: recipes/{gb200,gb300}-fp{4,8}/{1k1k,1k8k,8k1k}/*.yaml). So those workers' experts are
#: priced at the wide-EP tables' balanced routing, not aiconfigurator's power-law default
#: (`wide_ep_balanced`).
SGLANG_WIDE_EP_EXPERT_LOAD = "balanced"

#: How the multi-node rows' front end picked a decode worker: InferenceX's srt-slurm recipes
#: serve behind Dynamo's frontend and set no ``--router-mode``, whose default is round-robin
#: (Dynamo 1.2 Router Guide; NVIDIA/srt-slurm at c88ef731, ``frontend:`` without a router).
#: kvsim's round-robin turns replica by replica, so it is set only where each decode worker is
#: one replica (no attention DP): Dynamo hands a worker with attention DP the request, and the
#: worker picks its rank, which kvsim's least-loaded default stands for.
DYNAMO_DECODE_ROUTER = "round_robin"


def wide_ep_balanced(group: dict[str, Any], model: Any, gpu: Any) -> bool:
    """Whether a stage's experts are priced at `SGLANG_WIDE_EP_EXPERT_LOAD`: an SGLang side
    with attention DP and whole experts (moe_tp 1: DeepEP) whose layout SGLang's wide-EP
    tables hold (`kvsim.cost.kernels.wide_ep_moe_curves`). Where they do not, kvsim prices
    the experts from ``moe_perf``, whose SGLang rows time one GPU's fused MoE over all the
    instance's tokens (its balanced rows the slower, unlike a rank's load), so the default
    stands there."""
    from kvsim.cost.config import KernelCostConfig
    from kvsim.cost.kernels import resolve_source, wide_ep_moe_curves

    dp, ep = group.get("attention_dp", 1), group.get("moe_ep", 1)
    if group["engine"]["backend"] != "sglang" or dp == 1 or ep != group["tp"] * dp or not model.is_moe:
        return False
    source = resolve_source(KernelCostConfig(), gpu, "sglang")
    curves = wide_ep_moe_curves(
        source, hidden=model.hidden_size, inter=model.intermediate_size, topk=model.num_experts_per_token,
        num_experts=model.num_experts, moe_ep=ep, expert_dtype="fp8_block", distribution="uniform", warn=[],
    )  # fmt: skip
    return curves is not None


def stage_group(row: dict[str, str], stage: str, is_moe: bool, gpu: str, engine: dict[str, Any],
                concurrency: int, isl: int) -> dict[str, Any]:  # fmt: skip
    """One stage's replica group: its workers, tp and role, and the layout fields of issue 22
    item 2 (``attention_dp``, ``moe_tp``, ``moe_ep``) wherever the row's layout is not plain
    tensor parallelism (moe_tp x moe_ep = tp x attention_dp; a field the schema does not
    know makes the row "unsupported" through the scenario's own error). A decode worker
    holds its share of the clients, ceil(C / decode workers) sequences (the row's
    decode_batch_size x decode_attention_dp_size); a prefill worker keeps its engine's
    defaults (the rows' prefill_batch_size is 1 throughout: the estimator's prefill batch),
    except that a TensorRT-LLM one, which does not chunk prompts, takes the longest prompt
    in one step (max_num_tokens >= ISL; its default is 8,192, too few for 15,000-token rows
    that ran)."""
    workers = _int(row.get(f"{stage}_num_workers")) or 1
    tp, dp = _int(row.get(f"{stage}_tp_size")) or 1, _int(row.get(f"{stage}_attention_dp_size")) or 1
    group: dict[str, Any] = {"name": stage, "count": workers, "role": stage, "gpu": gpu, "tp": tp,
                             "engine": dict(engine), "cost_model": {"kind": "kernels"}}  # fmt: skip
    group["engine"]["async_scheduling"] = async_scheduling(row, {}, stage)
    if dp > 1:
        group["attention_dp"] = dp
    if is_moe:  # a dense model's moe_* columns say nothing (0, 1 or the tp size)
        moe_tp = _int(row.get(f"{stage}_moe_tp_size")) or None  # 0 or empty: not given
        moe_ep = _int(row.get(f"{stage}_moe_ep_size")) or 1
        if moe_ep > 1:
            group["moe_ep"] = moe_ep
        if moe_tp is not None and moe_tp != tp * dp:
            group["moe_tp"] = moe_tp
    if stage == "decode":
        group["engine"]["max_num_seqs"] = math.ceil(concurrency / workers)
    elif engine["backend"] == "trtllm" and isl > TRTLLM_MAX_NUM_TOKENS:
        group["engine"]["max_num_batched_tokens"] = isl
    return group


def system_node(system: str) -> dict[str, Any]:
    """The ``node`` section of aiconfigurator-core's ``systems/<system>.yaml`` (0.12.0): GPUs
    per node (and per NVL72 rack), per-GPU NVLink and network bandwidths, latency."""
    from kvsim.yaml_safe import load_yaml_file

    root = package_tables_root()
    path = root.parent / f"{system}.yaml" if root is not None else None
    if path is None or not path.is_file():
        raise ValueError(f"unsupported: no aiconfigurator-core system file for {system!r} (the KV link)")
    node = load_yaml_file(path, what="system").get("node") or {}
    return dict(node)


def kv_link(system: str, prefill_gpus: int, decode_gpus: int, total_gpus: int) -> dict[str, float]:
    """``kv_transfer`` of a deployment: NVLink when all its GPUs fit one NVLink domain (an
    8-GPU node; a GB200/GB300 NVL72 rack, ``num_gpus_per_rack``), else the network between
    nodes (racks). Each GPU sends its own shard, so a transfer gets min(prefill GPUs, decode
    GPUs) of the per-GPU links; the latency is the system file's ``p2p_latency``."""
    node = system_node(system)
    domain = int(node.get("num_gpus_per_rack") or node.get("num_gpus_per_node") or 8)
    if total_gpus <= domain:
        per_gpu = float(node["intra_node_bw"])
    else:
        per_gpu = float(node.get("inter_rack_bw") or node["inter_node_bw"])
    return {
        "bandwidth_bytes_per_s": per_gpu * min(prefill_gpus, decode_gpus),
        "latency_s": float(node.get("p2p_latency", 10e-6)),
    }


def bench_workload(harness: dict[str, str], concurrency: int, isl: int, osl: int) -> dict[str, Any]:
    """The benchmark client as the harness record says it ran (`scenario_for`'s rule)."""
    ratio = _num(harness.get("random_range_ratio"))
    return {
        "kind": "bench_serve",
        "max_concurrency": concurrency,
        "num_prompts": _int(harness.get("num_prompts")) or 10 * concurrency,
        "num_warmups": _int(harness.get("num_warmups")) or 0,
        "random_input_len": isl,
        "random_output_len": osl,
        "random_range_ratio": 1.0 if ratio is None else ratio,
        "random_range_ratio_rule": "legacy",
    }


def client_times(result: Any) -> tuple[float, float]:
    """Mean TTFT and mean TPOT, seconds, of a disaggregated run as the benchmark client sees
    them. kvsim samples a request's first token at the end of its prefill (its ``ttft_s``);
    the client's stream comes from the decode worker, which shows it at the end of its first
    iteration holding the request (as vLLM's NIXL connector does: the decode worker
    recomputes the prompt's last token and samples the first): the iteration that started at
    the request's ``decode_scheduled_s``, after its KV arrived and a slot was free. TTFT
    ends there; TPOT is (finish - that) / (output - 2), the decode worker's mean time a token
    over the rest (it samples output - 1 tokens in kvsim, output in the engine). Requests
    that never reached a decode worker (one output token) keep kvsim's own times. Warm-ups
    and unfinished requests are left out, as in the summary."""
    import numpy as np

    reqs = _measured_requests(result)
    ttft = reqs["ttft_s"].to_numpy(dtype=float).copy()
    tpot = reqs["tpot_s"].to_numpy(dtype=float).copy()
    out = reqs["output_tokens"].to_numpy(dtype=float)
    moved = ~np.isnan(reqs["decode_scheduled_s"].to_numpy(dtype=float)) & (out > 2)
    for name in set(reqs["replica_id"][moved]):
        mine = moved & (reqs["replica_id"] == name).to_numpy()
        starts, ends = _replica_steps(result.iterations, name)
        scheduled = reqs["decode_scheduled_s"].to_numpy(dtype=float)[mine]
        first = ends[np.searchsorted(starts, scheduled - 1e-12, side="left")]
        ttft[mine] = first - reqs["arrival_s"].to_numpy(dtype=float)[mine]
        tpot[mine] = (reqs["finish_s"].to_numpy(dtype=float)[mine] - first) / (out[mine] - 2)
    return _means(ttft, tpot)


#: TensorRT-LLM's ``stream_interval`` (the executor answers a streaming request every N of its
#: iterations) as trtllm-serve showed it to InferenceX's client: the first chunk came with the
#: N-th iteration that produced the request's tokens, not with the first. The rows say so:
#: on the every-eighth MoE sample kvsim's TTFT fell short of the measured one by about N of
#: its own steps, whatever the concurrency or prompt length (DeepSeek-R1 / V3, whose scripts
#: set 10: 5-17 steps, median 10; gpt-oss-120b, 20: 14-38, but 3-4 on three B200 runs of
#: 2025-11), on the 1.1.0rc2 and 1.2.0rc6 images alike, and by nothing on the rows without it
#: (NVIDIA's gap analysis). TensorRT-LLM's executor has answered the context step at once
#: since #5836 (July 2025); where the hold comes from on the serving path is not identified.
#: SGLang and vLLM exempt the first token from their stream intervals (SGLang's
#: ``len(req.output_ids) == 1``, vLLM's ``sent_tokens_offset == 0``,
#: v1/engine/output_processor.py) and get no such hold.
#: The hold grows with the instance's GPUs (`HOLD_FULL_AT_GPUS`): of the N - 1 iterations past
#: the first, the 185 h200_sxm TensorRT-LLM aggregated rows saw (median, measured TTFT against
#: kvsim's with and without the hold) 0.05 on 1 GPU (17 rows), 0.21 on 2 (30), 0.52 on 4 (29),
#: 1.02 on 8 (95) and 1.24 on 64 (14): about GPUs / 8, all of it from one node up. H200 fit
#: objective (median |TTFT error| + median |TPOT error|): the whole hold on every row 0.451
#: (TTFT 36% / 126% / +20%), none 0.574, on 4 GPUs and more 0.340, on 8 and more 0.335,
#: GPUs / 8 of it 0.239 (TTFT 15% / 50% / -0%).
_STREAM_INTERVAL = re.compile(r"stream_interval (\d+)")

#: The instance size, in GPUs, from which its client saw the whole stream-interval hold (one
#: 8-GPU node: `first_chunk_iterations`).
HOLD_FULL_AT_GPUS = 8


def first_chunk_iterations(
    row: dict[str, str], harness: dict[str, str], gpus: int = HOLD_FULL_AT_GPUS
) -> int:
    """How many of its iterations a request of the row ran before the client saw its first
    token: 1 + (N - 1) x min(1, gpus / `HOLD_FULL_AT_GPUS`), rounded, for the launch script's
    TensorRT-LLM ``stream_interval`` N (`describe`) on an instance of ``gpus`` GPUs; else 1.
    Only the aggregated rows: the disaggregated recipes' decode workers are not transcribed."""
    if row.get("backend") != "trtllm" or row.get("mode") == "disagg":
        return 1
    found = _STREAM_INTERVAL.search(describe(row, harness))
    if not found:
        return 1
    share = min(1.0, max(gpus, 1) / HOLD_FULL_AT_GPUS)
    return 1 + math.floor((int(found[1]) - 1) * share + 0.5)


def instance_gpus(scenario: dict[str, Any]) -> int:
    """GPUs of one instance of an aggregated row's scenario: its replica group's tp x
    attention_dp (the ranks that serve one batch together)."""
    group = scenario["replicas"][0]
    return int(group.get("tp") or 1) * int(group.get("attention_dp") or 1)


def streamed_times(result: Any, iterations: int) -> tuple[float, float]:
    """Mean TTFT and mean TPOT, seconds, of an aggregated run whose server sends a request's
    first token with its ``iterations``-th iteration (`first_chunk_iterations`): the end of the
    iteration ``iterations - 1`` after the one that gave kvsim's first token, on the request's
    replica (every iteration of a replica runs each of its requests until it finishes; a
    request that finishes sooner shows its first token at its finish). The client's TPOT is
    (finish - first chunk) / (output - 1), as the benchmark computes it. Warm-ups and
    unfinished requests are left out, as in the summary."""
    import numpy as np

    reqs = _measured_requests(result)
    first = reqs["first_token_s"].to_numpy(dtype=float).copy()
    finish = reqs["finish_s"].to_numpy(dtype=float)
    for name in set(reqs["replica_id"]):
        mine = (reqs["replica_id"] == name).to_numpy()
        _, ends = _replica_steps(result.iterations, name)
        at = np.searchsorted(ends, first[mine] - 1e-12, side="left") + iterations - 1
        first[mine] = ends[np.minimum(at, len(ends) - 1)]
    first = np.minimum(first, finish)
    out = reqs["output_tokens"].to_numpy(dtype=float)
    many = out > 1
    return _means(first - reqs["arrival_s"].to_numpy(dtype=float), (finish - first)[many] / (out[many] - 1))


def _measured_requests(result: Any) -> Any:
    """The requests the summary counts: finished, not warm-ups."""
    reqs = result.requests
    return reqs[reqs["finished"].to_numpy(dtype=bool) & ~reqs["warmup"].to_numpy(dtype=bool)]


def _replica_steps(iterations: Any, replica: str) -> tuple[Any, Any]:
    """Start and end times of ``replica``'s iterations, in order (they never overlap)."""
    import numpy as np

    steps = iterations[iterations["replica_id"] == replica]
    starts = steps["start_s"].to_numpy(dtype=float)
    order = np.argsort(starts, kind="stable")
    return starts[order], starts[order] + steps["duration_s"].to_numpy(dtype=float)[order]


def _means(ttft: Any, tpot: Any) -> tuple[float, float]:
    """The two means over the values that are numbers (NaN where there are none)."""
    import numpy as np

    ttft, tpot = ttft[~np.isnan(ttft)], tpot[~np.isnan(tpot)]
    return (float(ttft.mean()) if len(ttft) else math.nan, float(tpot.mean()) if len(tpot) else math.nan)


def _apply(scenario: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        node: Any = scenario
        parts = key.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[parts[-1]] = value
    return scenario


#: The most output tokens a row's measured prompts may ask for (``--max-output-tokens``) before
#: the row is counted as refused, not run: the six largest rows of the every-eighth MoE sample
#: (1k/8k at 2,048-8,192 clients, 168-671 million measured output tokens) would take hours of
#: a core each, and docs/validation.md's figures count them as refused; the next largest ask
#: for 88 million and run.
MAX_OUTPUT_TOKENS = 110_000_000


def measured_output_tokens(scenario: dict[str, Any]) -> int:
    """Output tokens the row's measured prompts ask for: prompts x the output length."""
    workload = scenario.get("workload") or {}
    return int(workload.get("num_prompts") or 0) * int(workload.get("random_output_len") or 0)


def simulate(
    job: tuple[dict[str, str], dict[str, str] | None, dict[str, Any]],
    max_output_tokens: int = MAX_OUTPUT_TOKENS,
) -> dict[str, Any]:
    """One row: {"id", "status", "mean_ttft_ms", "mean_tpot_ms"} (and the run's wall time).
    A row whose measured prompts ask for more than ``max_output_tokens`` is not run."""
    import warnings

    import kvsim

    row, harness, extra = job
    out: dict[str, Any] = {"id": row["id"], "status": "ok", "mean_ttft_ms": None, "mean_tpot_ms": None}
    start = time.perf_counter()
    try:
        scenario = scenario_for(row, harness, extra)
        if (tokens := measured_output_tokens(scenario)) > max_output_tokens:
            out["status"] = f"unsupported: not run: {tokens:,} output tokens, over --max-output-tokens"
            out["wall_s"] = round(time.perf_counter() - start, 3)
            return out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = kvsim.run(scenario)
        s = result.summary
        out["mean_ttft_ms"] = 1e3 * s["ttft_mean_s"]
        out["mean_tpot_ms"] = 1e3 * s["tpot_mean_s"]
        if row.get("mode") == "disagg":  # the client's view; kvsim's own TTFT ends at the prefill
            out["prefill_ttft_ms"], out["prefill_tpot_ms"] = out["mean_ttft_ms"], out["mean_tpot_ms"]
            ttft, tpot = client_times(result)
            out["mean_ttft_ms"], out["mean_tpot_ms"] = 1e3 * ttft, 1e3 * tpot
        elif (chunk := first_chunk_iterations(row, harness or {}, instance_gpus(scenario))) > 1:
            out["engine_ttft_ms"], out["engine_tpot_ms"] = out["mean_ttft_ms"], out["mean_tpot_ms"]
            ttft, tpot = streamed_times(result, chunk)
            out["mean_ttft_ms"], out["mean_tpot_ms"] = 1e3 * ttft, 1e3 * tpot
        if s["num_finished"] < s["num_requests"]:
            out["status"] = f"unsupported: {s['num_requests'] - s['num_finished']} requests did not finish"
    except ValueError as exc:
        if str(exc).startswith("unsupported:"):
            out["status"] = str(exc)
        else:
            out["status"] = f"unsupported: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    except kvsim.KvsimError as exc:
        out["status"] = f"unsupported: {str(exc).splitlines()[-1].strip()[:300]}"
    except MemoryError:  # under a memory limit (ulimit -v): this row is lost, not the others
        out["status"] = "unsupported: MemoryError: the simulation ran out of memory"
    # A pool's free queue is a cycle of linked blocks: collect the row's now, or a worker that
    # runs row after row holds several rows' pools until the cyclic collector's next full pass.
    gc.collect()
    out["wall_s"] = round(time.perf_counter() - start, 3)
    return out


# --------------------------------------------------------------------------- error tables


def family(model_path: str) -> str:
    for name in DENSE_FAMILIES:
        if name.lower() in model_path.lower():
            return name
    return model_path.split("/")[-1]


def _errors(pairs: Iterable[tuple[float, float]]) -> list[float]:
    return [p / m - 1 for p, m in pairs if p is not None and m and math.isfinite(p) and math.isfinite(m)]


def _quantile(values: list[float], q: float) -> float:
    """numpy's linear percentile, without numpy (this runs beside either interpreter)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def stats(errors: list[float]) -> str:
    if not errors:
        return "- | - | -"
    absolute = [abs(e) for e in errors]
    return (
        f"{100 * _quantile(absolute, 0.5):.0f}% | {100 * _quantile(absolute, 0.9):.0f}% | "
        f"{100 * _quantile(errors, 0.5):+.0f}%"
    )


def report(rows: list[dict[str, str]], ours: dict[str, dict[str, Any]], peer: dict[str, dict[str, Any]],
           where: Callable[[dict[str, str]], bool],
           harness: dict[str, dict[str, str]] | None = None) -> str:  # fmt: skip
    """Markdown tables: per group, kvsim's and the estimator's errors on the same rows; with
    ``harness``, the totals also by the harness that measured the rows."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        if where(row):
            key = ("fit" if row["system"] == FIT_SYSTEM else "held out", family(row["model_path"]),
                   row["system"], row["backend"])  # fmt: skip
            groups.setdefault(key, []).append(row)
    lines = [
        "| set | model | GPU | backend | rows | kvsim ok | TTFT med | p90 | bias | TPOT med | p90 | bias "
        "| estimator ok | est. TTFT med | p90 | bias | est. TPOT med | p90 | bias |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | ---: |",
    ]
    totals: dict[str, list[dict[str, str]]] = {}
    for key in sorted(groups):
        lines.append(_line(key, groups[key], ours, peer))
        totals.setdefault(key[0], []).extend(groups[key])
    lines.append("")
    lines += [lines[0], lines[1]]
    for name in ("fit", "held out"):
        if name in totals:
            lines.append(_line((name, "all", "all", "all"), totals[name], ours, peer))
    if harness:
        by_kind: dict[tuple[str, str], list[dict[str, str]]] = {}
        for name in ("fit", "held out"):
            for row in totals.get(name, []):
                kind = harness.get(row["id"], {}).get("harness", "unknown")
                by_kind.setdefault((name, kind), []).append(row)
        for (name, kind), chosen in sorted(by_kind.items()):
            lines.append(_line((name, f"harness {kind}", "all", "all"), chosen, ours, peer))
        by_spec: dict[tuple[str, str], list[dict[str, str]]] = {}
        for name in ("fit", "held out"):
            for row in totals.get(name, []):
                record = harness.get(row["id"], {})
                spec = record.get("spec_decoding")
                if spec and record.get("twin_run"):
                    spec = f"{spec} ({record['twin_run']} run)"
                if spec:
                    by_spec.setdefault((name, spec), []).append(row)
        for (name, spec), chosen in sorted(by_spec.items()):
            lines.append(_line((name, f"InferenceX MTP {spec}", "all", "all"), chosen, ours, peer))
    lines.append("")
    lines.append("Rows kvsim predicts and the estimator does not (or the reverse) are in one column and")
    lines.append("not the other; `both ok` below compares the two on the same rows only:")
    lines.append("")
    lines += [lines[0], lines[1]]
    for name in ("fit", "held out"):
        both = [r for r in totals.get(name, []) if _ok(ours, r) and _ok(peer, r)]
        if both:
            lines.append(_line((f"{name}, both ok", "all", "all", "all"), both, ours, peer))
    return "\n".join(lines)


def _ok(results: dict[str, dict[str, Any]], row: dict[str, str]) -> bool:
    r = results.get(row["id"])
    return r is not None and r.get("status") == "ok"


def _line(key: tuple[str, ...], rows: list[dict[str, str]], ours: dict[str, dict[str, Any]],
          peer: dict[str, dict[str, Any]]) -> str:  # fmt: skip
    cells = [*key, str(len(rows))]
    for results in (ours, peer):
        ok = [r for r in rows if _ok(results, r)]
        ttft = _errors((results[r["id"]]["mean_ttft_ms"], _num(r["silicon_ttft_ms"])) for r in ok)
        tpot = _errors((results[r["id"]]["mean_tpot_ms"], _num(r["silicon_tpot_ms"])) for r in ok)
        cells += [f"{len(ok)}", stats(ttft), stats(tpot)] if results else ["-"] * 7
    return "| " + " | ".join(cells) + " |"


def is_dense_agg(row: dict[str, str]) -> bool:
    return row.get("mode") == "agg" and family(row["model_path"]) in DENSE_FAMILIES


def load_results(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return {r["id"]: r for r in json.loads(raw)}


# --------------------------------------------------------------------------- the fit

#: The kernels model's free constants and the values the fit tries (`--fit BACKEND`).
FIT_GRID: dict[str, list[float]] = {
    "per_iteration_overhead_s": [0.0, 0.5e-3, 1e-3, 2e-3],
    "per_layer_overhead_s": [0.0, 5e-6, 10e-6, 20e-6],
    "elementwise_kernel_s": [0.0, 1.5e-6, 3e-6],
}


def objective(rows: list[dict[str, str]], results: list[dict[str, Any]]) -> float:
    """Median |error| of mean TTFT plus that of mean TPOT over the rows kvsim ran."""
    by_id = {r["id"]: r for r in results if r["status"] == "ok"}
    ok = [r for r in rows if r["id"] in by_id]
    if len(ok) < len(rows) // 2:
        return math.inf
    ttft = _errors((by_id[r["id"]]["mean_ttft_ms"], _num(r["silicon_ttft_ms"])) for r in ok)
    tpot = _errors((by_id[r["id"]]["mean_tpot_ms"], _num(r["silicon_tpot_ms"])) for r in ok)
    return _quantile([abs(e) for e in ttft], 0.5) + _quantile([abs(e) for e in tpot], 0.5)


def fit(
    rows: list[dict[str, str]],
    harness: dict[str, dict[str, str]],
    backend: str,
    jobs: int,
    rows_by_id: dict[str, dict[str, str]] | None = None,
) -> dict[str, float]:
    """Coordinate descent over `FIT_GRID` on one backend's h200_sxm rows: each constant in turn
    takes the grid value that minimises `objective`, until a round changes nothing.
    ``rows_by_id``: every row of the file, where a copy's twin is found (`as_run`)."""
    by_id = rows_by_id if rows_by_id is not None else {r["id"]: r for r in rows}
    chosen = [r for r in rows if r["backend"] == backend and r["system"] == FIT_SYSTEM]
    if any(r["system"] != FIT_SYSTEM for r in chosen):  # the fitting rule, kept by construction
        raise AssertionError("constants are fitted on h200_sxm rows only")
    best = {"per_iteration_overhead_s": 0.0, "per_layer_overhead_s": 0.0, "elementwise_kernel_s": 3e-6}
    seen: dict[tuple[float, ...], float] = {}

    def score(params: dict[str, float]) -> float:
        key = tuple(params[k] for k in FIT_GRID)
        if key not in seen:
            extra = {f"replicas.0.cost_model.{k}": v for k, v in params.items()}
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                jobs_ = [
                    (as_run(r, harness.get(r["id"]), by_id), harness.get(r["id"]), extra) for r in chosen
                ]
                results = list(pool.map(simulate, jobs_))
            seen[key] = objective(chosen, results)
            print(f"  {params} -> {seen[key]:.4f}", file=sys.stderr, flush=True)
        return seen[key]

    for _round in range(2):
        changed = False
        for name, grid in FIT_GRID.items():
            values = {v: score({**best, name: v}) for v in grid}
            pick = min(values, key=lambda v: (values[v], v))
            changed |= pick != best[name]
            best[name] = pick
        if not changed:
            break
    print(
        f"{backend}: {len(chosen)} {FIT_SYSTEM} rows, objective {score(best):.4f} at {best}", file=sys.stderr
    )
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=Path, help="a CSV in silicon_sample.csv's format (default: the installed one)"
    )
    parser.add_argument("--out", type=Path, help="per-row JSON to write (default: print the tables only)")
    parser.add_argument("--report", type=Path, help="write the error tables as Markdown to this file")
    parser.add_argument(
        "--harness", type=Path, default=HARNESS, help="per-row benchmark settings (silicon_harness.py)"
    )
    parser.add_argument(
        "--peer", type=Path, default=PEER, help="the estimator's per-row JSON (aiconfigurator_peer.py)"
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument(
        "--match", action="append", default=[], help="only rows whose id contains this (repeatable)"
    )
    parser.add_argument("--all", action="store_true", help="every row, not only the dense aggregated ones")
    parser.add_argument(
        "--fit",
        metavar="BACKEND",
        help="fit the kernels model's constants for BACKEND "
        "(vllm, sglang, trtllm) on h200_sxm rows only, print them and stop",
    )
    parser.add_argument("--results", type=Path, action="append", default=[], metavar="JSON",
                        help="tables from per-row results written before (repeatable; no simulation)")  # fmt: skip
    parser.add_argument("--harness-kind", help="only rows of this harness (e.g. nvidia-gap-analysis)")
    parser.add_argument("--srt-slurm-recipes", action=argparse.BooleanOptionalAction, default=True,
                        help="launch each side of a multi-node SGLang row with its srt-slurm recipe's flags "
                        "(recipe_flags; on by default: docs/validation.md, twenty-second pass)")  # fmt: skip
    parser.add_argument("--every", type=int, default=1, metavar="K", help="every K-th chosen row (a sample)")
    parser.add_argument("--assume-prompts-per-client", type=float, metavar="N",
                        help=f"{ASSUMED_HARNESS} rows: N x C measured prompts (documented assumption: 10)")  # fmt: skip
    parser.add_argument("--assume-warmups-per-client", type=float, metavar="N",
                        help=f"{ASSUMED_HARNESS} rows: N x C warm-ups (assumption: 2)")  # fmt: skip
    parser.add_argument("--assume-range-ratio", type=float, metavar="R",
                        help=f"{ASSUMED_HARNESS} rows: lengths U[floor(R L), L] (assumption: 1, exact)")  # fmt: skip
    parser.add_argument("--max-output-tokens", type=int, default=MAX_OUTPUT_TOKENS, metavar="N",
                        help="count a row whose measured prompts ask for more output tokens as refused, "
                        f"not run (default {MAX_OUTPUT_TOKENS:,}: hours of a core above it)")  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a scenario override for every row, JSON value (e.g. workload.num_prompts=640)")  # fmt: skip
    args = parser.parse_args(argv)
    if not 1 <= args.jobs <= 64:
        parser.error("--jobs must be in 1..64")
    extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        extra[key] = json.loads(value)
    rows = read_csv(args.rows or default_rows())
    harness = harness_by_id(args.harness, recipes=args.srt_slurm_recipes)
    if not 1 <= args.every <= 10_000:
        parser.error("--every must be in 1..10000")
    if args.max_output_tokens < 1:
        parser.error("--max-output-tokens must be at least 1")
    harness = {
        rid: assume(
            h, args.assume_prompts_per_client, args.assume_range_ratio, args.assume_warmups_per_client
        )
        for rid, h in harness.items()
    }
    chosen = [
        r
        for r in rows
        if (args.all or is_dense_agg(r))
        and all(m in r["id"] for m in args.match)
        and (args.harness_kind is None or harness.get(r["id"], {}).get("harness") == args.harness_kind)
    ][:: args.every]
    if args.fit:
        print(json.dumps(fit(chosen, harness, args.fit, args.jobs, {r["id"]: r for r in rows})))
        return 0
    start = time.perf_counter()
    results: list[dict[str, Any]] = []
    if args.results:
        loaded: dict[str, dict[str, Any]] = {}
        for path in args.results:
            loaded.update(load_results(path))
        chosen = [r for r in chosen if r["id"] in loaded]
        results = [loaded[r["id"]] for r in chosen]
    else:
        print(f"{len(chosen)} of {len(rows)} rows, {args.jobs} workers", file=sys.stderr)
        by_id = {r["id"]: r for r in rows}
        jobs = [(as_run(r, harness.get(r["id"]), by_id), harness.get(r["id"]), extra) for r in chosen]
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            run_one = functools.partial(simulate, max_output_tokens=args.max_output_tokens)
            for i, res in enumerate(pool.map(run_one, jobs, chunksize=1), 1):
                results.append(res)
                if i % 25 == 0 or i == len(jobs):
                    print(f"  {i}/{len(jobs)} rows, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(f".{args.out.name}.tmp-{os.getpid()}")
        data = json.dumps(results, indent=0).encode()
        tmp.write_bytes(gzip.compress(data, mtime=0) if args.out.suffix == ".gz" else data)
        tmp.replace(args.out)
    ours = {r["id"]: r for r in results}
    peer = load_results(args.peer)
    text = report(chosen, ours, peer, lambda r: True, harness)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    text += "\n\nkvsim's statuses: " + "; ".join(
        f"{k}: {v}" for k, v in sorted(statuses.items(), key=lambda kv: -kv[1])
    )
    if not args.results:
        text += f"\n\n{len(chosen)} rows in {time.perf_counter() - start:.0f} s wall ({args.jobs} workers)"
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
