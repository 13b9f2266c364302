"""benchmarks/tables_vs_packaged.py on the H200 tables kvsim's harness measured (shipped in
calibration/measurements/): the figures docs/cost-model.md quotes ("The harness on a real H200")
hold, every shipped point meets a packaged one, and kvsim prices a MoE model from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def script():  # type: ignore[no-untyped-def]
    pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the kernels extra) is absent")
    return load_benchmark("tables_vs_packaged")


def test_the_quoted_kernel_ratios(script) -> None:  # type: ignore[no-untyped-def]
    from kvsim.cost.tables import package_tables_root

    packaged = package_tables_root()
    assert packaged is not None
    rows = script.compare(script.SHIPPED, "h200_sxm", None, "vllm", "0.24.0", packaged)
    quoted = {
        (r["table"], r["group"]): (r["points"], r["of"], round(r["median"], 2), round(r["p90"], 2))
        for r in rows
    }
    assert quoted[("gemm_perf", "bfloat16")] == (240, 480, 1.09, 2.02)
    assert quoted[("gemm_perf", "fp8")] == (240, 480, 1.32, 2.43)
    assert quoted[("context_attention_perf", "all")] == (114, 114, 0.85, 1.03)
    assert quoted[("generation_attention_perf", "bfloat16")] == (87, 218, 1.13, 1.66)
    assert quoted[("generation_attention_perf", "fp8")] == (87, 218, 8.32, 20.52)
    assert quoted[("moe_perf", "all")] == (360, 360, 1.82, 3.63)
    assert quoted[("moe_perf", "4096 14336 2 8 1 1")] == (30, 360, 1.41, 1.73)


def test_the_quoted_steps(script) -> None:  # type: ignore[no-untyped-def]
    steps = {
        s["step"]: round(s["ratio"], 2)
        for s in script.steps(script.SHIPPED, "h200_sxm", "vllm", "0.24.0", "mixtral-8x7b")
    }
    assert steps == {
        "decode 1 x 2,048": 1.77,
        "decode 16 x 2,048": 1.62,
        "decode 64 x 2,048": 1.33,
        "decode 256 x 1,024": 1.15,
        "prefill 2,048": 1.24,
        "prefill 8,192": 1.19,
    }


def test_the_script_prints_both_tables(script, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert script.main([]) == 0
    out = capsys.readouterr().out
    assert "| moe_perf | all | 360 of 360 | 1.82 |" in out
    assert "| decode 64 x 2,048 |" in out
