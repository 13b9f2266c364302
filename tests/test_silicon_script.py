"""benchmarks/silicon.py on a tiny CSV in silicon_sample.csv's format: the per-row JSON
(issue 20: `{"id", "status", "mean_ttft_ms", "mean_tpot_ms"}`), the reasons a row is
unsupported, the error tables, and the fitting rule (h200_sxm rows only)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark

from kvsim.cost.tables import package_tables_root

ROOT = Path(__file__).resolve().parent.parent

needs_tables = pytest.mark.skipif(
    package_tables_root() is None, reason="aiconfigurator-core is not installed (pip install -e '.[kernels]')"
)


silicon = load_benchmark("silicon")

COLUMNS = ["id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision",
           "mode", "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size",
           "attention_dp_size", "moe_tp_size", "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms",
           *(f"{stage}_{field}" for stage in ("prefill", "decode")
             for field in ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
                           "moe_ep_size"))]  # fmt: skip


def _row(id: str, **over: str) -> dict[str, str]:
    row = dict.fromkeys(COLUMNS, "")
    row.update(
        id=id, backend="vllm", backend_version="0.12.0", model_path="meta-llama/Llama-3.1-8B-Instruct",
        system="h200_sxm", precision="bf16", mode="agg", isl="256", osl="8", batch_size="2",
        tp_size="1", pp_size="1", silicon_ttft_ms="20", silicon_tpot_ms="7",
    )  # fmt: skip
    row.update(over)
    return row


def _disagg(id: str, **over: str) -> dict[str, str]:
    """A small disaggregated row: 1 prefill worker (tp 1) and 2 decode workers (tp 2), 6 clients."""
    row = _row(id, mode="disagg", tp_size="", batch_size="", pp_size="",
               silicon_data_source="db-dump; silicon_concurrency=6; vllm/vllm-openai:v0.12.0",
               prefill_num_workers="1", prefill_tp_size="1", prefill_batch_size="1", prefill_pp_size="1",
               decode_num_workers="2", decode_tp_size="2", decode_batch_size="3", decode_pp_size="1")  # fmt: skip
    row.update(over)
    return row


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_rows_kvsim_does_not_model_say_why_without_running() -> None:
    cases = {
        "no prefill_num_workers": _row("d", mode="disagg"),
        "pipeline parallelism": _disagg("dp", prefill_pp_size="2"),
        "has no concurrency": _disagg("dc", silicon_data_source=""),
        "mode 'afd'": _row("f", mode="afd"),
        "pipeline": _row("p", pp_size="2"),
        "Qwen3-Next-80B-A3B": _row("m", model_path="Qwen/Qwen3-Next-80B-A3B-Instruct"),  # no preset
        "weight precision 'int2'": _row("w", gemm_quant_mode="int2"),
        "no concurrency": _row("c", batch_size=""),
    }
    for why, row in cases.items():
        with pytest.raises(ValueError, match=r"^unsupported: ") as info:
            silicon.scenario_for(row, None, {})
        assert why in str(info.value), (why, str(info.value))


def test_deepseek_mtp_runs_draft_as_their_launch_scripts_did() -> None:
    """InferenceX's DeepSeek-R1 TensorRT-LLM B200 runs on the 1.2.0rc6.post3 image ran MTP
    speculative decoding (dsr1_fp8_b200_trt_mtp.sh: 3 draft tokens, 1 with attention DP, at
    `MTP_ACCEPTANCE`); the .post2 runs and other harnesses run without."""
    harness = {"harness": "inferencex-single-node", "concurrency": "4"}
    row = _row("mtp", backend="trtllm", backend_version="1.2.0rc6.post3", model_path="deepseek-ai/DeepSeek-R1",
               system="b200_sxm", tp_size="8", moe_tp_size="8", moe_ep_size="1", gemm_quant_mode="fp8")  # fmt: skip
    engine = silicon.scenario_for(row, harness, {})["replicas"][0]["engine"]
    assert engine["speculative_config"] == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "acceptance_rate": silicon.MTP_ACCEPTANCE,
    }
    dp = {**row, "tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1", "moe_ep_size": "8"}
    assert (
        silicon.scenario_for(dp, harness, {})["replicas"][0]["engine"]["speculative_config"][
            "num_speculative_tokens"
        ]
        == 1
    )
    assert silicon.mtp_run(row, harness)
    assert not silicon.mtp_run({**row, "backend_version": "1.2.0rc6.post2"}, harness)
    assert not silicon.mtp_run(row, {"harness": "inferencemax-single-node"})
    assert not silicon.mtp_run({**row, "system": "h200_sxm"}, harness)
    plain = silicon.scenario_for({**row, "backend_version": "1.2.0rc6.post2"}, harness, {})
    assert "speculative_config" not in plain["replicas"][0]["engine"]
    # Each engine's script: SGLang's EAGLE over MTP 2 steps for DeepSeek-R1, 3 for Qwen3.5;
    # an engine and model no transcribed script ran: refused by name.
    assert silicon.mtp_draft_tokens({**row, "backend": "sglang"}) == 2
    assert silicon.mtp_draft_tokens({**row, "backend": "sglang", "model_path": "Qwen/Qwen3.5-397B-A17B"}) == 3
    assert silicon.mtp_draft_tokens({**row, "backend": "vllm"}) is None
    mtp = {**harness, "spec_decoding": "mtp"}
    with pytest.raises(ValueError, match=r"^unsupported: an MTP speculative-decoding run whose draft length"):
        silicon.scenario_for({**row, "backend": "vllm", "backend_version": "0.15.1"}, mtp, {})


def test_a_rows_parallel_layout_becomes_the_groups() -> None:
    """attention_dp_size, moe_tp_size and moe_ep_size are the replica group's attention_dp,
    moe_tp and moe_ep (issue 22 item 2); a dense row's attention DP is data-parallel ranks."""
    row = _row("ep", backend="trtllm", backend_version="1.2.0rc5", model_path="deepseek-ai/DeepSeek-R1",
               tp_size="1", attention_dp_size="8", moe_tp_size="1", moe_ep_size="8")  # fmt: skip
    group = silicon.scenario_for(row, None, {})["replicas"][0]
    assert (group["tp"], group["attention_dp"], group["moe_tp"], group["moe_ep"]) == (1, 8, 1, 8)
    mixed = _row("tp", model_path="openai/gpt-oss-120b", tp_size="4", moe_tp_size="2", moe_ep_size="2")
    group = silicon.scenario_for(mixed, None, {})["replicas"][0]
    assert (group["tp"], group["attention_dp"], group["moe_tp"], group["moe_ep"]) == (4, 1, 2, 2)
    # The 2026_04_06 rows whose columns count X x Y GPUs for a launch their id names tpX_epY
    # run on X GPUs, as the 2026_03_25 rows they repeat measurement for measurement.
    for cols, want in (
        ({"tp_size": "64"}, (8, 1, 1, 8)),
        ({"tp_size": "1", "attention_dp_size": "64"}, (1, 8, 1, 8)),
    ):
        dup = _row("2026_04_06_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x1024_c64_tp8_ep8_953",
                   model_path="deepseek-ai/DeepSeek-R1", moe_tp_size="8", moe_ep_size="8", **cols)  # fmt: skip
        group = silicon.scenario_for(dup, None, {})["replicas"][0]
        assert (group["tp"], group["attention_dp"], group["moe_tp"], group["moe_ep"]) == want
    # The database dump's rows carry the defect without naming the launch: on an 8-GPU node
    # X x X > 8 GPUs run as tpX_epX would; tp and DP both above 1 is vLLM's TP attention
    # with expert parallelism (its Kimi-K2.5 / MiniMax-M2.5 scripts), not attention DP.
    for cols, want in (
        ({"tp_size": "64", "moe_tp_size": "8", "moe_ep_size": "8"}, (8, 1, 1, 8)),
        ({"tp_size": "1", "attention_dp_size": "64", "moe_tp_size": "8", "moe_ep_size": "8"}, (1, 8, 1, 8)),
        ({"tp_size": "16", "moe_tp_size": "4", "moe_ep_size": "4"}, (4, 1, 1, 4)),
        ({"tp_size": "4", "attention_dp_size": "4", "moe_tp_size": "1", "moe_ep_size": "16"}, (4, 1, 1, 4)),
    ):
        dump = _row("dsr1_b200_sglang_fp4_agg_8192x1024_c64_cfg202", model_path="deepseek-ai/DeepSeek-R1",
                    system="b200_sxm", **cols)  # fmt: skip
        group = silicon.scenario_for(dump, None, {})["replicas"][0]
        assert (group["tp"], group["attention_dp"], group["moe_tp"], group["moe_ep"]) == want, cols
    # A rack system's rows may span nodes; a count that is no square is left as it is.
    rack = _row("dsr1_gb200_trtllm_fp4_agg_1024x1024_c64_cfg9", model_path="deepseek-ai/DeepSeek-R1",
                system="gb200", tp_size="16", moe_tp_size="1", moe_ep_size="16")  # fmt: skip
    assert silicon.parallel_layout(rack, True) == {"tp": 16, "attention_dp": 1, "moe_tp": 1, "moe_ep": 16}
    odd = _row("x_cfg3", system="h200_sxm", tp_size="32", moe_tp_size="4", moe_ep_size="8")
    assert silicon.parallel_layout(odd, True) == {"tp": 32, "attention_dp": 1, "moe_tp": 4, "moe_ep": 8}
    same = _row(
        "x_c64_tp8_ep8_9", model_path="deepseek-ai/DeepSeek-R1", tp_size="8", moe_ep_size="8", moe_tp_size="1"
    )
    group = silicon.scenario_for(same, None, {})["replicas"][0]
    assert (group["tp"], group["attention_dp"], group["moe_tp"], group["moe_ep"]) == (8, 1, 1, 8)
    dense = silicon.scenario_for(_row("dp", attention_dp_size="4"), None, {})["replicas"][0]
    assert dense["attention_dp"] == 4 and "moe_ep" not in dense
    # A layout whose experts do not span the instance's GPUs is refused by the scenario check.
    bad = _row("bad", model_path="openai/gpt-oss-120b", tp_size="4", moe_tp_size="2", moe_ep_size="4")
    status = silicon.simulate((bad, None, {}))["status"]
    assert status.startswith("unsupported: ") and "moe_tp x moe_ep = 2 x 4 = 8 must equal" in status, status


