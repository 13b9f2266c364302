"""Trace commands: ``kvsim cache-curve`` (hit ratio per cache size) and ``kvsim trace-stats``.

    kvsim cache-curve ../shared/traces/mooncake/conversation_trace.jsonl \\
        --block-size 512 --capacities 1000,10000,100000,inf --policy lru
    kvsim trace-stats ../shared/traces/azure/AzureLLMInferenceTrace_conv.csv --json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, get_args

import numpy as np
from pydantic import ValidationError

from kvsim.analysis.cache_curve import cache_curve, parse_capacities
from kvsim.cli.types import count, path_arg, text_arg
from kvsim.errors import KvsimError, TraceError
from kvsim.inputs import open_input
from kvsim.limits import MAX_CAPACITIES, MAX_NUM_REQUESTS, MAX_TOKENS, MAX_TRACE_BYTES, MAX_TRACE_LINE_CHARS
from kvsim.request import RequestSpec
from kvsim.workload.config import TraceFormat, TraceWorkload
from kvsim.workload.traces import TraceReport, replay_trace


class UsageError(KvsimError):
    """A command-line value is invalid."""


def guess_format(path: Path) -> str:
    """Trace format from the file name and header: .jsonl -> mooncake; .csv -> azure or burstgpt."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return "mooncake"
    if suffix == ".csv":
        try:
            with open_input(path, MAX_TRACE_BYTES) as fh:  # a regular file only; its first line, capped
                header = fh.readline(MAX_TRACE_LINE_CHARS + 1).decode("utf-8", errors="replace")
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
            raise TraceError(f"{path}: cannot read trace: {getattr(exc, 'strerror', None) or exc}") from None
        if "ContextTokens" in header:
            return "azure"
        if "Request tokens" in header:
            return "burstgpt"
    raise UsageError(f"{path}: cannot tell the trace format from its name/header; pass --format")


def _format(path: Path, fmt: str | None, columns: str | None) -> str:
    """``--format``, or the format the file's name (and header) says: with ``--columns`` a
    ``.csv`` is the generic csv format and a ``.jsonl`` generic jsonl, since only those take a
    column mapping."""
    if fmt:
        return fmt
    if columns:
        suffix = path.suffix.lower()
        if suffix == ".csv":
            return "csv"
        if suffix in (".jsonl", ".json"):
            return "jsonl"
    return guess_format(path)


def _load(args: argparse.Namespace) -> tuple[list[RequestSpec], TraceReport]:
    path = Path(args.trace)
    fmt = _format(path, args.format, args.columns)
    try:
        columns = json.loads(args.columns) if args.columns else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"--columns must be a JSON object: {exc.msg}") from None
    except (ValueError, RecursionError):  # 4,300-digit integers, deep nesting
        raise UsageError("--columns must be a JSON object of column names") from None
    try:
        cfg = TraceWorkload.model_validate(
            {"path": str(path), "format": fmt, "columns": columns, "max_requests": args.max_requests}
        )
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'trace'}: {e['msg']}" for e in err.errors())
        raise UsageError(problems) from None
    return replay_trace(cfg)


def _add_trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", type=path_arg, help="Trace file.")
    p.add_argument(
        "--format", choices=get_args(TraceFormat), help="Trace format (default: from name/header)."
    )
    p.add_argument(
        "--columns",
        type=text_arg(),
        help='Column mapping for csv/jsonl, as JSON: {"timestamp": "t", "prompt_tokens": ...}; '
        "implies --format csv for a .csv file and jsonl for a .jsonl file.",
    )
    p.add_argument("--max-requests", type=count(1, MAX_NUM_REQUESTS), help="Use only the first N requests.")
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table.")


