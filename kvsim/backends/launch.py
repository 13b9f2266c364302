"""The serving engine's launch command for a deployment a scenario describes.

    launch_commands(scenario) -> [GroupLaunch(role "both", replicas 3, command "vllm serve Qwen/...")]

One command per replica group, to run once per replica (``replicas`` times), with the
engine knobs the scenario resolved (`kvsim.backends.defaults`: every knob the planner or the file
set, and the backend's defaults for the rest) written as that engine's flags:

    kvsim knob               vllm serve                 sglang.launch_server        trtllm-serve
    tp                       --tensor-parallel-size     --tp (x attention_dp)       --tp_size (x attention_dp)
    attention_dp             --data-parallel-size       --dp, --enable-dp-attention enable_attention_dp
    moe_ep > 1               --enable-expert-parallel   --ep-size                   --ep_size
    max_num_seqs             --max-num-seqs             --max-running-requests      --max_batch_size
    max_num_batched_tokens   --max-num-batched-tokens   --chunked-prefill-size      --max_num_tokens
    kv_cache_dtype           --kv-cache-dtype           --kv-cache-dtype            kv_cache_config.dtype
    enable_prefix_caching    --[no-]enable-prefix-caching  --disable-radix-cache    kv_cache_config.enable_block_reuse
    gpu_memory_utilization   --gpu-memory-utilization   --mem-fraction-static       --kv_cache_free_gpu_memory_fraction
    block_size               --block-size               --page-size                 kv_cache_config.tokens_per_block
    enable_chunked_prefill   --no-enable-chunked-prefill  (always on)               enable_chunked_prefill

TensorRT-LLM's knobs without a command-line flag go into the YAML file its
``--extra_llm_api_options`` reads, printed beside the command. Disaggregated groups get
their engine's prefill/decode role (vLLM: a NixlConnector KV transfer config; SGLang:
``--disaggregation-mode``); the router in front of them is not an engine flag and is named
in a note.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from kvsim.model.presets import resolve_model
from kvsim.scenario.schema import ReplicaGroup, Scenario

_HF_ID = re.compile(r"huggingface\.co/([\w.\-]+/[\w.\-]+)")
#: kvsim KV dtypes -> each engine's spelling (None: no such flag value; a note says so).
_KV_DTYPE: dict[str, dict[str, str]] = {
    "vllm": {"auto": "auto", "fp8": "fp8", "bf16": "bfloat16"},
    "sglang": {"auto": "auto", "fp8": "fp8_e4m3", "bf16": "bf16"},
    "trtllm": {"auto": "auto", "fp8": "fp8"},
}


@dataclass(frozen=True)
class GroupLaunch:
    """How to start one replica group's replicas."""

    group: str
    role: str
    replicas: int
    gpus_per_replica: int
    command: str
    config_file: str = ""  # TensorRT-LLM's --extra_llm_api_options YAML ("" when none)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The command with its replica count, config file and notes, as printed."""
        role = "" if self.role == "both" else f" ({self.role})"
        lines = [f"# {self.group}{role}: {self.replicas} replica(s) of {self.gpus_per_replica} GPU(s), each:"]
        lines.append(self.command)
        if self.config_file:
            lines += ["# extra_llm_api_options.yaml:", *self.config_file.rstrip("\n").splitlines()]
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines)


def model_id(scenario: Scenario) -> str:
    """The Hugging Face id to serve: the scenario's own when it names one, else the id the
    preset (or inline model) cites as its source, else its name."""
    if isinstance(scenario.model, str) and "/" in scenario.model:
        return scenario.model
    model = resolve_model(scenario.model)
    found = _HF_ID.search(model.source)
    return found.group(1) if found else model.name


def _vllm(group: ReplicaGroup, model: str, notes: list[str]) -> tuple[list[str], str]:
    e = group.engine
    args = ["vllm", "serve", model, "--tensor-parallel-size", str(group.tp)]
    moe_tp, moe_ep = group.moe_layout
    if group.attention_dp > 1:
        args += ["--data-parallel-size", str(group.attention_dp)]
    if moe_ep > 1:
        args.append("--enable-expert-parallel")
        if moe_tp > 1:
            notes.append(
                f"vLLM's expert parallelism spans all tp x data-parallel GPUs: moe_tp {moe_tp} x moe_ep "
                f"{moe_ep} has no vLLM flag (kvsim simulated it anyway)"
            )
    args += ["--max-num-seqs", str(e.max_num_seqs), "--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    args += ["--kv-cache-dtype", _kv_dtype("vllm", e.kv_cache_dtype, notes)]
    args.append("--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching")
    args += ["--gpu-memory-utilization", f"{e.gpu_memory_utilization:g}", "--block-size", str(e.block_size)]
    if not e.enable_chunked_prefill:
        args.append("--no-enable-chunked-prefill")
    if e.long_prefill_token_threshold:
        args += ["--long-prefill-token-threshold", str(e.long_prefill_token_threshold)]
    if e.max_model_len is not None:
        args += ["--max-model-len", str(e.max_model_len)]
    _quantization(args, "--quantization", e.quantization, notes)
    if group.role != "both":
        config = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        args += ["--kv-transfer-config", json.dumps(config, separators=(",", ":"))]
    return args, ""


def _sglang(group: ReplicaGroup, model: str, notes: list[str]) -> tuple[list[str], str]:
    e = group.engine
    # SGLang's --tp counts the instance's GPUs; --dp of them run attention as data-parallel ranks.
    args = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        "--tp",
        str(group.gpus_per_instance),
    ]
    if group.attention_dp > 1:
        args += ["--dp", str(group.attention_dp), "--enable-dp-attention"]
    if group.moe_layout[1] > 1:
        args += ["--ep-size", str(group.moe_layout[1])]
    args += [
        "--max-running-requests",
        str(e.max_num_seqs),
        "--chunked-prefill-size",
        str(e.max_num_batched_tokens),
    ]
    args += ["--kv-cache-dtype", _kv_dtype("sglang", e.kv_cache_dtype, notes)]
    args += ["--mem-fraction-static", f"{e.gpu_memory_utilization:.3g}", "--page-size", str(e.block_size)]
    if not e.enable_prefix_caching:
        args.append("--disable-radix-cache")
    if e.max_model_len is not None:
        args += ["--context-length", str(e.max_model_len)]
    _quantization(args, "--quantization", e.quantization, notes)
    if group.role != "both":
        args += ["--disaggregation-mode", group.role]
    return args, ""


