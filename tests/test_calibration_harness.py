"""The calibration harness on CPU with tiny shapes: it must produce a valid profile that the
calibrated cost model loads (the same code runs on CUDA at full size)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibration.grids import Grids
from calibration.shapes import ModelShape
from kvsim.cli import main
from kvsim.cost.base import Batch
from kvsim.cost.calibrated import CalibratedCostModel
from kvsim.cost.profile import load_profile, validate_profile, write_profile
from kvsim.model.presets import GPU_PRESETS
from kvsim.model.specs import ModelSpec

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TINY = dict(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=256,
)
TINY_SPEC = ModelSpec(**TINY, num_params=1e6, max_model_len=1024)
GRIDS = Grids(
    tokens=[1, 8, 32],
    prefill_chunk_tokens=[4, 16],
    prefill_context_tokens=[0, 16],
    decode_batch_sizes=[1, 2],
    decode_context_tokens=[16, 48],
    hbm_copy_bytes=[1 << 16],
    host_transfer_bytes=[1 << 16],
    allreduce_bytes=[1 << 10],
    warmup=0,
    repeats=1,
)


def test_shapes_are_sharded_for_tensor_parallelism() -> None:
    shape = ModelShape(**TINY)
    assert shape.linear_shapes(1) == {
        "qkv": (64, 128),
        "o": (64, 64),
        "gate_up": (64, 256),
        "down": (128, 64),
        "lm_head": (64, 256),
    }
    # tp=4: one query head and (replicated) one KV head per shard
    assert shape.linear_shapes(4) == {
        "qkv": (64, 48),
        "o": (16, 64),
        "gate_up": (64, 64),
        "down": (32, 64),
        "lm_head": (64, 64),
    }
    with pytest.raises(ValueError, match="not divisible by tp=3"):
        shape.check_tp(3)


def test_cpu_run_produces_a_profile_the_calibrated_model_loads(tmp_path: Path) -> None:
    from calibration.harness import run_calibration

    messages: list[str] = []
    data = run_calibration(
        ModelShape(**TINY), tp=2, device="cpu", grids=GRIDS, gpu="h100-sxm", progress=messages.append
    )
    validate_profile(data)
    assert data["gemm"]["shapes"]["qkv"] == [64, 64]  # (2 query + 2 x 1 KV heads) x 16 on one of 2 shards
    assert sorted(data["decode_attention"]) == ["bf16", "fp8"]
    assert data["host_transfer"] == {"status": "skipped", "reason": "host<->device copies need a CUDA device"}
    assert data["allreduce"]["status"] == "skipped"
    assert data["device"]["type"] == "cpu" and data["device"]["torch"] == torch.__version__
    assert data["settings"]["repeats"] == 1 and data["settings"]["cuda_graphs"] is False
    assert messages[0].startswith("tiny tp=2 bf16") and messages[-1].startswith("done in")

    path = write_profile(data, tmp_path / "tiny.json")
    model = CalibratedCostModel(load_profile(path), model=TINY_SPEC, gpu=GPU_PRESETS["h100-sxm"], tp=2)
    step = model.step_time_s(Batch(prefill_chunks=[(10, 5)], num_decode_seqs=2, decode_context_tokens=60))
    assert step > data["per_iteration_overhead_s"]
    ctx = np.array([20, 60, 500])
    assert model.decode_steps_s(2, ctx).tolist() == [
        model.step_time_s(Batch(num_decode_seqs=2, decode_context_tokens=int(c))) for c in ctx
    ]


def test_cli_calibrates_on_cpu_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(TINY_SPEC.model_dump()))
    out = tmp_path / "profile.json"
    assert main(["calibrate", "--model", str(spec), "--device", "cpu", "--quick", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["model"]["name"] == "tiny" and data["settings"]["quick"] is True
    assert data["command"] == f"kvsim calibrate --model {spec} --tp 1 --device cpu --quick --out {out}"
    assert "[calibrate] done in" in capsys.readouterr().err


def test_cli_says_when_torch_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "calibration.harness", None)  # makes the import fail
    assert main(["calibrate", "--model", "llama-3-8b", "--out", str(tmp_path / "x.json")]) == 2
    assert "kvsim calibrate needs torch" in capsys.readouterr().err


def test_end_to_end_iterations_on_cpu_in_the_measurements_format() -> None:
    from calibration.endtoend import measure_points

    rows = measure_points(
        ModelShape(**TINY),
        [("prefill", 2, 8, 0), ("decode", 3, 0, 40)],
        device="cpu",
        warmup=0,
        repeats=1,
        progress=lambda _m: None,
    )
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in rows] == [
        {"tp": 1, "phase": "prefill", "batch_size": 2, "prompt_tokens": 8, "context_tokens": 0},
        {"tp": 1, "phase": "decode", "batch_size": 3, "prompt_tokens": 0, "context_tokens": 40},
    ]
    assert all(isinstance(r["time_s"], float) and r["time_s"] > 0 for r in rows)
