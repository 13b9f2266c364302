"""End-to-end iterations: whole forward passes of a random-weight model, timed on a device.

A check of the calibrated cost model's composition (per-layer sums of kernel curves): this
module runs complete iterations, every layer with its own weights and its own paged KV
pool, and writes their times in the measurements CSV format that ``kvsim predict`` and
``kvsim calibrate --fit-measurements`` read (``tp,phase,batch_size,prompt_tokens,
context_tokens,time_s``). One iteration is:

    per layer: RMSNorm -> QKV GEMM -> attention -> O GEMM -> residual add
               -> RMSNorm -> gate/up GEMM -> SiLU-and-multiply -> down GEMM -> residual add
    then the LM head on one row per sequence

Prefill attends causally within the prompt (no cached context); decode gathers each
request's K/V through a block table from the layer's block pool, as the harness does.
Iterations are replayed from CUDA graphs on CUDA (see `calibration.timing`).

    python -m calibration.endtoend --model-json SHAPE.json --device cuda --out e2e.csv
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from calibration.shapes import ModelShape
from calibration.timing import time_median_s
from kvsim.errors import KvsimError
from kvsim.outputs import check_file_target, write_file
from kvsim.yaml_safe import load_yaml_file

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

#: Default points: (phase, batch_size, prompt_tokens, context_tokens).
DEFAULT_POINTS = [
    ("prefill", 1, 128, 0),
    ("prefill", 1, 1024, 0),
    ("prefill", 1, 4096, 0),
    ("prefill", 4, 1024, 0),
    ("decode", 1, 0, 1024),
    ("decode", 16, 0, 2048),
    ("decode", 64, 0, 2048),
    ("decode", 256, 0, 512),
]


class _Model:
    """Random weights of every layer on one device."""

    def __init__(self, shape: ModelShape, device: torch.device, block_size: int = 16) -> None:
        self.shape, self.device, self.block_size = shape, device, block_size
        self.dtype = _DTYPES[shape.dtype]
        gen = torch.Generator(device=device).manual_seed(0)
        lin = shape.linear_shapes(1)

        def rand(*size: int) -> torch.Tensor:
            return (torch.randn(*size, generator=gen, device=device) * 0.02).to(self.dtype)

        self.layers = [
            {name: rand(*lin[name]) for name in ("qkv", "o", "gate_up", "down")}
            for _ in range(shape.num_layers)
        ]
        self.norm = torch.ones(shape.hidden_size, device=device, dtype=self.dtype)
        self.lm_head = rand(*lin["lm_head"])
        self.gen = gen

    def _mlp_and_residuals(
        self, x: torch.Tensor, attn: torch.Tensor, w: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        h = self.shape.hidden_size
        x = x + attn @ w["o"]
        gate, up = (F.rms_norm(x, (h,), self.norm) @ w["gate_up"]).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ w["down"]

    def prefill_fn(self, batch: int, prompt: int) -> Callable[[int], torch.Tensor]:
        s, h = self.shape, self.shape.hidden_size
        heads, kvh, hd = s.num_attention_heads, s.num_kv_heads, s.head_dim
        x0 = torch.randn(batch * prompt, h, generator=self.gen, device=self.device).to(self.dtype)

        def run(_i: int) -> torch.Tensor:
            x = x0
            for w in self.layers:
                qkv = F.rms_norm(x, (h,), self.norm) @ w["qkv"]
                q, k, v = qkv.split([heads * hd, kvh * hd, kvh * hd], dim=-1)
                q = q.view(batch, prompt, heads, hd).transpose(1, 2)
                k = k.view(batch, prompt, kvh, hd).transpose(1, 2)
                v = v.view(batch, prompt, kvh, hd).transpose(1, 2)
                attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                x = self._mlp_and_residuals(x, attn.transpose(1, 2).reshape(batch * prompt, heads * hd), w)
            last = x.view(batch, prompt, h)[:, -1]
            return F.rms_norm(last, (h,), self.norm) @ self.lm_head

        return run

    def decode_fn(self, batch: int, context: int) -> Callable[[int], torch.Tensor]:
        s, h, bs = self.shape, self.shape.hidden_size, self.block_size
        heads, kvh, hd = s.num_attention_heads, s.num_kv_heads, s.head_dim
        blocks = math.ceil(context / bs)
        pools = [
            (
                torch.randn(batch * blocks, bs, kvh, hd, generator=self.gen, device=self.device).to(
                    self.dtype
                ),
                torch.randn(batch * blocks, bs, kvh, hd, generator=self.gen, device=self.device).to(
                    self.dtype
                ),
            )
            for _ in self.layers
        ]
        perm = torch.randperm(batch * blocks, generator=torch.Generator().manual_seed(1)).to(self.device)
        table = perm.view(batch, blocks)
        x0 = torch.randn(batch, h, generator=self.gen, device=self.device).to(self.dtype)

        def run(_i: int) -> torch.Tensor:
            x = x0
            for w, (kp, vp) in zip(self.layers, pools, strict=True):
                qkv = F.rms_norm(x, (h,), self.norm) @ w["qkv"]
                q = qkv[:, : heads * hd].view(batch, kvh, heads // kvh, hd)
                k = kp[table].view(batch, -1, kvh, hd)[:, :context].transpose(1, 2)
                v = vp[table].view(batch, -1, kvh, hd)[:, :context].transpose(1, 2)
                attn = F.scaled_dot_product_attention(q, k, v)
                x = self._mlp_and_residuals(x, attn.reshape(batch, heads * hd), w)
            return F.rms_norm(x, (h,), self.norm) @ self.lm_head

        return run


def measure_points(
    shape: ModelShape,
    points: list[tuple[str, int, int, int]],
    *,
    device: str = "cuda",
    warmup: int = 2,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, object]]:
    """Time each point's whole iteration; rows in the measurements CSV format (tp 1)."""
    dev = torch.device(device)
    say = progress or (lambda m: print(f"[endtoend] {m}", file=sys.stderr, flush=True))
    rows = []
    with torch.inference_mode():
        model = _Model(shape, dev)
        for phase, batch, prompt, context in points:
            fn = model.prefill_fn(batch, prompt) if phase == "prefill" else model.decode_fn(batch, context)
            t = time_median_s(fn, dev, warmup=warmup, repeats=repeats)
            say(f"{phase} batch={batch} prompt={prompt} context={context}: {t * 1e3:.3f} ms")
            rows.append(
                {
                    "tp": 1,
                    "phase": phase,
                    "batch_size": batch,
                    "prompt_tokens": prompt,
                    "context_tokens": context,
                    "time_s": t,
                }
            )
            del fn
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-json", required=True, help="JSON file with ModelShape fields")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--out", required=True, help="CSV to write")
    args = parser.parse_args(argv)
    try:
        # A CSV carries no mark of what wrote it: an existing file is never replaced (kvsim.outputs).
        check_file_target(args.out, "--out", None)
        data = load_yaml_file(args.model_json, what="model shape")  # JSON is YAML; bounded, UTF-8 checked
        if not isinstance(data, dict):
            raise KvsimError(f"{args.model_json}: a model shape must be a JSON object")
        try:
            shape = ModelShape(**data)
        except TypeError as exc:
            raise KvsimError(f"{args.model_json}: not a model shape: {exc}") from None
        rows = measure_points(shape, DEFAULT_POINTS, device=args.device)
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        write_file(args.out, text.getvalue().encode("utf-8"), "--out", None)
    except KvsimError as exc:
        print(f"endtoend: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
