"""The shipped H200 profile against measured kernel tables, shape for shape.

    python benchmarks/profile_vs_kernels.py                   # vs aiconfigurator-core's vLLM 0.24.0 tables
    python benchmarks/profile_vs_kernels.py --json
    python benchmarks/profile_vs_kernels.py --tables DIR --backend torch --version 2.13.0   # vs your own

Compares `kvsim/data/profiles/h200-llama-3-8b-bf16-tp1.json` (kvsim's torch harness on one
H200, 2026-11-29; decode attention gathered the blocks, then attended) with the kernel tables
of ``--system`` (default ``h200_sxm``) for Llama-3-8B's shapes (hidden 4096, 32 heads, 8 KV
heads, head_dim 128, intermediate 14336, bf16, TP 1), one layer:

- GEMMs QKV (4096 -> 6144), O (4096 -> 4096), gate+up (4096 -> 28672), down (14336 -> 4096)
  at several token counts (``m``); the tables have no 28672 or 14336 feature size, so those
  two are interpolated linearly in ``n`` / ``k`` between the grid's neighbours (marked ``~``);
- context attention of one prompt of ``isl`` tokens, causal, no cached prefix (the profile's
  ``prefill_attention`` at context 0, the tables' ``context_attention_perf`` at batch 1);
- decode attention of ``batch`` requests attending to ``context`` tokens each (the profile's
  ``decode_attention.bf16``; the tables' ``generation_attention_perf`` at ``step`` =
  ``context - 1``, the tokens cached before the new one, interpolated linearly between its
  2^k - 1 grid values);
- one whole decode layer (the four GEMMs plus decode attention) at the same points;
- one whole decode iteration as kvsim prices it with the profile (`CalibratedCostModel`:
  32 layers, elementwise work, LM head, the profile's 0.5 ms per iteration) against the same
  iteration with only its decode attention taken from the tables: what the gathered decode
  attention alone adds to a user's TPOT.

Prints ``profile ms``, ``kernels ms`` and their ratio (profile / kernels: above 1, the
profile is slower than the measured kernel), then the median ratio of each section. Needs
pandas and pyarrow (kvsim's dependencies) and, for the default tables, aiconfigurator-core
(``pip install kvsim[kernels]``); no torch, no GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvsim.cost.base import Batch
from kvsim.cost.calibrated import CalibratedCostModel
from kvsim.cost.profile import load_profile
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "kvsim" / "data" / "profiles" / "h200-llama-3-8b-bf16-tp1.json"
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
#: Llama-3-8B's linear layers on one GPU: (n = out features, k = in features).
GEMMS = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
TOKENS = [1, 16, 64, 256, 1024, 4096, 8192, 16384]
PROMPTS = [128, 512, 1024, 2048, 4096, 8192, 16384]
#: (batch, context): profile grid points the tables also cover (batch x step x heads <= 8M).
DECODE = [
    (1, 1024),
    (1, 4096),
    (1, 16384),
    (8, 2048),
    (8, 16384),
    (32, 4096),
    (64, 2048),
    (64, 4096),
    (128, 2048),
    (256, 512),
]


def packaged_tables() -> Path:
    try:
        import aiconfigurator_core
    except ImportError:
        sys.exit("aiconfigurator-core is not installed (pip install kvsim[kernels]); or pass --tables DIR")
    return Path(aiconfigurator_core.__file__).parent / "systems" / "data"


def _bracket(grid: np.ndarray, x: int) -> tuple[int, int]:
    """The grid values either side of ``x`` (both ``x`` when it is on the grid)."""
    if x in grid:
        return x, x
    i = int(np.searchsorted(grid, x))
    if i == 0 or i == len(grid):
        raise ValueError(f"{x} is outside the table's grid {grid[0]}..{grid[-1]}")
    return int(grid[i - 1]), int(grid[i])


def _interp(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    if x < xs[0] or x > xs[-1]:
        raise ValueError(f"{x} is outside the table's grid {xs[0]}..{xs[-1]}")
    if xs[0] == xs[-1]:
        return float(ys[0])
    return float(np.interp(x, xs, ys))


class Tables:
    """The bf16 tables of one system/backend/version, looked up at Llama-3-8B's shapes."""

    def __init__(self, root: Path, system: str, backend: str, version: str) -> None:
        base = root / system
        self.gemm = pd.read_parquet(base / "gemm" / backend / version / "gemm_perf.parquet")
        self.gemm = self.gemm[self.gemm["gemm_dtype"] == "bfloat16"]
        attn = base / "attention" / backend / version
        keep = {"num_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM}
        self.context = self._select(pd.read_parquet(attn / "context_attention_perf.parquet"), keep)
        self.generation = self._select(pd.read_parquet(attn / "generation_attention_perf.parquet"), keep)
        self.kernel_sources = sorted(
            set(self.gemm["kernel_source"])
            | set(self.context["kernel_source"])
            | set(self.generation["kernel_source"])
        )

    @staticmethod
    def _select(frame: pd.DataFrame, keep: dict[str, int]) -> pd.DataFrame:
        mask = (frame["kv_cache_dtype"] == "bfloat16") & (frame["window_size"] == 0)
        for col, value in keep.items():
            mask &= frame[col] == value
        return frame[mask]

    def gemm_ms(self, m: int, n: int, k: int) -> tuple[float, bool]:
        """Latency at (m, n, k), bilinear in (n, k) between the neighbouring grid points; and
        whether it was interpolated."""
        at_m = self.gemm[self.gemm["m"] == m].groupby(["n", "k"])["latency"].median()
        if at_m.empty:
            raise ValueError(f"no GEMM rows at m={m}")
        ns = np.sort(at_m.index.get_level_values("n").unique())
        ks = np.sort(at_m.index.get_level_values("k").unique())
        (n0, n1), (k0, k1) = _bracket(ns, n), _bracket(ks, k)

        def along_n(kk: int) -> float:
            return _interp(np.array([n0, n1], float), np.array([at_m[(n0, kk)], at_m[(n1, kk)]]), n)

        value = _interp(np.array([k0, k1], float), np.array([along_n(k0), along_n(k1)]), k)
        return value, (n0, k0) != (n, k)

    def context_ms(self, isl: int) -> float:
        rows = self.context[(self.context["batch_size"] == 1) & (self.context["isl"] == isl)]
        if rows.empty:
            raise ValueError(f"no context attention row at isl={isl}")
        return float(rows["latency"].median())

    def generation_ms(self, batch: int, context: int) -> float:
        rows = self.generation[self.generation["batch_size"] == batch].groupby("step")["latency"].median()
        return _interp(rows.index.to_numpy(dtype=float), rows.to_numpy(), context - 1)


class Profile:
    """The shipped profile's curves (seconds) at its own grid points, and kvsim's calibrated
    cost model built from it."""

    def __init__(self, path: Path) -> None:
        self.data = json.loads(path.read_text())
        self.tokens = self.data["gemm"]["tokens"]
        model = MODEL_PRESETS["llama-3-8b"]
        self.num_layers = model.num_layers
        self.model = CalibratedCostModel(load_profile(path), model=model, gpu=GPU_PRESETS["h200"], tp=1)

    def decode_step_ms(self, batch: int, context: int) -> float:
        """One decode iteration of ``batch`` requests at ``context`` tokens, as kvsim prices it."""
        step = self.model.step_time_s(Batch(num_decode_seqs=batch, decode_context_tokens=batch * context))
        return 1e3 * step

    def gemm_ms(self, op: str, m: int) -> float:
        return 1e3 * self.data["gemm"]["time_s"][op][self.tokens.index(m)]

    def context_ms(self, isl: int) -> float:
        pf = self.data["prefill_attention"]
        return 1e3 * pf["time_s"][pf["chunk_tokens"].index(isl)][pf["context_tokens"].index(0)]

    def decode_ms(self, batch: int, context: int) -> float:
        dec = self.data["decode_attention"]["bf16"]
        return 1e3 * dec["time_s"][dec["batch_sizes"].index(batch)][dec["context_tokens"].index(context)]


def compare(profile: Profile, tables: Tables) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(section: str, point: str, p: float, k: float) -> None:
        rows.append({"section": section, "point": point, "profile_ms": p, "kernels_ms": k, "ratio": p / k})

    for m in TOKENS:
        total_p = total_k = 0.0
        for op, (n, k) in GEMMS.items():
            p = profile.gemm_ms(op, m)
            t, interpolated = tables.gemm_ms(m, n, k)
            add("gemm", f"{op} m={m}{' ~' if interpolated else ''}", p, t)
            total_p, total_k = total_p + p, total_k + t
        add("gemm layer", f"4 GEMMs m={m}", total_p, total_k)
    for isl in PROMPTS:
        add("context attention", f"isl={isl}", profile.context_ms(isl), tables.context_ms(isl))
    for b, c in DECODE:
        p_attn, k_attn = profile.decode_ms(b, c), tables.generation_ms(b, c)
        add("decode attention", f"batch={b} context={c}", p_attn, k_attn)
        p_dense = sum(profile.gemm_ms(op, b) for op in GEMMS) if b in profile.tokens else float("nan")
        k_dense = sum(tables.gemm_ms(b, n, k)[0] for n, k in GEMMS.values())
        add("decode layer", f"batch={b} context={c}", p_dense + p_attn, k_dense + k_attn)
    for b, c in DECODE:
        step = profile.decode_step_ms(b, c)
        fused = step + profile.num_layers * (tables.generation_ms(b, c) - profile.decode_ms(b, c))
        add("decode iteration", f"batch={b} context={c}", step, fused)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default=str(PROFILE), help="a kernels profile of Llama-3-8B, tp 1")
    parser.add_argument("--tables", help="tables root (default: aiconfigurator-core's packaged data)")
    parser.add_argument("--system", default="h200_sxm")
    parser.add_argument("--backend", default="vllm")
    parser.add_argument("--version", default="0.24.0")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    root = Path(args.tables) if args.tables else packaged_tables()
    tables = Tables(root, args.system, args.backend, args.version)
    rows = compare(Profile(Path(args.profile)), tables)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(
        f"{Path(args.profile).name} vs {args.system}/{args.backend}/{args.version} ({', '.join(tables.kernel_sources)})"
    )
    print(f"{'section':<18} {'point':<28} {'profile ms':>11} {'kernels ms':>11} {'ratio':>7}")
    for r in rows:
        print(
            f"{r['section']:<18} {r['point']:<28} {r['profile_ms']:>11.4f} {r['kernels_ms']:>11.4f} {r['ratio']:>7.2f}"
        )
    print("\nmedian ratio (profile / kernels) per section:")
    for section in dict.fromkeys(r["section"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["section"] == section]
        print(f"  {section:<18} {statistics.median(ratios):.2f}  (range {min(ratios):.2f}-{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
