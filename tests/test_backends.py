"""Per-backend engine defaults (kvsim.backends.defaults): each knob, each backend, by version and GPU;
explicit knobs win; the resolved values are what the scenario shows and reloads with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import kvsim
from kvsim.backends.defaults import (
    BACKENDS,
    DEFAULTED_KNOBS,
    DEFAULTS_TABLE,
    KNOB_NAMES,
    LEGACY_VLLM,
    TABLE_VERSIONS,
    parse_version,
    resolve_engine,
    sglang_max_running_requests,
    table_version,
)
from kvsim.errors import ScenarioError
from kvsim.model.kv_sizing import GIB, weight_bytes
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.scenario.loading import dump_scenario, load_scenario, scenario_data
from kvsim.scenario.resolved import resolve_plan
from kvsim.scenario.schema import EngineConfig

ROOT = Path(__file__).resolve().parents[1]
H100, H200, B200, A100, L40S = (resolve_gpu(n) for n in ("h100-sxm", "h200", "b200", "a100-80gb", "l40s"))
KNOBS = (
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "gpu_memory_utilization",
    "enable_chunked_prefill",
)


def knobs(engine: EngineConfig) -> dict[str, Any]:
    return {k: getattr(engine, k) for k in (*KNOBS, "enable_prefix_caching", "long_prefill_token_threshold")}


def resolved(gpu: Any = None, tp: int = 1, model: str | None = None, **engine: Any) -> dict[str, Any]:
    spec = resolve_model(model) if model else None
    return knobs(resolve_engine(EngineConfig(**engine), gpu=gpu, tp=tp, model=spec))


# -- vLLM ---------------------------------------------------------------------------------


def test_vllm_without_a_version_keeps_kvsims_defaults_everywhere() -> None:
    for gpu in (None, H100, B200, A100, L40S):
        got = resolve_engine(EngineConfig(), gpu=gpu, tp=2, model=resolve_model("llama-3.1-8b"))
        assert {k: getattr(got, k) for k in DEFAULTED_KNOBS} == LEGACY_VLLM
    assert {k: EngineConfig.model_fields[k].default for k in DEFAULTED_KNOBS} == LEGACY_VLLM


@pytest.mark.parametrize(
    ("version", "gpu", "expected"),
    [
        # 0.32.0: 16,384 tokens from 160 GiB (B200), 8,192 from 70 GiB unless an A100, else 2,048
        ("0.32.0", H100, (16, 8192, 1024, 0.92, True)),
        ("0.32.0", H200, (16, 8192, 1024, 0.92, True)),
        ("0.32.0", B200, (16, 16384, 1024, 0.92, True)),
        ("0.32.0", A100, (16, 2048, 256, 0.92, True)),
        ("0.32.0", L40S, (16, 2048, 256, 0.92, True)),
        ("0.24.0", B200, (16, 8192, 1024, 0.92, True)),  # the 160 GiB class is 0.29.0's
        ("0.19.0", H100, (16, 8192, 1024, 0.9, True)),  # 0.92 is 0.20.0's
        ("0.11.2", H100, (16, 8192, 1024, 0.9, True)),
        ("0.9.0", A100, (16, 2048, 256, 0.9, True)),  # the A100 exception (vLLM PR #17885)
        ("0.8.5", A100, (16, 8192, 1024, 0.9, True)),  # before it
        ("0.32.0", None, (16, 2048, 256, 0.92, True)),  # no GPU known: vLLM's fallback
    ],
)
def test_vllm_defaults_by_version_and_gpu(version: str, gpu: Any, expected: tuple[Any, ...]) -> None:
    got = resolved(gpu, backend="vllm", backend_version=version)
    assert tuple(got[k] for k in KNOBS) == expected
    assert got["enable_prefix_caching"] is True and got["long_prefill_token_threshold"] == 0


def test_vllm_clamps_to_max_model_len_and_without_chunking() -> None:
    tiny = resolved(H100, backend="vllm", backend_version="0.32.0", max_model_len=4)
    assert (tiny["max_num_batched_tokens"], tiny["max_num_seqs"]) == (4 * 1024, 1024)
    old = resolved(H100, backend="vllm", backend_version="0.11.0", max_model_len=4)  # no clamp yet
    assert old["max_num_batched_tokens"] == 8192
    whole = resolved(
        H100, model="llama-3.1-8b", backend="vllm", backend_version="0.32.0", enable_chunked_prefill=False
    )
    assert whole["max_num_batched_tokens"] == 131072  # a whole prompt per step: max_model_len


# -- SGLang -------------------------------------------------------------------------------


def test_sglang_defaults_on_an_h100() -> None:
    got = resolve_engine(EngineConfig(backend="sglang", backend_version="0.5.8.post1"), gpu=H100, tp=1)
    # mem_fraction_static = (81,920 - (512 + 1.5 x 8,192 + 2 x 256 + 128)) / 81,920 MiB
    assert knobs(got) == {
        "block_size": 1,
        "max_num_batched_tokens": 8192,
        "max_num_seqs": 2048,
        "gpu_memory_utilization": round((81920 - 13440) / 81920, 3),
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "long_prefill_token_threshold": 0,
    }
    assert got.activation_reserve_gib == 0.0


@pytest.mark.parametrize(
    ("version", "gpu", "tp", "chunk", "fraction"),
    [
        ("0.5.9", H100, 8, 8192, round((81920 - (512 + 12288 + 1024 + 1024)) / 81920, 3)),
        ("0.5.9", B200, 1, 16384, round((184320 - (512 + 24576 + 1024 + 128)) / 184320, 3)),
        ("0.5.9", L40S, 1, 4096, round((49152 - (512 + 6144 + 64 + 128)) / 49152, 3)),
        ("0.5.1", H100, 1, 8192, round((81920 - 10240) / 81920, 3)),  # (9.5 + tp / 2) GiB
        ("0.5.1", H200, 2, 8192, round((144384 - 13 * 1024) / 144384, 3)),  # (12 + tp / 2) GiB
        ("0.5.1", B200, 8, 16384, round((184320 - 32768) / 184320, 3)),
        # 0.5.10: piecewise CUDA graphs, 8 MiB for each of the 58 capture sizes up to 8,192
        ("0.5.10.post1", H100, 1, 8192, round((81920 - 13440 - 58 * 8) / 81920, 3)),
        ("0.5.3", resolve_gpu("rtx-4090"), 1, 2048, round((24576 - (512 + 3072 + 32 + 128)) / 24576, 3)),
    ],
)
def test_sglang_memory_defaults(version: str, gpu: Any, tp: int, chunk: int, fraction: float) -> None:
    got = resolved(gpu, tp, backend="sglang", backend_version=version)
    assert (got["max_num_batched_tokens"], got["gpu_memory_utilization"]) == (chunk, fraction)


def test_sglang_page_size_and_pool_sized_running_requests() -> None:
    assert resolved(B200, backend="sglang")["block_size"] == 64  # trtllm_mha / trtllm_mla
    assert resolved(resolve_gpu("rtx-pro-6000"), backend="sglang")["block_size"] == 1  # sm 120: flashinfer
    assert sglang_max_running_requests(23_985, 40_960) == 2048  # small pools: the 2,048 floor
    assert sglang_max_running_requests(400_000, 4096) == 4096  # the 4,096 ceiling
    assert sglang_max_running_requests(3000, 4096) == 1500  # at most half the pool's tokens
    scenario = load_scenario(
        {
            "model": "qwen3-32b",
            "replicas": [{"gpu": "h100-sxm", "engine": {"backend": "sglang", "max_model_len": 4096}}],
        }
    )
    group = resolve_plan(scenario).groups[0]
    pool = group.capacity.num_blocks * group.capacity.block_size
    assert group.engine.max_num_seqs == sglang_max_running_requests(pool, 4096)


def test_sglang_memory_fraction_follows_an_explicit_chunk_size() -> None:
    got = resolved(H100, backend="sglang", backend_version="0.5.9", max_num_batched_tokens=16384)
    assert got["max_num_batched_tokens"] == 16384
    assert got["gpu_memory_utilization"] == round((81920 - (512 + 24576 + 512 + 128)) / 81920, 3)


# -- TensorRT-LLM -------------------------------------------------------------------------


def test_trtllm_defaults() -> None:
    for gpu in (None, H100, B200):
        assert resolved(gpu, backend="trtllm", backend_version="1.2.0rc6") == {
            "block_size": 32,
            "max_num_batched_tokens": 8192,
            "max_num_seqs": 2048,
            "gpu_memory_utilization": 0.9,
            "enable_chunked_prefill": False,
            "enable_prefix_caching": True,
            "long_prefill_token_threshold": 0,
        }


# -- versions, explicit knobs, dumps ------------------------------------------------------


def test_versions_parse_and_old_ones_are_refused() -> None:
    assert parse_version("0.5.8.post1") == (0, 5, 8)
    assert parse_version("1.2.0rc6") == (1, 2, 0)
    assert parse_version("v0.11.2") == (0, 11, 2)
    assert table_version("sglang", "0.5.8.post1") == "0.5.5"
    assert table_version("vllm", "0.40.0") == TABLE_VERSIONS["vllm"][-1]
    assert table_version("vllm", None) is None and table_version("trtllm", None) == "1.0.0"
    with pytest.raises(ScenarioError, match="backend_version 'nightly' is not a release number"):
        load_scenario({"replicas": [{"engine": {"backend": "sglang", "backend_version": "nightly"}}]})
    with pytest.raises(ScenarioError, match=r"vllm 0\.6\.3 is older than the first version kvsim tabulates"):
        load_scenario({"replicas": [{"engine": {"backend_version": "0.6.3"}}]})


def test_set_knobs_win_and_the_dump_shows_the_resolved_ones() -> None:
    scenario = load_scenario(
        {"replicas": [{"gpu": "h100-sxm", "engine": {"backend": "trtllm", "block_size": 64}}]}
    )
    engine = scenario.replicas[0].engine
    assert engine.block_size == 64 and engine.max_num_seqs == 2048
    assert engine.model_fields_set == {"backend", "block_size"}
    dumped = yaml.safe_load(dump_scenario(scenario))["replicas"][0]["engine"]
    assert dumped["block_size"] == 64 and dumped["max_num_batched_tokens"] == 8192
    assert dumped["enable_chunked_prefill"] is False and dumped["backend"] == "trtllm"
    again = load_scenario(yaml.safe_load(dump_scenario(scenario)))
    assert again.replicas[0].engine == engine  # the saved scenario reloads to the same knobs


def test_overrides_rederive_defaults_but_keep_set_knobs() -> None:
    base = {"replicas": [{"gpu": "h100-sxm", "engine": {"block_size": 32}}]}
    switched = load_scenario(base, ["replicas.0.engine.backend=sglang"])
    engine = switched.replicas[0].engine
    assert engine.block_size == 32  # set: kept
    # SGLang's (no backend_version: 0.5.10, whose piecewise CUDA graphs reserve 58 x 8 MiB more)
    assert engine.max_num_seqs != 256 and engine.gpu_memory_utilization == round(
        (81920 - 13440 - 464) / 81920, 3
    )
    bigger = load_scenario(load_scenario(base, ["replicas.0.engine.backend=sglang"]), ["replicas.0.gpu=b200"])
    assert bigger.replicas[0].engine.max_num_batched_tokens == 16384  # re-derived for the B200
    data = scenario_data(switched)
    assert (
        "max_num_seqs" not in data["replicas"][0]["engine"]
        and data["replicas"][0]["engine"]["block_size"] == 32
    )


#: Shipped scenarios about one engine's own behaviour, which name that engine.
ENGINE_SCENARIOS = {"attention_dp_balance.yaml": "trtllm"}  # attention-DP balancing is TensorRT-LLM's


def test_every_shipped_scenario_keeps_kvsims_vllm_defaults() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if path.name in ENGINE_SCENARIOS:
            assert {g["engine"]["backend"] for g in raw["replicas"]} == {ENGINE_SCENARIOS[path.name]}
            continue
        for group in raw.get("replicas") or [{}]:
            engine = group.get("engine") or {}
            assert "backend" not in engine and "backend_version" not in engine, path.name
            resolved_engine = resolve_engine(EngineConfig(**engine), gpu=H100, tp=1)
            for knob in DEFAULTED_KNOBS:
                assert getattr(resolved_engine, knob) == engine.get(knob, LEGACY_VLLM[knob]), (
                    path.name,
                    knob,
                )


# -- memory rules -------------------------------------------------------------------------


def test_memory_rule_per_backend() -> None:
    model = resolve_model("qwen3-32b")
    weights = weight_bytes(model)
    sgl = resolve_plan(
        load_scenario(
            {"model": "qwen3-32b", "replicas": [{"gpu": "h100-sxm", "engine": {"backend": "sglang"}}]}
        )
    ).groups[0]
    # SGLang: weights + KV = memory x mem_fraction_static; nothing else reserved
    assert sgl.capacity.kv_bytes_per_shard == pytest.approx(
        80 * GIB * sgl.engine.gpu_memory_utilization - weights
    )
    trt = resolve_plan(
        load_scenario(
            {"model": "qwen3-32b", "replicas": [{"gpu": "h100-sxm", "engine": {"backend": "trtllm"}}]}
        )
    ).groups[0]
    reserve = trt.capacity.activation_reserve_bytes
    # TensorRT-LLM: KV = free_gpu_memory_fraction x (memory - weights - activations)
    assert trt.capacity.kv_bytes_per_shard == pytest.approx(0.9 * (80 * GIB - weights - reserve))
    assert trt.capacity.budget_bytes == pytest.approx(80 * GIB - 0.1 * (80 * GIB - weights - reserve))


def test_qwen3_32b_bf16_on_one_h100_runs_on_sglang_and_trtllm_but_not_vllm() -> None:
    """The issue's case: SGLang served it; vLLM refuses its 40,960-token context on one H100."""
    sglang = {"backend": "sglang", "backend_version": "0.5.8.post1"}  # the silicon rows' version
    scenario = load_scenario({"model": "qwen3-32b", "replicas": [{"gpu": "h100-sxm", "engine": sglang}]})
    group = resolve_plan(scenario).groups[0]
    assert 2560 < group.max_model_len < 40960  # capped to the pool (23,985 tokens), as SGLang does
    assert group.max_model_len <= group.capacity.num_tokens
    trt = load_scenario(
        {"model": "qwen3-32b", "replicas": [{"gpu": "h100-sxm", "engine": {"backend": "trtllm"}}]}
    )
    assert resolve_plan(trt).groups[0].max_model_len == 40960  # 0.9 of what is left holds it whole
    with pytest.raises(
        ScenarioError, match="one request of max_model_len 40,960 tokens needs 2,560 KV blocks"
    ):
        load_scenario({"model": "qwen3-32b", "replicas": [{"gpu": "h100-sxm"}]})
    fine = load_scenario(
        {"model": "qwen3-32b", "replicas": [{"gpu": "h100-sxm", "engine": {"max_model_len": 8192}}]}
    )
    assert resolve_plan(fine).groups[0].max_model_len == 8192