def _trtllm(group: ReplicaGroup, model: str, notes: list[str]) -> tuple[list[str], str]:
    e = group.engine
    # TensorRT-LLM's tp_size counts the instance's GPUs; attention DP runs attention at tp 1 on each.
    args = [
        "trtllm-serve",
        model,
        "--tp_size",
        str(group.gpus_per_instance),
        "--max_batch_size",
        str(e.max_num_seqs),
    ]
    if group.moe_layout[1] > 1:
        args += ["--ep_size", str(group.moe_layout[1])]
    if group.attention_dp > 1 and group.tp > 1:
        notes.append(
            f"TensorRT-LLM's attention DP runs one rank per GPU (attention_dp = tp_size); tp {group.tp} "
            f"x attention_dp {group.attention_dp} has no flag (kvsim simulated it anyway)"
        )
    args += ["--max_num_tokens", str(e.max_num_batched_tokens)]
    args += ["--kv_cache_free_gpu_memory_fraction", f"{e.gpu_memory_utilization:g}"]
    if e.max_model_len is not None:
        args += ["--max_seq_len", str(e.max_model_len)]
    kv = [
        f"  enable_block_reuse: {str(e.enable_prefix_caching).lower()}",
        f"  tokens_per_block: {e.block_size}",
    ]
    if e.kv_cache_dtype != "auto":
        kv.insert(0, f"  dtype: {_kv_dtype('trtllm', e.kv_cache_dtype, notes)}")
    config = (
        f"enable_chunked_prefill: {str(e.enable_chunked_prefill).lower()}\nkv_cache_config:\n" + "\n".join(kv)
    )
    if group.attention_dp > 1:
        config = "enable_attention_dp: true\n" + config
    args += ["--extra_llm_api_options", "extra_llm_api_options.yaml"]
    if e.quantization is not None:
        notes.append(
            f"weights in {e.quantization}: serve a checkpoint quantized so (TensorRT-LLM reads its format)"
        )
    if group.role != "both":
        notes.append(
            f"disaggregated {group.role} worker: TensorRT-LLM's disaggregated serving "
            "(trtllm-serve disaggregated, or NVIDIA Dynamo) pairs the workers"
        )
    return args, config + "\n"


def _kv_dtype(backend: str, dtype: str, notes: list[str]) -> str:
    spelled = _KV_DTYPE[backend].get(dtype)
    if spelled is None:
        notes.append(f"kv_cache_dtype {dtype} has no {backend} flag value; kvsim simulated it anyway")
        return dtype
    return spelled


def _quantization(args: list[str], flag: str, quantization: str | None, notes: list[str]) -> None:
    if quantization == "fp8":
        args += [flag, "fp8"]
    elif quantization is not None:
        notes.append(
            f"weights in {quantization}: serve a checkpoint quantized so (the engine reads its format)"
        )


_BUILDERS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}


def launch_commands(scenario: Scenario) -> list[GroupLaunch]:
    """One `GroupLaunch` per replica group of ``scenario``."""
    model = model_id(scenario)
    out = []
    disaggregated = any(g.role != "both" for g in scenario.replicas)
    for group in scenario.replicas:
        notes: list[str] = []
        args, config = _BUILDERS[group.engine.backend](group, model, notes)
        if group.engine.backend_version:
            notes.insert(
                0, f"{group.engine.backend} {group.engine.backend_version}'s defaults were simulated"
            )
        out.append(
            GroupLaunch(
                group=group.name,
                role=group.role,
                replicas=group.count,
                gpus_per_replica=group.gpus_per_instance,
                command=shlex.join(args),
                config_file=config,
                notes=notes,
            )
        )
    if disaggregated:
        out[-1].notes.append(
            "prefill and decode replicas need a router that sends each prompt to a prefill replica and "
            "its KV on to a decode replica (e.g. llm-d, NVIDIA Dynamo, SGLang's router in PD mode)"
        )
    elif sum(g.count for g in scenario.replicas) > 1:
        out[-1].notes.append(f"behind a {scenario.router.kind} router (router.kind in the scenario)")
    return out