def test_rows_over_the_output_token_cap_are_refused_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row whose measured prompts ask for more output tokens than the cap is counted as
    refused and never simulated; at the cap it runs. The default refuses exactly the six rows
    of the every-eighth MoE sample that docs/validation.md counts as not run (168-671 million
    tokens; the next, 88 million, runs)."""
    import kvsim

    row = _row("small")
    asked = silicon.measured_output_tokens(silicon.scenario_for(row, None, {}))
    assert asked == silicon.scenario_for(row, None, {})["workload"]["num_prompts"] * 8
    assert silicon.simulate((row, None, {}), max_output_tokens=asked)["status"] == "ok"

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused row was simulated")

    monkeypatch.setattr(kvsim, "run", never)
    out = silicon.simulate((row, None, {}), max_output_tokens=asked - 1)
    assert out["status"] == f"unsupported: not run: {asked:,} output tokens, over --max-output-tokens"
    assert out["mean_ttft_ms"] is None and out["mean_tpot_ms"] is None
    assert 88_156_160 < silicon.MAX_OUTPUT_TOKENS < 167_772_160
    with pytest.raises(SystemExit):
        silicon.main(["--max-output-tokens", "0", "--results", "x.json"])


def test_a_row_that_runs_out_of_memory_is_lost_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a memory limit a MemoryError ends the row, not the whole run (and its results)."""
    import kvsim

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(kvsim, "run", exhausted)
    out = silicon.simulate((_row("big"), None, {}))
    assert out["status"] == "unsupported: MemoryError: the simulation ran out of memory"
    assert out["mean_ttft_ms"] is None


def test_requests_reach_attention_dp_ranks_as_each_engine_dispatches_them() -> None:
    """vLLM's and TensorRT-LLM's front ends give a new request to the least-loaded rank;
    SGLang's data-parallel controller deals them round robin, as to replicas without DP."""
    kinds = {}
    for backend, dp in (("vllm", "4"), ("trtllm", "8"), ("sglang", "8"), ("vllm", "1")):
        row = _row(f"{backend}{dp}", backend=backend, model_path="deepseek-ai/DeepSeek-R1",
                   tp_size="1" if dp != "1" else "8", attention_dp_size=dp, moe_tp_size="1",
                   moe_ep_size="8" if dp != "4" else "4")  # fmt: skip
        kinds[backend, dp] = silicon.scenario_for(row, None, {})["router"]["kind"]
    assert kinds == {
        ("vllm", "4"): "least_loaded",
        ("trtllm", "8"): "least_loaded",
        ("sglang", "8"): "round_robin",
        ("vllm", "1"): "round_robin",
    }


