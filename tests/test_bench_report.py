"""``kvsim bench-serve`` and `kvsim.results.bench_report`: vLLM 0.32.0's result block, its JSON keys
and its metric definitions, computed from a kvsim run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kvsim
from kvsim.cli import main
from kvsim.results.bench_report import (
    _stats,
    bench_metrics,
    bench_result_json,
    format_bench_block,
    token_steps,
)
from kvsim.scenario.schema import EngineConfig


def one_client(**workload: Any) -> kvsim.Result:
    """One client, 10 ms iterations, ten 100-token prompts of 5 output tokens, two warm-ups."""
    w = {"kind": "bench_serve", "num_prompts": 10, "max_concurrency": 1, "num_warmups": 2,
         "random_input_len": 100, "random_output_len": 5} | workload  # fmt: skip
    cost = {"kind": "constant", "step_time_s": 0.01}
    return kvsim.run({"replicas": [{"gpu": "h100-sxm", "cost_model": cost}], "workload": w})


#: vLLM 0.32.0's result keys for the default --percentile-metrics and --metric-percentiles
#: with --max-concurrency set (serve.py: benchmark's result dict and process_one_metric;
#: input_lens, output_lens, ttfts, itls, start_times, generated_texts and errors are
#: removed by main_async without --save-detailed).
VLLM_KEYS = [
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "request_goodput", "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
]  # fmt: skip
VLLM_HEADER = ["date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
               "request_rate", "burstiness", "max_concurrency"]  # fmt: skip


def test_metrics_of_one_client_by_hand():
    m = bench_metrics(one_client())
    # 10 requests of 50 ms back to back after the warm-ups: 0.5 s.
    assert m["duration"] == pytest.approx(0.5)
    assert (m["completed"], m["failed"], m["total_input_tokens"], m["total_output_tokens"]) == (
        10,
        0,
        1000,
        50,
    )
    assert m["request_throughput"] == pytest.approx(20) and m["output_throughput"] == pytest.approx(100)
    assert m["total_token_throughput"] == pytest.approx(2100)
    for name in ("ttft", "tpot", "itl"):
        assert m[f"mean_{name}_ms"] == pytest.approx(10) and m[f"p99_{name}_ms"] == pytest.approx(10)
        assert m[f"std_{name}_ms"] == pytest.approx(0, abs=1e-9)
    assert "mean_e2el_ms" not in m  # not in the default --percentile-metrics
    # All 10 requests and their 50 tokens fall in the first second.
    assert (m["max_output_tokens_per_s"], m["max_concurrent_requests"]) == (50.0, 10)
    assert m["latencies"] == pytest.approx([0.05] * 10) and m["queue_times"] == pytest.approx(
        [0.05 * i for i in range(10)]
    )
    assert list(m)[: len(VLLM_KEYS)] == VLLM_KEYS


def test_the_result_block_is_vllms_to_the_character():
    m = bench_metrics(one_client(), percentile_metrics=["ttft", "e2el"], percentiles=[50, 99.9])
    block = format_bench_block(m, [50, 99.9]).splitlines()
    assert block == [
        "============ Serving Benchmark Result ============",
        "Successful requests:                     10        ",
        "Failed requests:                         0         ",
        "Maximum request concurrency:             1         ",
        "Benchmark duration (s):                  0.50      ",
        "Total input tokens:                      1000      ",
        "Total generated tokens:                  50        ",
        "Request throughput (req/s):              20.00     ",
        "Output token throughput (tok/s):         100.00    ",
        "Peak output token throughput (tok/s):    50.00     ",
        "Peak concurrent requests:                10.00     ",
        "Total token throughput (tok/s):          2100.00   ",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          10.00     ",
        "Median TTFT (ms):                        10.00     ",
        "P50 TTFT (ms):                           10.00     ",
        "P99.9 TTFT (ms):                         10.00     ",
        "----------------End-to-end Latency----------------",
        "Mean E2EL (ms):                          50.00     ",
        "Median E2EL (ms):                        50.00     ",
        "P50 E2EL (ms):                           50.00     ",
        "P99.9 E2EL (ms):                         50.00     ",
        "==================================================",
    ]
    paced = bench_metrics(one_client(request_rate=50.0))
    assert "Request rate configured (RPS):           50.00     " in format_bench_block(paced).splitlines()


def test_json_has_vllms_keys_in_order():
    res = one_client()
    m = bench_metrics(res, percentile_metrics=["ttft", "tpot", "itl", "client_queue_time"])
    payload = bench_result_json(m, date="20260101-000000", backend="vllm", model_id="llama-3-8b",
                                num_prompts=10, burstiness=1.0)  # fmt: skip
    assert list(payload)[: len(VLLM_HEADER)] == VLLM_HEADER
    assert list(payload)[len(VLLM_HEADER) : len(VLLM_HEADER) + len(VLLM_KEYS)] == VLLM_KEYS
    assert payload["request_rate"] == "inf" and payload["max_concurrency"] == 1
    assert payload["mean_client_queue_time_ms"] == pytest.approx(225)  # 0, 50, ..., 450 ms


def test_itl_from_iteration_spans_counts_every_gap_once():
    # Roofline iterations (every one a different length), 24 clients, no preemption: every
    # request gets exactly output - 1 gaps, and the mean is the summary's per-token mean.
    res = kvsim.run({"workload": {"kind": "bench_serve", "num_prompts": 150, "max_concurrency": 24,
                                  "random_input_len": 700, "random_output_len": 90, "random_range_ratio": 0.7}})  # fmt: skip
    r = res.requests
    assert res.summary["num_preemptions"] == 0
    _, _, counts = token_steps(r, res.iterations)
    assert counts.sum() == (r["output_tokens"] - 1).sum()
    m = bench_metrics(res)
    assert m["mean_itl_ms"] == pytest.approx(res.summary["itl_mean_s"] * 1000, rel=1e-12)
    assert m["mean_tpot_ms"] == pytest.approx(res.summary["tpot_mean_s"] * 1000, rel=1e-12)
    assert m["median_ttft_ms"] == pytest.approx(res.summary["ttft_p50_s"] * 1000, rel=1e-12)


def test_weighted_statistics_equal_numpy_on_the_expanded_gaps():
    rng = np.random.default_rng(1)
    for _ in range(500):
        values = np.round(rng.random(rng.integers(1, 8)) * 0.01, int(rng.integers(3, 10)))
        weights = rng.integers(0, 5, size=len(values))
        weights[0] = max(weights[0], 1)
        ps = [float(rng.uniform(0, 100)), 50.0, 99.0, 99.9, 0.0, 100.0]
        got, want = _stats(values, weights, ps), _stats(np.repeat(values, weights), None, ps)
        assert got["median"] == want["median"] and got["percentiles"] == want["percentiles"]
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-12)
        assert got["std"] == pytest.approx(want["std"], rel=1e-9, abs=1e-12)


# --------------------------------------------------------------------------- the command


def test_bench_serve_prints_the_block(capsys):
    code = main(["bench-serve", "--num-prompts", "20", "--max-concurrency", "4", "--num-warmups", "4",
                 "--random-input-len", "256", "--random-output-len", "16", "--ignore-eos", "--dataset-name",
                 "random", "--gpu", "h200", "--max-num-seqs", "64"])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == "============ Serving Benchmark Result ============"
    assert out[1] == "Successful requests:                     20        "
    assert "Maximum request concurrency:             4         " in out
    assert out[-1] == "=" * 50


def test_bench_serve_json_and_save_result(tmp_path: Path, capsys):
    args = ["bench-serve", "--num-prompts", "12", "--max-concurrency", "3", "--random-input-len", "128",
            "--random-output-len", "8", "--seed", "4", "--percentile-metrics", "ttft,e2el",
            "--metric-percentiles", "50,99", "--metadata", "run=a"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["completed"] == 12 and payload["run"] == "a" and payload["num_prompts"] == 12
    assert {"mean_ttft_ms", "median_ttft_ms", "p50_ttft_ms", "p99_e2el_ms", "std_e2el_ms"} <= set(payload)
    assert main([*args, "--save-result", "--result-dir", str(tmp_path / "res")]) == 0
    (saved,) = (tmp_path / "res").iterdir()
    assert saved.name.startswith("vllm-infqps-concurrency3-llama-3-8b-") and saved.suffix == ".json"
    assert json.loads(saved.read_text())["completed"] == 12
    # A named file is written, and replaced only if it holds a benchmark result.
    target = tmp_path / "mine.json"
    assert main([*args, "--save-result", "--result-filename", str(target)]) == 0
    assert main([*args, "--save-result", "--result-filename", str(target)]) == 0
    notes = tmp_path / "notes.json"
    notes.write_text('{"keep": true}')
    assert main([*args, "--save-result", "--result-filename", str(notes)]) == 2
    assert "is not a benchmark result" in capsys.readouterr().err
    assert notes.read_text() == '{"keep": true}'


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-prompts", "0"], "argument --num-prompts: must be between 1 and"),
        (["--request-rate", "-2"], "argument --request-rate: must be a number > 0 or inf"),
        (
            ["--random-range-ratio", "1.0"],
            "--random-range-ratio (workload.bench_serve): random_range_ratio must",
        ),
        (
            ["--random-range-ratio", '{"input": 0.2}'],
            "--random-range-ratio (workload.bench_serve.random_range_ratio)",
        ),
        (["--gpu", "nope"], "--gpu (replicas.0.gpu): unknown GPU preset 'nope'"),
        (["--percentile-metrics", "ttft,bogus"], "unknown metric(s) bogus"),
        (["--metric-percentiles", "101"], "comma-separated numbers in [0, 100]"),
        (["--set", "workload.num_prompts=x"], "--num-prompts (workload.bench_serve.num_prompts)"),
        (["--dataset-name", "sharegpt"], "invalid choice: 'sharegpt'"),
    ],
)
def test_bad_input_names_the_flag_and_exits_2(argv, message, capsys):
    try:
        code = main(["bench-serve", "--num-prompts", "3", *argv])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_help_lists_vllms_flags(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench-serve", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--max-concurrency", "--num-prompts", "--num-warmups", "--request-rate", "--burstiness",
                 "--random-input-len", "--random-output-len", "--random-range-ratio", "--random-prefix-len",
                 "--ignore-eos", "--seed", "--save-result", "--result-dir", "--result-filename",
                 "--percentile-metrics", "--metric-percentiles", "--model", "--gpu", "--tp", "--backend",
                 "--quantization", "--kv-cache-dtype", "--cost-model", "--max-num-seqs",
                 "--max-num-batched-tokens", "--set", "--scenario"):  # fmt: skip
        assert flag in out, flag


def test_deployment_flags_set_replica_group_0(tmp_path: Path):
    from kvsim.cli import build_parser
    from kvsim.cli.bench_cmd import build_scenario

    base = tmp_path / "base.yaml"
    base.write_text("name: base\nworkload: {kind: bench_serve, num_prompts: 7, max_concurrency: 2}\n")
    args = build_parser().parse_args(
        ["bench-serve", "--scenario", str(base), "--model", "llama-2-7b", "--gpu", "a100-80gb", "--tp", "2",
         "--kv-cache-dtype", "fp8", "--max-num-seqs", "32", "--max-num-batched-tokens", "4096",
         "--cost-model", "roofline", "--max-concurrency", "5", "--set", "replicas.0.engine.block_size=32"]
    )  # fmt: skip
    scenario, _ = build_scenario(args)
    group = scenario.replicas[0]
    assert (scenario.model, group.gpu, group.tp) == ("llama-2-7b", "a100-80gb", 2)
    assert (group.engine.kv_cache_dtype, group.engine.max_num_seqs, group.engine.max_num_batched_tokens) == (
        "fp8",
        32,
        4096,
    )
    assert group.engine.block_size == 32 and group.cost_model.kind == "roofline"
    # Unset client flags keep the base scenario's client: 7 prompts, concurrency now 5.
    assert scenario.workload.num_prompts == 7 and scenario.workload.max_concurrency == 5  # type: ignore[union-attr]


_PENDING = {
    "backend": "engine.backend (vllm | sglang | trtllm) is being added on another branch",
    "quantization": "engine.quantization (bf16 ... int4) is being added on another branch",
}


@pytest.mark.parametrize(("flag", "value"), [("backend", "sglang"), ("quantization", "fp8")])
def test_backend_and_quantization_flags_set_their_engine_fields(flag: str, value: str, capsys):
    if flag not in EngineConfig.model_fields:
        pytest.xfail(f"--{flag} maps to replicas.0.engine.{flag}; {_PENDING[flag]}")
    from kvsim.cli import build_parser
    from kvsim.cli.bench_cmd import build_scenario

    args = build_parser().parse_args(["bench-serve", f"--{flag}", value, "--num-prompts", "2"])
    scenario, _ = build_scenario(args)
    assert getattr(scenario.replicas[0].engine, flag) == value


def test_cost_model_flag_sets_the_kind_of_group_0():
    from kvsim.cli import build_parser
    from kvsim.cli.bench_cmd import build_scenario

    # kernels (measured kernel tables) is being added on another branch: either it is a kind
    # now, or the error names the flag and the field it set.
    args = build_parser().parse_args(["bench-serve", "--cost-model", "kernels", "--num-prompts", "2"])
    try:
        scenario, _ = build_scenario(args)
    except kvsim.KvsimError as exc:
        assert "--cost-model (replicas.0.cost_model" in str(exc)
    else:
        assert scenario.replicas[0].cost_model.kind == "kernels"
    profile = build_parser().parse_args(
        [
            "bench-serve",
            "--set",
            "replicas.0.cost_model={kind: constant, step_time_s: 0.02}",
            "--num-prompts",
            "2",
        ]
    )
    assert build_scenario(profile)[0].replicas[0].cost_model.kind == "constant"
