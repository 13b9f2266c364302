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
are dropped and counted in the `TraceReport`, never silently; a trace with no rows, or none
left to replay, is an error too.

Bounds (`kvsim.limits`, docs/limits.md): lines of at most MAX_TRACE_LINE_CHARS characters,
CSV cells of at most MAX_TRACE_CELL_CHARS, JSON nested at most MAX_TRACE_JSON_DEPTH deep,
token counts in 0..MAX_TOKENS, hash ids in 0..MAX_HASH_ID, timestamps finite and within
MAX_TRACE_TIME_S seconds, priorities within MAX_PRIORITY; files are checked to be UTF-8
line by line (the error names the line and byte offset).
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
from kvsim.inputs import FileTooLargeError, check_input, open_input
from kvsim.limits import (
    MAX_HASH_ID,
    MAX_PRIORITY,
    MAX_TOKENS,
    MAX_TRACE_BYTES,
    MAX_TRACE_CELL_CHARS,
    MAX_TRACE_HASH_IDS,
    MAX_TRACE_JSON_DEPTH,
    MAX_TRACE_LINE_CHARS,
    MAX_TRACE_LINES,
    MAX_TRACE_TIME_S,
)
from kvsim.paths import PathError, expand_user, printable
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
    num_lines: int = 0  # physical lines read
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


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: errors never quote a whole cell."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _int(value: Any, name: str, path: str, line: int, hi: int = MAX_TOKENS) -> int:
    """A token count: an integer (or integral number) in 0..hi."""
    if isinstance(value, bool):
        raise _err(path, line, f"{name} must be an integer, got {_short(value)}")
    if isinstance(value, int):
        out = value
    elif isinstance(value, float) and value.is_integer():
        out = int(value)
    elif isinstance(value, str):
        try:
            f = float(value.strip())
        except ValueError:
            raise _err(path, line, f"{name} must be an integer, got {_short(value)}") from None
        if not f.is_integer():
            raise _err(path, line, f"{name} must be an integer, got {_short(value)}")
        out = int(f)
    else:
        raise _err(path, line, f"{name} must be an integer, got {_short(value)}")
    if out < 0:
        raise _err(path, line, f"{name} must be >= 0, got {_short(out)}")
    if out > hi:
        raise _err(path, line, f"{name} must be <= {hi:,}, got {_short(out)}")
    return out


def _float(value: Any, name: str, path: str, line: int) -> float:
    try:
        out = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, OverflowError):
        raise _err(path, line, f"{name} must be a number, got {_short(value)}") from None
    if not math.isfinite(out):
        raise _err(path, line, f"{name} must be finite, got {_short(value)}")
    return out


def _retention(value: Any, path: str, line: int) -> Retention:
    """A retention column: none, default, priority:P or priority:P:DURATION_S."""
    try:
        return Retention.parse(str(value))
    except ValueError as exc:
        raise _err(path, line, str(exc)) from None


def _time(t: float, name: str, path: str, line: int) -> float:
    """A timestamp in seconds, within +-MAX_TRACE_TIME_S (so that differences stay finite)."""
    if not -MAX_TRACE_TIME_S <= t <= MAX_TRACE_TIME_S:
        raise _err(path, line, f"{name} must lie within +-{MAX_TRACE_TIME_S:g} s, got {t:g} s")
    return t


def _priority(value: Any, name: str, path: str, line: int) -> int:
    f = _float(value, name, path, line)
    if not f.is_integer() or abs(f) > MAX_PRIORITY:
        raise _err(path, line, f"{name} must be an integer within +-{MAX_PRIORITY:,}, got {_short(value)}")
    return int(f)


def _datetime_s(value: Any, path: str, line: int) -> float:
    """Seconds since the epoch of 'YYYY-MM-DD HH:MM:SS[.fffffff]' (UTC; any number of digits)."""
    text = str(value).strip()
    main, _, frac = text.partition(".")
    try:
        if len(main) == 19 and main[10] == " ":  # zero-padded: the C parser, 10x faster
            base = datetime.fromisoformat(main).replace(tzinfo=timezone.utc)  # noqa: UP017
        else:
            base = datetime.strptime(main, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)  # noqa: UP017
        fraction = float("0." + frac) if frac else 0.0
        seconds = base.timestamp() + fraction
    except (ValueError, OverflowError, OSError):
        raise _err(
            path, line, f"timestamp must look like 2023-11-16 18:17:03.97996, got {_short(text)}"
        ) from None
    return _time(seconds, "timestamp", path, line)