def test_moe_rows_run_at_their_checkpoints_precision() -> None:
    """aiconfigurator labels gpt-oss's MXFP4 experts "nvfp4" (on an H200, which has no FP4
    tensor cores) and block-scaled fp8 checkpoints "fp8": the preset's own precision is
    served. A label naming another precision quantizes the whole model, as for dense rows."""
    cases = [
        ("openai/gpt-oss-120b", "nvfp4", None),
        ("Qwen/Qwen3-235B-A22B-FP8", "fp8", None),
        ("moonshotai/Kimi-K2.5", "int4_wo", None),
        ("deepseek-ai/DeepSeek-R1", "fp8", None),
        ("Qwen/Qwen3-235B-A22B", "nvfp4", "nvfp4"),  # NVIDIA's export quantizes attention too
    ]
    for model_path, label, expected in cases:
        row = _row("m", model_path=model_path, gemm_quant_mode=label, moe_quant_mode=label, tp_size="8")
        scenario = silicon.scenario_for(row, None, {})
        assert scenario["replicas"][0]["engine"]["quantization"] == expected, model_path
    # The FP8 repository's alias carries its precision into the scenario (not the preset's bf16).
    row = _row("q", model_path="Qwen/Qwen3-235B-A22B-FP8", gemm_quant_mode="fp8", moe_quant_mode="fp8")
    model = silicon.scenario_for(row, None, {})["model"]
    assert model["weight_dtype"] == "fp8_block"
    # Qwen3.5's FP8 rows name the bf16 model: experts fp8_block, GEMMs "fp8" -> the block-scaled checkpoint.
    row = _row("q5", model_path="Qwen/Qwen3.5-397B-A17B", gemm_quant_mode="fp8", moe_quant_mode="fp8_block",
               tp_size="4", moe_tp_size="4", backend="sglang", backend_version="0.5.9")  # fmt: skip
    assert silicon.scenario_for(row, None, {})["replicas"][0]["engine"]["quantization"] == "fp8_block"


def test_an_nvfp4_row_serves_nvidias_export_with_its_own_precisions() -> None:
    """InferenceX's fp4 rows served NVIDIA's NVFP4 exports (nvidia/DeepSeek-R1-0528-FP4-V2,
    nvidia/Kimi-K2.5-NVFP4, ...), which quantize the routed experts and keep part of attention
    in 16 bits: the scenario's model is that export, unquantized further, aggregated and
    disaggregated alike. R1-0528-FP4-V2 quantizes o_proj, the dense layers and the shared
    experts too; Kimi-K2.5-NVFP4 the dense layer and shared experts; MiniMax-M2.5-NVFP4 has
    neither. InferenceMAX's DeepSeek-R1 rows named DeepSeek-V3 serve R1's export."""
    qkv_only = {"attention_o": "nvfp4", "dense_mlp": "nvfp4", "shared_experts": "nvfp4"}
    cases = (
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1", qkv_only),
        ("deepseek-ai/DeepSeek-V3", "deepseek-r1", qkv_only),
        ("moonshotai/Kimi-K2.5", "kimi-k2.5", {"dense_mlp": "nvfp4", "shared_experts": "nvfp4"}),
        ("MiniMaxAI/MiniMax-M2.5", "minimax-m2.5", {}),
    )
    for model_path, preset, modules in cases:
        row = _row("f", model_path=model_path, gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size="8",
                   precision="fp4", system="b200_sxm", backend="trtllm", backend_version="1.2.0rc6")  # fmt: skip
        for scenario in (
            silicon.scenario_for(row, None, {}),
            silicon.scenario_for(_disagg("d", **{k: v for k, v in row.items() if k in (
                "model_path", "gemm_quant_mode", "moe_quant_mode", "precision", "system", "backend",
                "backend_version")}, prefill_tp_size="8", decode_tp_size="8"), None, {}),
        ):  # fmt: skip
            model = scenario["model"]
            assert (model["name"], model["weight_dtype"], model["expert_weight_dtype"]) == (
                preset,
                "bf16",
                "nvfp4",
            )
            assert model["module_weight_dtypes"] == modules
            assert all(g["engine"]["quantization"] is None for g in scenario["replicas"])


def test_vllm_gpt_oss_on_b200_runs_its_experts_with_mxfp8_activations_as_launched() -> None:
    """SemiAnalysis' vLLM gpt-oss B200 scripts export VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1:
    those rows' MXFP4 experts take MXFP8 activations (priced from SGLang's table of the same
    FlashInfer kernel); H200 rows, TensorRT-LLM rows and other harnesses keep the defaults."""
    single = {"harness": "inferencex-single-node"}
    row = _row("g", model_path="openai/gpt-oss-120b", system="b200_sxm", gemm_quant_mode="nvfp4",
               moe_quant_mode="nvfp4", backend="vllm", backend_version="0.15.1")  # fmt: skip
    cost = silicon.scenario_for(row, single, {})["replicas"][0]["cost_model"]
    assert cost == {"kind": "kernels", "mxfp4_moe_activation": "mxfp8", "moe_tables_backend": "sglang"}
    for other, harness in (
        ({"system": "h200_sxm"}, single),
        ({"backend": "trtllm", "backend_version": "1.2.0rc2"}, single),
        ({}, {"harness": "nvidia-gap-analysis"}),
    ):
        cost = silicon.scenario_for({**row, **other}, harness, {})["replicas"][0]["cost_model"]
        assert cost == {"kind": "kernels"}, other


def test_vllm_gpt_oss_on_hopper_runs_marlin_experts_where_its_script_exported_them() -> None:
    """InferenceX's gpt-oss vLLM scripts for H100 / H200 export VLLM_MXFP4_USE_MARLIN=1 from
    cec542a9a (2026-03-27T04:01:48-04:00): rows measured after it price their experts by
    Marlin's rows (`VLLM_MARLIN_MXFP4_MOE`); rows measured before, by the fastest kernel."""
    single = {"harness": "inferencex-single-node", "concurrency": "8"}
    row = _row("m", model_path="openai/gpt-oss-120b", system="h100_sxm", precision="fp4", gemm_quant_mode="nvfp4",
               moe_quant_mode="nvfp4", backend="vllm", backend_version="0.18.0", tp_size="2", isl="1024",
               osl="1024", silicon_data_source="src; measured=2026-03-27T08:01:51Z; wip=False")  # fmt: skip
    for system in ("h100_sxm", "h200_sxm"):
        cost = silicon.scenario_for({**row, "system": system}, single, {})["replicas"][0]["cost_model"]
        assert cost["moe_kernel"] == "marlin", system
    before = {**row, "backend_version": "", "silicon_data_source": "src; measured=2025-12-05T00:00:00.000Z"}
    assert "VLLM_MXFP4_USE_MARLIN" not in silicon.describe(before, single)
    assert "moe_kernel" not in silicon.scenario_for(before, single, {})["replicas"][0]["cost_model"]


