"""Saving a `Result` to a folder and reading it back.

A result folder holds exactly five files::

    DIR/
    ├── summary.json        the flat summary (NaN and infinities written as null)
    ├── requests.parquet    one row per request
    ├── iterations.parquet  one row per engine iteration
    ├── events.parquet      one row per event
    └── scenario.yaml       the resolved scenario, every default written out

`save_result` is atomic: it writes everything into a hidden temporary sibling of
``DIR`` and renames it into place only once every file is complete, so a failure leaves
no half-written folder and an existing ``DIR`` is replaced only after success:

    .DIR.tmp-PID-XXXXXXXX/        the new result being written
    .DIR.old-PID-XXXXXXXX/result  the previous result, between the two renames

A process killed meanwhile leaves these behind. `clean_stale` (called by `save_result`,
and by ``kvsim run --out`` before it simulates, which reports what it did) removes those
whose process (PID) is gone, and first moves a previous result back to ``DIR`` if ``DIR``
is missing (a kill between the two renames); `load_result` recovers such a result too.
Folders get the user's umask, like the files in them. `check_out_dir` says up front
whether a folder may receive a result.
`load_result` reads such a folder back (the dashboard's Compare page and sweeps use it).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import ResultDirError, ScenarioError
from kvsim.limits import MAX_SUMMARY_BYTES
from kvsim.result import RENAMED_REQUEST_COLUMNS, SUMMARY_ALIASES, Result
from kvsim.scenario.loading import dump_scenario, load_scenario

SUMMARY_FILE = "summary.json"
SCENARIO_FILE = "scenario.yaml"
#: Result attribute -> Parquet file name.
TABLE_FILES: dict[str, str] = {
    "requests": "requests.parquet",
    "iterations": "iterations.parquet",
    "events": "events.parquet",
}
#: Every file of a result folder, in the order they are written.
RESULT_FILES: tuple[str, ...] = (SUMMARY_FILE, *TABLE_FILES.values(), SCENARIO_FILE)


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
    (folder / SUMMARY_FILE).write_text(summary_to_json(result.summary) + "\n", encoding="utf-8")
    for attr, name in TABLE_FILES.items():
        write_parquet(getattr(result, attr), folder / name)
    (folder / SCENARIO_FILE).write_text(dump_scenario(result.scenario), encoding="utf-8")


def _is_replaceable(folder: Path) -> bool:
    """An existing folder may be replaced only if it is empty or holds a kvsim result."""
    entries = {p.name for p in folder.iterdir()}
    return not entries or (SUMMARY_FILE in entries and entries <= set(RESULT_FILES))


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in RESULT_FILES)


def _make_sibling(parent: Path, name: str, kind: str) -> Path:
    """A new hidden folder ``.NAME.KIND-PID-HEX`` in ``parent``, created with the user's umask
    (``tempfile.mkdtemp`` would make it 0700, and the result folder is this folder renamed)."""
    for _ in range(100):
        folder = parent / f".{name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(folder)  # mode 0o777 & ~umask
        except FileExistsError:
            continue
        return folder
    raise ResultDirError(f"{parent}: cannot create a temporary folder for {name}")  # pragma: no cover


def _owner_alive(suffix: str) -> bool:
    """Whether the process that made a ``.DIR.KIND-SUFFIX`` folder may still be using it."""
    match = re.fullmatch(r"(\d+)-[0-9a-f]+", suffix)
    if match is None:
        return False  # no PID: left by an older kvsim, which wrote no other way
    pid = int(match.group(1))
    if pid == os.getpid():
        return True  # this process (another thread may be saving)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists but belongs to someone else
    return True


def _stale_siblings(target: Path) -> list[tuple[str, Path]]:
    """``(kind, folder)`` of the temporary siblings of ``target`` left by dead processes,
    newest first."""
    parent = target.parent
    if not parent.is_dir():
        return []
    found = []
    for kind in ("tmp", "old"):
        prefix = f".{target.name}.{kind}-"
        for entry in parent.iterdir():
            if (
                entry.name.startswith(prefix)
                and entry.is_dir()
                and not _owner_alive(entry.name[len(prefix) :])
            ):
                found.append((kind, entry))
    found.sort(key=lambda item: item[1].stat().st_mtime, reverse=True)
    return found


def clean_stale(out_dir: str | Path) -> list[str]:
    """Remove what killed runs left beside ``out_dir``; return one note per thing done.

    A previous result parked in ``.DIR.old-*/result`` is moved back to ``DIR`` first when
    ``DIR`` is missing, so that cleaning never loses the last complete result. Folders of
    processes still alive are left alone.
    """
    out_dir = Path(out_dir)
    target = out_dir.absolute()
    notes = []
    for kind, folder in _stale_siblings(target):
        if kind == "old" and not target.exists() and _is_complete(folder / "result"):
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
    out_dir = Path(out_dir)
    target = out_dir.absolute()
    if target.exists() or target.is_symlink():
        if not out_dir.is_dir():
            raise ResultDirError(f"{out_dir}: exists and is not a folder")
        if not overwrite:
            raise ResultDirError(f"{out_dir}: already exists (pass overwrite=True to replace it)")
        if not _is_replaceable(out_dir):
            raise ResultDirError(
                f"{out_dir}: not replaced because it holds files other than a kvsim result "
                f"({', '.join(RESULT_FILES)}); choose another --out folder"
            )
        return
    for ancestor in target.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ResultDirError(f"{out_dir}: cannot be created: {ancestor} is not a folder")
            return


def save_result(result: Result, out_dir: str | Path, *, overwrite: bool = True) -> Path:
    """Write ``result`` into ``out_dir`` atomically and return the folder's path.

    With ``overwrite`` an existing ``out_dir`` is replaced, but only after the new result
    is completely written, and only if it is empty or holds nothing but a previous
    kvsim result (so ``--out .`` never deletes a working tree). Without ``overwrite`` an
    existing ``out_dir`` is an error. Leftovers of killed runs beside it are cleaned first
    (`clean_stale`).
    """
    out_dir = Path(out_dir)
    target = out_dir.resolve()
    clean_stale(target)
    check_out_dir(out_dir, overwrite=overwrite)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = _make_sibling(parent, target.name, "tmp")
    try:
        _write_files(result, tmp)
        if target.exists():
            # A folder cannot be renamed over a non-empty one: move the old result aside,
            # put the new one in place, then drop the old one.
            old = _make_sibling(parent, target.name, "old")
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
    `save_result` left it in ``.DIR.old-*/result``: moved back into place when its process
    is gone, read where it is otherwise (or when it cannot be moved)."""
    target = result_dir.absolute()
    parent = target.parent
    if not parent.is_dir():
        return None
    prefix = f".{target.name}.old-"
    candidates = sorted(
        (e for e in parent.iterdir() if e.name.startswith(prefix) and _is_complete(e / "result")),
        key=lambda e: e.stat().st_mtime,
        reverse=True,
    )
    for folder in candidates:
        if _owner_alive(folder.name[len(prefix) :]):
            return folder / "result"
        try:
            os.rename(folder / "result", target)
        except OSError:
            return folder / "result"
        shutil.rmtree(folder, ignore_errors=True)
        return result_dir
    return None


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
    if not result_dir.exists() and (recovered := _recover(result_dir)) is not None:
        result_dir = recovered
    if not result_dir.is_dir():
        raise ResultDirError(f"{result_dir}: no such result folder")
    missing = [name for name in RESULT_FILES if not (result_dir / name).is_file()]
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
