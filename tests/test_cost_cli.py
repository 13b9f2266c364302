"""``kvsim profiles``, ``kvsim predict`` and ``kvsim calibrate --fit-* / --compare``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvsim.cli import main
from kvsim.cost.base import Batch
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.fit import Point, point_time_s, write_points
from kvsim.cost.roofline import RooflineCostModel
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS

LLAMA3, H100 = MODEL_PRESETS["llama-3-8b"], GPU_PRESETS["h100-sxm"]
# NVIDIA H200 SXM datasheet figures, as a spec file (the CLI accepts one in place of a preset).
H200 = {
    "name": "h200",
    "memory_bytes": 141 * 10**9,
    "hbm_bandwidth_bytes_per_s": 4.8e12,
    "bf16_flops": 989e12,
    "fp16_flops": 989e12,
    "fp8_flops": 1979e12,
    "interconnect_bandwidth_bytes_per_s": 450e9,
    "pcie_bandwidth_bytes_per_s": 64e9,
}
HEADER = "tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def h200(tmp_path: Path) -> str:
    path = tmp_path / "h200.yaml"
    path.write_text(yaml.safe_dump(H200))
    return str(path)


def test_profiles_lists_the_shipped_h200_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["profiles", "--json"], capsys)
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0
    assert rows["h200-llama-3-8b-bf16-tp1"] == {
        "name": "h200-llama-3-8b-bf16-tp1",
        "kind": "kernels",
        "model": "llama-3-8b",
        "gpu": "h200",
        "dtype": "bf16",
        "kv_dtypes": "bf16,fp8",
        "tp": "1",
        "date": "2026-11-29",
    }
    assert rows["h200-llama-3-8b-bf16-tp2"]["tp"] == "2"
    code, table, _ = run(["profiles"], capsys)
    assert table.splitlines()[0].split() == [
        "name",
        "kind",
        "model",
        "gpu",
        "dtype",
        "kv_dtypes",
        "tp",
        "date",
    ]


def test_predict_roofline_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    points = tmp_path / "points.csv"
    points.write_text(HEADER + "1,prefill,2,512,0,0.05\n2,decode,16,0,1024,\n")
    code, out, _ = run(
        [
            "predict",
            "--cost-model",
            "roofline",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--points",
            str(points),
            "--json",
        ],
        capsys,
    )
    rows = json.loads(out)
    expected_prefill = RooflineCostModel(LLAMA3, H100).step_time_s(Batch(prefill_chunks=[(512, 0), (512, 0)]))
    expected_decode = RooflineCostModel(LLAMA3, H100, tp=2).step_time_s(
        Batch(num_decode_seqs=16, decode_context_tokens=16 * 1024)
    )
    assert code == 0
    assert rows == [
        {
            "tp": 1,
            "phase": "prefill",
            "batch_size": 2,
            "prompt_tokens": 512,
            "context_tokens": 0,
            "time_s": 0.05,
            "predicted_time_s": expected_prefill,
            "relative_error": (expected_prefill - 0.05) / 0.05,
        },
        {
            "tp": 2,
            "phase": "decode",
            "batch_size": 16,
            "prompt_tokens": 0,
            "context_tokens": 1024,
            "time_s": None,
            "predicted_time_s": expected_decode,
        },
    ]


def test_fit_measurements_then_predict_with_the_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    true = RooflineCostConfig(compute_efficiency=0.5, memory_efficiency=0.65, per_iteration_overhead_s=1e-3)
    lines = []
    for tp in (1, 2):
        for b, p in ((1, 256), (4, 2048), (8, 8192), (1, 16384)):
            t = point_time_s(RooflineCostModel(LLAMA3, H100, true, tp=tp), Point(tp, "prefill", b, p, 0))
            lines.append(f"{tp},prefill,{b},{p},0,{t!r}")
        for b, c in ((1, 128), (16, 2048), (64, 4096), (256, 1024)):
            t = point_time_s(RooflineCostModel(LLAMA3, H100, true, tp=tp), Point(tp, "decode", b, 0, c))
            lines.append(f"{tp},decode,{b},0,{c},{t!r}")
    csv = tmp_path / "measured.csv"
    csv.write_text(HEADER + "\n".join(lines) + "\n")
    fitted = tmp_path / "fit.json"
    code, out, _ = run(
        [
            "calibrate",
            "--fit-measurements",
            str(csv),
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            str(fitted),
        ],
        capsys,
    )
    assert code == 0 and "compute_efficiency: 0.5" in out
    data = json.loads(fitted.read_text())
    assert data["kind"] == "roofline-fit" and data["tps"] == [1, 2] and len(data["points"]) == 16
    assert data["roofline"]["memory_efficiency"] == pytest.approx(0.65, rel=1e-3)
    code, out, _ = run(
        [
            "predict",
            "--cost-model",
            str(fitted),
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--points",
            str(csv),
            "--json",
        ],
        capsys,
    )
    assert code == 0 and max(abs(r["relative_error"]) for r in json.loads(out)) < 1e-4
    code, out, _ = run(["calibrate", "--compare", str(fitted), "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 16 and all(abs(r["fitted_rel_err"]) < 1e-4 for r in rows)


def test_compare_and_fit_roofline_on_the_shipped_profile(
    tmp_path: Path, h200: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        ["calibrate", "--compare", "h200-llama-3-8b-bf16-tp1", "--gpu", h200, "--json"], capsys
    )
    rows = json.loads(out)
    assert code == 0
    sections = {r["section"] for r in rows}
    assert {
        "gemm/qkv",
        "gemm/lm_head",
        "prefill",
        "decode/bf16",
        "decode/fp8",
        "iteration/decode",
    } <= sections
    gemm = next(r for r in rows if r["section"] == "gemm/gate_up" and r["x"] == 16384)
    # 2 x 16384 x 4096 x 28672 FLOPs at 0.6 x 989 TFLOP/s
    assert gemm["roofline_s"] == pytest.approx(2 * 16384 * 4096 * 28672 / (0.6 * 989e12))
    assert gemm["roofline_rel_err"] == pytest.approx(
        (gemm["roofline_s"] - gemm["measured_s"]) / gemm["measured_s"]
    )
    code, text, _ = run(["calibrate", "--compare", "h200-llama-3-8b-bf16-tp1", "--gpu", h200], capsys)
    assert "median |relative error| by section:" in text
    out_path = tmp_path / "h200-fit.json"
    code, text, _ = run(
        ["calibrate", "--fit-roofline", "h200-llama-3-8b-bf16-tp1", "--gpu", h200, "--out", str(out_path)],
        capsys,
    )
    assert code == 0 and "memory_efficiency" in text
    assert json.loads(out_path.read_text())["gpu"] == "h200"


def test_predict_refuses_a_profile_of_another_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    points = tmp_path / "p.csv"
    points.write_text(HEADER + "1,decode,1,0,100,\n")
    code, _, err = run(
        [
            "predict",
            "--cost-model",
            "h200-llama-3-8b-bf16-tp1",
            "--model",
            "llama-2-7b",
            "--gpu",
            "h100-sxm",
            "--points",
            str(points),
        ],
        capsys,
    )
    assert code == 2 and "profile is for model 'llama-3-8b'" in err


def test_unknown_gpu_names_the_presets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    points = tmp_path / "p.csv"
    points.write_text(HEADER + "1,decode,1,0,100,\n")
    code, _, err = run(
        [
            "predict",
            "--cost-model",
            "roofline",
            "--model",
            "llama-3-8b",
            "--gpu",
            "tpu",
            "--points",
            str(points),
        ],
        capsys,
    )
    assert code == 2 and "unknown GPU preset 'tpu'" in err and "or a YAML/JSON GpuSpec file" in err


def test_fit_whole_steps_with_the_sum_roofline_then_compare_and_predict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    true = RooflineCostConfig(compute_efficiency=0.6, memory_efficiency=0.5, combine="sum")
    steps = [
        Point.step([(256, 0)], 0, 0),
        Point.step([(100, 512), (20, 0)], 3, 3000),
        Point.step([], 8, 8 * 700),
        Point.step([], 1, 90),
        Point.step([(64, 2048)], 12, 12 * 1500),
        Point.step([], 30, 30 * 300),
    ]
    m = RooflineCostModel(LLAMA3, H100, true)
    timed = [
        Point.step(p.prefill_chunks, p.num_decode_seqs, p.decode_context_tokens, point_time_s(m, p))
        for p in steps
    ]
    csv = write_points(timed, tmp_path / "steps.csv")
    fitted = tmp_path / "fit.json"
    argv = ["calibrate", "--fit-measurements", str(csv), "--model", "llama-3-8b", "--gpu", "h100-sxm"]
    code, _, _ = run(
        [*argv, "--out", str(fitted), "--combine", "sum", "--robust", "0.05", "--match-total"], capsys
    )
    data = json.loads(fitted.read_text())
    assert code == 0 and data["roofline"]["combine"] == "sum"
    assert data["command"].endswith("--combine sum --robust 0.05 --match-total")
    assert data["points"][1]["prefill_chunks"] == [[100, 512], [20, 0]]
    code, out, _ = run(["calibrate", "--compare", str(fitted), "--json"], capsys)
    assert code == 0 and all(abs(r["fitted_rel_err"]) < 1e-3 for r in json.loads(out))
    code, out, _ = run(
        [
            "predict",
            "--cost-model",
            str(fitted),
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--points",
            str(csv),
            "--json",
        ],
        capsys,
    )
    assert code == 0 and max(abs(r["relative_error"]) for r in json.loads(out)) < 1e-3