def test_trtllm_deepseek_fp8_on_b200_runs_the_trtllm_gen_moe_its_script_chose() -> None:
    """InferenceX's DeepSeek-R1 fp8 TensorRT-LLM B200 script (1.2.0rc6 runs) sets MoE backend
    TRTLLM except at 1k/8k with C >= 256, its MTP script (.post3) except with attention DP
    (DEEPGEMM then: the table's own kernel)."""
    harness = {"harness": "inferencex-single-node", "concurrency": "16"}
    row = _row("d", model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm", gemm_quant_mode="fp8",
               moe_quant_mode="fp8", backend="trtllm", backend_version="1.2.0rc6.post2", tp_size="8",
               isl="1024", osl="8192")  # fmt: skip
    cost = silicon.scenario_for(row, harness, {})["replicas"][0]["cost_model"]
    assert cost == {"kind": "kernels", "moe_tables_backend": "sglang"}
    # The MTP script (.post3: refused as MTP runs, `mtp_run`): TRTLLM unless attention DP.
    mtp = {**row, "backend_version": "1.2.0rc6.post3"}
    assert silicon.trtllm_gen_fp8_moe(mtp, {**harness, "concurrency": "256"})
    dp = {"tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1", "moe_ep_size": "8"}
    assert not silicon.trtllm_gen_fp8_moe({**mtp, **dp}, harness)
    cases = [
        ({}, "256"),
        ({"backend_version": "1.1.0rc2.post2"}, "16"),
        ({"system": "h200_sxm"}, "16"),
        ({**dp, "backend_version": "1.2.0rc6.post2"}, "256"),
    ]
    for other, conc in cases:
        h = {**harness, "concurrency": conc}
        assert silicon.scenario_for({**row, **other}, h, {})["replicas"][0]["cost_model"] == {
            "kind": "kernels"
        }


def test_a_moe_row_runs_with_the_engine_flags_its_launch_script_set() -> None:
    """InferenceX's dsr1_fp8_b200.sh as of 2026-03-25 (64c20b6b5): --max-running-requests 128,
    --chunked-prefill-size 32768, --mem-fraction-static 0.82, --disable-radix-cache and
    --scheduler-recv-interval 30 from 16 clients (10 below); benchmarks/launch_flags.py."""
    harness = {"harness": "inferencex-single-node", "concurrency": "32"}
    source = (
        "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=32; measured=2026-03-25T16:34:14Z"
    )
    row = _row("2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c32_tp8_0_ep1_0_269",
               silicon_data_source=source, model_path="deepseek-ai/DeepSeek-R1", system="b200_sxm",
               gemm_quant_mode="fp8", moe_quant_mode="fp8", precision="fp8", backend="sglang",
               backend_version="0.5.9", tp_size="8", moe_tp_size="8", moe_ep_size="1", attention_dp_size="1",
               isl="1024", osl="1024", batch_size="32")  # fmt: skip
    engine = silicon.scenario_for(row, harness, {})["replicas"][0]["engine"]
    knobs = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "enable_prefix_caching",
             "scheduler_recv_interval")  # fmt: skip
    assert {k: engine[k] for k in knobs} == {
        "max_num_seqs": 128,
        "max_num_batched_tokens": 32768,
        "gpu_memory_utilization": 0.82,
        "enable_prefix_caching": False,
        "scheduler_recv_interval": 30,
    }
    few = silicon.scenario_for(row, {**harness, "concurrency": "8"}, {})["replicas"][0]["engine"]
    assert few["scheduler_recv_interval"] == 10
    # Not an InferenceX single-node row: the engine's defaults.
    assert "scheduler_recv_interval" not in silicon.scenario_for(row, None, {})["replicas"][0]["engine"]


def test_sglang_rows_replay_prompt_graphs_only_where_their_launch_did() -> None:
    """SGLang 0.5.10.post1 replays prompt steps from piecewise CUDA graphs unless the launch
    turns them off. dsr1_fp8_b300.sh (5b302f147) sets nothing that does: kvsim's default. The
    fp4 script passes --enable-symm-mem and Qwen3.5 is a multimodal checkpoint: 0. A row without
    a release measured while 0.5.5.post3 was the newest SGLang: 0 (kvsim would run it at 0.5.10)."""
    harness = {"harness": "inferencex-single-node", "concurrency": "4"}
    source = "db-dump/2026-04-27; config_id=719; silicon_concurrency=4; measured=2026-04-18T00:00:00.000Z"
    row = _row("dsr1_b300_sglang_fp8_agg_1024x1024_c4_cfg719", silicon_data_source=source,
               model_path="deepseek-ai/DeepSeek-V3", system="b300_sxm", gemm_quant_mode="fp8_block",
               moe_quant_mode="fp8_block", precision="fp8", backend="sglang", backend_version="0.5.10.post1",
               tp_size="8", moe_tp_size="8", moe_ep_size="1", attention_dp_size="1", isl="1024", osl="1024",
               batch_size="4")  # fmt: skip

    def cost(r: dict[str, str]) -> dict[str, Any]:
        return silicon.scenario_for(r, harness, {})["replicas"][0]["cost_model"]

    assert silicon.sglang_prompt_graphs_off(row, harness) is None
    assert "piecewise_cuda_graph_max_tokens" not in cost(row)
    fp4 = {**row, "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
           "id": "dsr1_b300_sglang_fp4_agg_1024x1024_c4_cfg718"}  # fmt: skip
    assert silicon.sglang_prompt_graphs_off(fp4, harness) == "--enable-symm-mem"
    assert cost(fp4)["piecewise_cuda_graph_max_tokens"] == 0
    qwen = {
        **row,
        "model_path": "Qwen/Qwen3.5-397B-A17B",
        "id": "qwen3_5_b300_sglang_fp8_agg_1024x1024_c4_cfg716",
    }
    assert silicon.sglang_prompt_graphs_off(qwen, harness) == "a multimodal checkpoint"
    old = {**row, "backend_version": "", "silicon_data_source": "src; measured=2025-11-18T00:00:00.000Z"}
    assert silicon.sglang_prompt_graphs_off(old, harness) == (
        "no release named; measured when SGLang 0.5.5.post3 was the newest"
    )
    assert silicon.sglang_prompt_graphs_off({**row, "backend": "vllm"}, harness) is None


