"""``kvsim sweep``: run a sweep file's points in parallel and write one tidy table.

kvsim sweep sweeps/block_size.yaml --out runs/block_size --jobs 4
kvsim sweep sweeps/block_size.yaml --out runs/block_size --executor ray --address ray://head:10001
"""

from __future__ import annotations

import argparse
import os
import sys

from kvsim.sweep import run_sweep


def _cmd_sweep(args: argparse.Namespace) -> int:
    report = run_sweep(
        args.sweep,
        args.out,
        jobs=args.jobs,
        executor=args.executor,
        address=args.address,
        progress=lambda line: print(line, file=sys.stderr),
    )
    print(
        f"{report.num_points} points: {report.num_skipped} already done, {report.num_ok} ok, "
        f"{report.num_failed} failed; table: {args.out}/results.parquet, {args.out}/results.csv"
    )
    return 1 if report.num_failed else 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``sweep`` to the parser."""
    p = sub.add_parser(
        "sweep",
        help="Run a sweep (base scenario x grid/list of overrides) into one table.",
        description="Run every point of a sweep file not already done in OUT, in parallel, and write "
        "OUT/results.parquet and OUT/results.csv (one row per point). Exit code 1 if any point failed.",
    )
    p.add_argument("sweep", help="Sweep file (YAML): base, overrides, grid and/or points.")
    p.add_argument("--out", required=True, help="Output folder (reused: finished points are skipped).")
    p.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="Points run at once (default: CPU count)."
    )
    p.add_argument(
        "--executor", choices=("local", "ray"), default="local", help="local processes or a Ray cluster."
    )
    p.add_argument("--address", help="Ray cluster address (--executor ray; default: start a local Ray).")
    p.set_defaults(func=_cmd_sweep)
