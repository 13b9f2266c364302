"""Step records and the compact fixture files that hold vLLM's (stdlib only).

A *record* is what one side did with one workload, on the step clock:

    {"steps": [StepRecord, ...], "requests": {id: RequestRecord}, "stalled": bool}

    StepRecord     step, sched [[id, tokens], ...] in scheduling order, preempted ids in
                   order, finished ids, free (free blocks right after scheduling, the
                   null block excluded), running and waiting ids after scheduling (context
                   for a divergence report, not compared)
    RequestRecord  arrival step, hits (prefix-hit tokens at each admission: the first,
                   then one per re-admission after preemption), preemptions,
                   first_token and finish steps, num_output tokens, rejected

A fixture file is one gzip'd JSON object per group of workloads:

    {"format": "kvsim-vllm-fixtures/1", "vllm_version": "0.32.0", "engine": {...},
     "entries": [{"workload": {...}, "record": <compact record>}, ...]}

Compact records keep steps and requests as arrays (field order in `STEP_FIELDS`,
`REQUEST_FIELDS`) and ``sched`` flattened to id, tokens, id, tokens, ...
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .workload import DiffWorkload  # relative: the recorder loads this package without kvsim's __init__

FORMAT = "kvsim-vllm-fixtures/1"
WORKLOADS_FORMAT = "kvsim-diff-workloads/1"
STEP_FIELDS = ("step", "sched", "preempted", "finished", "free", "running", "waiting")
REQUEST_FIELDS = ("id", "arrival", "hits", "preemptions", "first_token", "finish", "num_output", "rejected")
#: Fields two records must agree on, per step and per request.
COMPARED_STEP_FIELDS = ("step", "sched", "preempted", "finished", "free")
COMPARED_REQUEST_FIELDS = (
    "arrival",
    "hits",
    "preemptions",
    "first_token",
    "finish",
    "num_output",
    "rejected",
)

Record = dict[str, Any]


def new_request_record(rid: int) -> dict[str, Any]:
    return {
        "id": rid,
        "arrival": None,
        "hits": [],
        "preemptions": 0,
        "first_token": None,
        "finish": None,
        "num_output": 0,
        "rejected": False,
    }


def encode_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The compact form of a record (arrays instead of objects)."""
    steps = []
    for s in record["steps"]:
        flat = [x for pair in s["sched"] for x in pair]
        steps.append([s["step"], flat, s["preempted"], s["finished"], s["free"], s["running"], s["waiting"]])
    reqs = [
        [r[k] if k != "rejected" else int(r[k]) for k in REQUEST_FIELDS]
        for _, r in sorted(record["requests"].items())
    ]
    out = {"steps": steps, "requests": reqs, "stalled": bool(record.get("stalled", False))}
    if record.get("meta"):
        out["meta"] = dict(record["meta"])
    return out


def decode_record(compact: Mapping[str, Any]) -> Record:
    steps = []
    for row in compact["steps"]:
        s = dict(zip(STEP_FIELDS, row, strict=True))
        flat = s["sched"]
        s["sched"] = [[flat[i], flat[i + 1]] for i in range(0, len(flat), 2)]
        steps.append(s)
    reqs = {}
    for row in compact["requests"]:
        r = dict(zip(REQUEST_FIELDS, row, strict=True))
        r["rejected"] = bool(r["rejected"])
        reqs[r["id"]] = r
    out: Record = {"steps": steps, "requests": reqs, "stalled": bool(compact.get("stalled", False))}
    if compact.get("meta"):
        out["meta"] = dict(compact["meta"])
    return out


@dataclass(frozen=True, slots=True)
class Fixture:
    """One recorded workload: the workload, vLLM's record and where it came from."""

    workload: DiffWorkload
    record: Record
    vllm_version: str
    engine: Mapping[str, Any] = field(default_factory=dict)
    path: str = ""


def write_json_gz(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as gzip'd JSON atomically (mtime 0, so equal content gives equal bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj, separators=(",", ":"), sort_keys=False).encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as gz,
        ):
            gz.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


#: Most bytes of one fixture or workloads file, compressed and decompressed (the largest
#: recorded fixture is 3.8 MB decompressed); `kvsim.limits.MAX_FIXTURE_BYTES`, repeated
#: here because this module is stdlib only.
MAX_FIXTURE_BYTES = 256 * 1024 * 1024


def read_json_gz(path: str | Path) -> Any:
    """A gzip'd JSON file: a regular file only (never a FIFO or a device), its compressed
    and decompressed sizes within `MAX_FIXTURE_BYTES` (a gzip bomb stops there)."""

    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file; kvsim reads fixtures from regular files only")
        if st.st_size > MAX_FIXTURE_BYTES:
            raise ValueError(f"{path}: larger than {MAX_FIXTURE_BYTES:,} bytes (the most kvsim reads)")

    check(os.stat(path))  # a FIFO or a device is never opened
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as raw:
        check(os.fstat(raw.fileno()))  # the file opened: a path swapped in between is caught too
        with gzip.GzipFile(fileobj=raw, mode="rb") as fh:
            data = fh.read(MAX_FIXTURE_BYTES + 1)
    if len(data) > MAX_FIXTURE_BYTES:
        raise ValueError(
            f"{path}: decompresses to more than {MAX_FIXTURE_BYTES:,} bytes (the most kvsim reads)"
        )
    return json.loads(data.decode("utf-8"))


def write_fixture_file(
    path: str | Path,
    entries: Iterable[tuple[DiffWorkload, Record]],
    *,
    vllm_version: str,
    engine: Mapping[str, Any],
) -> None:
    obj = {
        "format": FORMAT,
        "vllm_version": vllm_version,
        "engine": dict(engine),
        "entries": [{"workload": wl.to_dict(), "record": encode_record(rec)} for wl, rec in entries],
    }
    write_json_gz(path, obj)


def read_fixture_file(path: str | Path) -> list[Fixture]:
    obj = read_json_gz(path)
    if obj.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file (format {obj.get('format')!r})")
    version = str(obj["vllm_version"])
    engine = obj.get("engine", {})
    return [
        Fixture(
            workload=DiffWorkload.from_dict(e["workload"]),
            record=decode_record(e["record"]),
            vllm_version=version,
            engine=engine,
            path=str(path),
        )
        for e in obj["entries"]
    ]


def load_fixture_dir(directory: str | Path) -> list[Fixture]:
    """Every fixture under ``directory`` (``*.json.gz``), files in name order."""
    out: list[Fixture] = []
    for p in sorted(Path(directory).glob("*.json.gz")):
        out.extend(read_fixture_file(p))
    return out


def write_workloads(path: str | Path, workloads: Iterable[DiffWorkload]) -> None:
    """The recorder's input: differential workloads, gzip'd JSON."""
    write_json_gz(path, {"format": WORKLOADS_FORMAT, "workloads": [wl.to_dict() for wl in workloads]})


def read_workloads(path: str | Path) -> list[DiffWorkload]:
    p = Path(path)
    obj = read_json_gz(p) if p.name.endswith(".gz") else json.loads(p.read_text(encoding="utf-8"))
    if obj.get("format") != WORKLOADS_FORMAT:
        raise ValueError(f"{path}: not a {WORKLOADS_FORMAT} file")
    return [DiffWorkload.from_dict(w) for w in obj["workloads"]]