class _Run:
    """A kvsim result's two tables, as `silicon.streamed_times` reads them."""

    def __init__(self, requests: dict[str, list[Any]], iterations: dict[str, list[Any]]) -> None:
        import pandas as pd

        self.requests, self.iterations = pd.DataFrame(requests), pd.DataFrame(iterations)


def test_a_trtllm_stream_interval_holds_the_first_token_for_its_iterations() -> None:
    """Replica a runs 10 ms iterations from 0; b 20 ms ones from 5 ms. Request 1 (a, arrived
    at 0, first token at the end of iteration 0 = 10 ms, 6 tokens, finished at 60 ms) is seen
    with iteration 0 + 3 - 1 = 2, ending at 30 ms: TTFT 30 ms, TPOT (60 - 30) / 5 = 6 ms.
    Request 2 (b, arrived at 5, first at 25 ms, 2 tokens, finished at 45 ms) finishes before
    its third iteration: it is seen at its finish, TTFT 40 ms, TPOT 0. Request 3 (a, arrived
    at 20 ms, first at 40 ms, 3 tokens, finished at 60 ms) is seen with iteration 5, ending at
    60 ms, its finish: TTFT 40 ms, TPOT 0. The warm-up is left out."""
    run = _Run(
        {"replica_id": ["a", "b", "a", "a"], "finished": [True, True, True, True],
         "warmup": [False, False, False, True], "arrival_s": [0.0, 0.005, 0.02, 0.0],
         "first_token_s": [0.01, 0.025, 0.04, 0.01], "finish_s": [0.06, 0.045, 0.06, 0.06],
         "output_tokens": [6, 2, 3, 6]},
        {"replica_id": ["a"] * 6 + ["b"] * 3, "start_s": [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.005, 0.025, 0.045],
         "duration_s": [0.01] * 6 + [0.02] * 3},
    )  # fmt: skip
    ttft, tpot = silicon.streamed_times(run, 3)
    assert ttft == pytest.approx((0.030 + 0.040 + 0.040) / 3)
    assert tpot == pytest.approx((0.006 + 0.0 + 0.0) / 3)
    ttft, tpot = silicon.streamed_times(run, 1)  # every iteration answered: kvsim's own times
    assert ttft == pytest.approx((0.01 + 0.02 + 0.02) / 3)
    assert tpot == pytest.approx((0.01 + 0.02 + 0.01) / 3)


def test_the_client_sees_the_first_token_with_the_decode_workers_first_iteration() -> None:
    """A decode worker runs 10 ms iterations from 0. Request 0's KV arrived at 17 ms and it
    ran from the iteration starting at 20 ms (its ``decode_scheduled_s``), which ends at 30
    ms: TTFT 30 ms, TPOT (60 - 30) / (10 - 2), however many tokens its iterations gave.
    Request 1's KV arrived at 17 ms too but it waited for a slot until 50 ms: TTFT 60 - 5 =
    55 ms, TPOT (90 - 60) / (4 - 2). A one-token request (no decode worker) keeps kvsim's
    own times. Neither the KV's arrival nor a count back from the finish says when a request
    that waited for a slot, or drafted several tokens an iteration, was first served."""
    run = _Run(
        {"replica_id": ["d", "d", "p"], "finished": [True] * 3, "warmup": [False] * 3,
         "arrival_s": [0.0, 0.005, 0.0], "first_token_s": [0.012, 0.012, 0.012],
         "decode_scheduled_s": [0.02, 0.05, math.nan], "finish_s": [0.06, 0.09, 0.012],
         "output_tokens": [10, 4, 1], "ttft_s": [0.012, 0.007, 0.012], "tpot_s": [0.048 / 9, 0.078 / 3, math.nan]},
        {"replica_id": ["d"] * 10, "start_s": [0.01 * k for k in range(10)], "duration_s": [0.01] * 10},
    )  # fmt: skip
    ttft, tpot = silicon.client_times(run)
    assert ttft == pytest.approx((0.03 + 0.055 + 0.012) / 3)
    assert tpot == pytest.approx((0.03 / 8 + 0.03 / 2) / 2)


def test_a_build_that_is_not_a_release_runs_at_the_release_in_force_on_its_build_day() -> None:
    """PyPI's upload days (`silicon.RELEASES`): SGLang 0.5.8.post1 on 2026-02-05, 0.5.9 on
    02-23; TensorRT-LLM 1.3.0rc2 on 02-03 and the 1.2.0rc6.post3 backport on 02-05 (newer by
    upload, older by version). A nightly's own date wins over the day it was measured; a
    build with neither, or older than the table, is refused by name."""

    def row(version: str, backend: str = "sglang", measured: str = "2026-02-20") -> dict[str, str]:
        source = f"db-dump/2026-04-27; measured={measured}T00:00:00.000Z" if measured else "x.csv"
        return {"backend": backend, "backend_version": version, "silicon_data_source": source}

    assert silicon.release_in_force("sglang", "2026-02-22") == "0.5.8.post1"
    assert silicon.release_in_force("sglang", "2026-02-23") == "0.5.9"
    assert silicon.release_in_force("trtllm", "2026-02-05") == "1.3.0rc2"
    assert silicon.release_in_force("vllm", "2025-01-01") is None
    assert silicon.build_release(row("nightly-dev")) == "0.5.8.post1"
    assert silicon.build_release(row("nightly-dev", measured="2026-03-29")) == "0.5.10rc0"
    assert silicon.build_release(row("nightly-dev-20260216-d3bae71e", measured="2026-02-23")) == "0.5.8.post1"
    assert silicon.build_release(row("nightly-5b8c30d62b754b57", "vllm", "2026-04-03")) == "0.19.0"
    assert silicon.build_release(row("gpt-oss-dev", "trtllm", "2025-12-15")) == "1.2.0rc5"
    assert silicon.build_release(row("0.5.9")) == "0.5.9"  # a release as it is
    with pytest.raises(ValueError, match="unsupported: engine build 'nightly-dev' is not a release"):
        silicon.build_release(row("nightly-dev", measured=""))
    with pytest.raises(ValueError, match="no vllm release by 2024-05-01"):
        silicon.build_release(row("nightly-abc", "vllm", "2024-05-01"))
    # A Dynamo runtime's own release number still names no engine version.
    dynamo = {
        **row("0.8.1.post1", "trtllm"),
        "silicon_data_source": "x; nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post1",
    }
    assert silicon.engine_version(dynamo) is None


