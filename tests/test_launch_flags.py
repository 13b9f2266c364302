"""benchmarks/launch_flags.py: the engine flags InferenceX's launch scripts set, per row of
aiconfigurator-core's silicon_sample.csv (exact values for real rows, {} where unknown, and every
MoE single-node aggregated row either mapped to a script version or given a reason)."""

from __future__ import annotations

import csv
import glob
import gzip
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from launch_flags import (  # noqa: E402
    MODEL_KEY,
    NO_KV_DTYPE,
    Ctx,
    _trt_tokens,
    describe,
    launch_flags,
    launch_kv_cache_dtype,
    resolve,
)


def _sample_csv() -> str | None:
    try:
        import aiconfigurator_core
    except ImportError:
        return None
    found = glob.glob(os.path.join(os.path.dirname(aiconfigurator_core.__file__), "**", "silicon_sample.csv"),
                      recursive=True)  # fmt: skip
    return found[0] if found else None


@pytest.fixture(scope="module")
def data() -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    path = _sample_csv()
    if path is None:
        pytest.skip("aiconfigurator-core (silicon_sample.csv) is not installed")
    with open(path, newline="") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    with gzip.open(ROOT / "benchmarks" / "results" / "silicon_harness.csv.gz", "rt", newline="") as f:
        harness = {r["id"]: r for r in csv.DictReader(f)}
    return rows, harness


def flags(data, rid: str) -> dict:
    rows, harness = data
    return launch_flags(rows[rid], harness.get(rid, {}))


OFF = {"enable_prefix_caching": False}

