"""Trace replay: reading request traces into `RequestSpec` lists.

Formats (one reader each, all returning the same `TraceTable`):

- ``mooncake``  JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
- ``azure``     Azure LLM inference 2023 CSV: ``TIMESTAMP`` (wall clock), ``ContextTokens``,
                ``GeneratedTokens``
- ``burstgpt``  BurstGPT CSV: ``Timestamp`` (s), ``Model``, ``Request tokens``,
                ``Response tokens``, ...
- ``csv`` / ``jsonl``  generic, with a column mapping (timestamp, prompt_tokens,
                output_tokens; optional hash_ids, tenant, priority, retention)

Hash ids name prefix blocks of ``hash_block_tokens`` tokens (Mooncake: 512). Each id becomes
one segment whose content id is the hash id, so identical id prefixes share KV and
different ids never do; the engine cuts segments into its own block size:

    hash_ids [7, 9, 4], input_length 1300 -> [7:512][9:512][4:276]

A row that cannot be parsed raises `TraceError` naming the file and line. Rows that parse
but cannot be simulated (no prompt tokens, no output tokens under ``zero_output: drop``)
are dropped and counted in the `TraceReport`, never silently.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.errors import TraceError
from kvsim.request import DEFAULT_RETENTION, RequestSpec, Retention, Segment
from kvsim.workload.config import TraceFormat, TraceWorkload

_TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass
class TraceTable:
    """A trace's rows as parallel lists, in file order; times in seconds from the first row."""

    path: str
    arrival_s: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    hash_ids: list[list[int]] | None = None
    tenant: list[str] | None = None
    priority: list[int] | None = None
    retention: list[Retention] | None = None
    lines: list[int] = field(default_factory=list)  # file line of each row (1-based)
    num_dropped: Counter[str] = field(default_factory=Counter)  # reason -> rows

    def __len__(self) -> int:
        return len(self.arrival_s)


@dataclass(frozen=True)
class TraceReport:
    """What a trace replay kept and dropped (every row is accounted for)."""

    path: str
    format: str
    num_rows: int
    num_requests: int
    num_dropped: int
    dropped_by_reason: dict[str, int]
    num_outside_window: int
    duration_s: float

    def summary(self) -> dict[str, Any]:
        """Flat fields for a run summary (prefix ``trace_``)."""
        out: dict[str, Any] = {
            "trace_num_rows": self.num_rows,
            "trace_num_requests": self.num_requests,
            "trace_num_dropped": self.num_dropped,
            "trace_num_outside_window": self.num_outside_window,
        }
        for reason, n in sorted(self.dropped_by_reason.items()):
            out[f"trace_dropped_{reason}"] = n
        return out


# --------------------------------------------------------------------------- field parsing


def _err(path: str, line: int, msg: str) -> TraceError:
    return TraceError(f"{path}, line {line}: {msg}")


def _int(value: Any, name: str, path: str, line: int) -> int:
    if isinstance(value, bool):
        raise _err(path, line, f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)
    elif isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            raise _err(path, line, f"{name} must be an integer, got {value!r}") from None
        if not f.is_integer():
            raise _err(path, line, f"{name} must be an integer, got {value!r}")
        out = int(f)
    else:
        raise _err(path, line, f"{name} must be an integer, got {value!r}")
    if out < 0:
        raise _err(path, line, f"{name} must be >= 0, got {out}")
    return out


