"""Kernel tables measured with torch, in the shape of aiconfigurator-core's (`kvsim.cost.table_layout`).

`measure_tables` times, on one device, over a `calibration.table_grids.TableGrids`:

- ``gemm_perf``: ``F.linear(x[m, k], W[n, k])`` in bf16 (the call vLLM's unquantized
  linear layers make); fp8: ``x`` quantised per tensor with a static scale (as vLLM's fp8
  linear layers do in their forward), then ``torch._scaled_mm`` with per-tensor scales and
  a bf16 output, where the device supports fp8 (compute capability 8.9+, or the CPU);
- ``context_attention_perf``: causal ``scaled_dot_product_attention`` of ``batch_size``
  prompts of ``isl`` new tokens (no cached prefix: ``step`` 0), GQA through
  ``enable_gqa``, on the first SDPA backend that runs (flash, cuDNN, efficient, math;
  the one used is the row's ``kernel_source``);
- ``generation_attention_perf``: one new token per request attending to its ``step``
  cached tokens and itself (``step + 1``; aiconfigurator's collector,
  collector/vllm/collect_attn.py at d5bad971c, the commit of the vLLM 0.24.0 tables) of a
  paged KV cache through a block table, in one fused kernel: the
  KV pool is ``[pages, page_tokens, kv_heads, head_dim]`` (vLLM's layout) with the pages of
  every request scattered at random, read where it lies, never gathered into a copy.
  Kernels, first that passes a correctness check against `gather_then_attend`:
  ``torch.nn.attention.varlen.varlen_attn`` with ``block_table`` (the FlashAttention
  kernel bundled with torch: CUDA only, pages of a multiple of 256 tokens), then
  ``flex_attention`` over a block mask built from the block table (compiled on CUDA;
  eager on a CPU, where it computes dense scores: a correctness path only);
- ``custom_allreduce_perf``: ``torch.distributed.all_reduce`` of ``message_size`` bf16
  elements over NCCL between 2, 4, 8 GPUs of this machine (`calibration.allreduce`); on
  a CPU, one gloo process (``num_gpus`` 1): the code path, not a measurement of anything;
- ``moe_perf``: one MoE layer's routed experts in bf16 (`calibration.moe`: sort by expert,
  grouped gate/up GEMM, SiLU-and-multiply, grouped down GEMM, weighted sum) for
  ``num_tokens`` tokens under a synthetic routing (``distribution``), on the GPU the
  routing loads most when ``moe_ep`` > 1. Each shape's kernel must first reproduce
  `calibration.moe.reference_moe`; fp8 and 4-bit experts are not measured (torch has no
  public quantised grouped GEMM): the packaged tables price them.

What cannot run here (fp8 on a GPU without fp8, a shape the kernel refuses, an all-reduce
with one GPU) is recorded with the reason (`Table.skip`) and lands in collection_meta.yaml.
Times are medians over repetitions after warm-up, CUDA work replayed from CUDA graphs
(`calibration.timing`), in milliseconds as the tables store them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from calibration.harness import _num_copies, device_info
from calibration.moe import MOE_TOLERANCE, TorchMoE, reference_moe, routing
from calibration.table_grids import TableGrids
from calibration.timing import time_median_s

Progress = Callable[[str], None]

#: The tables `measure_tables` can write, in the order it measures them.
ALL_TABLES = (
    "gemm_perf",
    "context_attention_perf",
    "generation_attention_perf",
    "custom_allreduce_perf",
    "moe_perf",
)
#: Table dtype names (aiconfigurator's) of the harness's dtypes.
DTYPE_NAMES = {"bf16": "bfloat16", "fp8": "fp8"}
FP8 = getattr(torch, "float8_e4m3fn", None)
#: Largest difference between a paged decode kernel and `gather_then_attend` accepted (bf16, fp8).
DECODE_TOLERANCE = {"bf16": 2e-2, "fp8": 1e-1}


def torch_version() -> str:
    """torch's public version (``2.11.0`` of ``2.11.0+cu130``): the tables' version folder."""
    return torch.__version__.split("+")[0]


def _stderr_progress(message: str) -> None:
    print(f"[calibrate] {message}", file=sys.stderr, flush=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


@dataclass
class Table:
    """The rows of one table and what could not be measured, with the reasons."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    kernel_sources: list[str] = field(default_factory=list)
    #: reason -> (number of cases, the first few cases)
    skipped: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if row["kernel_source"] not in self.kernel_sources:
            self.kernel_sources.append(row["kernel_source"])

    def skip(self, case: str, reason: str, count: int = 1) -> None:
        n, cases = self.skipped.get(reason, (0, []))
        self.skipped[reason] = (n + count, cases if len(cases) >= 3 else [*cases, case])

    def meta(self) -> dict[str, Any]:
        """This table's entry in collection_meta.yaml."""
        status = "skipped" if not self.rows else "partial" if self.skipped else "complete"
        out: dict[str, Any] = {"status": status, "rows": len(self.rows), "kernel_source": self.kernel_sources}
        if self.skipped:
            out["skipped"] = [
                {"reason": reason, "cases": n, "examples": cases}
                for reason, (n, cases) in self.skipped.items()
            ]
        if self.notes:
            out["notes"] = list(self.notes)
        return out


