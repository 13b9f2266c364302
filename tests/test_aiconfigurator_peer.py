"""benchmarks/aiconfigurator_peer.py and silicon_harness.py without the estimator.

What is handed to NVIDIA's estimator for a row, what is refused before it, how the errors
are summarised, and the committed run (benchmarks/results/aiconfigurator_silicon.json.gz)
against the figures issue 20 quotes for the estimator on the 772 dense aggregated
H100/H200 rows. The estimator itself lives in .venv-aic (make aic-peer) and is not needed.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest
from conftest import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


peer = load_benchmark("aiconfigurator_peer")
harness = load_benchmark("silicon_harness")

AGG_ROW = {
    "id": "r1",
    "silicon_data_source": "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=16; "
    "measured=2025-10-21T00:00:00Z; wip=False",
    "backend": "vllm",
    "backend_version": "0.11.0",
    "model_path": "meta-llama/Llama-3.1-70B",
    "system": "h200_sxm",
    "precision": "fp8",
    "mode": "agg",
    "isl": "1024",
    "osl": "8192",
    "gemm_quant_mode": "fp8",
    "moe_quant_mode": "fp8",
    "batch_size": "16",
    "tp_size": "4",
    "pp_size": "1",
    "attention_dp_size": "1",
    "moe_tp_size": "",
    "moe_ep_size": "",
    "prefill_batch_size": "",
    "prefill_num_workers": "",
    "decode_batch_size": "",
    "decode_num_workers": "",
    "silicon_ttft_ms": "100",
    "silicon_tpot_ms": "20",
}


def test_an_agg_row_is_passed_as_it_stands_with_the_bundled_config_name() -> None:
    assert peer.estimate_args(AGG_ROW) == {
        "model_path": "meta-llama/Meta-Llama-3.1-70B",  # the bundled config of the same model
        "system_name": "h200_sxm",
        "mode": "agg",
        "backend_name": "vllm",
        "backend_version": "0.11.0",
        "isl": 1024,
        "osl": 8192,
        "gemm_quant_mode": "fp8",
        "moe_quant_mode": "fp8",
        "batch_size": 16,
        "tp_size": 4,
        "pp_size": 1,
        "attention_dp_size": 1,
    }
    assert peer.unsupported_reason(AGG_ROW) is None


def test_model_aliases_follow_the_precision_and_leave_bundled_names_alone() -> None:
    glm = {**AGG_ROW, "model_path": "zhipuai/GLM-5"}
    assert peer.model_path_for({**glm, "precision": "fp8"}) == "zai-org/GLM-5-FP8"
    assert peer.model_path_for({**glm, "precision": "fp4"}) == "nvidia/GLM-5-NVFP4"
    assert peer.model_path_for({**AGG_ROW, "model_path": "Qwen/Qwen3-32B"}) == "Qwen/Qwen3-32B"


def test_disagg_rows_without_workers_and_batches_are_refused_not_guessed() -> None:
    row = {**AGG_ROW, "mode": "disagg", "batch_size": "", "prefill_tp_size": "4", "decode_tp_size": "4"}
    reason = peer.unsupported_reason(row)
    assert reason is not None and "prefill_batch_size" in reason and "decode_num_workers" in reason
    full = {**row, "prefill_batch_size": "1", "prefill_num_workers": "2", "decode_batch_size": "8"}
    assert peer.unsupported_reason({**full, "decode_num_workers": "1"}) is None
    args = peer.estimate_args({**full, "decode_num_workers": "1"})
    assert args["prefill_num_workers"] == 2 and args["decode_batch_size"] == 8 and "batch_size" not in args


def test_error_statistics_median_p90_and_median_bias() -> None:
    rows = [{**AGG_ROW, "id": f"r{i}", "silicon_ttft_ms": "100", "silicon_tpot_ms": "10"} for i in range(5)]
    ttfts = [50.0, 90.0, 100.0, 120.0, 200.0]  # errors -50%, -10%, 0, +20%, +100%
    preds = [
        {"id": f"r{i}", "status": "ok", "mean_ttft_ms": t, "mean_tpot_ms": 10.0} for i, t in enumerate(ttfts)
    ]
    preds[4] = {"id": "r4", "status": "unsupported: x", "mean_ttft_ms": None, "mean_tpot_ms": None}
    errors = peer._errors(peer.joined(rows, preds), "ttft")
    assert errors == pytest.approx([-0.5, -0.1, 0.0, 0.2])
    stats = peer.error_stats(errors)
    assert stats["median_abs"] == pytest.approx(0.15)
    assert stats["p90_abs"] == pytest.approx(0.2 + 0.7 * 0.3)  # numpy's linear interpolation
    assert stats["bias_median"] == pytest.approx(-0.05)
    assert stats["bias_mean"] == pytest.approx(-0.1)


def test_refusals_are_counted_by_kind() -> None:
    a = "unsupported: RuntimeError: OOM: the model 'Qwen/Qwen3-32B' does not fit in GPU memory on system 'h100_sxm'"
    b = "unsupported: RuntimeError: OOM: the model 'x/y' does not fit in GPU memory on system 'b200_sxm' (tp=1)"
    assert peer.reason_category(a) == peer.reason_category(b)
    assert "A2A" in peer.reason_category("unsupported: E: Cross-node EP requires DeepEP A2A data for 2 nodes")


def test_harness_of_inferencex_and_gap_analysis_rows() -> None:
    # InferenceMAX, October 2025: kimbochen/bench_serving, 10 C prompts, no warm-ups, R 0.8.
    old = harness.harness_for_row(AGG_ROW)
    assert (old["harness"], old["num_prompts"], old["num_warmups"], old["random_range_ratio"]) == (
        "inferencemax-single-node",
        "160",
        "0",
        "0.8",
    )
    # InferenceX after 2026-01-21: its own client, 2 C warm-ups.
    src = "db-dump/2026-04-27; config_id=733; silicon_concurrency=128; measured=2026-04-17T00:00:00.000Z"
    new = harness.harness_for_row({**AGG_ROW, "silicon_data_source": src})
    assert (new["harness"], new["num_prompts"], new["num_warmups"]) == (
        "inferencex-single-node",
        "1280",
        "256",
    )
    # NVIDIA's gap analysis: nothing published; aiconfigurator's own pipeline assumed.
    gap = harness.harness_for_row(
        {
            **AGG_ROW,
            "silicon_data_source": "source_file=/x/aic-auto-gap-analysis/a.csv; silicon_concurrency=8",
        }
    )
    assert (gap["harness"], gap["random_range_ratio"], gap["num_warmups"]) == (
        "nvidia-gap-analysis",
        "1.0",
        "16",
    )
    assert gap["basis"].startswith("assumed")


def test_a_gap_analysis_row_that_copies_an_inferencex_run_takes_its_record() -> None:
    # An InferenceX run (attention DP 4: batch 4 a rank) and NVIDIA's gap-analysis rows: a copy
    # with its TTFT and TPOT rounded to 0.01 ms and its attention DP lost, one 0.02 ms off, one
    # at other clients, one of another model.
    ix = {**AGG_ROW, "id": "ix", "attention_dp_size": "4", "batch_size": "4",
          "silicon_data_source": "source_file=2026-03-25.csv; silicon_concurrency=16; "
          "measured=2026-03-04T18:53:03Z", "silicon_ttft_ms": "290.5145", "silicon_tpot_ms": "22.6287"}  # fmt: skip
    gap_src = "source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=16; aic_database_mode=SILICON"
    copy = {**AGG_ROW, "id": "copy", "silicon_data_source": gap_src, "attention_dp_size": "1",
            "batch_size": "16", "silicon_ttft_ms": "290.51", "silicon_tpot_ms": "22.63"}  # fmt: skip
    off = {**copy, "id": "off", "silicon_tpot_ms": "22.65"}
    other_clients = {**copy, "id": "other_clients",
                     "silicon_data_source": gap_src.replace("concurrency=16", "concurrency=8")}  # fmt: skip
    other_model = {**copy, "id": "other_model", "model_path": "Qwen/Qwen3.5-397B-A17B"}
    rows = [ix, copy, off, other_clients, other_model]
    records = {r["id"]: r for r in harness.harness_records(rows)}
    assert harness.copies(rows, {r["id"]: harness.harness_for_row(r) for r in rows}) == {"copy": "ix"}
    assert records["copy"] == {**records["ix"], "id": "copy", "copy_of": "ix",
                               "basis": "copy of InferenceX row ix (the same mean TTFT and TPOT); documented"}  # fmt: skip
    assert records["copy"]["harness"] == "inferencex-single-node" and records["ix"]["copy_of"] == ""
    for rid in ("off", "other_clients", "other_model"):
        assert (records[rid]["harness"], records[rid]["copy_of"]) == ("nvidia-gap-analysis", "")


def silicon_rows() -> list[dict[str, str]]:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        pytest.skip("aiconfigurator-core (the kernels extra) is not installed: no silicon_sample.csv")
    with (Path(spec.origin).parent / "systems" / "silicon_sample.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_the_committed_run_gives_the_issues_estimator_figures() -> None:
    rows = silicon_rows()
    predictions = peer.read_predictions(RESULTS / "aiconfigurator_silicon.json.gz")
    assert [p["id"] for p in predictions] == [r["id"] for r in rows]
    issue_rows = [r for r in rows if peer.is_issue_dense_row(r)]
    assert len(issue_rows) == 772
    pairs = peer.joined(issue_rows, predictions)
    ttft, tpot = peer.error_stats(peer._errors(pairs, "ttft")), peer.error_stats(peer._errors(pairs, "tpot"))
    # issue 20: TTFT median 49%, p90 89%, bias -44%; TPOT median 10%, p90 39%, bias +1%.
    assert [round(100 * ttft[k]) for k in ("median_abs", "p90_abs", "bias_median")] == [49, 89, -44]
    assert [round(100 * tpot[k]) for k in ("median_abs", "p90_abs", "bias_median")] == [10, 39, 1]
    assert sum(p["status"] == "ok" for _, p in pairs) == 742  # 30 refused as out of memory