def _cmd_cache_curve(args: argparse.Namespace) -> int:
    try:
        capacities = parse_capacities(args.capacities)
    except ValueError as exc:
        raise UsageError(f"--capacities: {exc}") from None
    requests, report = _load(args)
    points = cache_curve(
        requests,
        capacities,
        block_size=args.block_size,
        policy=args.policy,
        partial_blocks=not args.full_blocks_only,
        cache_outputs=args.cache_outputs,
    )
    if args.json:
        print(json.dumps([p.as_dict() for p in points], indent=2))
        return 0
    print(
        f"{report.path}: {report.num_requests} requests ({report.num_dropped} dropped), "
        f"block size {args.block_size}, policy {args.policy}"
    )
    print(f"{'capacity_blocks':>16} {'block_hit_ratio':>16} {'token_hit_ratio':>16} {'evictions':>10}")
    for p in points:
        cap = "inf" if p.capacity_blocks is None else str(p.capacity_blocks)
        print(f"{cap:>16} {p.block_hit_ratio:>16.4f} {p.token_hit_ratio:>16.4f} {p.num_evictions:>10}")
    return 0


def _stats(values: list[int]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    if not len(a):
        return {"mean": math.nan, "p50": math.nan, "p99": math.nan, "max": math.nan}
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }


def trace_stats(requests: list[RequestSpec], report: TraceReport) -> dict[str, Any]:
    """Counts, duration, rate and length statistics of a replayed trace."""
    span = report.duration_s
    return {
        "path": report.path,
        "format": report.format,
        "num_rows": report.num_rows,
        "num_requests": report.num_requests,
        "num_dropped": report.num_dropped,
        "dropped_by_reason": report.dropped_by_reason,
        "duration_s": span,
        "rate_per_s": (len(requests) - 1) / span if span > 0 else math.nan,
        "prompt_tokens": _stats([r.prompt_tokens for r in requests]),
        "output_tokens": _stats([r.output_tokens for r in requests]),
    }


def _cmd_trace_stats(args: argparse.Namespace) -> int:
    stats = trace_stats(*_load(args))
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    print(f"{stats['path']} ({stats['format']})")
    print(f"  rows {stats['num_rows']}, requests {stats['num_requests']}, dropped {stats['num_dropped']}")
    print(f"  duration {stats['duration_s']:.1f} s, rate {stats['rate_per_s']:.3f} req/s")
    for key in ("prompt_tokens", "output_tokens"):
        s = stats[key]
        print(f"  {key:<14} mean {s['mean']:.1f}  p50 {s['p50']:.0f}  p99 {s['p99']:.0f}  max {s['max']:.0f}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``cache-curve`` and ``trace-stats`` to the parser."""
    p = sub.add_parser(
        "cache-curve",
        help="Hit ratio of a trace's prefix reuse per cache capacity (no timing).",
        description="Replay a trace's prefix structure against a block cache and print the hit ratio "
        "(blocks and tokens) per capacity. A request hits its longest cached run of leading blocks.",
    )
    _add_trace_args(p)
    p.add_argument(
        "--block-size", type=count(1, MAX_TOKENS), default=512, help="Tokens per block (default 512)."
    )
    p.add_argument(
        "--capacities",
        default="1000,10000,100000,inf",
        help="Comma-separated capacities in blocks; 'inf' for unbounded (default 1000,10000,100000,inf; "
        f"at most {MAX_CAPACITIES:,}, each replaying the whole trace).",
    )
    p.add_argument("--policy", choices=("lru", "lfu"), default="lru", help="Eviction policy (default lru).")
    p.add_argument(
        "--full-blocks-only",
        action="store_true",
        help="Never cache partial last blocks (vLLM hashes full blocks only).",
    )
    p.add_argument(
        "--cache-outputs",
        action="store_true",
        help="Also cache each request's output blocks after it finishes.",
    )
    p.set_defaults(func=_cmd_cache_curve)

    s = sub.add_parser(
        "trace-stats",
        help="Requests, rate and length statistics of a trace.",
        description="Read a trace as a replay would and print counts, duration, rate and length statistics.",
    )
    _add_trace_args(s)
    s.set_defaults(func=_cmd_trace_stats)