def test_a_run_with_each_backend() -> None:
    for backend in BACKENDS:
        result = kvsim.run(
            {
                "model": "qwen3-8b",
                "replicas": [{"gpu": "h100-sxm", "engine": {"backend": backend}}],
                "workload": {"num_requests": 20},
            }
        )
        assert result.summary["num_finished"] == 20, backend


# -- the table ----------------------------------------------------------------------------


def test_the_table_covers_every_knob_of_every_backend_and_the_docs_show_it() -> None:
    docs = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    for backend in BACKENDS:
        covered = {k.strip() for r in DEFAULTS_TABLE if r.backend == backend for k in r.knob.split(",")}
        assert covered >= set(DEFAULTED_KNOBS), (backend, set(DEFAULTED_KNOBS) - covered)
        for knob in DEFAULTED_KNOBS:
            assert KNOB_NAMES[knob][backend]
    for rule in DEFAULTS_TABLE:
        assert rule.source and rule.versions
        assert f"| {rule.backend} | {rule.knob} | {rule.versions} |" in docs, rule


def test_fit_and_kv_size_take_a_backend(capsys: pytest.CaptureFixture[str]) -> None:
    from kvsim.cli import main

    args = ["--model", "Qwen/Qwen3-32B", "--gpu", "h100_sxm", "--json"]
    fit = [*args, "--context-tokens", "2560", "--batch", "8"]
    assert main(["fit", *fit, "--backend", "sglang", "--backend-version", "0.5.8.post1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["budget_bytes"] == pytest.approx(80 * GIB * 0.836) and out["activation_reserve_bytes"] == 0
    assert main(["kv-size", *args, "--backend", "trtllm"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["backend"], out["block_size"], out["max_num_seqs"]) == ("trtllm", 32, 2048)
    free = 80 * GIB - out["weight_bytes_per_shard"] - out["activation_reserve_bytes"]
    assert out["kv_bytes_per_shard"] == pytest.approx(0.9 * free)
    assert main(["kv-size", *args]) == 0  # no backend: kvsim's vLLM defaults, as before
    out = json.loads(capsys.readouterr().out)
    assert (out["gpu_memory_utilization"], out["max_num_seqs"], out["block_size"]) == (0.9, 256, 16)
    assert main(["kv-size", *args, "--backend-version", "0.5"]) == 2
    assert "older than the first version kvsim tabulates" in capsys.readouterr().err
