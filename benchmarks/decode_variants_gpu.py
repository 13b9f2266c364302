"""Decode attention variants on one GPU: compiled flex_attention over a paged KV cache (page
sizes 64/128/256, four tile settings) and, unpaged, SDPA and flex over contiguous K/V; bf16,
32 query / 8 KV heads, head_dim 128, at seven (batch, tokens) points. Needs a CUDA GPU.

    python benchmarks/decode_variants_gpu.py OUT.csv

Its run on one H200 (torch 2.11.0+cu130, 2026-12-04) is
calibration/measurements/decode-variants-h200-torch-2.11.0.csv; docs/cost-model.md ("The
harness on a real H200") reads it beside vLLM 0.24.0's FA3 (aiconfigurator-core 0.12.0): why
the harness measures decode attention over contiguous K/V where torch has no paged kernel.
Columns: variant, page (0: unpaged), batch, tokens each request attends to, ms (median of 10
CUDA-graph replays), err (largest difference from gather-then-attend, batches <= 16; FAIL and
the reason when the variant does not run).
"""

import csv
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calibration.tables import FlexPagedDecode, PagedKV, gather_then_attend, make_paged_kv
from calibration.timing import time_median_s

H, KV, D = 32, 8, 128
POINTS = [(1, 1024), (1, 4096), (1, 16384), (16, 4096), (64, 1024), (64, 4096), (256, 1024)]
#: flex_attention kernel_options tried over the pages (None: torch's own choice).
OPTIONS: dict[str, dict[str, int] | None] = {
    "tile64": {"BLOCK_M": 64, "BLOCK_N": 64},
    "n64": {"BLOCK_N": 64},
    "m16n32": {"BLOCK_M": 16, "BLOCK_N": 32},
    "default": None,
}
#: Seconds after which the paged sweep stops (the run's budget on a lent GPU).
BUDGET_S = 250


def main(path: str) -> None:
    warnings.filterwarnings("ignore")
    dev, gen = torch.device("cuda"), torch.Generator().manual_seed(0)
    t0 = time.time()
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["variant", "page", "batch", "tokens", "ms", "err"])

        def record(variant: str, page: int, b: int, n: int, fn: Callable[[torch.Tensor], Any], q: torch.Tensor,
                   kv: PagedKV | None) -> None:  # fmt: skip
            try:
                err = ""
                got = fn(q).float()
                if kv is not None and b <= 16:
                    err = f"{float((got - gather_then_attend(q, kv)).abs().max()):.3g}"
                ms = time_median_s(lambda i: fn(q), dev, warmup=2, repeats=10, cuda_graph=True) * 1e3
            except Exception as exc:  # a variant that does not run is a result too
                ms, err = float("nan"), ("FAIL " + str(exc).splitlines()[0])[:200]
            out.writerow([variant, page, b, n, f"{ms:.5f}", err])
            fh.flush()
            print(variant, page, b, n, f"{ms:.4f}", err, f"t={time.time() - t0:.0f}s", flush=True)

        for page in (64, 128, 256):
            for b, n in POINTS:
                pages = b * math.ceil(n / page) + 8
                k_pool = torch.randn(pages, page, KV, D, device=dev, dtype=torch.bfloat16)
                v_pool = torch.randn(pages, page, KV, D, device=dev, dtype=torch.bfloat16)
                kv = make_paged_kv(k_pool, v_pool, [n] * b, gen)
                q = torch.randn(b, H, D, device=dev, dtype=torch.bfloat16)
                for name, options in OPTIONS.items():
                    if time.time() - t0 > BUDGET_S:
                        break
                    kernel = FlexPagedDecode(kv, compiled=True)
                    kernel.kernel_options = options
                    record(f"flex_{name}", page, b, n, kernel, q, kv)
                torch.cuda.empty_cache()
        compiled = torch.compile(flex_attention)
        for b, n in POINTS:  # unpaged references: SDPA (torch picks the backend) and flex
            k = torch.randn(b, KV, n, D, device=dev, dtype=torch.bfloat16)
            v = torch.randn(b, KV, n, D, device=dev, dtype=torch.bfloat16)
            q = torch.randn(b, H, D, device=dev, dtype=torch.bfloat16)

            def sdpa(q: torch.Tensor, k: torch.Tensor = k, v: torch.Tensor = v) -> torch.Tensor:
                return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=True)[:, :, 0]

            def flex(q: torch.Tensor, k: torch.Tensor = k, v: torch.Tensor = v) -> torch.Tensor:
                result: torch.Tensor = compiled(q.unsqueeze(2), k, v, enable_gqa=True)[:, :, 0]
                return result

            record("sdpa_dense_gqa", 0, b, n, sdpa, q, None)
            record("flex_dense", 0, b, n, flex, q, None)
    print("done", round(time.time() - t0, 1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "decode_variants.csv")
