"""Does it fit: `kvsim.model.memory_fit`, ``kvsim fit``, ``kv-size``'s verdict and vLLM's start-up check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.cli import main
from kvsim.errors import ScenarioError
from kvsim.model.kv_sizing import GIB
from kvsim.model.memory_fit import check_fit, fit_variants, max_context_tokens
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.scenario.loading import load_scenario

LLAMA3 = resolve_model("llama-3-8b")
RTX4090 = resolve_gpu("rtx-4090")


def test_llama_3_8b_on_an_rtx_4090_by_hand() -> None:
    # 24 GiB x 0.9 = 23,192,823,398.4 budget - 16,060,522,496 weights (8.03B x 2) - 2 GiB reserve
    # = 4,984,817,254.4 bytes of KV, over 2 MiB blocks (16 x 131,072): 2,376 blocks.
    fit = check_fit(LLAMA3, RTX4090, context_tokens=8192, batch_size=4, activation_reserve_bytes=2 * GIB)
    assert fit.capacity.num_blocks == 2376
    assert fit.blocks_per_sequence == 512 and fit.fits and fit.max_batch_size == 4
    assert fit.max_context_tokens == 8192  # 594 blocks each: capped by the model's 8,192
    assert max_context_tokens(LLAMA3, 2376, 16, batch_size=5) == 475 * 16 == 7600
    five = check_fit(LLAMA3, RTX4090, context_tokens=8192, batch_size=5, activation_reserve_bytes=2 * GIB)
    assert not five.fits and five.dominant == "weights"
    assert five.kv_bytes_needed == 5 * 512 * 2 * 2**20
    assert "does not fit: 5 x 8,192 tokens need 5.00 GiB of KV per GPU, 4.64 GiB are left" in five.reason()


def test_weights_beyond_the_budget_fit_nothing() -> None:
    fit = check_fit(resolve_model("llama-2-70b"), resolve_gpu("t4"), context_tokens=4096)
    assert not fit.weights_fit and not fit.fits
    assert fit.max_batch_size == fit.max_context_tokens == 0
    assert fit.reason() == "weights need 128.48 GiB per GPU, more than the 14.40 GiB budget"


def test_quantization_variants_buy_batch() -> None:
    rows = fit_variants(LLAMA3, RTX4090, context_tokens=8192, batch_size=1, activation_reserve_bytes=2 * GIB)
    got = {(r.weight_dtype, r.kv_cache_dtype): r.max_batch_size for r in rows}
    assert got[("bf16", "auto")] == 4 and got[("bf16", "fp8")] == 9  # fp8 KV: 4,752 blocks of 1 MiB
    assert got[("fp8", "auto")] > got[("bf16", "auto")]  # 8 GB of weights freed
    assert got[("int4", "fp8")] == max(got.values())


def test_sliding_window_and_hybrid_models_hold_long_contexts() -> None:
    gemma = resolve_model("gemma-3-1b")
    fit = check_fit(gemma, resolve_gpu("rtx-3070"), context_tokens=32768, batch_size=8)
    # 2,048 full-layer blocks + 6 window groups x 33 blocks per sequence.
    assert fit.blocks_per_sequence == 2048 + 6 * 33 and fit.fits
    assert fit.max_context_tokens == 32768


def _fit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["fit", *argv])
    return code, capsys.readouterr().out


def test_fit_command_exit_codes_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _fit(capsys, "--model", "llama-3-8b", "--gpu", "rtx-4090", "--context-tokens", "8192")
    assert code == 0 and "FITS" in out and "largest batch at 8,192 tokens:" in out
    code, out = _fit(capsys, "--model", "llama-2-70b", "--gpu", "t4", "--context-tokens", "4096")
    assert code == 3 and "DOES NOT FIT" in out and "weights need 128.48 GiB" in out
    code, out = _fit(capsys, "--model", "llama-3-8b", "--gpu", "rtx-4090", "--batch", "64", "--json")
    data = json.loads(out)
    assert code == 3 and data["fits"] is False and data["dominant"] == "kv"
    assert [(v["weight_dtype"], v["kv_cache_dtype"]) for v in data["variants"]][:2] == [
        ("bf16", "auto"),
        ("bf16", "fp8"),
    ]


def test_fit_takes_inline_and_file_specs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = LLAMA3.model_dump() | {"name": "my-llama", "weight_dtype": "int4"}
    code, out = _fit(capsys, "--model", json.dumps(spec), "--gpu", "rtx-3070", "--context-tokens", "4096")
    assert code == 0 and out.startswith("my-llama (int4 weights")
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(resolve_gpu("t4").model_dump() | {"name": "my-t4"}))
    code, out = _fit(capsys, "--model", "qwen2.5-0.5b", "--gpu", str(path), "--context-tokens", "4096")
    assert code == 0 and "on my-t4" in out
    assert main(["fit", "--model", '{"name": "x"}', "--gpu", "t4"]) == 2
    assert "invalid ModelSpec: num_layers: Field required" in capsys.readouterr().err


def test_kv_size_says_when_nothing_fits_and_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv-size", "--model", "llama-2-70b", "--gpu", "t4"]) == 3
    out = capsys.readouterr().out
    # No negative KV cache: none, and by how much weights and activations overflow the budget.
    assert "GiB -" not in out and "-116.70" not in out
    assert "= KV cache                          none  (116.70 GiB short" in out
    assert "DOES NOT FIT: the weights alone exceed the budget" in out
    assert main(["kv-size", "--model", "llama-2-70b", "--gpu", "h100-sxm", "--tp", "8"]) == 0


def test_validate_refuses_a_max_model_len_the_pool_cannot_hold() -> None:
    scenario = {"model": "llama-3.2-1b", "replicas": [{"gpu": "rtx-3070"}]}
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario)
    ((field, rule),) = err.value.problems
    assert field == "replicas.0.engine.max_model_len"
    assert rule.startswith("one request of max_model_len 131,072 tokens needs 8,192 KV blocks")
    assert "at most 105,376 tokens fit" in rule and "llama-3.2-1b's own limit applies" in rule
    ok = {"model": "llama-3.2-1b", "replicas": [{"gpu": "rtx-3070", "engine": {"max_model_len": 65536}}]}
    load_scenario(ok)
    # A tiny pool set by num_gpu_blocks_override is allowed (requests too long are rejected at arrival).
    load_scenario({"model": "llama-3-8b", "replicas": [{"engine": {"num_gpu_blocks_override": 10}}]})


def test_validate_counts_a_chunk_beside_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    # Mistral-7B on an L4: the window needs 257 blocks, but a 8,192-token chunk beside it
    # cdiv(4,095 + 8,192, 16) + 1 = 769 (vLLM's SlidingWindowSpec.max_memory_usage_bytes).
    from kvsim.model.kv_sizing import blocks_per_sequence

    assert blocks_per_sequence(resolve_model("mistral-7b"), 32768, 16, chunk_tokens=8192) == 769
