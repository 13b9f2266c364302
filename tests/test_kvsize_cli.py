"""``kvsim kv-size``: text and JSON output, and errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.cli import main
from kvsim.model.kv_sizing import GIB, kv_capacity
from kvsim.model.presets import resolve_gpu, resolve_model


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["kv-size", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_without_gpu_has_per_token_figures_only(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "--model", "llama-2-70b", "--kv-dtype", "fp16")
    assert out["bytes_per_token"] == 327_680 and isinstance(out["bytes_per_token"], int)
    assert out["bytes_per_block_per_shard"] == 327_680 * 16
    assert out["context_bytes"] == 10 * GIB
    assert "num_blocks" not in out and "gpu" not in out


def test_json_with_gpu_and_tp(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "--model", "llama-2-70b", "--kv-dtype", "fp16", "--gpu", "h100-sxm", "--tp", "8")
    cap = kv_capacity(resolve_model("llama-2-70b"), resolve_gpu("h100-sxm"), tp=8, kv_cache_dtype="fp16")
    assert out["bytes_per_token"] == 327_680
    assert out["bytes_per_token_per_shard"] == 40_960
    assert out["bytes_per_token_all_shards"] == 327_680
    assert out["kv_heads_per_shard"] == 1
    assert out["num_blocks"] == cap.num_blocks > 0
    assert out["num_tokens"] == cap.num_blocks * 16
    assert out["weight_bytes_per_shard"] == 68_976_648_192 * 2 // 8
    assert out["activation_reserve_estimated"] is True


def test_json_honours_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        "--model",
        "llama-2-7b",
        "--gpu",
        "a100-80gb",
        "--kv-dtype",
        "fp16",
        "--block-size",
        "32",
        "--gpu-memory-utilization",
        "0.9",
        "--activation-reserve-gib",
        "2",
    )
    # Same hand-computed case as test_kv_sizing, with 16 MiB blocks: floor(7353.4 / 2).
    assert out["num_blocks"] == 3676
    assert out["activation_reserve_bytes"] == 2 * GIB
    assert out["activation_reserve_estimated"] is False


def test_text_output_shows_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["kv-size", "--model", "llama-2-70b", "--kv-dtype", "fp16", "--gpu", "h100-sxm", "--tp", "8"])
        == 0
    )
    text = capsys.readouterr().out
    assert "KV bytes per token:           327,680 (whole model)" in text
    assert "KV bytes per token per shard: 40,960 (1 KV head(s) per shard)" in text
    assert "a 32,768-token context takes 10.00 GiB (1.25 GiB per shard)" in text
    assert "x utilization = budget         72.00 GiB" in text
    assert "- weights                      16.06 GiB" in text
    assert "KV capacity:" in text and "blocks =" in text


def test_text_mentions_the_sliding_window(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv-size", "--model", "mistral-7b"]) == 0
    text = capsys.readouterr().out
    assert "takes 0.50 GiB (sliding window 4,096: only the last 4,096 tokens are kept)" in text
    assert "KV capacity" not in text


def test_mla_per_shard_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv-size", "--model", "deepseek-v2-lite", "--tp", "2"]) == 0
    assert "31,104 (MLA latent (replicated per shard))" in capsys.readouterr().out


def test_bad_model_exits_2_with_suggestions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv-size", "--model", "llama-2-7"]) == 2
    err = capsys.readouterr().err
    assert "unknown model preset 'llama-2-7' (did you mean 'llama-2-7b'" in err
    assert "available:" in err


def test_bad_gpu_and_bad_tp_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv-size", "--model", "llama-3-8b", "--gpu", "mi300x"]) == 2  # b200 is a preset now
    assert "unknown GPU preset 'mi300x'" in capsys.readouterr().err
    assert main(["kv-size", "--model", "falcon-7b", "--tp", "2"]) == 2
    assert "--tp: tp=2 must divide the model's num_attention_heads (71)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--tp", "0"],
        ["--gpu-memory-utilization", "1.5"],
        ["--kv-dtype", "fp4"],
        ["--block-size", "-1"],
    ],
)
def test_bad_flags_are_argparse_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["kv-size", "--model", "llama-3-8b", *argv])
    assert exit_info.value.code == 2


def test_docs_show_the_real_output(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["kv-size", "--model", "llama-2-70b", "--kv-dtype", "fp16", "--gpu", "h100-sxm", "--tp", "8"]
    assert main(argv) == 0
    docs = (Path(__file__).resolve().parents[1] / "docs" / "presets.md").read_text(encoding="utf-8")
    assert capsys.readouterr().out.rstrip("\n") in docs
