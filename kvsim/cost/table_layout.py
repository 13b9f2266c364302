"""Kernel tables on disk: aiconfigurator-core's layout and columns, and kvsim's writer of them.

`kvsim calibrate --tables DIR` measures kernels with torch (`calibration.tables`) and writes
them here in the shape of the tables NVIDIA's aiconfigurator-core 0.12.0 ships, so that the
kernels cost model reads a user's own measurements exactly as it reads the packaged ones:

    DIR/<system>/gemm/torch/<torch version>/gemm_perf.parquet
    DIR/<system>/attention/torch/<torch version>/context_attention_perf.parquet
    DIR/<system>/attention/torch/<torch version>/generation_attention_perf.parquet
    DIR/<system>/comm/torch/<torch version>/custom_allreduce_perf.parquet
    DIR/<system>/moe/torch/<torch version>/moe_perf.parquet
    ... each version folder also holds collection_meta.yaml and kvsim's marker .kvsim

``<system>`` is aiconfigurator's system name (``h200_sxm``; `--system`), the backend is
``torch`` and the version torch's public version (``2.11.0``; the local label, such as
``+cu130``, is in the meta file). Columns, their order and their Arrow types are those of
the packaged files (`TABLE_SCHEMAS`; ``moe_perf``'s strings are ``large_string``, as there); ``latency`` is milliseconds per call of one layer's
kernel, ``message_size`` of an all-reduce counts elements (aiconfigurator's collector
sends ``message_size`` bf16 elements). A table with no row is not written; its meta entry
says why.

Ownership: kvsim writes, replaces or deletes only version folders that hold its marker
(``.kvsim``, ``{"kvsim": "kernel-tables", ...}``); a folder that exists without it, or with
files kvsim does not write, is refused before anything is measured (`check_tables_out`).
Every version folder is written into a hidden temporary folder under ``DIR`` and renamed
into place once complete; other systems, backends and versions under ``DIR`` (the
packaged vLLM tables copied beside, say) are never touched.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kvsim import __version__
from kvsim.errors import ResultDirError

#: The backend folder of tables kvsim's harness measures (aiconfigurator: vllm, sglang, trtllm).
BACKEND = "torch"
#: The ``harness`` named in collection_meta.yaml.
HARNESS = "kvsim-calibration"
META_FILE = "collection_meta.yaml"
#: kvsim's ownership marker in every version folder it writes, and the kind it names.
MARKER_FILE = ".kvsim"
MARKER_KIND = "kernel-tables"

_STRING, _LARGE_STRING, _INT, _FLOAT = "string", "large_string", "int64", "double"


def _common(string: str) -> tuple[tuple[str, str], ...]:
    return tuple((col, string) for col in ("framework", "version", "device", "op_name", "kernel_source"))


_COMMON = _common(_STRING)
_ATTENTION: tuple[tuple[str, str], ...] = (
    *_COMMON,
    ("batch_size", _INT),
    ("isl", _INT),
    ("num_heads", _INT),
    ("num_key_value_heads", _INT),
    ("head_dim", _INT),
    ("beam_width", _INT),
    ("attn_dtype", _STRING),
    ("kv_cache_dtype", _STRING),
    ("step", _INT),
    ("window_size", _INT),
    ("latency", _FLOAT),
)

#: Table name -> (column, Arrow type) in file order: aiconfigurator-core 0.12.0's
#: h200_sxm/{gemm,attention,comm,moe}/vllm/0.24.0 files (tests compare them with the package).
TABLE_SCHEMAS: dict[str, tuple[tuple[str, str], ...]] = {
    "gemm_perf": (
        *_COMMON,
        ("gemm_dtype", _STRING),
        ("m", _INT),
        ("n", _INT),
        ("k", _INT),
        ("latency", _FLOAT),
    ),
    "context_attention_perf": _ATTENTION,
    "generation_attention_perf": _ATTENTION,
    "custom_allreduce_perf": (
        *_COMMON,
        ("allreduce_dtype", _STRING),
        ("num_gpus", _INT),
        ("message_size", _INT),
        ("latency", _FLOAT),
        ("backend", _STRING),
    ),
    # the packaged moe_perf stores its strings as large_string
    "moe_perf": (
        *_common(_LARGE_STRING),
        ("moe_dtype", _LARGE_STRING),
        ("num_tokens", _INT),
        ("hidden_size", _INT),
        ("inter_size", _INT),
        ("topk", _INT),
        ("num_experts", _INT),
        ("moe_tp_size", _INT),
        ("moe_ep_size", _INT),
        ("distribution", _LARGE_STRING),
        ("latency", _FLOAT),
    ),
}
#: Table name -> the op folder it lives in.
TABLE_OPS: dict[str, str] = {
    "gemm_perf": "gemm",
    "context_attention_perf": "attention",
    "generation_attention_perf": "attention",
    "custom_allreduce_perf": "comm",
    "moe_perf": "moe",
}
#: Table name -> the ``op_name`` its rows carry.
TABLE_OP_NAMES: dict[str, str] = {
    "gemm_perf": "gemm",
    "context_attention_perf": "context_attention",
    "generation_attention_perf": "generation_attention",
    "custom_allreduce_perf": "all_reduce",
    "moe_perf": "moe",
}

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_name(value: str, what: str) -> str:
    """``value`` unless it cannot be one folder name (a system or a version)."""
    if not _NAME.fullmatch(value) or value in (".", ".."):
        raise ResultDirError(
            f"{what} {value!r}: must be 1-100 letters, digits, '.', '_', '+' or '-', "
            "starting with a letter or digit (it names a folder)"
        )
    return value


def version_dir(root: str | Path, system: str, op: str, version: str) -> Path:
    """``root/<system>/<op>/torch/<version>``: where one op's tables go."""
    return Path(root) / system / op / BACKEND / version


