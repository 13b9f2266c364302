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
no half-written folder and an existing ``DIR`` is replaced only after success.
`load_result` reads such a folder back (the dashboard's Compare page and sweeps use it).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.errors import ResultDirError, ScenarioError
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


def _write_files(result: Result, folder: Path) -> None:
    (folder / SUMMARY_FILE).write_text(summary_to_json(result.summary) + "\n", encoding="utf-8")
    for attr, name in TABLE_FILES.items():
        frame: pd.DataFrame = getattr(result, attr)
        frame.to_parquet(folder / name, engine="pyarrow", index=False)
    (folder / SCENARIO_FILE).write_text(dump_scenario(result.scenario), encoding="utf-8")


def _is_replaceable(folder: Path) -> bool:
    """An existing folder may be replaced only if it is empty or holds a kvsim result."""
    entries = {p.name for p in folder.iterdir()}
    return not entries or (SUMMARY_FILE in entries and entries <= set(RESULT_FILES))


def save_result(result: Result, out_dir: str | Path, *, overwrite: bool = True) -> Path:
    """Write ``result`` into ``out_dir`` atomically and return the folder's path.

    With ``overwrite`` an existing ``out_dir`` is replaced, but only after the new result
    is completely written, and only if it is empty or holds nothing but a previous
    kvsim result (so ``--out .`` never deletes a working tree). Without ``overwrite`` an
    existing ``out_dir`` is an error.
    """
    out_dir = Path(out_dir)
    target = out_dir.resolve()
    if target.exists():
        if not out_dir.is_dir():
            raise ResultDirError(f"{out_dir}: exists and is not a folder")
        if not overwrite:
            raise ResultDirError(f"{out_dir}: already exists (pass overwrite=True to replace it)")
        if not _is_replaceable(out_dir):
            raise ResultDirError(
                f"{out_dir}: not replaced because it holds files other than a kvsim result "
                f"({', '.join(RESULT_FILES)}); choose another --out folder"
            )
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
    try:
        _write_files(result, tmp)
        if target.exists():
            # A folder cannot be renamed over a non-empty one: move the old result aside,
            # put the new one in place, then drop the old one.
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))
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


def _summary_from_json(data: Any, path: Path) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ResultDirError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    # null was NaN (or an infinity) when written; NaN keeps the numbers numeric.
    return {k: float("nan") if v is None else v for k, v in data.items()}


def load_result(result_dir: str | Path) -> Result:
    """Read a folder written by `save_result` back into a `Result`."""
    result_dir = Path(result_dir)
    if not result_dir.is_dir():
        raise ResultDirError(f"{result_dir}: no such result folder")
    missing = [name for name in RESULT_FILES if not (result_dir / name).is_file()]
    if missing:
        raise ResultDirError(f"{result_dir}: not a kvsim result folder, missing {', '.join(missing)}")
    summary_path = result_dir / SUMMARY_FILE
    try:
        summary = _summary_from_json(json.loads(summary_path.read_text(encoding="utf-8")), summary_path)
    except json.JSONDecodeError as exc:
        raise ResultDirError(f"{summary_path}: not valid JSON: {exc}") from None
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
