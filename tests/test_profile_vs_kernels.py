"""benchmarks/profile_vs_kernels.py on the packaged tables: the figures docs/cost-model.md quotes
("The shipped H200 profile against measured kernels") hold."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from conftest import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


def test_the_quoted_medians() -> None:
    pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the kernels extra) is absent")
    script = load_benchmark("profile_vs_kernels")
    tables = script.Tables(script.packaged_tables(), "h200_sxm", "vllm", "0.24.0")
    rows = script.compare(script.Profile(script.PROFILE), tables)
    medians = {
        section: round(statistics.median(r["ratio"] for r in rows if r["section"] == section), 2)
        for section in dict.fromkeys(r["section"] for r in rows)
    }
    assert medians == {
        "gemm": 1.05,
        "gemm layer": 1.01,
        "context attention": 0.95,
        "decode attention": 3.04,
        "decode layer": 2.06,
        "decode iteration": 1.88,
    }
    # on-grid points are the tables' own rows: no interpolation there
    qkv = next(r for r in rows if r["point"] == "qkv m=4096")
    assert qkv["kernels_ms"] == pytest.approx(0.2482, abs=1e-4)