def _json_loads(text: str, path: str, line: int) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _err(path, line, f"not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise _err(path, line, f"JSON nested deeper than {MAX_TRACE_JSON_DEPTH} levels") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise _err(path, line, f"not valid JSON: {exc}") from None


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            deepest = max(deepest, d)
            if d <= MAX_TRACE_JSON_DEPTH:  # deeper is refused anyway: stop looking
                stack.extend((v, d + 1) for v in node if isinstance(v, dict | list))
    return deepest


def _hash_ids(value: Any, path: str, line: int) -> list[int]:
    if isinstance(value, str):
        value = _json_loads(value, path, line)
        if not isinstance(value, list):
            raise _err(path, line, f"hash_ids must be a JSON list of integers, got {_short(value)}")
    # set(map(type, ...)) runs in C: exact ints only (bool is a subclass of int, and refused)
    if not isinstance(value, list) or (value and set(map(type, value)) != {int}):
        raise _err(path, line, "hash_ids must be a list of integers")
    if value and (min(value) < 0 or max(value) > MAX_HASH_ID):
        bad = next(h for h in value if not 0 <= h <= MAX_HASH_ID)
        raise _err(path, line, f"hash_ids must lie in 0..2**60 - 1, got {_short(bad)}")
    return value


# --------------------------------------------------------------------------- readers


def _too_long_trace() -> str:
    return (
        f"a trace holds at most {MAX_TRACE_LINES:,} lines and {MAX_TRACE_BYTES:,} bytes "
        "(the most kvsim reads); cut it, e.g. with head"
    )


def check_trace_file(path: Path) -> None:
    """A `TraceError` unless ``path`` is a regular file within `MAX_TRACE_BYTES` (nothing is read)."""
    shown = printable(str(path))
    try:
        check_input(path, MAX_TRACE_BYTES)
    except FileNotFoundError:
        raise TraceError(f"{shown}: trace file not found") from None
    except FileTooLargeError:
        raise TraceError(f"{shown}: {_too_long_trace()}") from None
    except OSError as exc:  # not a regular file, a folder on the way that is not one, no access
        raise TraceError(f"{shown}: cannot read trace: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise TraceError(f"{shown}: cannot read trace: {exc}") from None


def _open(path: Path, counter: list[int] | None = None) -> Iterator[str]:
    """The file's lines as text, each checked for length and UTF-8 (errors name line and byte).

    ``counter`` (if given) is ``[characters, lines]`` handed out so far.
    """
    line_no, offset = 0, 0
    try:
        # A regular file only (a FIFO or /dev/zero would never end), of at most MAX_TRACE_BYTES.
        with open_input(path, MAX_TRACE_BYTES) as fh:
            readline = fh.readline
            while raw := readline(MAX_TRACE_LINE_CHARS + 1):
                line_no += 1
                if len(raw) > MAX_TRACE_LINE_CHARS:
                    raise _err(str(path), line_no, f"line longer than {MAX_TRACE_LINE_CHARS:,} characters")
                if line_no > MAX_TRACE_LINES or offset + len(raw) > MAX_TRACE_BYTES:  # it grew meanwhile
                    raise _err(str(path), line_no, _too_long_trace())
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _err(
                        str(path),
                        line_no,
                        f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte offset {offset + exc.start} "
                        f"({exc.reason})",
                    ) from None
                if line_no == 1:
                    text = text.removeprefix("\ufeff")  # a byte-order mark
                if counter is not None:
                    counter[0] += len(text)
                    counter[1] = line_no
                offset += len(raw)
                yield text
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror or exc}") from None


def _json_rows(path: Path, table: TraceTable) -> Iterator[tuple[int, dict[str, Any]]]:
    p = str(path)
    for line_no, text in enumerate(_open(path), start=1):
        table.num_lines = line_no
        if not text.strip():
            continue
        row = _json_loads(text, p, line_no)
        if not isinstance(row, dict):
            raise _err(p, line_no, "each line must be a JSON object")
        # Only a line with many brackets can be deep: the common case costs two counts.
        if text.count("[") + text.count("{") > MAX_TRACE_JSON_DEPTH and _depth(row) > MAX_TRACE_JSON_DEPTH:
            raise _err(p, line_no, f"JSON nested deeper than {MAX_TRACE_JSON_DEPTH} levels")
        yield line_no, row


def _csv_rows(path: Path, required: list[str], table: TraceTable) -> Iterator[tuple[int, dict[str, Any]]]:
    p = str(path)
    consumed = [0, 0]  # characters and lines handed to the csv module so far
    reader = csv.DictReader(_open(path, consumed))
    try:
        header = reader.fieldnames
        table.num_lines = reader.line_num
        if not header:
            raise _err(p, 1, "empty file: no header and no rows")
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"{path}, line 1: missing column(s) {', '.join(missing)}; "
                f"header has {_short(', '.join(header), 200)}"
            )
        row_start = consumed[0]
        for row in reader:
            table.num_lines = reader.line_num
            # DictReader counts physical lines; line_num is the line just read.
            if None in row or any(v is None for v in row.values()):
                raise _err(p, reader.line_num, f"expected {len(header)} fields")
            if consumed[0] - row_start > MAX_TRACE_CELL_CHARS and any(
                len(v) > MAX_TRACE_CELL_CHARS for v in row.values()
            ):
                raise _err(p, reader.line_num, f"a cell longer than {MAX_TRACE_CELL_CHARS:,} characters")
            row_start = consumed[0]
            yield reader.line_num, row
    except csv.Error as exc:  # on the line last handed to the csv module
        limit = csv.field_size_limit()
        if "field larger than field limit" in str(exc):
            raise _err(p, consumed[1], f"a cell longer than {limit:,} characters") from None
        raise _err(p, consumed[1], f"not valid CSV: {exc}") from None