# --------------------------------------------------------------------------- paged KV


@dataclass
class PagedKV:
    """A pool of KV pages (vLLM's layout) and the block tables of one batch of requests.

    ::

        k_pool, v_pool  [num_pages, page_tokens, kv_heads, head_dim]
        block_table     [batch, max_pages]  int32: page of each request's i-th block
        seq_lens        [batch]             int32: tokens each request attends to

    A request's pages are scattered over the pool in random order (as a block pool hands
    them out after a while); unused entries of the block table are 0.
    """

    k_pool: torch.Tensor
    v_pool: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    page_tokens: int

    @property
    def num_pages(self) -> int:
        return int(self.k_pool.shape[0])


def make_paged_kv(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    seq_lens: list[int],
    generator: torch.Generator,
) -> PagedKV:
    """Block tables of requests with ``seq_lens`` tokens over random pages of the given pools."""
    num_pages, page = int(k_pool.shape[0]), int(k_pool.shape[1])
    per_seq = [max(1, math.ceil(n / page)) for n in seq_lens]
    if sum(per_seq) > num_pages:
        raise ValueError(f"the pool holds {num_pages} pages, the batch needs {sum(per_seq)}")
    perm = torch.randperm(num_pages, generator=generator).to(torch.int32)
    table = torch.zeros(len(seq_lens), max(per_seq), dtype=torch.int32)
    start = 0
    for i, n in enumerate(per_seq):
        table[i, :n] = perm[start : start + n]
        start += n
    device = k_pool.device
    return PagedKV(
        k_pool, v_pool, table.to(device), torch.tensor(seq_lens, dtype=torch.int32, device=device), page
    )


def _rows(kv: PagedKV, start: int, stop: int) -> PagedKV:
    """Requests ``start:stop`` of ``kv`` (same pools)."""
    return PagedKV(
        kv.k_pool,
        kv.v_pool,
        kv.block_table[start:stop].contiguous(),
        kv.seq_lens[start:stop].contiguous(),
        kv.page_tokens,
    )


def gather_then_attend(q: torch.Tensor, kv: PagedKV, *, scale: float | None = None) -> torch.Tensor:
    """Reference decode attention in float32: each request's K/V gathered from its pages, then
    attended (the old harness's method). ``q`` is ``[batch, heads, head_dim]``."""
    out = []
    kv_heads = kv.k_pool.shape[2]
    for i in range(q.shape[0]):
        n = int(kv.seq_lens[i])
        pages = kv.block_table[i, : max(1, math.ceil(n / kv.page_tokens))].long()
        k = kv.k_pool[pages].float().reshape(-1, kv_heads, kv.k_pool.shape[3])[:n].transpose(0, 1)
        v = kv.v_pool[pages].float().reshape(-1, kv_heads, kv.v_pool.shape[3])[:n].transpose(0, 1)
        qi = q[i].float().unsqueeze(1)  # [heads, 1, head_dim]
        out.append(
            F.scaled_dot_product_attention(
                qi.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), scale=scale, enable_gqa=True
            )[0, :, 0]
        )
    return torch.stack(out)


class VarlenPagedDecode:
    """Decode over a paged KV cache with ``torch.nn.attention.varlen.varlen_attn`` and a block
    table: torch's bundled FlashAttention reads each request's pages in place (CUDA only)."""

    name = "torch_varlen_attn_paged"

    def __init__(self, kv: PagedKV) -> None:
        import inspect

        from torch.nn.attention.varlen import varlen_attn

        params = inspect.signature(varlen_attn).parameters
        if "block_table" not in params:
            raise TypeError(f"torch {torch.__version__}'s varlen_attn takes no block_table (no paged KV)")
        # torch 2.11's has no enable_gqa: FlashAttention takes fewer KV heads as they are
        self._gqa = {"enable_gqa": True} if "enable_gqa" in params else {}
        self.kv, self._attn = kv, varlen_attn
        b = int(kv.seq_lens.shape[0])
        dev = kv.k_pool.device
        self.cu_seq_q = torch.arange(b + 1, dtype=torch.int32, device=dev)
        self.cu_seq_k = torch.zeros(b + 1, dtype=torch.int32, device=dev)
        self.cu_seq_k[1:] = torch.cumsum(kv.seq_lens, 0)
        self.max_k = int(kv.seq_lens.max())

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self._attn(
            q,
            self.kv.k_pool,
            self.kv.v_pool,
            self.cu_seq_q,
            self.cu_seq_k,
            1,
            self.max_k,
            **self._gqa,
            seqused_k=self.kv.seq_lens,
            block_table=self.kv.block_table,
        )
        return out


