"""``kvsim capacity``: the smallest value of a knob (or the largest load) that meets an SLO.

    kvsim capacity scenarios/azure_conversation.yaml --knob replicas.0.count --range 1:8 \\
        --slo ttft_p99_s=2 --set workload.time_scale=8 --set router.kind=least_loaded
    kvsim capacity s.yaml --knob replicas.0.gpu --values l4,a100-80gb,h100-sxm,h200 --json
    kvsim capacity s.yaml --knob workload.arrival.rate_per_s --range 1:64 --slo ttft_p99_s=2

Prints one row per run (value, offered and achieved request rate, TTFT/TPOT percentiles,
SLO met, overloaded) and the answer in one line; exit code 3 when no value in the range
meets the SLO. The search is `kvsim.planning.capacity.find_capacity`, the dashboard's Capacity page
calls the same function.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, Literal

from kvsim.cli.types import count, number, path_arg, text_arg
from kvsim.limits import JOBS_PER_CPU, MAX_JOBS
from kvsim.planning.capacity import (
    DEFAULT_MIN_SERVED,
    TABLE_KEYS,
    CapacityPoint,
    CapacityReport,
    find_capacity,
    parse_slo,
    parse_values,
)
from kvsim.results.io import json_safe
from kvsim.units import MISSING, format_rate, format_seconds, rate_unit

#: Exit code when the search ran but no candidate meets the SLO.
EXIT_NO_ANSWER = 3


def _cell(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "served":
        return f"{value:.1%}"
    if key.endswith("_per_s"):
        return format_rate(value, rate_unit(key))
    if key.endswith("_s"):
        return format_seconds(value)
    if isinstance(value, float):
        return MISSING if math.isnan(value) else f"{value:.4g}"
    return str(value)


#: Column titles of the printed table.
TITLES = {
    "offered_requests_per_s": "offered",
    "achieved_requests_per_s": "achieved",
    "ttft_p50_s": "TTFT p50",
    "ttft_p99_s": "TTFT p99",
    "tpot_p50_s": "TPOT p50",
    "tpot_p99_s": "TPOT p99",
    "served": "served",
    "slo_met": "SLO met",
    "overloaded": "overloaded",
    "run": "run",
}


def format_table(report: CapacityReport) -> str:
    """The report's table as aligned text (values right-aligned, the knob first)."""
    table = report.table()
    keys = [report.knob, *TABLE_KEYS, *(b.key for b in report.slo if b.key not in TABLE_KEYS)]
    keys += ["served", "slo_met", "overloaded", "run"]
    head = [TITLES.get(k, k) for k in keys]
    rows = [[_cell(k, row[k]) for k in keys] for _, row in table.iterrows()]
    for r, (_, row) in zip(rows, table.iterrows(), strict=True):
        if row["error"]:
            r[keys.index("slo_met")] = "failed"
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    errors = [(row[report.knob], row["error"]) for _, row in table.iterrows() if row["error"]]
    lines += [f"  {report.knob}={v} failed: {e}" for v, e in errors]
    return "\n".join(lines)


def _cmd_capacity(args: argparse.Namespace) -> int:
    values = parse_values(args.range if args.range is not None else args.values)
    slo = parse_slo(args.slo) if args.slo else None
    goal: Literal["smallest", "largest"] | None = (
        "largest" if args.largest else "smallest" if args.smallest else None
    )

    def progress(point: CapacityPoint, num_candidates: int) -> None:
        if args.quiet or args.json:
            return
        verdict = "failed" if point.status != "ok" else "feasible" if point.feasible else "not feasible"
        print(
            f"run {point.run_index + 1}: {args.knob}={point.value} {verdict} "
            f"(TTFT p99 {format_seconds(point.summary.get('ttft_p99_s'))}, {point.wall_s:.1f} s)",
            file=sys.stderr,
        )

    report = find_capacity(
        args.scenario,
        args.knob,
        values,
        slo,
        goal=goal,
        overrides=args.overrides,
        jobs=args.jobs,
        progress=progress,
        min_served=args.min_served,
    )
    if args.json:
        print(json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False))
    else:
        print(format_table(report))
        print()
        print(report.answer_line())
    for note in report.notes:
        print(f"kvsim: warning: {note}", file=sys.stderr)
    return 0 if report.answer is not None else EXIT_NO_ANSWER


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``capacity`` to the parser."""
    p = sub.add_parser(
        "capacity",
        help="Smallest value of a knob (replicas, GPU, TP, memory) or largest rate that meets an SLO.",
        description="Search a knob's values for the boundary of an SLO by bisection, each point a full "
        "run of the whole workload in parallel worker processes. A point counts when every --slo bound "
        "holds, the run is not overloaded (backlog still growing and first tokens ever later when arrivals "
        "end, or requests cut off) and it served --min-served of its requests. Prints one row per run and the answer in one line. Exit codes: 0 answer found, "
        f"{EXIT_NO_ANSWER} no value in the range meets the SLO, 2 bad input, 1 a failure.",
    )
    p.add_argument(
        "scenario", nargs="?", type=path_arg, help="Scenario file (default: the embedded default scenario)."
    )
    p.add_argument(
        "--knob",
        required=True,
        type=text_arg(1000),
        metavar="PATH",
        help="Dotted path of the knob, as for --set: replicas.0.count, replicas.0.gpu, replicas.0.tp, "
        "replicas.0.engine.gpu_memory_utilization, workload.arrival.rate_per_s, workload.time_scale, ...",
    )
    values = p.add_mutually_exclusive_group(required=True)
    values.add_argument(
        "--range",
        metavar="START:STOP[:STEP]",
        help="Candidate numbers, both ends included (STEP 1 for integers; required for decimals).",
    )
    values.add_argument(
        "--values",
        metavar="A,B,...",
        help="Candidate values in order of increasing capacity (e.g. GPU presets l4,a100-80gb,h100-sxm).",
    )
    p.add_argument(
        "--slo",
        metavar="KEY=LIMIT,...",
        help="Bounds on summary keys: KEY=LIMIT or KEY<=LIMIT (upper), KEY>=LIMIT (lower), e.g. "
        "ttft_p99_s=2,tpot_p99_s=0.1 (any percentile key: ttft_p90_s, e2e_p99_s, ...). "
        "Default: the scenario's slo as ttft_p99_s and tpot_p99_s.",
    )
    goal = p.add_mutually_exclusive_group()
    goal.add_argument("--smallest", action="store_true", help="Look for the smallest feasible value.")
    goal.add_argument(
        "--largest",
        action="store_true",
        help="Look for the largest feasible value (the default for rate_per_s and time_scale knobs).",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a scenario field for every point (repeatable), as for kvsim run.",
    )
    p.add_argument(
        "--min-served",
        type=number(0, 1),
        default=DEFAULT_MIN_SERVED,
        metavar="SHARE",
        help=f"Least share of the requests a point must finish to count (default {DEFAULT_MIN_SERVED}): "
        "rejected (too long for the KV pool or max_model_len) and cut-off requests count against it.",
    )
    p.add_argument(
        "--jobs",
        type=count(1, MAX_JOBS),
        default=min(os.cpu_count() or 1, 4),
        help="Points run at once per bisection round (default: CPU count, at most 4); 1 is plain "
        f"bisection, the fewest runs (at most {JOBS_PER_CPU} x the CPU count, and {MAX_JOBS}).",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="Print the report as JSON (points with summaries).")
    out.add_argument("--quiet", action="store_true", help="No progress lines on stderr.")
    p.set_defaults(func=_cmd_capacity)
