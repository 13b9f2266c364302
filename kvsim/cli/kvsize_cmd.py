"""``kvsim kv-size``: KV bytes per token and block, and the KV capacity of a GPU.

    kvsim kv-size --model llama-2-70b --kv-dtype fp16
    kvsim kv-size --model llama-2-70b --gpu h100-sxm --tp 8 --json
    kvsim kv-size --model my-model.yaml --gpu '{"name": "my-gpu", ...}'

Without ``--gpu`` only the per-token and per-block figures are printed; with it, the
memory breakdown of one TP shard and the capacity in blocks and tokens; when not one KV
block fits, it says why and exits 3 (`kvsim fit` answers for a context and batch).
``--model`` / ``--gpu`` take a preset name, a YAML/JSON spec file or inline JSON.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kvsim.backends.defaults import KNOB_NAMES
from kvsim.cli.fit_cmd import (
    EXIT_DOES_NOT_FIT,
    add_engine_args,
    engine_knobs,
    gpu_arg,
    model_arg,
    positive_int,
    reserve_gib,
)
from kvsim.cli.types import text_arg
from kvsim.errors import KvsimError
from kvsim.model.kv_sizing import (
    GIB,
    blocks_per_sequence,
    bytes_per_block_per_shard,
    kv_bytes_for_context,
    kv_bytes_per_token,
    kv_capacity,
    kv_heads_per_shard,
    kv_layer_groups,
    kv_tokens_held,
    linear_state_bytes_per_seq,
    weight_bytes,
)
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS, tp_problem
from kvsim.model.specs import KV_DTYPE_BYTES


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``kv-size`` to the parser."""
    p = sub.add_parser(
        "kv-size",
        help="KV bytes per token/block and KV capacity of a GPU.",
        description="KV-cache size of a model, and with --gpu how many KV blocks and tokens fit "
        "after weights and activation reserve (vLLM's rule, per tensor-parallel shard).",
    )
    p.add_argument(
        "--model",
        required=True,
        type=text_arg(),
        help=f"model preset ({', '.join(MODEL_PRESETS)}) or Hugging Face id, a Hugging Face config.json, "
        "a spec file or JSON",
    )
    p.add_argument(
        "--kv-dtype",
        default="auto",
        choices=["auto", *KV_DTYPE_BYTES],
        help="KV-cache element type (vLLM's kv_cache_dtype; 'auto' = the model's dtype).",
    )
    p.add_argument("--gpu", type=text_arg(), help=f"GPU preset ({', '.join(GPU_PRESETS)}), spec file or JSON")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel degree (default 1)")
    add_engine_args(p)
    p.add_argument(
        "--activation-reserve-gib",
        type=reserve_gib,
        default=None,
        help="memory held for activations per GPU, GiB (default: estimated)",
    )
    p.add_argument(
        "--context-tokens",
        type=positive_int,
        default=32768,
        help="context length for the 'a context of N tokens takes X GiB' line (default 32768)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def _num(value: float) -> int | float:
    """Integral floats as ints, so JSON shows 327680, not 327680.0."""
    return int(value) if float(value).is_integer() else value


def _figures(args: argparse.Namespace) -> dict[str, Any]:
    model = model_arg(args.model)
    problem = tp_problem(model, args.tp)
    if problem:
        raise KvsimError(f"--tp: {problem}")
    dtype, tp, ctx = args.kv_dtype, args.tp, args.context_tokens
    gpu = gpu_arg(args.gpu) if args.gpu is not None else None
    engine = engine_knobs(args, model, gpu)
    block_size = engine.block_size
    per_token = kv_bytes_per_token(model, dtype, 1)
    per_token_shard = kv_bytes_per_token(model, dtype, tp)
    out: dict[str, Any] = {
        "model": model.name,
        "attention": model.attention_kind,
        "kv_cache_dtype": dtype,
        "tp": tp,
        "block_size": block_size,
        "kv_heads_per_shard": None if model.is_mla else kv_heads_per_shard(model, tp),
        "bytes_per_token": _num(per_token),
        "bytes_per_token_per_shard": _num(per_token_shard),
        "bytes_per_token_all_shards": _num(per_token_shard * tp),
        "bytes_per_block_per_shard": _num(bytes_per_block_per_shard(model, dtype, tp, block_size)),
        "sliding_window": model.sliding_window,
        "num_sliding_window_layers": model.num_window_layers,
        "num_kv_groups": kv_layer_groups(model).num_groups,
        "context_blocks": blocks_per_sequence(model, ctx, block_size),
        "max_model_len": model.max_model_len,
        "context_tokens": ctx,
        "context_tokens_held": kv_tokens_held(model, ctx),
        "context_bytes": _num(kv_bytes_for_context(model, ctx, dtype, 1)),
        "context_bytes_per_shard": _num(kv_bytes_for_context(model, ctx, dtype, tp)),
        "weight_bytes": _num(weight_bytes(model)),
        "num_linear_attention_layers": model.num_linear_attention_layers,
        "linear_state_bytes_per_seq": _num(linear_state_bytes_per_seq(model, 1)),
        "linear_state_bytes_per_seq_per_shard": _num(linear_state_bytes_per_seq(model, tp)),
    }
    if gpu is None:
        return out
    reserve_gib = engine.activation_reserve_gib
    reserve = None if reserve_gib is None else reserve_gib * GIB
    cap = kv_capacity(
        model,
        gpu,
        tp=tp,
        kv_cache_dtype=dtype,
        block_size=block_size,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_num_batched_tokens=engine.max_num_batched_tokens,
        max_num_seqs=engine.max_num_seqs,
        activation_reserve_bytes=reserve,
        backend=engine.backend,
    )
    out.update(
        {
            "gpu": gpu.name,
            "backend": engine.backend,
            "backend_version": engine.backend_version,
            "memory_bytes": gpu.memory_bytes,
            "gpu_memory_utilization": engine.gpu_memory_utilization,
            "budget_bytes": _num(cap.budget_bytes),
            "weight_bytes_per_shard": _num(cap.weight_bytes_per_shard),
            "activation_reserve_bytes": _num(cap.activation_reserve_bytes),
            "activation_reserve_estimated": reserve is None,
            "max_num_batched_tokens": engine.max_num_batched_tokens,
            "max_num_seqs": engine.max_num_seqs,
            "linear_state_pool_bytes_per_shard": _num(cap.linear_state_pool_bytes_per_shard),
            "kv_bytes_per_shard": _num(cap.kv_bytes_per_shard),
            "num_blocks": cap.num_blocks,
            "num_tokens": cap.num_tokens,
            "fits": cap.num_blocks >= 1 and cap.weight_bytes_per_shard <= cap.budget_bytes,
        }
    )
    return out


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.2f} GiB"


