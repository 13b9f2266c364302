"""Kernel tables on disk (kvsim/cost/table_layout.py): aiconfigurator-core's columns and types,
the folder layout and meta file kvsim writes, and the refusal to replace what kvsim did not
write. No torch: rows are written by hand here; tests/test_calibration_tables.py measures them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from kvsim.cli import main
from kvsim.cost.table_layout import (
    MARKER_FILE,
    META_FILE,
    TABLE_OPS,
    TABLE_SCHEMAS,
    arrow_table,
    check_tables_out,
    version_dir,
    write_tables,
)
from kvsim.errors import ResultDirError

#: The packaged vLLM 0.24.0 tables on h200_sxm whose shape kvsim's tables copy.
PACKAGED = {
    "gemm_perf": "gemm/vllm/0.24.0/gemm_perf.parquet",
    "context_attention_perf": "attention/vllm/0.24.0/context_attention_perf.parquet",
    "generation_attention_perf": "attention/vllm/0.24.0/generation_attention_perf.parquet",
    "custom_allreduce_perf": "comm/vllm/0.24.0/custom_allreduce_perf.parquet",
    "moe_perf": "moe/vllm/0.24.0/moe_perf.parquet",
}


def packaged_dir() -> Path:
    core = pytest.importorskip(
        "aiconfigurator_core", reason="aiconfigurator-core (the kernels extra) is absent"
    )
    return Path(core.__file__).parent / "systems" / "data" / "h200_sxm"


def row(table: str, **values: Any) -> dict[str, Any]:
    """A row of ``table`` with every column filled (strings 'x', integers 1, latency 0.5)."""
    defaults = {"string": "x", "large_string": "x", "int64": 1, "double": 0.5}
    out: dict[str, Any] = {col: defaults[typ] for col, typ in TABLE_SCHEMAS[table]}
    out.update(values)
    return out


RUN_META = {"kvsim": "0.1.0", "torch": "2.13.0+cpu", "device": "cpu", "collected_at": "2026-12-01T00:00:00Z"}


def write(root: Path, tables: dict[str, list[dict[str, Any]]], **kw: Any) -> list[Path]:
    return write_tables(
        root,
        system=kw.pop("system", "h200_sxm"),
        version=kw.pop("version", "2.13.0"),
        tables=tables,
        table_meta={name: {"status": "complete", "rows": len(rows)} for name, rows in tables.items()},
        run_meta=RUN_META,
        **kw,
    )


@pytest.mark.parametrize("table", list(PACKAGED))
def test_schemas_are_the_packaged_tables(table: str) -> None:
    schema = pq.read_schema(packaged_dir() / PACKAGED[table])
    assert [(f.name, str(f.type)) for f in schema] == list(TABLE_SCHEMAS[table])
    assert arrow_table(table, [row(table)]).schema.equals(schema.remove_metadata())


def test_tables_are_written_in_the_packaged_layout(tmp_path: Path) -> None:
    gemm = [row("gemm_perf", m=m, n=4096, k=4096, latency=0.01 * m) for m in (1, 2, 4)]
    ctx = [row("context_attention_perf", isl=512)]
    written = write(tmp_path, {"gemm_perf": gemm, "context_attention_perf": ctx})
    assert written == [tmp_path / "h200_sxm/attention/torch/2.13.0", tmp_path / "h200_sxm/gemm/torch/2.13.0"]
    assert sorted(p.name for p in written[1].iterdir()) == [MARKER_FILE, META_FILE, "gemm_perf.parquet"]
    assert pq.read_table(written[1] / "gemm_perf.parquet").to_pylist() == gemm
    meta = yaml.safe_load((written[1] / META_FILE).read_text())
    assert meta == {
        "schema_version": 1,
        "provenance": "collected",
        "runtime": {"framework": "torch", "version": "2.13.0"},
        "harness": {"name": "kvsim-calibration", **RUN_META},
        "tables": {"gemm_perf": {"status": "complete", "rows": 3}},
    }
    assert json.loads((written[1] / MARKER_FILE).read_text())["kvsim"] == "kernel-tables"
    assert [p.name for p in tmp_path.iterdir()] == ["h200_sxm"]  # no temporary folder left


def test_a_table_without_rows_is_not_written_but_its_meta_says_why(tmp_path: Path) -> None:
    write_tables(
        tmp_path,
        system="cpu",
        version="2.13.0",
        tables={"custom_allreduce_perf": []},
        table_meta={
            "custom_allreduce_perf": {"status": "skipped", "rows": 0, "skipped": [{"reason": "1 GPU"}]}
        },
        run_meta=RUN_META,
    )
    folder = version_dir(tmp_path, "cpu", "comm", "2.13.0")
    assert sorted(p.name for p in folder.iterdir()) == [MARKER_FILE, META_FILE]
    assert (
        yaml.safe_load((folder / META_FILE).read_text())["tables"]["custom_allreduce_perf"]["status"]
        == "skipped"
    )


def test_rows_must_have_exactly_the_columns(tmp_path: Path) -> None:
    bad = row("gemm_perf")
    del bad["k"]
    bad["K"] = 1
    with pytest.raises(
        ValueError, match=r"gemm_perf row 0: missing columns \['k'\], unknown columns \['K'\]"
    ):
        write(tmp_path / "t", {"gemm_perf": [bad]})
    assert not (tmp_path / "t" / "h200_sxm").exists()
    assert [p.name for p in (tmp_path / "t").iterdir()] == []  # the temporary folder is gone


def test_its_own_tables_are_replaced_and_nothing_else_is_touched(tmp_path: Path) -> None:
    vllm = tmp_path / "h200_sxm/gemm/vllm/0.24.0"  # packaged tables copied beside: never touched
    vllm.mkdir(parents=True)
    (vllm / "gemm_perf.parquet").write_text("theirs")
    write(tmp_path, {"gemm_perf": [row("gemm_perf", m=1)]})
    write(tmp_path, {"gemm_perf": [row("gemm_perf", m=2)]})
    folder = version_dir(tmp_path, "h200_sxm", "gemm", "2.13.0")
    assert pq.read_table(folder / "gemm_perf.parquet").column("m").to_pylist() == [2]
    assert (vllm / "gemm_perf.parquet").read_text() == "theirs"
    assert sorted(p.name for p in folder.parent.iterdir()) == ["2.13.0"]  # no parked old copy left


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (lambda f: (f / "gemm_perf.parquet").write_text("mine"), "no .kvsim marker of kernel tables"),
        (
            lambda f: (
                (f / MARKER_FILE).write_text('{"kvsim": "kernel-tables"}'),
                (f / "notes.txt").write_text(""),
            ),
            "holds files kvsim does not write: notes.txt",
        ),
        (lambda f: (f / MARKER_FILE).write_text('{"kvsim": "result"}'), "no .kvsim marker of kernel tables"),
    ],
)
def test_a_folder_kvsim_did_not_write_is_refused(tmp_path: Path, prepare: Any, message: str) -> None:
    folder = version_dir(tmp_path, "h200_sxm", "gemm", "2.13.0")
    folder.mkdir(parents=True)
    prepare(folder)
    before = sorted((p.name, p.read_bytes()) for p in folder.iterdir())
    with pytest.raises(ResultDirError, match=message):
        write(tmp_path, {"gemm_perf": [row("gemm_perf")]})
    assert sorted((p.name, p.read_bytes()) for p in folder.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h200_sxm"]


def test_bad_roots_and_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultDirError, match="exists and is not a folder"):
        check_tables_out(tmp_path / "file", "h200_sxm", "2.13.0", ["gemm_perf"])
    with pytest.raises(ResultDirError, match=r"cannot be created: .*file is not a folder"):
        check_tables_out(tmp_path / "file" / "sub", "h200_sxm", "2.13.0", ["gemm_perf"])
    for system in ("../up", "a/b", "", ".."):
        with pytest.raises(ResultDirError, match="--system"):
            check_tables_out(tmp_path, system, "2.13.0", ["gemm_perf"])
    (tmp_path / "sys" / "gemm").mkdir(parents=True)
    (tmp_path / "sys" / "gemm" / "torch").write_text("")
    with pytest.raises(ResultDirError, match="torch: exists and is not a folder"):
        check_tables_out(tmp_path, "sys", "2.13.0", ["gemm_perf"])


def test_every_table_has_an_op_folder() -> None:
    assert set(TABLE_OPS) == set(TABLE_SCHEMAS) == set(PACKAGED)
    assert {PACKAGED[t].split("/")[0] for t in PACKAGED} == set(TABLE_OPS.values())


def test_cli_refuses_a_foreign_tables_folder_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    from calibration.tables import torch_version

    folder = version_dir(tmp_path, "cpu", "gemm", torch_version())
    folder.mkdir(parents=True)
    (folder / "gemm_perf.parquet").write_text("mine")
    assert main(["calibrate", "--tables", str(tmp_path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "not replaced" in err and "[calibrate]" not in err  # nothing was measured
    assert (folder / "gemm_perf.parquet").read_text() == "mine"
