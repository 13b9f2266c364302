"""``kvsim sweep``: run a sweep file's points in parallel and write one tidy table.

kvsim sweep sweeps/block_size.yaml --out runs/block_size --jobs 4
kvsim sweep sweeps/block_size.yaml --out runs/block_size --executor ray --address ray://head:10001

Prints one line per point: its overrides, offered and achieved load, TTFT/TPOT p99 and
whether it was overloaded (the whole table is in OUT/results.csv); warns when a point
replays only part of its trace.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import pandas as pd

from kvsim.cli.types import count, number, path_arg, text_arg
from kvsim.limits import JOBS_PER_CPU, MAX_JOBS
from kvsim.planning.capacity import trace_share_kept
from kvsim.planning.sweep import DEFAULT_RAY_CONNECT_TIMEOUT_S, MAX_CONNECT_TIMEOUT_S, default_jobs, run_sweep
from kvsim.units import MISSING, format_rate, format_seconds, rate_unit

#: Summary columns of the printed table, with their titles.
PRINTED = {
    "offered_requests_per_s": "offered",
    "achieved_requests_per_s": "achieved",
    "ttft_p50_s": "TTFT p50",
    "ttft_p99_s": "TTFT p99",
    "tpot_p99_s": "TPOT p99",
    "overloaded": "overloaded",
}


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if key.endswith(("_rate", "_share", "_mean", "_peak", "attainment")) and isinstance(value, float):
        return f"{value:.1%}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_per_s"):
        return format_rate(value, rate_unit(key))
    if key.endswith("_s"):
        return format_seconds(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # an integer override in a column that also holds null
    return str(value)


def format_points(table: pd.DataFrame, extra: list[str] | None = None) -> str:
    """The sweep table in a few columns: overrides, status, load and tail latency, and ``extra`` summary keys."""
    cols = list(table.columns)
    overrides = cols[cols.index("index") + 1 : cols.index("status")]
    keys = [*overrides, "status", *(k for k in PRINTED if k in table.columns)]
    keys += [k for k in extra or [] if k not in keys]
    head = [PRINTED.get(k, k) for k in keys]
    rows = [[_cell(k, row[k]) for k in keys] for _, row in table.iterrows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def trace_warnings(table: pd.DataFrame) -> list[str]:
    """One warning per point that replayed part of its trace, with the share kept."""
    out = []
    for _, row in table.iterrows():
        share = trace_share_kept(row.to_dict())
        if share is not None and share < 1.0:
            out.append(
                f"point {row['point_id']} replays {share:.1%} of its trace (max_requests, start_s or "
                "end_s): a shortened trace can hide overload"
            )
    return out


def _cmd_sweep(args: argparse.Namespace) -> int:
    report = run_sweep(
        args.sweep,
        args.out,
        jobs=args.jobs,
        executor=args.executor,
        address=args.address,
        progress=lambda line: print(line, file=sys.stderr),
        connect_timeout_s=args.connect_timeout,
    )
    extra = [c.strip() for c in (args.columns or "").split(",") if c.strip()]
    unknown = [c for c in extra if c not in report.table.columns]
    if unknown and report.num_ok + report.num_skipped:
        print(f"kvsim: warning: no such summary key: {', '.join(unknown)}", file=sys.stderr)
    print(format_points(report.table, [c for c in extra if c in report.table.columns]))
    print()
    print(
        f"{report.num_points} points: {report.num_skipped} already done, {report.num_ok} ok, "
        f"{report.num_failed} failed; table: {args.out}/results.parquet, {args.out}/results.csv"
    )
    for warning in trace_warnings(report.table):
        print(f"kvsim: warning: {warning}", file=sys.stderr)
    return 1 if report.num_failed else 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``sweep`` to the parser."""
    p = sub.add_parser(
        "sweep",
        help="Run a sweep (base scenario x grid/list of overrides) into one table.",
        description="Run every point of a sweep file not already done in OUT, in parallel, and write "
        "OUT/results.parquet and OUT/results.csv (one row per point); print each point's overrides, "
        "offered and achieved load, TTFT/TPOT p99 and overload flag. Exit code 1 if any point failed.",
    )
    p.add_argument("sweep", type=path_arg, help="Sweep file (YAML): base, overrides, grid and/or points.")
    p.add_argument(
        "--out",
        required=True,
        type=path_arg,
        help="Output folder: new, empty, or a sweep folder kvsim wrote (marked by its .kvsim file), "
        "whose finished points are skipped.",
    )
    p.add_argument(
        "--jobs",
        type=count(1, MAX_JOBS),
        default=default_jobs(),
        help=f"Points run at once (default: CPU count; at most {JOBS_PER_CPU} x the CPU count, "
        f"and {MAX_JOBS}).",
    )
    p.add_argument(
        "--executor", choices=("local", "ray"), default="local", help="local processes or a Ray cluster."
    )
    p.add_argument(
        "--address",
        help="Ray cluster address, HOST:PORT (the head's GCS port, 6379) or ray://HOST:PORT (Ray "
        "Client, 10001) (--executor ray; default: start a local Ray).",
    )
    p.add_argument(
        "--connect-timeout",
        type=number(0, MAX_CONNECT_TIMEOUT_S, low_open=True),
        default=DEFAULT_RAY_CONNECT_TIMEOUT_S,
        metavar="S",
        help=f"Seconds to wait for the Ray cluster at --address (default {DEFAULT_RAY_CONNECT_TIMEOUT_S:g}).",
    )
    p.add_argument(
        "--columns",
        metavar="KEY,...",
        type=text_arg(10_000),
        help="Summary keys printed besides the default columns (e.g. prefix_cache_hit_rate,num_preemptions); "
        "the files hold them all.",
    )
    p.set_defaults(func=_cmd_sweep)
