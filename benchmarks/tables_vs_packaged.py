"""Kernel tables measured by kvsim's torch harness against the packaged ones, point for point.

    python benchmarks/tables_vs_packaged.py                       # the shipped H200 tables
    python benchmarks/tables_vs_packaged.py --tables DIR --system h200_sxm
    python benchmarks/tables_vs_packaged.py --json

Reads the tables `kvsim calibrate --tables` wrote (default: the ones measured on one H200
with torch 2.11.0+cu130 on 2026-12-04, `calibration/measurements/tables-h200-torch-2.11.0`)
and aiconfigurator-core 0.12.0's packaged tables of the same system for ``--backend``
(default vLLM 0.24.0), and prints, per table and group, how many points both measured and
the ratio harness / packaged (above 1: torch's kernel is slower): median, 10th and 90th
percentiles, least and most. Points are matched on every key column; where the packaged
table has several kernels for a point (vLLM's FA3 and FA4), the fastest; attention without
a sliding window; MoE in bf16 only (the harness measures no quantised experts).

Then one whole step as kvsim prices it (`KernelCostModel`, cost_model ``backend: torch``
against the packaged backend's tables) for ``--model`` (default Mixtral-8x7B, whose
attention and expert shapes the small grid measures) at a few decode and prefill points:
what a user who calibrated with the harness gets, beside what NVIDIA's tables give.

Needs pandas and pyarrow (kvsim's dependencies) and aiconfigurator-core (``pip install
kvsim[kernels]``); no torch, no GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvsim.cost.base import Batch
from kvsim.cost.config import KernelCostConfig
from kvsim.cost.kernels import KernelCostModel
from kvsim.cost.table_layout import TABLE_OPS
from kvsim.cost.tables import package_tables_root
from kvsim.model.presets import resolve_gpu, resolve_model

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "calibration" / "measurements" / "tables-h200-torch-2.11.0"
_ATTENTION_KEYS = [
    "batch_size",
    "isl",
    "num_heads",
    "num_key_value_heads",
    "head_dim",
    "kv_cache_dtype",
    "step",
]
#: Table -> (key columns, grouping columns).
KEYS: dict[str, tuple[list[str], list[str]]] = {
    "gemm_perf": (["gemm_dtype", "m", "n", "k"], ["gemm_dtype"]),
    "context_attention_perf": (_ATTENTION_KEYS, ["num_heads", "num_key_value_heads"]),
    "generation_attention_perf": (_ATTENTION_KEYS, ["kv_cache_dtype"]),
    "moe_perf": (
        [
            *("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts"),
            *("moe_tp_size", "moe_ep_size", "distribution"),
        ],
        ["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"],
    ),
}
#: (name, batch) of the whole-step points: decode requests x context, prefill chunks.
STEPS: list[tuple[str, Batch]] = [
    ("decode 1 x 2,048", Batch(num_decode_seqs=1, decode_context_tokens=2048)),
    ("decode 16 x 2,048", Batch(num_decode_seqs=16, decode_context_tokens=16 * 2048)),
    ("decode 64 x 2,048", Batch(num_decode_seqs=64, decode_context_tokens=64 * 2048)),
    ("decode 256 x 1,024", Batch(num_decode_seqs=256, decode_context_tokens=256 * 1024)),
    ("prefill 2,048", Batch(prefill_chunks=[(2048, 0)])),
    ("prefill 8,192", Batch(prefill_chunks=[(8192, 0)])),
]


def _version_folder(root: Path, system: str, op: str, backend: str, version: str | None) -> Path:
    base = root / system / op / backend
    if version is not None:
        return base / version
    found = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    if len(found) != 1:
        raise SystemExit(f"{base}: give --torch-version (found {[p.name for p in found]})")
    return found[0]


def _stats(ratios: np.ndarray) -> dict[str, float]:
    return {
        "median": float(np.median(ratios)),
        "p10": float(np.percentile(ratios, 10)),
        "p90": float(np.percentile(ratios, 90)),
        "min": float(ratios.min()),
        "max": float(ratios.max()),
    }


def compare(
    tables: Path, system: str, torch_version: str | None, backend: str, version: str, packaged: Path
) -> list[dict[str, Any]]:
    """One row per (table, group) and one per table ("all"): points matched and ratio statistics."""
    rows: list[dict[str, Any]] = []
    for table, (keys, groups) in KEYS.items():
        mine_path = (
            _version_folder(tables, system, TABLE_OPS[table], "torch", torch_version) / f"{table}.parquet"
        )
        theirs_path = (
            _version_folder(packaged, system, TABLE_OPS[table], backend, version) / f"{table}.parquet"
        )
        if not mine_path.is_file() or not theirs_path.is_file():
            continue
        mine, theirs = pd.read_parquet(mine_path), pd.read_parquet(theirs_path)
        if "window_size" in theirs.columns:
            theirs = theirs[theirs["window_size"] == 0]
        best = theirs.groupby(keys, as_index=False)["latency"].min()
        joined = mine.merge(best, on=keys, suffixes=("_torch", "_packaged"))
        joined["ratio"] = joined["latency_torch"] / joined["latency_packaged"]
        for group, part in [(("all",), joined), *joined.groupby(groups)]:
            name = " ".join(str(g) for g in (group if isinstance(group, tuple) else (group,)))
            rows.append(
                {
                    "table": table,
                    "group": name,
                    "points": len(part),
                    "of": len(mine),
                    **_stats(part["ratio"].to_numpy()),
                }
            )
    return rows


def steps(tables: Path, system: str, backend: str, version: str, model_name: str) -> list[dict[str, Any]]:
    """Whole steps of ``model_name`` (TP 1) priced from the harness's tables and the packaged ones."""
    model, gpu = resolve_model(model_name), resolve_gpu("h200-sxm")
    torch_cfg = KernelCostConfig(tables=str(tables), system=system, backend="torch")
    packaged_cfg = KernelCostConfig(system=system, backend=backend, version=version)  # type: ignore[arg-type]
    ours = KernelCostModel(model, gpu, torch_cfg, backend=backend)
    theirs = KernelCostModel(model, gpu, packaged_cfg, backend=backend)
    out = []
    for name, batch in STEPS:
        a, b = ours.step_time_s(batch) * 1e3, theirs.step_time_s(batch) * 1e3
        out.append({"step": name, "torch_ms": a, "packaged_ms": b, "ratio": a / b})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=Path, default=SHIPPED, help="a kvsim calibrate --tables folder")
    p.add_argument("--system", default="h200_sxm", help="the system folder in both (default h200_sxm)")
    p.add_argument(
        "--torch-version", default=None, help="the harness tables' version folder (default: the only one)"
    )
    p.add_argument("--backend", default="vllm", choices=("vllm", "sglang", "trtllm"))
    p.add_argument("--version", default="0.24.0", help="the packaged backend's version (default 0.24.0)")
    p.add_argument("--model", default="mixtral-8x7b", help="model preset for the whole-step points")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = p.parse_args(argv)
    packaged = package_tables_root()
    if packaged is None:
        print("needs aiconfigurator-core's tables: pip install -e '.[kernels]'", file=sys.stderr)
        return 2
    rows = compare(args.tables, args.system, args.torch_version, args.backend, args.version, packaged)
    step_rows = steps(args.tables, args.system, args.backend, args.version, args.model)
    if args.json:
        print(json.dumps({"kernels": rows, "steps": step_rows}, indent=1))
        return 0
    print(f"harness / {args.backend} {args.version} on {args.system}, one layer's kernel per point")
    print("| table | group | points | median | p10 | p90 | range |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['table']} | {r['group']} | {r['points']} of {r['of']} | {r['median']:.2f} | {r['p10']:.2f} "
            f"| {r['p90']:.2f} | {r['min']:.2f}-{r['max']:.2f} |"
        )
    print(
        f"\n{args.model}, TP 1, one step (ms): cost_model backend torch against {args.backend} {args.version}"
    )
    print("| step | harness tables | packaged tables | ratio |")
    print("|---|---:|---:|---:|")
    for s in step_rows:
        print(f"| {s['step']} | {s['torch_ms']:.2f} | {s['packaged_ms']:.2f} | {s['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