class FlexPagedDecode:
    """Decode over a paged KV cache with ``flex_attention``: the block mask lists each request's
    pages (``kv_indices`` = its block table), all full but its last, whose valid tokens a
    mask over physical positions keeps. Compiled (one fused Triton kernel) or eager."""

    name = "torch_flex_attention_paged"

    def __init__(self, kv: PagedKV, *, compiled: bool) -> None:
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        self.kv, self.compiled = kv, compiled
        p, page = kv.num_pages, kv.page_tokens
        b, dev = int(kv.seq_lens.shape[0]), kv.k_pool.device
        heads_kv, hd = int(kv.k_pool.shape[2]), int(kv.k_pool.shape[3])
        # [pages, page, kv_heads, hd] seen as flex's [1, kv_heads, pages * page, hd] (no copy)
        self.k = kv.k_pool.view(1, p * page, heads_kv, hd).permute(0, 2, 1, 3)
        self.v = kv.v_pool.view(1, p * page, heads_kv, hd).permute(0, 2, 1, 3)
        lens = kv.seq_lens.long()
        n_pages = torch.clamp((lens + page - 1) // page, min=1)
        last_full = lens == n_pages * page
        full_n = torch.where(last_full, n_pages, n_pages - 1)
        cols = torch.arange(kv.block_table.shape[1], device=dev)
        table = kv.block_table.long()
        full_idx = torch.zeros(b, 1, 1, p, dtype=torch.int32, device=dev)
        full_idx[:, 0, 0, : table.shape[1]] = torch.where(cols < full_n[:, None], table, 0).to(torch.int32)
        part_idx = torch.zeros(b, 1, 1, p, dtype=torch.int32, device=dev)
        part_idx[:, 0, 0, 0] = table.gather(1, (n_pages - 1)[:, None])[:, 0].to(torch.int32)
        part_n = (~last_full).to(torch.int32)
        # physical page -> logical block of each request (-1: not its page)
        self.p2l = torch.full((b, p), -1, dtype=torch.int64, device=dev)
        rows = torch.arange(b, device=dev)[:, None].expand_as(table)
        valid = cols[None, :] < n_pages[:, None]
        self.p2l[rows[valid], table[valid]] = cols[None, :].expand_as(table)[valid]
        self.lens = lens
        p2l_, lens_ = self.p2l, self.lens

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            logical = p2l_[b, kv_idx // page]
            return (logical >= 0) & (logical * page + kv_idx % page < lens_[b])

        self.block_mask = BlockMask.from_kv_blocks(
            part_n.view(b, 1, 1),
            part_idx,
            full_n.to(torch.int32).view(b, 1, 1),
            full_idx,
            BLOCK_SIZE=(page, page),
            mask_mod=mask_mod,
            seq_lengths=(1, p * page),
        )
        self._attn = _compiled_flex() if compiled else flex_attention
        # The compiled kernel's tiles must divide the mask's blocks (one page): its default
        # BLOCK_N of 128 for head_dim 128 on an H200 refuses 64-token pages (seen, torch 2.11).
        tile = min(page, 64)
        self.kernel_options = {"BLOCK_M": tile, "BLOCK_N": tile} if compiled and page % tile == 0 else None

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        with warnings.catch_warnings():
            # eager on purpose (a CPU's correctness path): torch's advice to compile is known
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = self._attn(
                q.unsqueeze(2),
                self.k,
                self.v,
                block_mask=self.block_mask,
                enable_gqa=True,
                kernel_options=self.kernel_options,
            )
        result: torch.Tensor = out[:, :, 0]
        return result


class ContiguousDecode:
    """Decode attention over each request's K/V copied out of its pages once, before timing:
    fused SDPA (FlashAttention, cuDNN or memory-efficient, as torch picks) of one query token
    per request over contiguous ``[batch, kv_heads, tokens, head_dim]`` K and V, GQA native.

    A stand-in for a paged kernel where torch has none that is fast: on one H200 (torch 2.11)
    it ran within 0.76-1.29x of vLLM 0.24.0's paged FlashAttention-3 at the same points, and
    compiled ``flex_attention`` over the pages 3.7-6.5x slower at 16-256 requests
    (docs/cost-model.md, "The harness on a real H200"). The copy is not timed (a paged kernel reads the pages in place). Requests
    of unequal length are padded and masked (the correctness check's batch); the tables' points
    are equal-length, unmasked. bf16/fp16 K/V only: SDPA takes no fp8."""

    name = "torch_sdpa_contiguous_kv"

    def __init__(self, kv: PagedKV) -> None:
        if kv.k_pool.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"SDPA takes no {kv.k_pool.dtype} K/V")
        lens = [int(n) for n in kv.seq_lens.tolist()]
        longest, page, kv_heads = max(lens), kv.page_tokens, int(kv.k_pool.shape[2])

        def gather(pool: torch.Tensor) -> torch.Tensor:
            out = pool.new_zeros(len(lens), longest, kv_heads, pool.shape[3])
            for i, n in enumerate(lens):
                pages = kv.block_table[i, : max(1, math.ceil(n / page))].long()
                out[i, :n] = pool[pages].reshape(-1, kv_heads, pool.shape[3])[:n]
            return out.transpose(1, 2).contiguous()

        self.k, self.v = gather(kv.k_pool), gather(kv.v_pool)
        self.mask = None
        if min(lens) != longest:
            held = torch.arange(longest, device=kv.k_pool.device)[None, :] < kv.seq_lens[:, None]
            self.mask = held[:, None, None, :]  # [batch, 1, 1, tokens]

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(
            q.unsqueeze(2), self.k, self.v, attn_mask=self.mask, enable_gqa=True
        )
        result: torch.Tensor = out[:, :, 0]
        return result


_COMPILED_FLEX: Any = None


def _compiled_flex() -> Any:
    """``torch.compile(flex_attention)``, once; recompilations allowed for every batch shape."""
    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        import torch._dynamo.config as dynamo_config
        from torch.nn.attention.flex_attention import flex_attention

        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 256)
        dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 4096)
        _COMPILED_FLEX = torch.compile(flex_attention)
    return _COMPILED_FLEX


