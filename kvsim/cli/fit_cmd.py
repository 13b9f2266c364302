"""``kvsim fit``: does a model fit a GPU at a context and batch, and what are the limits.

    kvsim fit --model llama-3-8b --gpu rtx-4090 --context-tokens 32768 --batch 4
    kvsim fit --model my-model.yaml --gpu rtx-3070 --context-tokens 8192 --json
    kvsim fit --model '{"name": "tiny", "num_layers": 4, ...}' --gpu t4

Prints whether it fits, what dominates memory (weights, activation reserve or KV), the
longest context for the batch and the largest batch at the context, then the same limits
with fp8 KV and fp8 / int4 weights. Exits 0 when it fits, 3 when it does not (2: bad input).
``--model`` and ``--gpu`` take a preset name (or alias: a Hugging Face id, an aiconfigurator
system name), a YAML/JSON file holding a spec, or inline JSON; ``--model`` also takes a Hugging
Face ``config.json`` (`kvsim.model.hf_config`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kvsim.backends.defaults import BACKENDS, resolve_engine
from kvsim.cli.types import count, number, text_arg
from kvsim.errors import KvsimError
from kvsim.limits import MAX_GPU_MEMORY_BYTES, MAX_TOKENS
from kvsim.model.hf_config import load_hf_config, looks_like_hf_config, read_json_capped
from kvsim.model.kv_sizing import GIB
from kvsim.model.memory_fit import FitCheck, check_fit, fit_variants, with_weight_dtype
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS, resolve_gpu, resolve_model, tp_problem
from kvsim.model.specs import KV_DTYPE_BYTES, WEIGHT_DTYPE_BYTES, GpuSpec, ModelSpec
from kvsim.paths import is_file
from kvsim.scenario.schema import EngineConfig
from kvsim.yaml_safe import load_yaml_file

#: Exit code of ``fit`` (and ``kv-size``) when the model does not fit.
EXIT_DOES_NOT_FIT = 3

S = TypeVar("S", bound=BaseModel)


def _spec_from_text(text: str, cls: type[S], what: str) -> S | None:
    """A spec from inline JSON or a YAML/JSON file; None when ``text`` is neither."""
    stripped = text.strip()
    if stripped.startswith("{"):
        source, data = "inline JSON", _loads(stripped, what)
    elif is_file(text):
        source = text
        try:
            data = load_yaml_file(text, what=f"{what} spec")
        except OSError as exc:
            raise KvsimError(f"--{what}: cannot read {text}: {exc}") from None
    else:
        return None
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        rules = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
        raise KvsimError(f"--{what} ({source}): invalid {cls.__name__}: {rules}") from None


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KvsimError(f"--{what}: invalid JSON: {exc}") from None


def model_arg(text: str) -> ModelSpec:
    """``--model``: a preset name or Hugging Face id, a Hugging Face config.json, a spec file, or
    inline JSON."""
    is_json_file = not text.strip().startswith("{") and text.endswith(".json") and is_file(text)
    if is_json_file and looks_like_hf_config(read_json_capped(Path(text), "--model file")):
        return load_hf_config(Path(text))
    return _spec_from_text(text, ModelSpec, "model") or resolve_model(text)


def gpu_arg(text: str) -> GpuSpec:
    """``--gpu``: a preset name, a spec file, or inline JSON."""
    return _spec_from_text(text, GpuSpec, "gpu") or resolve_gpu(text)


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """``--backend``, ``--backend-version`` and the memory knobs they default (fit, kv-size)."""
    p.add_argument(
        "--backend",
        default="vllm",
        choices=list(BACKENDS),
        help="serving engine whose defaults and memory rule apply (docs/backends.md; default vllm)",
    )
    p.add_argument(
        "--backend-version",
        type=text_arg(),
        default=None,
        help="its release, e.g. 0.11.2, 0.5.9, 1.2.0rc6 (default: kvsim's vLLM defaults; the newest "
        "tabulated SGLang / TensorRT-LLM)",
    )
    p.add_argument(
        "--block-size", type=positive_int, default=None, help="tokens per block (default: the backend's)"
    )
    p.add_argument(
        "--gpu-memory-utilization",
        type=utilization,
        default=None,
        help="fraction of GPU memory the engine may use: vLLM's gpu_memory_utilization, SGLang's "
        "mem_fraction_static, TensorRT-LLM's free_gpu_memory_fraction (default: the backend's; 0.9 for vLLM)",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        default=None,
        help="token budget per iteration, sizes the activation reserve (default: the backend's; 8192)",
    )
    p.add_argument(
        "--max-num-seqs",
        type=positive_int,
        default=None,
        help="most requests per iteration, sizes the sampler's logits (default: the backend's; 256)",
    )


_ENGINE_FLAGS = ("block_size", "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs")


def engine_knobs(args: argparse.Namespace, model: ModelSpec, gpu: GpuSpec | None) -> EngineConfig:
    """The engine the flags describe: flags given win, the others are the backend's defaults."""
    given = {k: getattr(args, k) for k in _ENGINE_FLAGS if getattr(args, k) is not None}
    if getattr(args, "activation_reserve_gib", None) is not None:
        given["activation_reserve_gib"] = args.activation_reserve_gib
    try:
        engine = EngineConfig(backend=args.backend, backend_version=args.backend_version, **given)
    except ValidationError as exc:
        raise KvsimError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
    return resolve_engine(engine, gpu=gpu, tp=args.tp, model=model)


