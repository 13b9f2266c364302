"""Saving a `Result` to a folder and reading it back.

A result folder holds five files and kvsim's marker::

    DIR/
    ├── .kvsim              the marker: this folder was written by kvsim (see kvsim.outputs)
    ├── summary.json        the flat summary (NaN and infinities written as null)
    ├── requests.parquet    one row per request
    ├── iterations.parquet  one row per engine iteration
    ├── events.parquet      one row per event
    └── scenario.yaml       the resolved scenario, every default written out

`save_result` is atomic: it writes everything into a hidden temporary sibling of
``DIR`` and renames it into place only once every file is complete, so a failure leaves
no half-written folder and an existing ``DIR`` is replaced only after success:

    .DIR.kvsim-tmp-PID-XXXXXXXX/        the new result being written (marker first)
    .DIR.kvsim-old-PID-XXXXXXXX/result  the previous result, between the two renames

It replaces only what it can prove it wrote (`kvsim.outputs`): an empty folder or one
holding its marker and nothing but result files; never a folder holding anything else,
whatever the names. A process killed meanwhile leaves these siblings behind. `clean_stale`
(called by `save_result`, and by ``kvsim run --out`` before it simulates, which reports
what it did) removes those that hold kvsim's marker and whose process (PID) is gone, and
first moves a previous result back to ``DIR`` if ``DIR`` is missing (a kill between the
two renames); `load_result` recovers such a result too. Folders get the user's umask,
like the files in them. `check_out_dir` says up front whether a folder may receive a
result. `load_result` reads such a folder back (the dashboard's Compare page and sweeps
use it); folders written before the marker existed read too.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import ResultDirError, ScenarioError
from kvsim.limits import MAX_SUMMARY_BYTES
from kvsim.outputs import (
    MARKER_FILE,
    check_parent,
    check_target,
    check_writable,
    foreign_entries,
    make_sibling,
    marker_kind,
    stale_siblings,
)
from kvsim.paths import exists, path_problem, printable
from kvsim.results.result import RENAMED_REQUEST_COLUMNS, SUMMARY_ALIASES, Result
from kvsim.scenario.loading import dump_scenario, load_scenario

SUMMARY_FILE = "summary.json"
SCENARIO_FILE = "scenario.yaml"
#: Result attribute -> Parquet file name.
TABLE_FILES: dict[str, str] = {
    "requests": "requests.parquet",
    "iterations": "iterations.parquet",
    "events": "events.parquet",
}
#: The files that hold a result, in the order they are written.
DATA_FILES: tuple[str, ...] = (SUMMARY_FILE, *TABLE_FILES.values(), SCENARIO_FILE)
#: Every file of a result folder, in the order they are written: kvsim's marker first.
RESULT_FILES: tuple[str, ...] = (MARKER_FILE, *DATA_FILES)
#: The kind named by the marker of a result folder, and of a parked previous result's folder.
RESULT_KIND = "result"
PARKED_KIND = "parked-result"


def json_safe(value: Any) -> Any:
    """Plain-JSON copy of ``value``: NaN and infinities become None, numpy scalars Python ones."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary_to_json(summary: Mapping[str, Any], *, indent: int | None = 2) -> str:
    """The summary as strict JSON (``allow_nan=False``: NaN and infinities written as null)."""
    return json.dumps(json_safe(summary), indent=indent, allow_nan=False)


#: Rows converted to Arrow and written at a time: a table is never copied whole.
PARQUET_ROWS_PER_WRITE = 16_384


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as a Parquet file (what ``frame.to_parquet(path, index=False)`` writes,
    pandas dtypes kept), converted to Arrow a slice of rows at a time: ``to_parquet`` copies
    the whole frame into Arrow first, which at 100k requests raised the peak memory of a run
    and its writing by a sixth."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.Schema.from_pandas(frame, preserve_index=False)
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, max(len(frame), 1), PARQUET_ROWS_PER_WRITE):
            part = frame.iloc[start : start + PARQUET_ROWS_PER_WRITE]
            writer.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False))


def _write_files(result: Result, folder: Path) -> None:
    """The data files (the marker is written when the temporary folder is made)."""
    (folder / SUMMARY_FILE).write_text(summary_to_json(result.summary) + "\n", encoding="utf-8")
    for attr, name in TABLE_FILES.items():
        write_parquet(getattr(result, attr), folder / name)
    (folder / SCENARIO_FILE).write_text(dump_scenario(result.scenario), encoding="utf-8")


