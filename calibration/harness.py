"""The calibration harness: times the kernels of one transformer layer with torch.

`run_calibration` measures, on one device, for one model sharded for a TP degree:

- ``gemm``: the linear layers (QKV, output projection, MLP gate+up, MLP down, LM head)
  as ``x[T, in] @ W[in, out]`` over a grid of token counts T;
- ``elementwise``: the rest of a layer's per-token work (two RMSNorms, two residual
  adds, SiLU-and-multiply) over the same grid;
- ``prefill_attention``: `scaled_dot_product_attention` of a chunk of new tokens over
  itself and an already-cached context, causal with the mask aligned to the bottom right
  (the new tokens are the last ones), over chunk sizes x context lengths, one layer;
- ``decode_attention``: one query token per request over a paged KV cache: K and V are
  gathered through a block table (a random permutation of blocks) from a block-pool
  tensor, dequantised when the pool is fp8, then attended; batch sizes x context lengths,
  one layer, for each KV dtype the device supports;
- ``hbm_copy``: device-to-device copies (achieved HBM bandwidth, counting bytes read and
  written), and ``host_transfer``: pinned host<->device copies (swap and CPU offload);
- ``allreduce``: NCCL all-reduce over message sizes when more than one GPU is visible
  (`calibration.allreduce`), otherwise recorded as skipped with the reason.

Weights are random tensors of the right shapes (nothing is downloaded). Large buffers
are rotated over enough copies to exceed the L2 cache (``l2_flush_bytes``), as a real
forward pass streams each layer's weights from HBM. The result is a plain dict in
the profile format that `kvsim.cost.profile` validates and loads.
"""

from __future__ import annotations

import datetime as dt
import math
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from calibration.grids import Grids, grids_for
from calibration.shapes import ModelShape
from calibration.timing import time_median_s

PROFILE_FORMAT = "kvsim-profile"
PROFILE_VERSION = 1

_TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

Progress = Callable[[str], None]


def _stderr_progress(message: str) -> None:
    print(f"[calibrate] {message}", file=sys.stderr, flush=True)


def _num_copies(nbytes: int, l2_flush_bytes: int) -> int:
    """Copies of a buffer of ``nbytes`` to rotate over so that their sum exceeds the L2 flush size."""
    if l2_flush_bytes <= 0 or nbytes <= 0:
        return 1
    return max(1, min(8, math.ceil(l2_flush_bytes / nbytes)))


def supported_kv_dtypes(shape: ModelShape, device: torch.device) -> list[str]:
    """KV dtypes measured: the model's dtype, plus fp8 where torch and the device support it.

    fp8 (e4m3) needs compute capability 8.9 or newer on CUDA (Ada, Hopper); on CPU torch
    converts it in software, which keeps the code path tested.
    """
    kv = [shape.dtype]
    if hasattr(torch, "float8_e4m3fn") and (
        device.type == "cpu" or (device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9))
    ):
        kv.append("fp8")
    return kv


def device_info(device: torch.device) -> dict[str, Any]:
    """What the profile records about the machine it was measured on."""
    info: dict[str, Any] = {
        "type": device.type,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            name=props.name,
            memory_bytes=int(props.total_memory),
            capability=f"{props.major}.{props.minor}",
            multiprocessors=int(props.multi_processor_count),
            cuda=torch.version.cuda,
            num_devices=torch.cuda.device_count(),
            driver=_nvidia_driver_version(),
        )
    else:
        info.update(
            name=platform.processor() or platform.machine(),
            memory_bytes=None,
            cuda=None,
            num_devices=1,
            driver=None,
            capability=None,
        )
    return info


def _nvidia_driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