def _marker_kind(folder: Path) -> str | None:
    path = folder / MARKER_FILE
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(4097).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    kind = data.get("kvsim") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def _own_files(op: str) -> set[str]:
    return {MARKER_FILE, META_FILE} | {f"{t}.parquet" for t, o in TABLE_OPS.items() if o == op}


def _replaceable(folder: Path, op: str) -> str | None:
    """None if kvsim may replace ``folder`` (empty, or its own tables); else why not."""
    if folder.is_symlink() or not folder.is_dir():
        return "exists and is not a folder"
    names = {p.name for p in folder.iterdir()}
    if not names:
        return None
    if _marker_kind(folder) != MARKER_KIND:
        return f"holds files kvsim did not write (no {MARKER_FILE} marker of kernel tables)"
    foreign = sorted(names - _own_files(op))
    if foreign:
        return f"holds files kvsim does not write: {', '.join(foreign[:5])}"
    return None


def check_tables_out(root: str | Path, system: str, version: str, tables: Sequence[str]) -> None:
    """Raise `ResultDirError` unless ``tables`` may be written under ``root`` (see the module
    docstring); called before anything is measured, and again before each folder is replaced."""
    check_name(system, "--system")
    check_name(version, "version")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ResultDirError(f"{root}: exists and is not a folder")
    for ancestor in root.absolute().parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise ResultDirError(f"{root}: cannot be created: {ancestor} is not a folder")
            break
    for op in sorted({TABLE_OPS[t] for t in tables}):
        folder = version_dir(root, system, op, version)
        for parent in (folder.parent, folder.parent.parent, folder.parent.parent.parent):
            if parent.exists() and (parent.is_symlink() or not parent.is_dir()):
                raise ResultDirError(f"{parent}: exists and is not a folder")
        if folder.exists() or folder.is_symlink():
            why = _replaceable(folder, op)
            if why is not None:
                raise ResultDirError(f"{folder}: not replaced: it {why}; choose another --tables folder")