def decode_kernels(device: torch.device, page_tokens: int) -> list[tuple[str, int, Callable[[PagedKV], Any]]]:
    """(kernel_source, page_tokens, factory) of the paged decode kernels to try, best first."""
    if device.type != "cuda":
        return [
            (f"{FlexPagedDecode.name}_eager", page_tokens, lambda kv: FlexPagedDecode(kv, compiled=False))
        ]
    out: list[tuple[str, int, Callable[[PagedKV], Any]]] = []
    for page in dict.fromkeys((page_tokens, 256)):
        out.append((VarlenPagedDecode.name, page, VarlenPagedDecode))
    out.append((ContiguousDecode.name, page_tokens, ContiguousDecode))
    out.append((FlexPagedDecode.name, page_tokens, lambda kv: FlexPagedDecode(kv, compiled=True)))
    return out


# --------------------------------------------------------------------------- the run


class _Tables:
    def __init__(
        self, device: torch.device, grids: TableGrids, progress: Progress, cuda_graphs: bool
    ) -> None:
        self.device, self.grids, self.progress, self.cuda_graphs = device, grids, progress, cuda_graphs
        self.gen = torch.Generator(device=device).manual_seed(0)
        self.cpu_gen = torch.Generator().manual_seed(1)
        self.device_name = str(device_info(device)["name"])
        self.version = torch_version()

    def _randn(self, *size: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.randn(*size, generator=self.gen, device=self.device, dtype=torch.float32).to(dtype)

    def _time_ms(self, fn: Callable[[int], object], variants: int = 1) -> float:
        s = time_median_s(
            fn,
            self.device,
            warmup=self.grids.warmup,
            repeats=self.grids.repeats,
            variants=variants,
            cuda_graph=self.cuda_graphs,
        )
        return s * 1e3

    def _row(self, table: str, kernel_source: str, **columns: Any) -> dict[str, Any]:
        op_name = {
            "gemm_perf": "gemm",
            "context_attention_perf": "context_attention",
            "generation_attention_perf": "generation_attention",
            "custom_allreduce_perf": "all_reduce",
            "moe_perf": "moe",
        }[table]
        return {
            "framework": "torch",
            "version": self.version,
            "device": self.device_name,
            "op_name": op_name,
            "kernel_source": kernel_source,
            **columns,
        }

    def _free(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ GEMM

    def fp8_unsupported(self) -> str | None:
        if FP8 is None or not hasattr(torch, "_scaled_mm"):
            return f"torch {torch.__version__} has no float8_e4m3fn / _scaled_mm"
        if self.device.type == "cuda" and torch.cuda.get_device_capability(self.device) < (8, 9):
            cap = ".".join(map(str, torch.cuda.get_device_capability(self.device)))
            return f"fp8 needs compute capability 8.9 or newer; this GPU has {cap}"
        return None

    def gemm(self) -> Table:
        table, g = Table(), self.grids
        for dtype in g.gemm_dtypes:
            if dtype == "fp8" and (why := self.fp8_unsupported()):
                table.skip("gemm_dtype=fp8", why, count=len(g.gemm_m) * len(g.gemm_nk))
                continue
            for n, k in g.gemm_nk:
                self._gemm_shape(table, dtype, n, k)
                self.progress(f"gemm {dtype} n={n} k={k}: {len(g.gemm_m)} token counts")
        return table

    def _gemm_shape(self, table: Table, dtype: str, n: int, k: int) -> None:
        g = self.grids
        copies = _num_copies(n * k * 2, g.l2_flush_bytes)
        scale = torch.ones((), dtype=torch.float32, device=self.device)  # per-tensor, static
        try:
            ws = [self._randn(n, k) for _ in range(copies)]
            if dtype == "fp8":
                # W stored [n, k] row-major (as vLLM keeps it), given as [k, n] column-major
                ws = [w.to(FP8).t() for w in ws]
        except (RuntimeError, ValueError) as exc:
            table.skip(f"gemm_dtype={dtype} n={n} k={k}", _first_line(exc), count=len(g.gemm_m))
            return
        source = "torch._scaled_mm" if dtype == "fp8" else "torch.nn.functional.linear"
        for m in g.gemm_m:
            try:
                x = self._randn(m, k)
                if dtype == "fp8":

                    def fn(i: int, x: torch.Tensor = x, ws: list[torch.Tensor] = ws) -> torch.Tensor:
                        xq = (x * scale).to(FP8)  # static per-tensor quantisation of the activations
                        return torch._scaled_mm(
                            xq, ws[i % len(ws)], scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16
                        )

                else:

                    def fn(i: int, x: torch.Tensor = x, ws: list[torch.Tensor] = ws) -> torch.Tensor:
                        return F.linear(x, ws[i % len(ws)])

                latency = self._time_ms(fn, len(ws))
            except (RuntimeError, ValueError) as exc:
                table.skip(f"gemm_dtype={dtype} m={m} n={n} k={k}", _first_line(exc))
                self._free()
                continue
            table.add(
                self._row("gemm_perf", source, gemm_dtype=DTYPE_NAMES[dtype], m=m, n=n, k=k, latency=latency)
            )
            del x
        del ws
        self._free()

    # ------------------------------------------------------------------ context attention

    def _sdpa_backend(self, heads: int, kv_heads: int, hd: int) -> tuple[SDPBackend, str, bool] | str:
        """(backend, name, expand KV heads) of the first fused SDPA kernel that runs this layout
        causally (torch's own pick first, then flash, cuDNN, efficient), or why none does.
        GQA is attended natively where the kernel can; otherwise
        the KV heads are expanded to the query heads before the timed call (the same FLOPs;
        more K/V bytes read, which prefill's compute hides). The unfused math backend comes
        last: it materialises the scores."""
        q = self._randn(1, heads, 16, hd)
        k = self._randn(1, kv_heads, 16, hd)
        k_expanded = k.repeat_interleave(heads // kv_heads, dim=1)
        names = {
            SDPBackend.FLASH_ATTENTION: "flash",
            SDPBackend.CUDNN_ATTENTION: "cudnn",
            SDPBackend.EFFICIENT_ATTENTION: "efficient",
        }
        # torch's own choice for this layout first (its heuristics for the device), then the others
        try:
            preferred = SDPBackend(
                torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=heads != kv_heads)
            )
        except (RuntimeError, ValueError, AttributeError):
            preferred = SDPBackend.FLASH_ATTENTION
        order = sorted(names, key=lambda backend: backend != preferred)
        fused = [(backend, names[backend]) for backend in order]
        candidates = [(backend, name, False) for backend, name in fused]
        if heads != kv_heads:
            candidates += [(backend, f"{name}_kv_expanded", True) for backend, name in fused]
        candidates.append((SDPBackend.MATH, "math", False))
        reasons = []
        for backend, name, expand in candidates:
            try:
                with sdpa_kernel([backend]):
                    kk = k_expanded if expand else k
                    F.scaled_dot_product_attention(q, kk, kk, is_causal=True, enable_gqa=not expand)
            except RuntimeError as exc:
                reasons.append(f"{name}: {_first_line(exc)}")
                continue
            return backend, name, expand
        return "; ".join(reasons)

    def context_attention(self) -> Table:
        table, g = Table(), self.grids
        for heads, kv_heads, hd in g.attention_heads:
            points = g.context_points(heads, kv_heads)
            layout = f"num_heads={heads} num_key_value_heads={kv_heads} head_dim={hd}"
            chosen = self._sdpa_backend(heads, kv_heads, hd)
            for kv in g.kv_dtypes:
                if kv == "fp8":
                    table.skip(
                        f"kv_cache_dtype=fp8 {layout}",
                        "no fused prefill attention over fp8 K/V in torch: SDPA's kernels take "
                        "fp16/bf16/fp32 (vLLM's FA3 runs prefill in fp8)",
                        count=len(points),
                    )
                    continue
                if isinstance(chosen, str):
                    table.skip(layout, f"no SDPA backend runs this layout: {chosen}", count=len(points))
                    continue
                backend, name, expand = chosen
                for b, isl in points:
                    self._context_point(
                        table, backend, f"torch_sdpa_{name}", expand, b, isl, heads, kv_heads, hd
                    )
                self.progress(f"context attention {layout}: {len(points)} points ({name})")
        return table

    def _context_point(
        self,
        table: Table,
        backend: SDPBackend,
        source: str,
        expand: bool,
        b: int,
        isl: int,
        heads: int,
        kv_heads: int,
        hd: int,
    ) -> None:
        try:
            # [batch, tokens, heads, hd] as a model holds them, seen as SDPA's [batch, heads, tokens, hd]
            q = self._randn(b, isl, heads, hd).transpose(1, 2)
            k = self._randn(b, isl, kv_heads, hd).transpose(1, 2)
            v = self._randn(b, isl, kv_heads, hd).transpose(1, 2)
            if expand:
                k = k.repeat_interleave(heads // kv_heads, dim=1)
                v = v.repeat_interleave(heads // kv_heads, dim=1)
            gqa = not expand

            def fn(_i: int, q: torch.Tensor = q, k: torch.Tensor = k, v: torch.Tensor = v) -> torch.Tensor:
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

            latency = self._time_ms(fn)
        except (RuntimeError, ValueError) as exc:
            table.skip(f"batch_size={b} isl={isl} num_heads={heads}", _first_line(exc))
            self._free()
            return
        table.add(
            self._row(
                "context_attention_perf",
                source,
                batch_size=b,
                isl=isl,
                num_heads=heads,
                num_key_value_heads=kv_heads,
                head_dim=hd,
                beam_width=1,
                attn_dtype="bfloat16",
                kv_cache_dtype="bfloat16",
                step=0,
                window_size=0,
                latency=latency,
            )
        )
        del q, k, v

    # ------------------------------------------------------------------ generation attention

    def _pool(
        self, pages: int, page: int, kv_heads: int, hd: int, kv: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = FP8 if kv == "fp8" else torch.bfloat16
        assert dtype is not None
        return self._randn(pages, page, kv_heads, hd, dtype=dtype), self._randn(
            pages, page, kv_heads, hd, dtype=dtype
        )

    def _query(self, b: int, heads: int, hd: int, kv: str, source: str) -> torch.Tensor:
        q = self._randn(b, heads, hd)
        # FlashAttention runs fp8 only with q, k and v in fp8 (as vLLM's FA3 path quantises q)
        if kv == "fp8" and source == VarlenPagedDecode.name and FP8 is not None:
            q = q.to(FP8)
        return q

    def choose_decode_kernel(
        self, heads: int, kv_heads: int, hd: int, kv: str
    ) -> tuple[tuple[str, int, Callable[[PagedKV], Any]] | None, list[str]]:
        """The first decode kernel whose output matches `gather_then_attend`, and why others failed."""
        failures = []
        for source, page, factory in decode_kernels(self.device, self.grids.page_tokens):
            try:
                k_pool, v_pool = self._pool(8, page, kv_heads, hd, kv)
                paged = make_paged_kv(k_pool, v_pool, [1, page + 3, 3 * page], self.cpu_gen)
                q = self._query(3, heads, hd, kv, source)
                out = factory(paged)(q)
                err = float((out.float() - gather_then_attend(q, paged)).abs().max())
            except Exception as exc:  # any failure of a candidate is a reason to try the next
                failures.append(f"{source} (page {page}): {_first_line(exc)}")
                continue
            if not math.isfinite(err) or err > DECODE_TOLERANCE[kv]:
                failures.append(f"{source} (page {page}): differs from gather-then-attend by {err:.3g}")
                continue
            return (source, page, factory), failures
        return None, failures

    def generation_attention(self) -> Table:
        table, g = Table(), self.grids
        for heads, kv_heads, hd in g.attention_heads:
            points = g.generation_points(heads, hd)
            layout = f"num_heads={heads} num_key_value_heads={kv_heads} head_dim={hd}"
            for kv in g.kv_dtypes:
                if kv == "fp8" and (why := self.fp8_unsupported()):
                    table.skip(f"kv_cache_dtype=fp8 {layout}", why, count=len(points))
                    continue
                chosen, failures = self.choose_decode_kernel(heads, kv_heads, hd, kv)
                for f in failures:
                    note = f"kv_cache_dtype={kv} {layout}: not used: {f}"
                    if chosen is not None and note not in table.notes:
                        table.notes.append(note)
                if chosen is None:
                    table.skip(
                        f"kv_cache_dtype={kv} {layout}",
                        "no fused paged decode kernel runs here: " + "; ".join(failures),
                        count=len(points),
                    )
                    continue
                self._generation_layout(table, chosen, points, heads, kv_heads, hd, kv)
                self.progress(f"generation attention {kv} {layout}: {len(points)} points ({chosen[0]})")
        return table

    def _decode_variants(self, b: int, step: int, kv_heads: int, hd: int, kv: str) -> int:
        """Copies of a point's batch (its own pages each) to rotate over, so that the K/V read
        by one call exceeds the L2 cache over the rotation, as one layer's cache in a forward
        pass is read from HBM (1 when the point alone is larger than the flush size)."""
        kv_bytes = 2 * b * (step + 1) * kv_heads * hd * (1 if kv == "fp8" else 2)
        return _num_copies(kv_bytes, self.grids.l2_flush_bytes)

    def _generation_layout(
        self,
        table: Table,
        chosen: tuple[str, int, Callable[[PagedKV], Any]],
        points: list[tuple[int, int]],
        heads: int,
        kv_heads: int,
        hd: int,
        kv: str,
    ) -> None:
        source, page, factory = chosen
        if not points:
            return
        pages = 1 + max(
            b * math.ceil((s + 1) / page) * self._decode_variants(b, s, kv_heads, hd, kv) for b, s in points
        )
        try:
            k_pool, v_pool = self._pool(pages, page, kv_heads, hd, kv)
        except (RuntimeError, ValueError) as exc:
            table.skip(
                f"kv_cache_dtype={kv} num_heads={heads} pool of {pages} pages", _first_line(exc), len(points)
            )
            self._free()
            return
        for b, step in points:
            try:
                copies = self._decode_variants(b, step, kv_heads, hd, kv)
                # one block table over b x copies requests (distinct pages), split into copies
                # the step cached tokens and the new one (the tables' convention)
                paged = make_paged_kv(k_pool, v_pool, [step + 1] * (b * copies), self.cpu_gen)
                kernels = [factory(_rows(paged, i * b, (i + 1) * b)) for i in range(copies)]
                q = self._query(b, heads, hd, kv, source)
                latency = self._time_ms(lambda i, q=q, kernels=kernels: kernels[i % len(kernels)](q), copies)
            except (RuntimeError, ValueError) as exc:
                table.skip(
                    f"kv_cache_dtype={kv} batch_size={b} step={step} num_heads={heads}", _first_line(exc)
                )
                self._free()
                continue
            table.add(
                self._row(
                    "generation_attention_perf",
                    f"{source}_page{page}",
                    batch_size=b,
                    isl=1,
                    num_heads=heads,
                    num_key_value_heads=kv_heads,
                    head_dim=hd,
                    beam_width=1,
                    attn_dtype="bfloat16",
                    kv_cache_dtype=DTYPE_NAMES[kv],
                    step=step,
                    window_size=0,
                    latency=latency,
                )
            )
            del kernels, q, paged
        del k_pool, v_pool
        self._free()

    # ------------------------------------------------------------------ all-reduce

    def allreduce(self) -> Table:
        from calibration.allreduce import measure_allreduce, measure_allreduce_in_process

        table, g = Table(), self.grids
        sizes = list(g.allreduce_elements)
        nbytes = [2 * n for n in sizes]
        visible = torch.cuda.device_count() if self.device.type == "cuda" else 0
        for world in g.allreduce_num_gpus:
            case = f"num_gpus={world}"
            try:
                if self.device.type == "cuda":
                    if world < 2 or world > visible:
                        table.skip(
                            case,
                            f"{visible} GPU(s) visible; an all-reduce over {world} needs them",
                            len(sizes),
                        )
                        continue
                    backend = "nccl"
                    self.progress(f"all-reduce over {world} GPUs (NCCL)")
                    times = measure_allreduce(
                        world, nbytes, dtype=torch.bfloat16, warmup=g.warmup, repeats=g.repeats
                    )
                else:
                    if world != 1:
                        table.skip(case, "a CPU run measures one gloo process only", len(sizes))
                        continue
                    backend = "gloo"
                    times = measure_allreduce_in_process(
                        nbytes, dtype=torch.bfloat16, warmup=g.warmup, repeats=g.repeats
                    )
            except (RuntimeError, ValueError, OSError) as exc:
                table.skip(case, _first_line(exc), len(sizes))
                continue
            for n, t in zip(sizes, times, strict=True):
                table.add(
                    self._row(
                        "custom_allreduce_perf",
                        "torch.distributed.all_reduce",
                        allreduce_dtype="bfloat16",
                        num_gpus=world,
                        message_size=n,
                        latency=t * 1e3,
                        backend=backend,
                    )
                )
        if self.device.type != "cuda":
            table.notes.append("CPU run: one gloo process, no communication; not a measurement of any GPU")
        return table

    # ------------------------------------------------------------------ MoE

    def moe(self) -> Table:
        table, g = Table(), self.grids
        for (hidden, inter, topk, experts), tp, ep in g.moe_cases():
            self._moe_case(table, hidden, inter, topk, experts, tp, ep)
            self.progress(
                f"moe hidden={hidden} inter={inter} top-{topk} of {experts} tp={tp} ep={ep}: "
                f"{len(g.moe_tokens)} token counts x {len(g.moe_distributions)} routings"
            )
        if self.device.type == "cuda" and torch.cuda.get_device_capability(self.device) < (9, 0):
            table.notes.append("torch._grouped_mm needs compute capability 9.0+: one GEMM pair per expert")
        return table

    def _moe_weights(self, experts: int, width: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
        def randn(*size: int, std: float) -> torch.Tensor:
            return torch.empty(*size, device=self.device, dtype=torch.bfloat16).normal_(
                std=std, generator=self.gen
            )

        return randn(experts, 2 * width, hidden, std=hidden**-0.5), randn(
            experts, hidden, width, std=width**-0.5
        )

    def _checked_moe(self, w13: torch.Tensor, w2: torch.Tensor, experts: int, topk: int, ep: int) -> TorchMoE:
        """The grouped kernel if it runs and reproduces `reference_moe` on a small routing, else
        the per-expert loop if that does; ValueError if neither."""
        ids, weights, first = routing(8, experts, topk, "power_law_1.01", moe_ep=ep, seed=1)
        x = self._randn(8, w13.shape[2])
        want = reference_moe(x, w13, w2, ids, weights, first)
        why = []
        for grouped in (True, False):
            moe = TorchMoE(w13, w2, grouped)
            try:
                got = moe.prepare(ids, weights, first, self.device)(x).float()
            except (RuntimeError, ValueError, NotImplementedError) as exc:
                why.append(f"{moe.kernel_source}: {_first_line(exc)}")
                continue
            err = float((got - want).norm() / want.norm().clamp_min(1e-30))
            if err <= MOE_TOLERANCE:
                return moe
            why.append(f"{moe.kernel_source}: differs from the reference by {err:.3g}")
        raise ValueError("; ".join(why))

    def _moe_case(
        self, table: Table, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int
    ) -> None:
        g = self.grids
        case = f"moe hidden={hidden} inter={inter} topk={topk} experts={experts} moe_tp={tp} moe_ep={ep}"
        points = len(g.moe_tokens) * len(g.moe_distributions)
        local, width = experts // ep, inter // tp
        copies = _num_copies(local * 3 * width * hidden * 2, g.l2_flush_bytes)
        try:
            weights = [self._moe_weights(local, width, hidden) for _ in range(copies)]
            checked = self._checked_moe(*weights[0], experts, topk, ep)
        except (RuntimeError, ValueError) as exc:
            table.skip(case, _first_line(exc), count=points)
            self._free()
            return
        moes = [TorchMoE(w13, w2, checked.grouped) for w13, w2 in weights]
        for distribution in g.moe_distributions:
            for tokens in g.moe_tokens:
                try:
                    ids, mix, first = routing(tokens, experts, topk, distribution, moe_ep=ep)
                    x = self._randn(tokens, hidden)
                    calls = [m.prepare(ids, mix, first, self.device) for m in moes]

                    def fn(i: int, x: torch.Tensor = x, calls: list = calls) -> torch.Tensor:  # type: ignore[type-arg]
                        return calls[i % len(calls)](x)

                    latency = self._time_ms(fn, len(calls))
                except (RuntimeError, ValueError) as exc:
                    table.skip(f"{case} num_tokens={tokens} {distribution}", _first_line(exc))
                    self._free()
                    continue
                table.add(
                    self._row(
                        "moe_perf",
                        checked.kernel_source,
                        moe_dtype="bfloat16",
                        num_tokens=tokens,
                        hidden_size=hidden,
                        inter_size=inter,
                        topk=topk,
                        num_experts=experts,
                        moe_tp_size=tp,
                        moe_ep_size=ep,
                        distribution=distribution,
                        latency=latency,
                    )
                )
        del moes, weights
        self._free()


def measure_tables(
    grids: TableGrids,
    *,
    device: str = "cuda",
    tables: tuple[str, ...] = ALL_TABLES,
    cuda_graphs: bool = True,
    progress: Progress | None = None,
) -> tuple[dict[str, Table], dict[str, Any]]:
    """Measure ``tables`` over ``grids`` on ``device``: each table, and the run's description
    for collection_meta.yaml's ``harness`` section (torch, device, date, grid)."""
    unknown = [t for t in tables if t not in ALL_TABLES]
    if unknown:
        raise ValueError(f"unknown tables {unknown}; choose from {', '.join(ALL_TABLES)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch sees no CUDA device (use --device cpu for a small CPU run)")
    dev = torch.device(device)
    say = progress or _stderr_progress
    run = _Tables(dev, grids, say, cuda_graphs and dev.type == "cuda")
    info = device_info(dev)
    started = dt.datetime.now(dt.UTC)
    say(f"kernel tables on {info['name']} ({grids.name} grid): {', '.join(tables)}")
    out: dict[str, Table] = {}
    with torch.inference_mode():
        for name in tables:
            out[name] = {
                "gemm_perf": run.gemm,
                "context_attention_perf": run.context_attention,
                "generation_attention_perf": run.generation_attention,
                "custom_allreduce_perf": run.allreduce,
                "moe_perf": run.moe,
            }[name]()
            say(
                f"{name}: {len(out[name].rows)} rows, {sum(n for n, _ in out[name].skipped.values())} skipped"
            )
    elapsed = (dt.datetime.now(dt.UTC) - started).total_seconds()
    meta = {
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "device": info["name"],
        "device_type": dev.type,
        "compute_capability": info.get("capability"),
        "driver": info.get("driver"),
        "collected_at": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "elapsed_s": round(elapsed, 3),
        "cuda_graphs": run.cuda_graphs,
        "grid": grids.name,
        "settings": json.loads(json.dumps(grids.to_dict())),
    }
    say(f"done in {elapsed:.1f} s")
    return out, meta


__all__ = [
    "ALL_TABLES",
    "ContiguousDecode",
    "FlexPagedDecode",
    "PagedKV",
    "Table",
    "VarlenPagedDecode",
    "gather_then_attend",
    "make_paged_kv",
    "measure_tables",
    "torch_version",
]