def _float(value: Any, name: str, path: str, line: int) -> float:
    try:
        out = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise _err(path, line, f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise _err(path, line, f"{name} must be finite, got {value!r}")
    return out


def _retention(value: Any, path: str, line: int) -> Retention:
    """A retention column: none, default, priority:P or priority:P:DURATION_S."""
    try:
        return Retention.parse(str(value))
    except ValueError as exc:
        raise _err(path, line, str(exc)) from None


def _datetime_s(value: Any, path: str, line: int) -> float:
    """Seconds since the epoch of 'YYYY-MM-DD HH:MM:SS[.fffffff]' (UTC; any number of digits)."""
    text = str(value).strip()
    main, _, frac = text.partition(".")
    try:
        base = datetime.strptime(main, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)  # noqa: UP017
        fraction = float("0." + frac) if frac else 0.0
    except ValueError:
        raise _err(path, line, f"timestamp must look like 2023-11-16 18:17:03.97996, got {text!r}") from None
    return base.timestamp() + fraction


def _hash_ids(value: Any, path: str, line: int) -> list[int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _err(path, line, f"hash_ids must be a JSON list of integers, got {value!r}") from None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise _err(path, line, "hash_ids must be a list of integers")
    if any(h < 0 for h in value):
        raise _err(path, line, "hash_ids must be >= 0")
    return value


# --------------------------------------------------------------------------- readers


def _open(path: Path) -> Iterator[str]:
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            yield from fh
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text: {exc.reason}") from None


def _json_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, text in enumerate(_open(path), start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _err(str(path), line_no, f"not valid JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise _err(str(path), line_no, "each line must be a JSON object")
        yield line_no, row


def _csv_rows(path: Path, required: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = _open(path)
    reader = csv.DictReader(lines)
    header = reader.fieldnames or []
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(
            f"{path}, line 1: missing column(s) {', '.join(missing)}; header has {', '.join(header)}"
        )
    for row in reader:
        # DictReader counts physical lines; line_num is the line just read.
        if None in row or any(v is None for v in row.values()):
            raise _err(str(path), reader.line_num, f"expected {len(header)} fields")
        yield reader.line_num, row


def _get(row: dict[str, Any], key: str, path: str, line: int) -> Any:
    if key not in row:
        raise _err(path, line, f"missing field {key!r}")
    return row[key]


def read_trace(
    path: str | Path,
    fmt: TraceFormat,
    *,
    columns: dict[str, str] | None = None,
    timestamp_unit: str = "s",
    model_filter: str | None = None,
) -> TraceTable:
    """Read every row of a trace file, in file order (no filtering except ``model_filter``)."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: trace file not found")
    p = str(path)
    cols = dict(columns or {})
    table = TraceTable(path=p)
    times: list[float] = []
    if fmt == "mooncake":
        table.hash_ids = []
        for line, row in _json_rows(path):
            times.append(_float(_get(row, "timestamp", p, line), "timestamp", p, line) * 1e-3)
            table.prompt_tokens.append(_int(_get(row, "input_length", p, line), "input_length", p, line))
            table.output_tokens.append(_int(_get(row, "output_length", p, line), "output_length", p, line))
            table.hash_ids.append(_hash_ids(_get(row, "hash_ids", p, line), p, line))
            table.lines.append(line)
    elif fmt == "azure":
        for line, row in _csv_rows(path, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]):
            times.append(_datetime_s(row["TIMESTAMP"], p, line))
            table.prompt_tokens.append(_int(row["ContextTokens"], "ContextTokens", p, line))
            table.output_tokens.append(_int(row["GeneratedTokens"], "GeneratedTokens", p, line))
            table.lines.append(line)
    elif fmt == "burstgpt":
        for line, row in _csv_rows(path, ["Timestamp", "Model", "Request tokens", "Response tokens"]):
            if model_filter is not None and row["Model"] != model_filter:
                table.num_dropped["other_model"] += 1
                continue
            times.append(_float(row["Timestamp"], "Timestamp", p, line))
            table.prompt_tokens.append(_int(row["Request tokens"], "Request tokens", p, line))
            table.output_tokens.append(_int(row["Response tokens"], "Response tokens", p, line))
            table.lines.append(line)
    elif fmt in ("csv", "jsonl"):
        for key in ("timestamp", "prompt_tokens", "output_tokens"):
            if key not in cols:
                raise TraceError(f"{p}: format {fmt!r} needs a column for {key!r}")
        unknown = set(cols) - {
            "timestamp",
            "prompt_tokens",
            "output_tokens",
            "hash_ids",
            "tenant",
            "priority",
            "retention",
        }
        if unknown:
            raise TraceError(f"{p}: unknown column mapping key(s) {', '.join(sorted(unknown))}")
        if "hash_ids" in cols:
            table.hash_ids = []
        if "tenant" in cols:
            table.tenant = []
        if "priority" in cols:
            table.priority = []
        if "retention" in cols:
            table.retention = []
        rows = _json_rows(path) if fmt == "jsonl" else _csv_rows(path, list(dict.fromkeys(cols.values())))
        for line, row in rows:
            ts = _get(row, cols["timestamp"], p, line)
            if timestamp_unit == "datetime":
                times.append(_datetime_s(ts, p, line))
            else:
                times.append(_float(ts, cols["timestamp"], p, line) * _TIME_UNITS_S[timestamp_unit])
            table.prompt_tokens.append(
                _int(_get(row, cols["prompt_tokens"], p, line), cols["prompt_tokens"], p, line)
            )
            table.output_tokens.append(
                _int(_get(row, cols["output_tokens"], p, line), cols["output_tokens"], p, line)
            )
            if table.hash_ids is not None:
                table.hash_ids.append(_hash_ids(_get(row, cols["hash_ids"], p, line), p, line))
            if table.tenant is not None:
                table.tenant.append(str(_get(row, cols["tenant"], p, line)))
            if table.priority is not None:
                value = _get(row, cols["priority"], p, line)
                table.priority.append(int(_float(value, cols["priority"], p, line)))
            if table.retention is not None:
                table.retention.append(_retention(_get(row, cols["retention"], p, line), p, line))
            table.lines.append(line)
    else:
        raise TraceError(f"{p}: unknown trace format {fmt!r}")
    if times:
        t0 = min(times)
        table.arrival_s = [t - t0 for t in times]
    return table


# --------------------------------------------------------------------------- replay


def _check_hash_ids(table: TraceTable, block_tokens: int) -> None:
    assert table.hash_ids is not None
    for i, ids in enumerate(table.hash_ids):
        n = table.prompt_tokens[i]
        want = math.ceil(n / block_tokens)
        if len(ids) != want:
            raise _err(
                table.path,
                table.lines[i],
                f"{len(ids)} hash_ids for {n} prompt tokens; expected ceil({n} / {block_tokens}) = {want}",
            )


def hashed_prompt(ids: list[int], prompt_tokens: int, block_tokens: int) -> tuple[Segment, ...]:
    """One segment per hash id; the last holds the remainder of the prompt."""
    last = prompt_tokens - block_tokens * (len(ids) - 1)
    return (*(Segment(h, block_tokens) for h in ids[:-1]), Segment(ids[-1], last))


def replay_trace(
    cfg: TraceWorkload, *, base_dir: Path | None = None
) -> tuple[list[RequestSpec], TraceReport]:
    """Requests of a trace replay (sorted by arrival, ids 0..N-1) and what was kept/dropped.

    Order of operations: read all rows; drop unsimulable rows (counted); keep the time window
    ``[start_s, end_s)`` of trace time and then the first ``max_requests``; shift to start at
    0; rescale time (``rate_per_s`` if set, else ``time_scale``).
    """
    path = Path(cfg.path)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    table = read_trace(
        path,
        cfg.format,
        columns=cfg.columns,
        timestamp_unit=cfg.timestamp_unit,
        model_filter=cfg.model_filter,
    )
    if table.hash_ids is not None:
        _check_hash_ids(table, cfg.hash_block_tokens)
    num_rows = len(table) + sum(table.num_dropped.values())
    dropped = Counter(table.num_dropped)
    order = sorted(range(len(table)), key=lambda i: (table.arrival_s[i], i))
    keep: list[int] = []
    outside = 0
    for i in order:
        if table.prompt_tokens[i] == 0:
            dropped["zero_prompt"] += 1
            continue
        if table.output_tokens[i] == 0 and cfg.zero_output == "drop":
            dropped["zero_output"] += 1
            continue
        t = table.arrival_s[i]
        if t < cfg.start_s or (cfg.end_s is not None and t >= cfg.end_s):
            outside += 1
            continue
        keep.append(i)
    if cfg.max_requests is not None and len(keep) > cfg.max_requests:
        outside += len(keep) - cfg.max_requests
        keep = keep[: cfg.max_requests]
    times = np.array([table.arrival_s[i] for i in keep], dtype=float)
    if len(times):
        times -= times[0]
    span = float(times[-1]) if len(times) else 0.0
    if cfg.rate_per_s is not None and len(times) > 1 and span > 0:
        # Mean rate of n arrivals over their span is (n - 1) / span.
        factor = ((len(times) - 1) / span) / cfg.rate_per_s
    else:
        factor = 1.0 / cfg.time_scale
    times = times * factor
    # Without hash ids, each request's prompt is unique text: content ids after any hash id.
    next_id = 1 + max((max(ids) for ids in table.hash_ids or [] if ids), default=-1)
    requests = []
    for rid, i in enumerate(keep):
        n_prompt = table.prompt_tokens[i]
        if table.hash_ids is not None:
            prompt = hashed_prompt(table.hash_ids[i], n_prompt, cfg.hash_block_tokens)
        else:
            prompt = (Segment(next_id + rid, n_prompt),)
        requests.append(
            RequestSpec(
                request_id=rid,
                arrival_s=float(times[rid]),
                prompt=prompt,
                output_tokens=max(table.output_tokens[i], 1),
                tenant=table.tenant[i] if table.tenant is not None else cfg.tenant,
                priority=table.priority[i] if table.priority is not None else 0,
                retention=table.retention[i] if table.retention is not None else DEFAULT_RETENTION,
            )
        )
    report = TraceReport(
        path=str(path),
        format=cfg.format,
        num_rows=num_rows,
        num_requests=len(requests),
        num_dropped=sum(dropped.values()),
        dropped_by_reason=dict(dropped),
        num_outside_window=outside,
        duration_s=float(times[-1]) if len(times) else 0.0,
    )
    return requests, report


def trace_lengths(
    path: str | Path, fmt: TraceFormat, which: str, *, columns: dict[str, str] | None = None
) -> np.ndarray:
    """Prompt or output lengths of every row with both counts >= 1 (for empirical resampling)."""
    table = read_trace(path, fmt, columns=columns)
    p = np.asarray(table.prompt_tokens, dtype=np.int64)
    o = np.asarray(table.output_tokens, dtype=np.int64)
    ok = (p > 0) & (o > 0)
    values = (p if which == "prompt" else o)[ok]
    if not len(values):
        raise TraceError(f"{path}: no rows with prompt and output tokens >= 1 to resample from")
    return values