def arrow_table(name: str, rows: Sequence[Mapping[str, Any]]) -> Any:
    """``rows`` as a pyarrow Table with exactly ``TABLE_SCHEMAS[name]``'s columns and types."""
    import pyarrow as pa  # a dependency of kvsim; imported where tables are written

    types = {_STRING: pa.string(), _LARGE_STRING: pa.large_string(), _INT: pa.int64(), _FLOAT: pa.float64()}
    schema = pa.schema([(col, types[typ]) for col, typ in TABLE_SCHEMAS[name]])
    columns = [c for c, _ in TABLE_SCHEMAS[name]]
    for i, row in enumerate(rows):
        if set(row) != set(columns):
            missing, extra = sorted(set(columns) - set(row)), sorted(set(row) - set(columns))
            raise ValueError(f"{name} row {i}: missing columns {missing}, unknown columns {extra}")
    return pa.Table.from_pydict({c: [row[c] for row in rows] for c in columns}, schema=schema)


def _make_tmp(root: Path) -> Path:
    for _ in range(100):
        folder = root / f".kvsim-tables.kvsim-tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(folder)
        except FileExistsError:
            continue
        _write_marker(folder)
        return folder
    raise ResultDirError(f"{root}: cannot create a temporary folder")  # pragma: no cover


def _write_marker(folder: Path) -> None:
    with open(folder / MARKER_FILE, "x", encoding="utf-8") as fh:
        fh.write(json.dumps({"kvsim": MARKER_KIND, "version": __version__}) + "\n")


def write_tables(
    root: str | Path,
    *,
    system: str,
    version: str,
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
    table_meta: Mapping[str, Mapping[str, Any]],
    run_meta: Mapping[str, Any],
) -> list[Path]:
    """Write each op's tables and collection_meta.yaml into ``root/<system>/<op>/torch/<version>``.

    ``tables`` maps table names to rows (a table with no row is left out); ``table_meta``
    maps every table measured (or skipped) to its entry in the meta file (status, rows,
    kernel sources, what was skipped and why); ``run_meta`` is the ``harness`` section
    (kvsim-calibration, torch version, device, date, command, grid). Returns the version
    folders written. Atomic per folder (see the module docstring).
    """
    import pyarrow.parquet as pq

    names = sorted(set(tables) | set(table_meta))
    unknown = [n for n in names if n not in TABLE_SCHEMAS]
    if unknown:
        raise ValueError(f"unknown kernel tables: {unknown}")
    check_tables_out(root, system, version, names)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = _make_tmp(root)
    written = []
    try:
        staged: dict[str, Path] = {}
        for op in sorted({TABLE_OPS[n] for n in names}):
            folder = tmp / op
            folder.mkdir()
            _write_marker(folder)
            op_tables = [n for n in names if TABLE_OPS[n] == op]
            meta = {
                "schema_version": 1,
                "provenance": "collected",
                "runtime": {"framework": BACKEND, "version": version},
                # plain data only (a torch version is a str subclass YAML cannot represent)
                "harness": {"name": HARNESS, **json.loads(json.dumps(dict(run_meta), default=str))},
                "tables": {n: dict(table_meta.get(n, {})) for n in op_tables},
            }
            for n in op_tables:
                rows = tables.get(n, [])
                if rows:
                    pq.write_table(arrow_table(n, rows), folder / f"{n}.parquet")
            (folder / META_FILE).write_text(
                yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=None),
                encoding="utf-8",
            )
            staged[op] = folder
        for op, folder in staged.items():
            target = version_dir(root, system, op, version)
            check_tables_out(root, system, version, [n for n in names if TABLE_OPS[n] == op])
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                old = target.parent / f".{target.name}.kvsim-old-{os.getpid()}-{secrets.token_hex(4)}"
                os.rename(target, old)
                try:
                    os.rename(folder, target)
                except BaseException:
                    os.rename(old, target)
                    raise
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(folder, target)
            written.append(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return written