def test_only_trtllm_rows_whose_script_set_a_stream_interval_are_held() -> None:
    """InferenceX's dsr1_fp8_h200_trt_slurm.sh sets stream_interval 10; SGLang's and vLLM's
    stream intervals send the first token at once; a row without launch flags gets 1."""
    harness = {"harness": "inferencemax-single-node", "concurrency": "8"}
    source = "db-dump/2026-04-27; config_id=83; silicon_concurrency=8; measured=2025-12-15T00:00:00.000Z"
    row = _row("dsr1_h200_trtllm_fp8_agg_8192x1024_c8_cfg83", silicon_data_source=source, backend="trtllm",
               backend_version="", model_path="deepseek-ai/DeepSeek-R1", gemm_quant_mode="fp8",
               moe_quant_mode="fp8", precision="fp8", tp_size="8", moe_tp_size="8", moe_ep_size="1",
               isl="8192", osl="1024", batch_size="8")  # fmt: skip
    assert "stream_interval 10" in silicon.describe(row, harness)
    assert silicon.first_chunk_iterations(row, harness) == 10
    # The share of the hold an instance's client saw grows with its GPUs, whole from 8 on:
    # 1 + 9 x min(1, GPUs / 8), rounded half up.
    assert silicon.first_chunk_iterations(row, harness, 16) == 10
    assert silicon.first_chunk_iterations(row, harness, 4) == 6  # 1 + 4.5
    assert silicon.first_chunk_iterations(row, harness, 2) == 3  # 1 + 2.25
    assert silicon.first_chunk_iterations(row, harness, 1) == 2  # 1 + 1.125
    scenario = silicon.scenario_for(row, harness, {})
    assert silicon.instance_gpus(scenario) == 8
    assert silicon.instance_gpus({"replicas": [{"tp": 1, "attention_dp": 4}]}) == 4
    assert silicon.first_chunk_iterations({**row, "backend": "sglang"}, harness) == 1
    assert silicon.first_chunk_iterations(row, {"harness": "nvidia-gap-analysis"}) == 1
    assert silicon.first_chunk_iterations({**row, "mode": "disagg"}, harness) == 1


def test_a_row_becomes_the_benchmark_as_it_was_run() -> None:
    harness = {"concurrency": "4", "num_prompts": "40", "num_warmups": "8", "random_range_ratio": "0.8",
               "harness": "inferencemax-single-node"}  # fmt: skip
    row = _row("x", model_path="meta-llama/Llama-3.1-70B-Instruct", tp_size="4", precision="fp8",
               gemm_quant_mode="fp8", batch_size="3")  # fmt: skip
    scenario = silicon.scenario_for(row, harness, {"workload.seed_offset": 1})
    workload = scenario["workload"]
    assert (workload["max_concurrency"], workload["num_prompts"], workload["num_warmups"]) == (4, 40, 8)
    assert workload["random_range_ratio"] == 0.8 and workload["seed_offset"] == 1
    engine = scenario["replicas"][0]["engine"]
    # InferenceMAX's published Llama-3.1-70B vLLM flags, max_num_seqs = the concurrency.
    assert engine["max_num_batched_tokens"] == 8192 and engine["max_num_seqs"] == 4
    assert engine["quantization"] == "fp8" and engine["kv_cache_dtype"] == "fp8"
    assert scenario["replicas"][0]["tp"] == 4 and scenario["replicas"][0]["cost_model"] == {"kind": "kernels"}
    # Without a harness record: 10 x the row's concurrency, no warm-ups, exact lengths.
    plain = silicon.scenario_for(_row("y"), None, {})["workload"]
    assert (plain["num_prompts"], plain["num_warmups"], plain["random_range_ratio"]) == (20, 0, 1.0)