def _is_complete(folder: Path) -> bool:
    return marker_kind(folder) == RESULT_KIND and all((folder / name).is_file() for name in DATA_FILES)


def _parked(target: Path, *, include_alive: bool = False) -> list[Path]:
    """Previous results of ``target`` parked by replacements, newest first: the ``result``
    inside each ``.DIR.kvsim-old-PID-HEX`` folder kvsim marked, whose process is gone
    (``include_alive``: or still running)."""
    folders = stale_siblings(target, "old", PARKED_KIND, include_alive=include_alive)
    return [f / "result" for f in folders if _is_complete(f / "result")]


def clean_stale(out_dir: str | Path) -> list[str]:
    """Remove what killed runs left beside ``out_dir``; return one note per thing done.

    Only folders named ``.DIR.kvsim-tmp-PID-HEX`` / ``.DIR.kvsim-old-PID-HEX`` that hold
    kvsim's marker and whose process is gone are touched (see `kvsim.outputs`): a user's
    ``.DIR.old-backup`` never is. A previous result parked in ``.DIR.kvsim-old-*/result`` is
    moved back to ``DIR`` first when ``DIR`` is missing, so that cleaning never loses the
    last complete result.
    """
    out_dir = Path(out_dir)
    if path_problem(out_dir) is not None:
        return []  # check_out_dir says why
    target = out_dir.absolute()
    notes = []
    stale = [(kind, f) for kind, marker in (("tmp", RESULT_KIND), ("old", PARKED_KIND))
             for f in stale_siblings(target, kind, marker)]  # fmt: skip
    for kind, folder in stale:
        if kind == "old" and not exists(target) and _is_complete(folder / "result"):
            try:
                os.rename(folder / "result", target)
                notes.append(
                    f"{out_dir}: restored the previous result from {folder.name} (an interrupted run)"
                )
            except OSError:
                continue  # keep it: it is the only copy
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            notes.append(f"{out_dir}: removed {folder.name}, left by an interrupted run")
    return notes


def check_out_dir(out_dir: str | Path, *, overwrite: bool = True) -> None:
    """Raise `ResultDirError` unless a result may be saved into ``out_dir`` (see `save_result`).

    ``kvsim run --out`` calls it before simulating, so that a bad folder is refused at once.
    """
    target = check_target(out_dir, "--out", ResultDirError)
    shown = printable(str(out_dir))
    try:
        cwd = Path.cwd().resolve()
    except OSError:
        cwd = None
    if target == cwd:
        raise ResultDirError(
            f"{shown}: is the current folder; a result folder is replaced as a whole, give a sub-folder"
        )
    if exists(target) or exists(Path(out_dir).absolute()):
        if not Path(out_dir).is_dir():
            raise ResultDirError(f"{shown}: exists and is not a folder")
        if not overwrite:
            raise ResultDirError(f"{shown}: already exists (pass overwrite=True to replace it)")
        try:
            foreign = foreign_entries(target, RESULT_KIND, RESULT_FILES)
        except OSError as exc:
            raise ResultDirError(f"{shown}: cannot look into the folder: {exc.strerror or exc}") from None
        check_writable(target.parent, shown, "--out", ResultDirError)  # replacing renames in the parent
        if foreign:
            raise ResultDirError(
                f"{shown}: not replaced because it holds files other than a kvsim result "
                f"({', '.join(foreign)}); kvsim replaces only an empty folder or a result folder it "
                f"wrote itself (marked by its {MARKER_FILE} file, holding nothing else but "
                f"{', '.join(DATA_FILES)}). Choose another --out folder, or remove it yourself"
            )
        return
    check_parent(target, shown, "--out", ResultDirError)