#: An argparse type: an integer from 1 to the largest token count (a count, a length, a batch).
positive_int = count(1, MAX_TOKENS)
#: An argparse type: a share in (0, 1].
utilization = number(0, 1, low_open=True)
#: An argparse type: activation memory per GPU, GiB (at most the largest GPU memory).
reserve_gib = number(0, MAX_GPU_MEMORY_BYTES / GIB)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``fit`` to the parser."""
    p = sub.add_parser(
        "fit",
        help="Does a model fit a GPU at a context length and batch size? (exit 3 if not)",
        description="Memory of one tensor-parallel shard: weights, activation reserve and the KV of "
        "--batch sequences of --context-tokens tokens, against GPU memory x utilization (vLLM's "
        "rule; --backend sglang / trtllm: theirs). Prints the verdict, what dominates, the longest context for the batch, the "
        "largest batch at the context, and the same with fp8 KV and fp8/int4 weights. Exit 0 "
        "when it fits, 3 when it does not.",
    )
    p.add_argument(
        "--model",
        required=True,
        type=text_arg(),
        help=f"preset ({', '.join(MODEL_PRESETS)}) or Hugging Face id, a Hugging Face config.json, a "
        "spec file or JSON",
    )
    p.add_argument(
        "--gpu", required=True, type=text_arg(), help=f"preset ({', '.join(GPU_PRESETS)}), spec file or JSON"
    )
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument(
        "--context-tokens",
        type=positive_int,
        default=None,
        help="tokens per sequence (default: the model's max_model_len)",
    )
    p.add_argument("--batch", type=positive_int, default=1, help="sequences held at once (default 1)")
    p.add_argument("--kv-dtype", default="auto", choices=["auto", *KV_DTYPE_BYTES], help="KV dtype")
    p.add_argument(
        "--weight-dtype",
        default=None,
        choices=list(WEIGHT_DTYPE_BYTES),
        help="quantize the weights to this dtype (default: the model's)",
    )
    add_engine_args(p)
    p.add_argument(
        "--activation-reserve-gib",
        type=reserve_gib,
        default=None,
        help="activation memory per GPU, GiB (default: estimated)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def _checks(args: argparse.Namespace) -> tuple[FitCheck, list[FitCheck]]:
    model, gpu = model_arg(args.model), gpu_arg(args.gpu)
    problem = tp_problem(model, args.tp)
    if problem:
        raise KvsimError(f"--tp: {problem}")
    if args.activation_reserve_gib is not None and args.activation_reserve_gib < 0:
        raise KvsimError("--activation-reserve-gib must be >= 0")
    if args.weight_dtype is not None:
        model = with_weight_dtype(model, args.weight_dtype)
    engine = engine_knobs(args, model, gpu)
    reserve = engine.activation_reserve_gib
    kwargs: dict[str, Any] = {
        "context_tokens": args.context_tokens or model.max_model_len,
        "batch_size": args.batch,
        "tp": args.tp,
        "block_size": engine.block_size,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "max_num_seqs": engine.max_num_seqs,
        "activation_reserve_bytes": None if reserve is None else reserve * GIB,
        "backend": engine.backend,
    }
    main = check_fit(model, gpu, kv_cache_dtype=args.kv_dtype, **kwargs)
    return main, fit_variants(model, gpu, **kwargs)


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.2f} GiB"


def format_fit(main: FitCheck, variants: list[FitCheck]) -> str:
    """The text report of ``kvsim fit``."""
    cap = main.capacity
    lines = [
        f"{main.model} ({main.weight_dtype} weights, kv_cache_dtype {main.kv_cache_dtype}) on {main.gpu}"
        + (f" x {main.tp} (tensor parallel)" if main.tp > 1 else "")
        + f": {'FITS' if main.fits else 'DOES NOT FIT'}",
        f"  {main.reason()}",
        "",
        "per GPU:",
        f"  budget (memory x utilization) {_gib(cap.budget_bytes):>12}",
        f"  weights                       {_gib(cap.weight_bytes_per_shard):>12}",
        f"  activation reserve            {_gib(cap.activation_reserve_bytes):>12}",
        *(
            [f"  request states (linear attn.) {_gib(cap.linear_state_pool_bytes_per_shard):>12}"]
            if cap.linear_state_pool_bytes_per_shard
            else []
        ),
        f"  KV needed ({main.batch_size} x {main.context_tokens:,} tokens) {_gib(main.kv_bytes_needed):>12}"
        f"  ({main.blocks_per_sequence:,} blocks per sequence)",
        "",
        f"longest context for {main.batch_size} sequence(s): {main.max_context_tokens:,} tokens"
        f" (the model's max_model_len: {main.max_model_len:,})",
        f"largest batch at {main.context_tokens:,} tokens: {main.max_batch_size:,}",
        "",
        f"with quantization (largest batch at {main.context_tokens:,} tokens / longest context for "
        f"{main.batch_size}):",
        "  weights  kv_cache_dtype  fits  max batch  max context",
    ]
    for v in variants:
        lines.append(
            f"  {v.weight_dtype:<8} {v.kv_cache_dtype:<15} {'yes' if v.fits else 'no':<5} "
            f"{v.max_batch_size:>9,} {v.max_context_tokens:>12,}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the verdict; exit 0 when it fits, `EXIT_DOES_NOT_FIT` when not."""
    main, variants = _checks(args)
    if args.json:
        out = main.to_dict() | {"variants": [v.to_dict() for v in variants]}
        print(json.dumps(out, indent=2))
    else:
        print(format_fit(main, variants))
    return 0 if main.fits else EXIT_DOES_NOT_FIT