#: Real rows, with the script version each ran (see launch_flags.VERSIONS) and its exact flags.
CASES = {
    # SGLang, dsr1_fp8_b200_docker.sh at d8fe8f73e (2025-11-18 run): C 4 < 16 -> recv interval 10 ...
    "dsr1_b200_sglang_fp8_agg_1024x8192_c4_cfg199": {
        "max_num_seqs": 128, "max_num_batched_tokens": 32768, "gpu_memory_utilization": 0.82, **OFF,
        "scheduler_recv_interval": 10},
    # ... and C 64 >= 16 -> 30 (the CONC branch).
    "dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg199": {
        "max_num_seqs": 128, "max_num_batched_tokens": 32768, "gpu_memory_utilization": 0.82, **OFF,
        "scheduler_recv_interval": 30},
    # SGLang, dsr1_fp8_h200.sh at 41aff0afc: 512 running requests at 1k/1k, no recv interval.
    "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81": {
        "max_num_seqs": 512, "max_num_batched_tokens": 32768, "gpu_memory_utilization": 0.82, **OFF},
    # SGLang, qwen3.5_fp8_b300.sh at c0f62a2ef: --max-running-requests $CONC, recv interval 10.
    "qwen3_5_b300_sglang_fp8_agg_8192x1024_c4_cfg716": {
        "max_num_seqs": 4, "max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.8, **OFF,
        "scheduler_recv_interval": 10},
    # TensorRT-LLM before the flag change: dsr1_fp8_b200_trt_slurm.sh at 9596d23d7 (2025-11-02):
    # MAX_NUM_TOKENS=(16+1024+127)/64*64 = 1152, no 8192 floor, no batch waiting.
    "dsr1_b200_trtllm_fp8_agg_1024x1024_c16_cfg75": {
        "max_num_batched_tokens": 1152, "gpu_memory_utilization": 0.8, **OFF},
    # ... and after: dsr1_fp8_b200_trt.sh at ec7bafaae (2026-01-29): floor 8192, and at 1k/1k
    # C >= 64 DELAY_BATCHING adds batch_wait_timeout_iters 40 / batch_wait_max_tokens_ratio 0.8.
    "dsr1_b200_trtllm_fp8_agg_1024x1024_c64_cfg75": {
        "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.8, **OFF,
        "batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8},
    # TensorRT-LLM with attention DP: dsr1_fp4_b200_trt.sh at 6eecc0e66 writes attention_dp_config
    # batching_wait_iters 0, enable_balance, timeout_iters 60 ...
    "dsr1_b200_trtllm_fp4_agg_1024x1024_c256_cfg191": {
        "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.8, **OFF,
        "attention_dp_balance": {"timeout_iters": 60, "batching_wait_iters": 0}},
    # ... gptoss_fp4_b200_trt.sh at b30c3398a enable_balance alone (TensorRT-LLM's defaults).
    "2026_04_06_gpt_oss_120b_b200_sxm_trtllm_fp4_agg_1024x1024_c256_tp2_ep2_1741": {
        "max_num_batched_tokens": 20000, "gpu_memory_utilization": 0.85, **OFF, "max_num_seqs": 512,
        "attention_dp_balance": {}},
    # TensorRT-LLM, gptoss_fp4_h200_trt_slurm.sh at d22bf9ca9: --max_batch_size $CONC, 20000 tokens.
    "2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_1024x8192_c64_tp1_ep1_153": {
        "max_num_batched_tokens": 20000, "gpu_memory_utilization": 0.85, **OFF, "max_num_seqs": 64},
    # vLLM, minimaxm2.5_fp8_b300.sh at 340d7854c: --max-num-batched-tokens $((ISL * 2)),
    # --max-cudagraph-capture-size 2048.
    "minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733": {
        "max_num_batched_tokens": 16384, "gpu_memory_utilization": 0.9, **OFF, "cuda_graph_max_size": 2048},
    # vLLM, minimaxm2.5_fp8_h200.sh before --no-enable-prefix-caching (1d5cae141, 2026-03-27) ...
    "2026_03_25_minimax_m2_5_h200_sxm_vllm_fp8_agg_1024x1024_c32_tp8_0_ep1_0_216": {
        "gpu_memory_utilization": 0.95},
    # ... and after (626932a11, measured 2026-03-28).
    "minimaxm2_5_h200_vllm_fp8_agg_8192x1024_c8_cfg637": {"gpu_memory_utilization": 0.95, **OFF},
    # vLLM, kimik2.5_fp4_b200.sh at 6c3acebfa: --max-num-seqs $CONC.
    "kimik2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg636": {
        "max_num_seqs": 4, "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.9, **OFF,
        "cuda_graph_max_size": 2048},
    # wip=True run from PR #947's branch (beb6a6b18), the row's image in its config.
    "2026_03_25_minimax_m2_5_b200_sxm_vllm_fp8_agg_1024x1024_c16_tp2_0_ep1_0_61": {
        "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.9, **OFF, "cuda_graph_max_size": 2048},
}  # fmt: skip


@pytest.mark.parametrize("rid", sorted(CASES))
def test_real_rows(data, rid: str) -> None:
    assert flags(data, rid) == CASES[rid]


@pytest.mark.parametrize(
    "rid,reason",
    [
        ("2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43", "Dynamo"),
        ("dsr1_gb200_trtllm_fp8_disagg_1024x8192_c2048_cfg375", "not InferenceX single-node"),
        ("2026_03_25_glm_5_b300_sxm_sglang_fp8_agg_1024x1024_c128_tp8_0_ep1_0_51", "wip=True"),
    ],
)
def test_unknown_rows_are_empty(data, rid: str, reason: str) -> None:
    rows, harness = data
    assert flags(data, rid) == {}
    assert reason in describe(rows[rid], harness.get(rid, {}))


def test_dense_and_unknown_rows_are_empty(data) -> None:
    rows, harness = data
    dense = [r for r in rows.values() if "Llama-3.1-70B" in r["model_path"]]
    assert dense and all(launch_flags(r, harness.get(r["id"], {})) == {} for r in dense)
    some = rows["dsr1_b200_sglang_fp8_agg_1024x1024_c64_cfg199"]
    assert launch_flags(some, {}) == {}  # no harness -> unknown
    assert launch_flags(dict(some, backend="vllm"), harness[some["id"]]) == {}  # no dsr1 vLLM script
    assert launch_flags(some, dict(harness[some["id"]], measured="")) != {}  # date from the source
    assert launch_flags(dict(some, silicon_data_source="x"), dict(harness[some["id"]], measured="")) == {}
    assert launch_flags(dict(some, mode="disagg"), harness[some["id"]]) == {}


def test_trt_token_arithmetic() -> None:
    c = Ctx(isl=8192, osl=1024, tp=8, ep=1, dp_attention=False, conc=256)
    assert _trt_tokens(c) == (256 + 8192 + 127) // 64 * 64 == 8512
    assert _trt_tokens(Ctx(1024, 1024, 8, 1, False, 4), 8192) == 8192


def test_every_moe_single_node_agg_row_is_mapped_or_explained(data) -> None:
    rows, harness = data
    mapped: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for r in rows.values():
        h = harness.get(r["id"], {})
        if r["model_path"] not in MODEL_KEY or r["mode"] != "agg":
            continue
        if h.get("harness") not in ("inferencex-single-node", "inferencemax-single-node"):
            continue
        if h.get("copy_of"):  # a gap-analysis copy runs as its InferenceX twin (silicon.as_run)
            assert h["copy_of"] in rows
            continue
        version, why = resolve(r, h)
        if version is None:
            assert launch_flags(r, h) == {}
            kind = (
                "GB200"
                if "Dynamo" in why
                else "wip"
                if "wip=True" in why
                else "cap"
                if "running cap" in why
                else why
            )
            reasons[kind] += 1
        else:
            assert launch_flags(r, h), describe(r, h)  # a mapped row has flags
            assert version.commit in describe(r, h)
            mapped[f"{version.script}"] += 1
    assert sum(mapped.values()) == 2084
    # cap: 18 rows above dsr1_fp8_b200's / qwen3.5_fp8_b200's --max-running-requests 128, which
    # those scripts set "as the maximum concurrency" their configs ran (64 and 128 clients).
    assert reasons == {"GB200": 55, "wip": 60, "cap": 18}


def test_the_kv_cache_is_the_one_the_launch_ran_with(data) -> None:
    # A script that passes an fp8 KV dtype gives fp8; one that passes none leaves it to the
    # checkpoint: the model's 16 bits for DeepSeek's, MiniMax's and OpenAI's, fp8 for NVIDIA's
    # NVFP4 exports (Kimi-K2.5 fp4 on B200, whose script passed none until 6c3acebfa).
    import silicon

    rows, harness = data
    first: dict[tuple[str, str], tuple[dict[str, str], dict[str, str]]] = {}
    for r in rows.values():
        h = harness.get(r["id"], {})
        version, _ = resolve(r, h) if r["mode"] == "agg" and not h.get("copy_of") else (None, "")
        if version is not None and launch_flags(r, h):
            first.setdefault((version.script, version.commit), (r, h))
    expected = {
        ("dsr1_fp8_h200", "41aff0afc"): "auto",  # SGLang, no --kv-cache-dtype
        ("dsr1_fp8_b200", "64c20b6b5"): "fp8",  # --kv-cache-dtype fp8_e4m3
        ("gptoss_fp4_h200_trt", "e28c038f8"): "auto",  # kv_cache_config: dtype: auto
        ("gptoss_fp4_b200", "d2c2acb19"): "fp8",  # vLLM config kv-cache-dtype: fp8
        ("minimaxm2.5_fp8_h200", "626932a11"): "auto",
        ("kimik2.5_fp4_b200", "79a42e20a"): "fp8",  # none passed; nvidia/Kimi-K2.5-NVFP4's own
    }
    for key, kv in expected.items():
        row, h = first[key]
        assert launch_kv_cache_dtype(row, h) == kv, key
        assert silicon.scenario_for(row, h, {})["replicas"][0]["engine"]["kv_cache_dtype"] == kv, key
        assert f"KV cache {kv}" in describe(row, h)
    assert set(first) >= NO_KV_DTYPE  # every version listed ran rows
    assert launch_kv_cache_dtype(AGG_UNKNOWN, {}) is None


AGG_UNKNOWN = {
    "model_path": "meta-llama/Llama-3.1-8B",
    "backend": "vllm",
    "system": "h200_sxm",
    "mode": "agg",
}


def test_a_scripts_cuda_graph_ceiling_prices_the_steps_not_the_scheduler(data) -> None:
    """kimik2.5_fp4_b200.sh at 6c3acebfa passes --max-cudagraph-capture-size 2048: the row's
    scenario gives it to the kernels cost model (which vLLM steps replay a graph), not to the
    engine; minimaxm2.5_fp8_h200.sh sets none and keeps vLLM's default."""
    import silicon

    rows, harness = data
    rid = "kimik2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg636"
    replica = silicon.scenario_for(rows[rid], harness[rid], {})["replicas"][0]
    assert replica["cost_model"] == {"kind": "kernels", "cuda_graph_max_size": 2048}
    assert "cuda_graph_max_size" not in replica["engine"] and replica["engine"]["max_num_seqs"] == 4
    rid = "minimaxm2_5_h200_vllm_fp8_agg_8192x1024_c8_cfg637"
    cost = silicon.scenario_for(rows[rid], harness[rid], {})["replicas"][0]["cost_model"]
    assert cost == {"kind": "kernels"}