def save_result(result: Result, out_dir: str | Path, *, overwrite: bool = True) -> Path:
    """Write ``result`` into ``out_dir`` atomically and return the folder's path.

    With ``overwrite`` an existing ``out_dir`` is replaced, but only after the new result
    is completely written, and only if it is empty or is a result folder kvsim wrote (its
    ``.kvsim`` marker and nothing but result files; so ``--out .`` never deletes a working
    tree, nor a folder holding a file that merely has a result file's name). Without
    ``overwrite`` an existing ``out_dir`` is an error. Leftovers of killed runs beside it are
    cleaned first (`clean_stale`).
    """
    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite=overwrite)
    target = out_dir.resolve()
    clean_stale(target)
    check_out_dir(out_dir, overwrite=overwrite)  # cleaning may have restored a parked result
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = make_sibling(parent, target.name, "tmp", RESULT_KIND)
    try:
        _write_files(result, tmp)
        if target.exists():
            # A folder cannot be renamed over a non-empty one: move the old result aside,
            # put the new one in place, then drop the old one.
            old = make_sibling(parent, target.name, "old", PARKED_KIND)
            os.rename(target, old / "result")
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old / "result", target)
                shutil.rmtree(old, ignore_errors=True)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _recover(result_dir: Path) -> Path | None:
    """Where the result of a missing ``result_dir`` is, if a kill between the two renames of
    `save_result` left it in ``.DIR.kvsim-old-*/result``: moved back into place (the process
    that parked it is gone), read where it is when it cannot be moved."""
    if path_problem(result_dir) is not None:
        return None
    target = result_dir.absolute()
    for parked in _parked(target):
        try:
            os.rename(parked, target)
        except OSError:
            return parked
        shutil.rmtree(parked.parent, ignore_errors=True)
        return result_dir
    alive = _parked(target, include_alive=True)  # a replacement under way: read it where it is
    return alive[0] if alive else None


def _summary_from_json(data: Any, path: Path) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ResultDirError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    # null was NaN (or an infinity) when written; NaN keeps the numbers numeric.
    return {k: float("nan") if v is None else v for k, v in data.items()}


def load_result(result_dir: str | Path) -> Result:
    """Read a folder written by `save_result` back into a `Result`.

    A missing folder whose previous result a killed `save_result` left in ``.DIR.old-*`` is
    recovered from there.
    """
    result_dir = Path(result_dir)
    if (problem := path_problem(result_dir)) is not None:
        raise ResultDirError(f"{printable(str(result_dir)[:200])}: {problem}")
    if not exists(result_dir) and (recovered := _recover(result_dir)) is not None:
        result_dir = recovered
    if not result_dir.is_dir():
        raise ResultDirError(f"{result_dir}: no such result folder")
    missing = [name for name in DATA_FILES if not (result_dir / name).is_file()]
    if missing:
        raise ResultDirError(f"{result_dir}: not a kvsim result folder, missing {', '.join(missing)}")
    summary_path = result_dir / SUMMARY_FILE
    try:
        with open(summary_path, "rb") as fh:
            raw = fh.read(MAX_SUMMARY_BYTES + 1)
    except OSError as exc:
        raise ResultDirError(f"{summary_path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SUMMARY_BYTES:
        raise ResultDirError(f"{summary_path}: larger than {MAX_SUMMARY_BYTES:,} bytes")
    try:
        summary = _summary_from_json(json.loads(raw.decode("utf-8")), summary_path)
    except json.JSONDecodeError as exc:
        raise ResultDirError(f"{summary_path}: not valid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ResultDirError(f"{summary_path}: not UTF-8 at byte {exc.start}") from None
    except (ValueError, RecursionError) as exc:  # 4,300-digit integers, deep nesting
        raise ResultDirError(f"{summary_path}: not valid JSON: {type(exc).__name__}") from None
    tables: dict[str, pd.DataFrame] = {}
    for attr, name in TABLE_FILES.items():
        try:
            tables[attr] = pd.read_parquet(result_dir / name, engine="pyarrow")
        except (OSError, ValueError) as exc:
            raise ResultDirError(f"{result_dir / name}: cannot read Parquet: {exc}") from None
    try:
        scenario = load_scenario(result_dir / SCENARIO_FILE)
    except ScenarioError as exc:
        raise ResultDirError(str(exc)) from None
    # Folders written before the 0.2 renames read under the new names.
    tables["requests"] = tables["requests"].rename(columns=RENAMED_REQUEST_COLUMNS)
    for old, new in SUMMARY_ALIASES.items():
        if old in summary and new not in summary:
            summary[new] = summary[old]
    return Result(scenario=scenario, summary=summary, **tables)