def _count_ids(num_ids: int, ids: list[int], path: str, line: int) -> int:
    num_ids += len(ids)
    if num_ids > MAX_TRACE_HASH_IDS:
        raise _err(path, line, f"more than {MAX_TRACE_HASH_IDS:,} hash ids in all (the most kvsim reads)")
    return num_ids


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
    try:
        path = expand_user(path, "trace file")  # a ~ the scenario's loader could not expand
    except PathError as exc:
        raise TraceError(str(exc)) from None
    check_trace_file(path)
    p = str(path)
    cols = dict(columns or {})
    table = TraceTable(path=p)
    times: list[float] = []
    num_ids = 0  # hash ids read so far: a line may hold 100,000 of them
    if fmt == "mooncake":
        table.hash_ids = []
        for line, row in _json_rows(path, table):
            t = _float(_get(row, "timestamp", p, line), "timestamp", p, line) * 1e-3
            times.append(_time(t, "timestamp", p, line))
            table.prompt_tokens.append(_int(_get(row, "input_length", p, line), "input_length", p, line))
            table.output_tokens.append(_int(_get(row, "output_length", p, line), "output_length", p, line))
            table.hash_ids.append(_hash_ids(_get(row, "hash_ids", p, line), p, line))
            num_ids = _count_ids(num_ids, table.hash_ids[-1], p, line)
            table.lines.append(line)
    elif fmt == "azure":
        for line, row in _csv_rows(path, ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], table):
            times.append(_datetime_s(row["TIMESTAMP"], p, line))
            table.prompt_tokens.append(_int(row["ContextTokens"], "ContextTokens", p, line))
            table.output_tokens.append(_int(row["GeneratedTokens"], "GeneratedTokens", p, line))
            table.lines.append(line)
    elif fmt == "burstgpt":
        for line, row in _csv_rows(path, ["Timestamp", "Model", "Request tokens", "Response tokens"], table):
            if model_filter is not None and row["Model"] != model_filter:
                table.num_dropped["other_model"] += 1
                continue
            times.append(_time(_float(row["Timestamp"], "Timestamp", p, line), "Timestamp", p, line))
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
        rows = (
            _json_rows(path, table)
            if fmt == "jsonl"
            else _csv_rows(path, list(dict.fromkeys(cols.values())), table)
        )
        for line, row in rows:
            ts = _get(row, cols["timestamp"], p, line)
            if timestamp_unit == "datetime":
                times.append(_datetime_s(ts, p, line))
            else:
                t = _float(ts, cols["timestamp"], p, line) * _TIME_UNITS_S[timestamp_unit]
                times.append(_time(t, cols["timestamp"], p, line))
            table.prompt_tokens.append(
                _int(_get(row, cols["prompt_tokens"], p, line), cols["prompt_tokens"], p, line)
            )
            table.output_tokens.append(
                _int(_get(row, cols["output_tokens"], p, line), cols["output_tokens"], p, line)
            )
            if table.hash_ids is not None:
                table.hash_ids.append(_hash_ids(_get(row, cols["hash_ids"], p, line), p, line))
                num_ids = _count_ids(num_ids, table.hash_ids[-1], p, line)
            if table.tenant is not None:
                table.tenant.append(str(_get(row, cols["tenant"], p, line)))
            if table.priority is not None:
                value = _get(row, cols["priority"], p, line)
                table.priority.append(_priority(value, cols["priority"], p, line))
            if table.retention is not None:
                table.retention.append(_retention(_get(row, cols["retention"], p, line), p, line))
            table.lines.append(line)
    else:
        raise TraceError(f"{p}: unknown trace format {fmt!r}")
    if not table.lines and not table.num_dropped:
        what = "no rows (an empty trace)" if fmt in ("mooncake", "jsonl") else "a header but no rows"
        raise _err(p, max(table.num_lines, 1), what)
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
    if not keep:
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items()))
        raise TraceError(
            f"{path}, lines 1-{table.num_lines}: no usable rows: {num_rows} read, "
            f"{sum(dropped.values())} dropped{f' ({reasons})' if reasons else ''}, "
            f"{outside} outside the time window [{cfg.start_s:g}, "
            f"{'end' if cfg.end_s is None else f'{cfg.end_s:g}'}) s"
        )
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
        raise TraceError(
            f"{path}, lines 1-{table.num_lines}: no rows with prompt and output tokens >= 1 to resample from"
        )
    return values