class _Harness:
    """One calibration run: the device, dtype, grids and progress sink."""

    def __init__(
        self,
        shape: ModelShape,
        tp: int,
        device: torch.device,
        grids: Grids,
        progress: Progress,
        cuda_graphs: bool,
    ):
        self.shape, self.tp, self.device, self.grids, self.progress = shape, tp, device, grids, progress
        self.cuda_graphs = cuda_graphs
        self.dtype = _TORCH_DTYPES[shape.dtype]
        self.gen = torch.Generator(device=device).manual_seed(0)

    def _randn(self, *size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        t = torch.randn(*size, generator=self.gen, device=self.device, dtype=torch.float32)
        return t.to(dtype or self.dtype)

    def _time(self, fn: Callable[[int], object], variants: int = 1, graph: bool = True) -> float:
        return time_median_s(
            fn,
            self.device,
            warmup=self.grids.warmup,
            repeats=self.grids.repeats,
            variants=variants,
            cuda_graph=graph and self.cuda_graphs,
        )

    def gemm(self) -> dict[str, Any]:
        shapes = self.shape.linear_shapes(self.tp)
        tokens = self.grids.tokens
        times: dict[str, list[float]] = {}
        for name, (k, n) in shapes.items():
            w_bytes = k * n * self.dtype.itemsize
            weights = [self._randn(k, n) for _ in range(_num_copies(w_bytes, self.grids.l2_flush_bytes))]
            row = []
            for t in tokens:
                x = self._randn(t, k)
                row.append(
                    self._time(lambda i, x=x, ws=weights: torch.matmul(x, ws[i % len(ws)]), len(weights))
                )
                del x
            times[name] = row
            del weights
            self.progress(
                f"gemm {name} [{k}x{n}]: {len(tokens)} token counts, "
                f"{row[-1] * 1e3:.3f} ms at {tokens[-1]} tokens"
            )
        return {"tokens": list(tokens), "shapes": {k: list(v) for k, v in shapes.items()}, "time_s": times}

    def elementwise(self) -> dict[str, Any]:
        h = self.shape.hidden_size
        inter = self.shape.intermediate_size // self.tp
        norm_w = self._randn(h)
        row = []
        for t in self.grids.tokens:
            x, res, gate_up = self._randn(t, h), self._randn(t, h), self._randn(t, 2 * inter)

            def layer_elementwise(_i: int, x=x, res=res, gate_up=gate_up) -> torch.Tensor:
                r = x + res
                y = F.rms_norm(r, (h,), norm_w)
                g, u = gate_up.chunk(2, dim=-1)
                a = F.silu(g) * u
                r2 = r + y
                return F.rms_norm(r2, (h,), norm_w) + a[:, :1]

            row.append(self._time(layer_elementwise))
        self.progress(
            f"elementwise: {len(row)} token counts, {row[-1] * 1e3:.3f} ms at {self.grids.tokens[-1]} tokens"
        )
        return {"tokens": list(self.grids.tokens), "time_s": row}

    def prefill_attention(self) -> dict[str, Any]:
        heads, hd = self.shape.heads_per_shard(self.tp), self.shape.head_dim
        chunks, contexts = self.grids.prefill_chunk_tokens, self.grids.prefill_context_tokens
        table = []
        for q_len in chunks:
            row = []
            for ctx in contexts:
                kv_len = ctx + q_len
                q = self._randn(1, heads, q_len, hd)
                # KV heads already expanded to the query heads (outside the timed region):
                # prefill attention is compute-bound, so this changes the FLOPs by nothing.
                k, v = self._randn(1, heads, kv_len, hd), self._randn(1, heads, kv_len, hd)
                mask = causal_lower_right(q_len, kv_len) if ctx else None

                def attend(_i: int, q=q, k=k, v=v, mask=mask) -> torch.Tensor:
                    if mask is None:  # no cached context: plain causal attention
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

                row.append(self._time(attend))
                del q, k, v
            table.append(row)
            self.progress(
                f"prefill attention chunk={q_len}: {len(contexts)} contexts, "
                f"{row[-1] * 1e3:.3f} ms at context {contexts[-1]}"
            )
        return {"chunk_tokens": list(chunks), "context_tokens": list(contexts), "time_s": table}

    def decode_attention(self, kv_dtype: str) -> dict[str, Any]:
        heads, kv_heads, hd = (
            self.shape.heads_per_shard(self.tp),
            self.shape.kv_heads_per_shard(self.tp),
            self.shape.head_dim,
        )
        group = heads // kv_heads
        bs = self.grids.block_size
        batches, contexts = self.grids.decode_batch_sizes, self.grids.decode_context_tokens
        pool_dtype = torch.float8_e4m3fn if kv_dtype == "fp8" else _TORCH_DTYPES[kv_dtype]
        num_blocks = max(batches) * math.ceil(max(contexts) / bs)
        # fp8 pools are gathered as raw bytes (uint8 indexing is supported everywhere) and
        # reinterpreted as fp8 before dequantisation.
        k_pool = self._randn(num_blocks, bs, kv_heads, hd, dtype=pool_dtype)
        v_pool = self._randn(num_blocks, bs, kv_heads, hd, dtype=pool_dtype)
        if kv_dtype == "fp8":
            k_pool, v_pool = k_pool.view(torch.uint8), v_pool.view(torch.uint8)
        cpu_gen = torch.Generator().manual_seed(1)
        perm = torch.randperm(num_blocks, generator=cpu_gen).to(self.device)
        table = []
        for b in batches:
            row = []
            for ctx in contexts:
                blocks_per_seq = math.ceil(ctx / bs)
                block_table = perm[: b * blocks_per_seq].view(b, blocks_per_seq)
                q = self._randn(b, kv_heads, group, hd)

                def paged_decode(
                    _i: int, q=q, block_table=block_table, b=b, ctx=ctx, kp=k_pool, vp=v_pool
                ) -> torch.Tensor:
                    # Gather this batch's blocks: [b, blocks, bs, kv_heads, hd] -> [b, kv_heads, ctx, hd].
                    k = kp[block_table].view(b, -1, kv_heads, hd)[:, :ctx].transpose(1, 2)
                    v = vp[block_table].view(b, -1, kv_heads, hd)[:, :ctx].transpose(1, 2)
                    if k.dtype == torch.uint8:
                        k = k.view(pool_dtype).to(self.dtype)
                        v = v.view(pool_dtype).to(self.dtype)
                    # GQA decode: the query heads of a group attend as a group of queries.
                    return F.scaled_dot_product_attention(q, k, v)

                row.append(self._time(paged_decode))
                del q
            table.append(row)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # the largest gathers take tens of GB
            self.progress(
                f"decode attention {kv_dtype} batch={b}: {len(contexts)} contexts, "
                f"{row[-1] * 1e3:.3f} ms at context {contexts[-1]}"
            )
        del k_pool, v_pool
        return {"batch_sizes": list(batches), "context_tokens": list(contexts), "time_s": table}

    def decode_attention_all(self, kv_dtypes: list[str]) -> dict[str, Any]:
        """Decode tables for each KV dtype; an optional dtype (fp8) that fails is reported and left out."""
        tables = {}
        for kv in kv_dtypes:
            try:
                tables[kv] = self.decode_attention(kv)
            except (RuntimeError, NotImplementedError) as exc:
                if kv == self.shape.dtype:
                    raise
                self.progress(f"decode attention {kv}: skipped ({exc})")
        return tables

    def hbm_copy(self) -> dict[str, Any]:
        sizes, times = self.grids.hbm_copy_bytes, []
        for nbytes in sizes:
            src = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            src.random_(0, 256, generator=self.gen)
            dst = torch.empty_like(src)
            times.append(self._time(lambda _i, s=src, d=dst: d.copy_(s), graph=False))
            del src, dst
        bw = max(2 * n / t for n, t in zip(sizes, times, strict=True))
        self.progress(f"HBM copy: {bw / 1e12:.3f} TB/s counting read + write")
        return {"bytes": list(sizes), "time_s": times, "bandwidth_bytes_per_s": bw}

    def host_transfer(self) -> dict[str, Any]:
        if self.device.type != "cuda":
            return {"status": "skipped", "reason": "host<->device copies need a CUDA device"}
        sizes, h2d, d2h = self.grids.host_transfer_bytes, [], []
        for nbytes in sizes:
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            h2d.append(self._time(lambda _i, h=host, d=dev: d.copy_(h, non_blocking=True), graph=False))
            d2h.append(self._time(lambda _i, h=host, d=dev: h.copy_(d, non_blocking=True), graph=False))
            del host, dev
        bw_h2d = max(n / t for n, t in zip(sizes, h2d, strict=True))
        bw_d2h = max(n / t for n, t in zip(sizes, d2h, strict=True))
        self.progress(f"host transfer (pinned): H2D {bw_h2d / 1e9:.1f} GB/s, D2H {bw_d2h / 1e9:.1f} GB/s")
        return {
            "status": "measured",
            "bytes": list(sizes),
            "h2d_time_s": h2d,
            "d2h_time_s": d2h,
            "bandwidth_bytes_per_s": min(bw_h2d, bw_d2h),
        }

    def allreduce(self) -> dict[str, Any]:
        if self.device.type != "cuda":
            return {"status": "skipped", "reason": "all-reduce is measured over NCCL on CUDA devices only"}
        count = torch.cuda.device_count()
        if count < 2:
            return {"status": "skipped", "reason": f"only {count} GPU visible"}
        from calibration.allreduce import measure_allreduce  # spawns processes: only when needed

        world = min(count, max(2, self.tp))
        self.progress(f"all-reduce over {world} GPUs (NCCL)")
        times = measure_allreduce(
            world,
            self.grids.allreduce_bytes,
            dtype=self.dtype,
            warmup=self.grids.warmup,
            repeats=self.grids.repeats,
        )
        return {
            "status": "measured",
            "world_size": world,
            "bytes": list(self.grids.allreduce_bytes),
            "time_s": times,
        }


def run_calibration(
    shape: ModelShape,
    *,
    tp: int = 1,
    device: str = "cuda",
    quick: bool = False,
    gpu: str | None = None,
    grids: Grids | None = None,
    per_iteration_overhead_s: float = 5e-4,
    cuda_graphs: bool = True,
    command: str = "",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure ``shape``'s kernels on ``device`` and return a profile dict (format version 1).

    ``gpu`` is the kvsim GPU preset this device corresponds to (recorded so that the
    profile is refused for scenarios on another GPU); ``grids`` overrides the grids chosen
    from the device type and ``quick``; ``per_iteration_overhead_s`` is recorded as the
    profile's CPU overhead per iteration, which kernels cannot measure; ``cuda_graphs``
    times CUDA work by replaying CUDA graphs (see `calibration.timing`).
    """
    shape.check_tp(tp)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device (use --device cpu for a small CPU run)")
    dev = torch.device(device)
    grids = grids or grids_for(dev.type, quick)
    say = progress or _stderr_progress
    h = _Harness(shape, tp, dev, grids, say, cuda_graphs and dev.type == "cuda")
    info = device_info(dev)
    say(f"{shape.name} tp={tp} {shape.dtype} on {info['name']} ({'quick' if quick else 'default'} grids)")
    started = dt.datetime.now(dt.UTC)
    with torch.inference_mode():
        profile: dict[str, Any] = {
            "format": PROFILE_FORMAT,
            "version": PROFILE_VERSION,
            "kind": "kernels",
            "created": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": command,
            "model": shape.to_dict(),
            "dtype": shape.dtype,
            "tp": tp,
            "gpu": gpu,
            "device": info,
            "settings": {"quick": quick, "cuda_graphs": h.cuda_graphs, **grids.to_dict()},
            "per_iteration_overhead_s": per_iteration_overhead_s,
            "gemm": h.gemm(),
            "elementwise": h.elementwise(),
            "prefill_attention": h.prefill_attention(),
            "decode_attention": h.decode_attention_all(supported_kv_dtypes(shape, dev)),
            "hbm_copy": h.hbm_copy(),
            "host_transfer": h.host_transfer(),
            "allreduce": h.allreduce(),
        }
    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
    profile["elapsed_s"] = elapsed
    say(f"done in {elapsed:.1f} s")
    return profile