def _text(f: dict[str, Any]) -> str:
    tp = f["tp"]
    heads = (
        "MLA latent (replicated per shard)"
        if f["kv_heads_per_shard"] is None
        else (f"{f['kv_heads_per_shard']} KV head(s) per shard")
    )
    lines = [
        f"model {f['model']} ({f['attention'].upper()}), kv_cache_dtype {f['kv_cache_dtype']}, "
        f"tp {tp}, block_size {f['block_size']}",
        f"  KV bytes per token:           {f['bytes_per_token']:,} (whole model)",
    ]
    if tp > 1:
        lines.append(f"  KV bytes per token per shard: {f['bytes_per_token_per_shard']:,} ({heads})")
    lines.append(f"  KV bytes per block per shard: {f['bytes_per_block_per_shard']:,}")
    ctx, held = f["context_tokens"], f["context_tokens_held"]
    ctx_line = f"  a {ctx:,}-token context takes {_gib(f['context_bytes'])}"
    if tp > 1:
        ctx_line += f" ({_gib(f['context_bytes_per_shard'])} per shard)"
    if held < ctx:
        layers = f"{f['num_sliding_window_layers']} sliding-window layers" if f["num_kv_groups"] > 1 else ""
        ctx_line += (
            f" (sliding window {f['sliding_window']:,}: only the last {held:,} tokens are kept"
            + (f" in its {layers}" if layers else "")
            + ")"
        )
    if ctx > f["max_model_len"]:
        ctx_line += f" (beyond the model's max_model_len {f['max_model_len']:,})"
    lines.append(ctx_line)
    if f["num_linear_attention_layers"]:
        lines.append(
            f"  + {f['num_linear_attention_layers']} linear-attention layers: "
            f"{f['linear_state_bytes_per_seq'] / 2**20:,.1f} MiB of state per running request "
            f"({f['linear_state_bytes_per_seq_per_shard'] / 2**20:,.1f} MiB per shard), not in the KV cache"
        )
    if "gpu" not in f:
        return "\n".join(lines)
    knob = KNOB_NAMES["gpu_memory_utilization"][f["backend"]]
    lines += [
        "",
        f"on {f['gpu']}"
        + (f" x {tp} (tensor parallel)" if tp > 1 else "")
        + ("" if f["backend"] == "vllm" else f", {f['backend']}")
        + f", per GPU, {knob} {f['gpu_memory_utilization']}:",
        f"  GPU memory                {_gib(f['memory_bytes']):>14}",
        f"  x utilization = budget    {_gib(f['budget_bytes']):>14}",
        f"  - weights                 {_gib(f['weight_bytes_per_shard']):>14}",
        f"  - activation reserve      {_gib(f['activation_reserve_bytes']):>14}"
        + (
            f"  (estimated for {f['max_num_batched_tokens']:,} batched tokens, {f['max_num_seqs']} seqs)"
            if f["activation_reserve_estimated"]
            else ""
        ),
        *(
            [f"  - request states          {_gib(f['linear_state_pool_bytes_per_shard']):>14}"]
            if f["linear_state_pool_bytes_per_shard"]
            else []
        ),
        (
            f"  = KV cache                {_gib(f['kv_bytes_per_shard']):>14}"
            if f["kv_bytes_per_shard"] >= 0
            else f"  = KV cache                {'none':>14}  "
            f"({_gib(-f['kv_bytes_per_shard'])} short of what weights and activations need)"
        ),
        f"  KV capacity: {f['num_blocks']:,} blocks = {f['num_tokens']:,} tokens",
    ]
    if f["num_kv_groups"] > 1:
        lines.append(
            f"  a {ctx:,}-token sequence holds {f['context_blocks']:,} blocks: one block table per "
            f"layer group ({f['num_kv_groups']} groups, vLLM's hybrid allocator)"
        )
    if not f["fits"]:
        why = (
            "the weights alone exceed the budget"
            if f["weight_bytes_per_shard"] > f["budget_bytes"]
            else "no room is left for a single KV block"
        )
        lines.append(f"  DOES NOT FIT: {why}; raise --tp, quantize, or pick a larger GPU (see kvsim fit)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the KV sizing figures as text or one JSON object."""
    figures = _figures(args)
    print(json.dumps(figures, indent=2) if args.json else _text(figures))
    return EXIT_DOES_NOT_FIT if figures.get("fits") is False else 0