@needs_tables
def test_the_per_row_json_and_the_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _write(tmp_path / "rows.csv", [_row("ok-1"), _row("ok-2", system="h100_sxm"), _disagg("dis")])
    out, report = tmp_path / "out" / "kvsim.json", tmp_path / "report.md"
    code = silicon.main(["--rows", str(rows), "--out", str(out), "--report", str(report), "--jobs", "1",
                         "--peer", str(tmp_path / "none.json"), "--harness", str(tmp_path / "none.csv"),
                         "--all"])  # fmt: skip
    assert code == 0
    results = {r["id"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"ok-1", "ok-2", "dis"}
    for rid in ("ok-1", "ok-2"):
        r = results[rid]
        assert r["status"] == "ok"
        assert {"id", "status", "mean_ttft_ms", "mean_tpot_ms"} <= set(r)
        # Two clients, 256-token prompts on one H200: milliseconds, not seconds or microseconds.
        assert 1 < r["mean_ttft_ms"] < 200 and 1 < r["mean_tpot_ms"] < 50
    # The same deployment is faster on the H200 (4.8 TB/s) than the H100 (3.35 TB/s).
    assert results["ok-1"]["mean_tpot_ms"] < results["ok-2"]["mean_tpot_ms"]
    # The disaggregated row runs: the client's TTFT (the decode worker's first iteration)
    # comes after kvsim's own, which ends at the prefill.
    dis = results["dis"]
    assert dis["status"] == "ok" and 1 < dis["mean_tpot_ms"] < 50
    assert dis["prefill_ttft_ms"] < dis["mean_ttft_ms"] < 200
    printed = capsys.readouterr().out
    assert report.read_text().strip() == printed.strip()
    assert "kvsim's statuses: ok: 3" in printed
    assert not list(out.parent.glob(".*tmp*"))  # written whole, then renamed
    # The same tables again from the written results, without simulating (the recipes' switch
    # parses both ways; it changes nothing here: no multi-node SGLang row).
    again = silicon.main(["--rows", str(rows), "--results", str(out), "--peer", str(tmp_path / "none.json"),
                          "--harness", str(tmp_path / "none.csv"), "--all", "--no-srt-slurm-recipes"])  # fmt: skip
    assert again == 0
    assert capsys.readouterr().out.strip() == printed.strip().rsplit("\n\n", 1)[0]


@needs_tables
def test_aggregated_vllm_rows_pass_through_vllms_front_end() -> None:
    """A request to ``vllm serve`` reaches its scheduler VLLM_FRONTEND_REQUEST_S (fitted on H200)
    after the client sent it; SGLang, TensorRT-LLM and Dynamo-served (disaggregated) rows take
    none (their front ends are not fitted; tests/test_frontend.py has the mechanics)."""
    engine = silicon.scenario_for(_row("v"), None, {})["replicas"][0]["engine"]
    assert (
        engine["frontend"] == {"request_s": silicon.VLLM_FRONTEND_REQUEST_S}
        and silicon.VLLM_FRONTEND_REQUEST_S == 0.02
    )
    for backend, version in (("sglang", "0.5.5"), ("trtllm", "1.0.0")):
        other = silicon.scenario_for(_row("o", backend=backend, backend_version=version), None, {})
        assert "frontend" not in other["replicas"][0]["engine"]
    for group in silicon.scenario_for(_disagg("d"), None, {})["replicas"]:
        assert "frontend" not in group["engine"]


@needs_tables
def test_a_disaggregated_row_becomes_prefill_and_decode_groups_and_their_link() -> None:
    scenario = silicon.scenario_for(_disagg("x"), None, {})
    prefill, decode = scenario["replicas"]
    assert [(g["name"], g["role"], g["count"], g["tp"]) for g in (prefill, decode)] == [
        ("prefill", "prefill", 1, 1),
        ("decode", "decode", 2, 2),
    ]
    for group in (prefill, decode):
        assert group["gpu"] == "h200" and group["cost_model"] == {"kind": "kernels"}
        assert (group["engine"]["backend"], group["engine"]["backend_version"]) == ("vllm", "0.12.0")
        assert not {"attention_dp", "moe_tp", "moe_ep"} & set(group)  # plain tensor parallelism
    assert decode["engine"]["max_num_seqs"] == 3  # ceil(6 clients / 2 decode workers)
    assert "max_num_seqs" not in prefill["engine"]
    workload = scenario["workload"]
    assert (workload["kind"], workload["max_concurrency"], workload["num_prompts"]) == ("bench_serve", 6, 60)
    # aiconfigurator-core 0.12.0 systems/h200_sxm.yaml: 8 GPUs a node, NVLink 450 GB/s and the
    # network 50 GB/s per GPU each way, 10 us. 1 + 2 x 2 = 5 GPUs fit one node: NVLink, one
    # GPU's worth (min(1, 2) GPUs send and receive shards in parallel).
    assert scenario["kv_transfer"] == {"bandwidth_bytes_per_s": 450e9, "latency_s": 10e-6}
    # 2 + 2 x 4 = 10 GPUs span two nodes: the network, min(2, 4) = 2 GPUs' worth.
    wide = silicon.scenario_for(_disagg("w", prefill_tp_size="2", decode_tp_size="4"), None, {})
    assert wide["kv_transfer"]["bandwidth_bytes_per_s"] == 2 * 50e9
    # GB200 NVL72 (gb200.yaml: 72 GPUs a rack, NVLink 900 GB/s, 100 GB/s between racks).
    rack = _disagg("g", system="gb200", prefill_tp_size="2", decode_tp_size="4")
    assert silicon.scenario_for(rack, None, {})["kv_transfer"]["bandwidth_bytes_per_s"] == 2 * 900e9
    racks = {**rack, "decode_num_workers": "18"}  # 2 + 18 x 4 = 74 GPUs: two racks
    assert silicon.scenario_for(racks, None, {})["kv_transfer"]["bandwidth_bytes_per_s"] == 2 * 100e9


@needs_tables
def test_srt_slurm_rows_pick_decode_workers_in_turn_as_dynamos_frontend_does() -> None:
    """Dynamo's default router is round-robin; kvsim's turns replica by replica, so only where
    each decode worker is one replica. Rows of other harnesses keep the least-loaded default."""
    srt = {"harness": "inferencex-multi-node-srt-slurm"}
    assert silicon.scenario_for(_disagg("x"), srt, {})["decode_router"] == "round_robin"
    assert "decode_router" not in silicon.scenario_for(_disagg("x"), None, {})
    dp = _disagg("d", decode_moe_tp_size="1", decode_moe_ep_size="0", decode_attention_dp_size="2")
    assert "decode_router" not in silicon.scenario_for(dp, srt, {})


def test_a_disaggregated_rows_parallel_layout_is_named_field_by_field() -> None:
    """attention_dp, moe_tp, moe_ep (issue 22 item 2's ReplicaGroup fields) where the row's
    stage is not plain tensor parallelism, nothing where it is; a dense model's moe_* columns
    are ignored. The version of a Dynamo runtime image is not the engine's."""
    row = _disagg("m", model_path="deepseek-ai/DeepSeek-V3", backend="trtllm", backend_version="0.8.1.post2",
                  silicon_data_source="c; silicon_concurrency=64; nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1.post2",
                  prefill_tp_size="1", prefill_attention_dp_size="8", prefill_moe_tp_size="1", prefill_moe_ep_size="8",
                  decode_num_workers="1", decode_tp_size="8", decode_attention_dp_size="1", decode_moe_tp_size="8",
                  decode_moe_ep_size="1")  # fmt: skip
    prefill, decode = silicon.scenario_for(row, None, {})["replicas"]
    assert (prefill["tp"], prefill["attention_dp"], prefill["moe_tp"], prefill["moe_ep"]) == (1, 8, 1, 8)
    assert decode["tp"] == 8 and not {"attention_dp", "moe_tp", "moe_ep"} & set(decode)
    assert "backend_version" not in prefill["engine"]  # 0.8.1.post2 is Dynamo's release
    dense = _disagg("d", decode_moe_tp_size="1", decode_moe_ep_size="0", decode_attention_dp_size="2")
    _, decode = silicon.scenario_for(dense, None, {})["replicas"]
    assert decode["attention_dp"] == 2 and not {"moe_tp", "moe_ep"} & set(decode)


@needs_tables
def test_sglang_wide_ep_sides_balance_their_experts() -> None:
    """An SGLang side with attention DP and whole experts runs DeepEP with EPLB in the
    srt-slurm recipes: its experts are priced at the wide-EP tables' balanced routing (H200:
    moe_ep 8 measured). A TensorRT-LLM side of the same layout, an SGLang side with
    tensor-parallel attention, and one whose layout the wide-EP tables lack (B200, moe_ep 8),
    keep the default."""
    fields = dict(model_path="deepseek-ai/DeepSeek-V3", silicon_data_source="c; silicon_concurrency=64",
                  prefill_tp_size="1", prefill_attention_dp_size="8", prefill_moe_tp_size="1",
                  prefill_moe_ep_size="8", decode_num_workers="1", decode_tp_size="8",
                  decode_attention_dp_size="1", decode_moe_tp_size="1", decode_moe_ep_size="8")  # fmt: skip
    prefill, decode = silicon.scenario_for(
        _disagg("s", backend="sglang", backend_version="0.5.8", **fields), None, {}
    )["replicas"]
    assert prefill["cost_model"]["expert_load"] == silicon.SGLANG_WIDE_EP_EXPERT_LOAD == "balanced"
    assert "expert_load" not in decode["cost_model"]  # tp 8 attention: no DeepEP
    prefill, _ = silicon.scenario_for(
        _disagg("t", backend="trtllm", backend_version="1.2.0", **fields), None, {}
    )["replicas"]
    assert "expert_load" not in prefill["cost_model"]
    b200 = _disagg("b", backend="sglang", backend_version="0.5.8", system="b200_sxm", **fields)
    prefill, _ = silicon.scenario_for(b200, None, {})["replicas"]
    assert "expert_load" not in prefill["cost_model"]


def test_errors_and_the_objective_by_hand() -> None:
    assert silicon._errors([(11.0, 10.0), (5.0, 10.0)]) == pytest.approx([0.1, -0.5])
    rows = [_row("a"), _row("b")]  # measured TTFT 20 ms, TPOT 7 ms
    results = [
        {"id": "a", "status": "ok", "mean_ttft_ms": 22.0, "mean_tpot_ms": 7.7},  # +10%, +10%
        {"id": "b", "status": "ok", "mean_ttft_ms": 16.0, "mean_tpot_ms": 7.0},  # -20%, 0%
    ]
    # median |TTFT error| (0.1, 0.2 -> 0.15) + median |TPOT error| (0.1, 0 -> 0.05)
    assert silicon.objective(rows, results) == pytest.approx(0.15 + 0.05)
    # Fewer than half the rows ran: no objective at all, whatever the errors.
    assert silicon.objective([*rows, _row("c"), _row("d")], results[:1]) == float("inf")


def test_the_fit_reads_h200_rows_only(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def fake(job: tuple[dict[str, str], Any, dict[str, Any]]) -> dict[str, Any]:
        row, _, extra = job
        seen.append(row["system"])
        ttft = 20.0 * (1 + 100 * extra["replicas.0.cost_model.per_iteration_overhead_s"])
        return {"id": row["id"], "status": "ok", "mean_ttft_ms": ttft, "mean_tpot_ms": 7.0}

    class Pool:  # in-process, so the fake is what runs
        def __init__(self, max_workers: int) -> None: ...
        def __enter__(self) -> Pool:
            return self

        def __exit__(self, *exc: object) -> None: ...
        def map(self, fn: Any, jobs: Any, **_: Any) -> Any:
            return map(fn, jobs)

    monkeypatch.setattr(silicon, "simulate", fake)
    monkeypatch.setattr(silicon, "ProcessPoolExecutor", Pool)
    rows = [
        _row("h200"),
        _row("h100", system="h100_sxm", silicon_ttft_ms="1000"),
        _row("sg", backend="sglang"),
    ]
    best = silicon.fit(rows, {}, "vllm", jobs=1)
    assert set(seen) == {"h200_sxm"}
    assert best["per_iteration_overhead_s"] == 0.0  # any overhead only moves TTFT off the measured 20 ms


def test_the_sensitivity_assumptions_change_only_the_assumed_harness() -> None:
    gap = {"harness": "nvidia-gap-analysis", "concurrency": "8", "num_prompts": "80", "num_warmups": "16",
           "random_range_ratio": "1.0"}  # fmt: skip
    documented = {**gap, "harness": "inferencemax-single-node", "random_range_ratio": "0.8"}
    moved = silicon.assume(gap, 20, 0.8, 0)
    assert (moved["num_prompts"], moved["num_warmups"], moved["random_range_ratio"]) == ("160", "0", "0.8")
    assert silicon.assume(gap, None, None, None) == gap
    assert silicon.assume(documented, 20, 0.5, 0) == documented  # a documented harness is not assumed
    workload = silicon.scenario_for(_row("g", batch_size="8"), moved, {})["workload"]
    assert (workload["num_prompts"], workload["num_warmups"], workload["random_range_ratio"]) == (160, 0, 0.8)


def test_each_row_schedules_asynchronously_as_its_engine_did() -> None:
    """vLLM from 0.14 (or launched with --async-scheduling), SGLang and TensorRT-LLM decide the
    next iteration while one runs (`silicon.async_scheduling`); TensorRT-LLM's context servers
    of a disaggregated deployment do not."""
    engine = silicon.scenario_for(_row("old"), None, {})["replicas"][0]["engine"]  # vLLM 0.12.0
    assert engine["async_scheduling"] is False
    new = silicon.scenario_for(_row("new", backend_version="0.15.1"), None, {})
    assert new["replicas"][0]["engine"]["async_scheduling"] is True
    assert silicon.async_scheduling(_row("s", backend="sglang", backend_version="0.5.9"), {})
    assert silicon.async_scheduling(_row("t", backend="trtllm", backend_version="1.2.0rc6"), {})
    assert not silicon.async_scheduling(_row("t", backend="trtllm"), {}, "prefill")
    assert silicon.async_scheduling(_row("t", backend="trtllm"), {}, "decode")
    trt = _disagg("d", backend="trtllm", backend_version="1.2.0rc6")
    prefill, decode = silicon.scenario_for(trt, None, {})["replicas"]
    assert (prefill["engine"]["async_scheduling"], decode["engine"]["async_scheduling"]) == (False, True)
    # gpt-oss-120b's InferenceMAX H100 script (vLLM 0.11.2) passed --async-scheduling.
    gptoss = _row("2026_04_06_gpt_oss_120b_h100_sxm_vllm_fp4_agg_1024x1024_c512_tp4_ep1_1133",
                  model_path="openai/gpt-oss-120b", system="h100_sxm", backend_version="0.11.2",
                  precision="fp4", tp_size="4", batch_size="512",
                  silicon_data_source="source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=512; "
                  "measured=2025-12-05T00:00:00.000Z; wip=False")  # fmt: skip
    harness = {"harness": "inferencemax-single-node", "concurrency": "512"}
    assert silicon.async_scheduling(gptoss, harness)
    assert not silicon.async_scheduling(
        {**gptoss, "model_path": "meta-llama/Llama-3.1-70B-Instruct"}, harness
    )
