"""The benchmark client (``workload: {kind: bench_serve}``) as ``vllm bench serve`` runs it:
its draws against vLLM 0.32.0's own, hand-computed closed loops on a constant-cost engine,
Little's law, warm-ups left out, paced sends, and fast-forward equal to stepping."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from oracle import run_eager
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.core.request_state import Request, Status
from kvsim.engine.sources import BenchClientSource, ConversationSource, Release
from kvsim.request import RequestSpec, Segment
from kvsim.workload.bench_serve import BenchClient, draw_lengths, generate_bench_serve, ready_offsets
from kvsim.workload.config import BenchServeWorkload


def bench(
    step_s: float | None = 0.01, engine: dict[str, Any] | None = None, **workload: Any
) -> dict[str, Any]:
    """A one-replica scenario with a benchmark client; constant-cost iterations unless step_s is None."""
    group: dict[str, Any] = {"gpu": "h100-sxm", "engine": engine or {}}
    if step_s is not None:
        group["cost_model"] = {"kind": "constant", "step_time_s": step_s}
    return {"model": "llama-3-8b", "replicas": [group], "workload": {"kind": "bench_serve", **workload}}


def measured(res: kvsim.Result) -> Any:
    return res.requests[~res.requests["warmup"]]


# --------------------------------------------------------------------------- vLLM's draws


def test_lengths_are_the_draws_of_vllm_0_32s_random_dataset():
    # vLLM 0.32.0, benchmarks/datasets/utils.py get_sampling_params(np.random.default_rng(0), 8,
    # range_ratio, input_len, output_len, tokenizer) with a tokenizer adding 1 special token,
    # run in .venv-vllm: these are its input_lens and output_lens.
    cfg = BenchServeWorkload(
        num_prompts=8,
        random_input_len=1024,
        random_output_len=128,
        random_range_ratio=0.5,
        num_special_tokens=1,
    )
    inputs, outputs = draw_lengths(cfg, 0)
    assert inputs.tolist() == [1382, 1163, 1034, 787, 826, 552, 588, 527]
    assert outputs.tolist() == [86, 168, 147, 181, 128, 142, 189, 158]
    # The JSON form {"input": 0.3, "output": 0.0} of --random-range-ratio, input 1000, output 100.
    split = BenchServeWorkload(
        num_prompts=8,
        random_input_len=1000,
        random_output_len=100,
        random_range_ratio={"input": 0.3, "output": 0.0},
        num_special_tokens=1,
    )
    inputs, outputs = draw_lengths(split, 0)
    assert inputs.tolist() == [1210, 1081, 1006, 861, 884, 723, 744, 708]
    assert outputs.tolist() == [100] * 8
    # The server adds the special token back: the engine sees drawn + 1.
    specs, _ = generate_bench_serve(cfg, 0)
    assert [s.prompt_tokens for s in specs] == [n + 1 for n in [1382, 1163, 1034, 787, 826, 552, 588, 527]]


def test_ready_times_are_vllm_0_32s_get_request():
    # vllm/benchmarks/serve.py get_request after np.random.seed(seed), its clock and sleep
    # replaced by a counter (run in .venv-vllm): when each request was yielded.
    assert ready_offsets(6, 4.0, 0.5, 0) == pytest.approx(
        [
            0.2016515299243791,
            0.452567967117729,
            0.5716234769927966,
            0.6986383212514438,
            1.28210314083162,
            1.5,
        ],
        rel=1e-12,
    )
    assert ready_offsets(5, 2.0, 1.0, 3) == pytest.approx(
        [0.37571754270475766, 0.9538873357466434, 1.11527873221792, 1.4509767197277408, 2.5], rel=1e-12
    )
    assert ready_offsets(4, 2.0, math.inf, 3).tolist() == [0.5, 1.0, 1.5, 2.0]
    assert ready_offsets(3, math.inf, 1.0, 0).tolist() == [0.0, 0.0, 0.0]


def test_legacy_range_rule_draws_between_l_times_r_and_l():
    cfg = BenchServeWorkload(
        num_prompts=4000, random_input_len=1000, random_output_len=200, random_range_ratio=0.8,
        random_range_ratio_rule="legacy", num_special_tokens=1,
    )  # fmt: skip
    assert cfg.input_range == (800, 1000) and cfg.output_range == (160, 200)  # special tokens not subtracted
    inputs, outputs = draw_lengths(cfg, 0)
    assert inputs.min() == 800 and inputs.max() == 1000 and abs(inputs.mean() - 900) < 3
    assert outputs.min() == 160 and outputs.max() == 200
    symmetric = cfg.model_copy(update={"random_range_ratio_rule": "symmetric"})
    assert symmetric.input_range == (199, 1799)  # floor(999 x 0.2), ceil(999 x 1.8)
    fixed = BenchServeWorkload(random_range_ratio=1.0, random_range_ratio_rule="legacy")
    assert fixed.input_range == (1024, 1024) and fixed.output_range == (128, 128)


def test_prompts_share_only_the_random_prefix_and_warmups_repeat_the_first():
    cfg = BenchServeWorkload(
        num_prompts=3, num_warmups=2, ready_check=True, random_input_len=100, random_prefix_len=32,
        num_special_tokens=1, max_concurrency=2,
    )  # fmt: skip
    specs, client = generate_bench_serve(cfg, 0)
    assert [s.request_id for s in specs] == [0, 1, 2, 3, 4, 5]
    assert client.measured == (0, 1, 2) and client.warmups == (3, 4) and client.ready_check == 5
    assert client.unmeasured == (5, 3, 4) and client.max_concurrency == 2
    for i, s in enumerate(specs[:3]):
        assert s.prompt[:2] == (Segment(1, 1), Segment(0, 32)) and s.prompt[2] == Segment(2 + i, 99)
    assert all(s.prompt == specs[0].prompt and s.output_tokens == specs[0].output_tokens for s in specs[3:])


def test_inputs_are_checked_with_vllms_rules():
    with pytest.raises(
        kvsim.ScenarioError, match=r"random_range_ratio must be in \[0, 1\) under the symmetric"
    ):
        kvsim.load_scenario({"workload": {"kind": "bench_serve", "random_range_ratio": 1.0}})
    with pytest.raises(kvsim.ScenarioError, match=r"workload\.bench_serve\.ignore_eos: .*must be true"):
        kvsim.load_scenario({"workload": {"kind": "bench_serve", "ignore_eos": False}})
    with pytest.raises(kvsim.ScenarioError, match=r"request_rate: .*must be inf or a number"):
        kvsim.load_scenario({"workload": {"kind": "bench_serve", "request_rate": 0}})
    with pytest.raises(kvsim.ScenarioError, match="random_input_len is too small"):
        kvsim.load_scenario({"workload": {"kind": "bench_serve", "random_input_len": 0}})
    ok = kvsim.load_scenario(
        {"workload": {"kind": "bench_serve", "request_rate": "inf", "burstiness": ".inf"}}
    )
    assert ok.workload.request_rate == "inf" and ok.workload.burstiness == "inf"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- the source, as a story


def _finish(specs: dict[int, RequestSpec], rid: int, t: float) -> Request:
    req = Request(specs[rid])
    req.status, req.metrics.finish_s = Status.FINISHED, t
    return req


def test_bench_client_source_sends_the_next_request_in_order_when_a_slot_frees():
    specs = {i: RequestSpec(i, 0.0, (Segment(i, 8),), 4) for i in range(7)}
    client = BenchClient(measured=(0, 1, 2, 3), ready_offsets_s=(0.0, 0.0, 5.0, 5.0), warmups=(4, 5), ready_check=6,
                         max_concurrency=2)  # fmt: skip
    src = BenchClientSource(specs.values(), client)
    log = [(r.spec.request_id, r.at_s, r.ready_s) for r in src.start()]
    assert log == [(6, 0.0, 0.0)]  # the ready check, alone
    log = [(r.spec.request_id, r.at_s) for r in src.on_done(_finish(specs, 6, 1.0), 1.0)]
    assert log == [(4, 1.0), (5, 1.0)]  # both warm-ups at once (concurrency 2)
    assert src.on_done(_finish(specs, 4, 2.0), 2.0) == []  # nothing left to send; 5 still running
    assert math.isnan(src.measured_start_s)
    log = [(r.spec.request_id, r.at_s, r.ready_s) for r in src.on_done(_finish(specs, 5, 3.0), 3.0)]
    assert log == [(0, 3.0, 3.0), (1, 3.0, 3.0)] and src.measured_start_s == 3.0
    # Request 2 is ready at 3 + 5 = 8: a slot free at 4 waits for it; one free at 9 is taken at once.
    assert [(r.at_s, r.ready_s) for r in src.on_done(_finish(specs, 0, 4.0), 4.0)] == [(8.0, 8.0)]
    assert [(r.spec.request_id, r.at_s, r.ready_s) for r in src.on_done(_finish(specs, 1, 9.0), 9.0)] == [
        (3, 9.0, 8.0)
    ]


def test_conversation_source_releases_follow_ups_and_drops_them_after_a_rejection():
    parent = RequestSpec(0, 1.0, (Segment(1, 8),), 2)
    child = RequestSpec(
        1, 1.0, (Segment(1, 8), Segment(-1, 2), Segment(2, 4)), 2, parent_id=0, think_time_s=3.0
    )
    src = ConversationSource([child, parent])
    assert [r.spec.request_id for r in src.start()] == [0]
    done = Request(parent)
    done.status, done.metrics.finish_s = Status.FINISHED, 2.5
    assert src.on_done(done, 2.5) == [Release(child, 5.5)]
    src = ConversationSource([child, parent])
    refused = Request(parent)
    refused.status = Status.REJECTED
    assert src.on_done(refused, 1.0) == [Release(child, dropped="parent_rejected")]


# --------------------------------------------------------------------------- hand-computed loops


def test_one_client_ttft_is_one_prefill_iteration_and_tpot_the_decode_step():
    # One client, 10 ms iterations, 100-token prompts, 5 output tokens: each request is sent
    # when the previous finishes, to an idle engine, so it is scheduled at once.
    res = kvsim.run(bench(0.01, num_prompts=10, max_concurrency=1, num_warmups=2, random_input_len=100,
                          random_output_len=5))  # fmt: skip
    m = measured(res)
    assert m["ttft_s"].tolist() == pytest.approx([0.01] * 10, rel=1e-9)
    assert m["tpot_s"].tolist() == pytest.approx([0.01] * 10, rel=1e-9)
    assert m["e2e_s"].tolist() == pytest.approx([0.05] * 10, rel=1e-9)
    assert m["arrival_s"].tolist() == pytest.approx([0.1 + 0.05 * i for i in range(10)], rel=1e-9)
    s = res.summary
    assert s["measured_start_s"] == pytest.approx(0.1) and s["num_requests"] == 10
    assert s["itl_mean_s"] == pytest.approx(0.01) and s["ttft_mean_s"] == pytest.approx(0.01)
    assert s["throughput_requests_per_s"] == pytest.approx(10 / 0.5)


def test_c_clients_startup_waves_follow_the_token_budget():
    # Four clients, 1,000-token prompts, a 2,048-token budget, 10 ms iterations, 10 outputs.
    #   iteration 1 [0, 10 ms]:  r0 1000 + r1 1000 + r2's first 48 tokens   -> r0, r1 first token
    #   iteration 2 [10, 20]:    r0, r1 decode + r2's last 952 + r3 1000    -> r2, r3 first token
    #   r0, r1 finish at 100 ms (first token + 9 decodes); r2, r3 at 110 ms.
    # r4, r5 are sent at 100 ms, when the engine has already scheduled [100, 110] without
    # them (the client's turnaround): they prefill in [110, 120], TTFT 20 ms. r6, r7, sent at
    # 110 ms, prefill in [120, 130] beside r4 and r5's decodes (2,002 tokens): TTFT 20 ms.
    res = kvsim.run(bench(0.01, {"max_num_batched_tokens": 2048}, num_prompts=8, max_concurrency=4,
                          random_input_len=1000, random_output_len=10))  # fmt: skip
    r = res.requests
    assert r["ttft_s"].tolist() == pytest.approx([0.01, 0.01, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02], rel=1e-9)
    assert r["arrival_s"].tolist() == pytest.approx([0, 0, 0, 0, 0.1, 0.1, 0.11, 0.11], rel=1e-9)
    assert r["finish_s"].tolist()[:4] == pytest.approx([0.1, 0.1, 0.11, 0.11], rel=1e-9)
    assert list(res.iterations["prefill_tokens"][:2]) == [2048, 1952]
    assert r["client_queue_s"].tolist() == pytest.approx([0, 0, 0, 0, 0.1, 0.1, 0.11, 0.11], rel=1e-9)
    assert res.summary["ttft_mean_s"] == pytest.approx(0.0175)


def test_littles_law_holds_for_the_closed_loop():
    # Throughput x mean E2E = mean requests in flight = C while every client is busy; only
    # the drain at the end (fewer than C left) pulls it below.
    c = 8
    res = kvsim.run(bench(None, num_prompts=1500, max_concurrency=c, random_input_len=512,
                          random_output_len=64, random_range_ratio=0.5))  # fmt: skip
    s = res.summary
    assert 0.98 * c < s["throughput_requests_per_s"] * s["e2e_mean_s"] <= c
    # Exactly C in flight from the start until the last request is sent.
    r = res.requests
    start, last_send = s["measured_start_s"], r["arrival_s"].max()
    busy = (np.minimum(r["finish_s"], last_send) - np.maximum(r["arrival_s"], start)).clip(lower=0).sum()
    assert busy == pytest.approx(c * (last_send - start), rel=1e-9)


def test_warmups_run_first_at_the_same_concurrency_and_are_left_out():
    res = kvsim.run(bench(None, num_prompts=40, max_concurrency=4, num_warmups=8, ready_check=True,
                          random_input_len=300, random_output_len=20, random_range_ratio=0.5))  # fmt: skip
    r, s = res.requests, res.summary
    warm, meas = r[r["warmup"]], r[~r["warmup"]]
    assert len(warm) == 9 and len(meas) == 40
    ready = warm[warm["request_id"] == 48].iloc[0]
    assert ready["arrival_s"] == 0 and (warm["arrival_s"].drop(ready.name) >= ready["finish_s"]).all()
    assert s["measured_start_s"] == warm["finish_s"].max() == meas["arrival_s"].min()
    times = np.sort(np.concatenate([warm["arrival_s"], warm["finish_s"]]))
    in_flight = [((warm["arrival_s"] <= t) & (warm["finish_s"] > t)).sum() for t in times]
    assert max(in_flight) == 4
    assert (s["num_requests"], s["num_finished"], s["num_warmup_requests"]) == (40, 40, 9)
    assert s["prompt_tokens"] == meas["prompt_tokens"].sum()
    assert s["ttft_mean_s"] == pytest.approx(meas["ttft_s"].mean(), rel=1e-12)
    assert s["throughput_requests_per_s"] == pytest.approx(40 / (s["sim_time_s"] - s["measured_start_s"]))
    # The warm-ups repeat the first prompt: the cache holds it for them and for request 0.
    assert (warm["prefix_cache_hits_tokens"] > 0).sum() >= 7 and meas.iloc[0]["prefix_cache_hits_tokens"] > 0


def test_a_finite_rate_paces_sends_with_gamma_gaps():
    rate, burstiness, n = 20.0, 0.25, 4000
    res = kvsim.run(bench(0.001, num_prompts=n, request_rate=rate, burstiness=burstiness, random_input_len=32,
                          random_output_len=2, seed=5))  # fmt: skip
    sends = np.sort(res.requests["arrival_s"].to_numpy())
    # vLLM scales the gaps so that the last request is ready n / rate after the start.
    assert sends[-1] == pytest.approx(n / rate, rel=1e-12)
    gaps = np.diff(np.concatenate([[0.0], sends]))
    assert gaps.mean() == pytest.approx(1 / rate, rel=1e-12)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)
    assert (res.requests["client_queue_s"] == 0).all()  # no concurrency limit: sent when ready


def test_a_rate_and_a_concurrency_limit_together():
    res = kvsim.run(bench(None, num_prompts=300, request_rate=40.0, max_concurrency=4, random_input_len=800,
                          random_output_len=64))  # fmt: skip
    r = res.requests.sort_values("request_id")
    sends = r["arrival_s"].to_numpy()
    ready = sends - r["client_queue_s"].to_numpy()
    offsets = ready_offsets(300, 40.0, 1.0, 0)
    assert ready == pytest.approx(offsets, rel=1e-12, abs=1e-12)  # seed 0: the scenario's
    assert (np.diff(sends) >= 0).all() and (r["client_queue_s"] > 0).any()


# --------------------------------------------------------------------------- fast-forward


@pytest.mark.parametrize(
    "extra",
    [
        {"max_concurrency": 16, "num_warmups": 8},
        {"max_concurrency": 32, "request_rate": 30.0, "burstiness": 0.5},
        {"max_concurrency": 24, "engine": {"num_gpu_blocks_override": 300}},  # preemptions
        {
            "max_concurrency": 6,
            "engine": {"max_num_seqs": 4},
            "ready_check": True,
        },  # requests queue in the engine
    ],
)
def test_fast_forward_equals_stepping_with_the_closed_loop(extra):
    extra = dict(extra)
    engine = extra.pop("engine", {})
    scenario = bench(None, engine, num_prompts=200, random_input_len=600, random_output_len=80,
                     random_range_ratio=0.6, random_prefix_len=40, **extra)  # fmt: skip
    fast = kvsim.run(scenario | {"sim": {"fast_forward": True}})
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert_frame_equal(fast.events, slow.events, check_exact=True)
    assert len(fast.iterations) > 500
    if engine.get("num_gpu_blocks_override"):
        assert fast.summary["num_preemptions"] > 0


def test_same_seed_same_requests_and_times():
    a = kvsim.run(bench(None, num_prompts=50, max_concurrency=5, random_range_ratio=0.3))
    b = kvsim.run(bench(None, num_prompts=50, max_concurrency=5, random_range_ratio=0.3))
    assert_frame_equal(a.requests, b.requests, check_exact=True)
    c = kvsim.run(bench(None, num_prompts=50, max_concurrency=5, random_range_ratio=0.3, seed=1))
    assert c.requests["prompt_tokens"].tolist() != a.requests["prompt_tokens"].tolist()


def test_the_decode_cohort_equals_walking_every_request_with_the_closed_loop():
    scenario = bench(None, {"num_gpu_blocks_override": 400}, num_prompts=150, max_concurrency=20, num_warmups=10,
                     random_input_len=500, random_output_len=120, random_range_ratio=0.8)  # fmt: skip
    lazy = kvsim.run(scenario)
    eager = run_eager(scenario)
    assert lazy.summary["num_preemptions"] > 0
    assert_frame_equal(lazy.requests, eager.requests, check_exact=True)
    assert_frame_equal(lazy.iterations, eager.iterations, check_exact=True)
    assert_frame_equal(lazy.events, eager.events, check_exact=True)
