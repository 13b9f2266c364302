"""Async scheduling (``engine.async_scheduling``): the next iteration is scheduled while the
current one runs (vLLM's AsyncScheduler, default from 0.14; SGLang's and TensorRT-LLM's overlap
schedulers), so a request that arrives during an iteration joins the one after the next.

The hand-computed cases run a constant-cost engine (as tests/test_frontend.py's, whose
helpers they share): every iteration takes D = 10 ms and the token budget is 1,000, so a 100-token prompt is prefilled in one iteration (its first token
at that iteration's end). Every case also runs on the oracle engine (no decode cohort, no
fast-forwarded runs) and must agree with it bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import spec
from test_frontend import D, _by_id, _run

import kvsim
from kvsim.errors import ScenarioError


def _one(async_scheduling: bool | None = True, backend: str = "vllm", **engine: Any) -> dict[str, Any]:
    eng: dict[str, Any] = {"backend": backend, "max_num_batched_tokens": 1000, "block_size": 16, **engine}
    if async_scheduling is not None:
        eng["async_scheduling"] = async_scheduling
    return {
        "model": "llama-3-8b",
        "replicas": [
            {"gpu": "h100-sxm", "engine": eng, "cost_model": {"kind": "constant", "step_time_s": D}}
        ],
    }


def test_an_arrival_during_an_iteration_joins_the_one_after_the_next() -> None:
    # Request 0 (sent at 0, 6 tokens out) runs iterations [0, 10), [10, 20), ... ms. Request 1
    # arrives at 15 ms, during [10, 20): synchronously it is prefilled in [20, 30) (TTFT 15 ms);
    # asynchronously [20, 30) was scheduled during [10, 20) without it, so [30, 40) (TTFT 25 ms).
    reqs = [spec(0, 100, output=6), spec(1, 100, output=2, arrival=0.015)]
    sync = _run(_one(False), reqs)
    assert _by_id(sync, "ttft_s") == pytest.approx([D, 0.015], rel=1e-12)
    res = _run(_one(True), reqs)
    assert _by_id(res, "ttft_s") == pytest.approx([D, 0.025], rel=1e-12)
    assert _by_id(res, "finish_s") == pytest.approx([0.06, 0.05], rel=1e-12)
    # The iteration in which it joins: [30, 40), the 4th, prefills its 100 tokens.
    assert res.iterations.prefill_tokens.tolist()[:5] == [100, 0, 0, 100, 0]
    assert _by_id(_run(_one(None), reqs), "ttft_s") == _by_id(sync, "ttft_s")  # off by default


def test_an_arrival_at_an_iterations_end_is_still_late() -> None:
    # At exactly 20 ms: synchronously the iteration starting there sees it (TTFT 10 ms);
    # asynchronously that iteration was decided during [10, 20): it starts at 30 ms (TTFT 20 ms).
    reqs = [spec(0, 100, output=6), spec(1, 100, output=2, arrival=0.02)]
    assert _by_id(_run(_one(False), reqs), "ttft_s") == pytest.approx([D, D], rel=1e-12)
    assert _by_id(_run(_one(True), reqs), "ttft_s") == pytest.approx([D, 0.02], rel=1e-12)


def test_an_idle_engine_takes_a_request_at_once() -> None:
    # Nothing runs when request 1 arrives at 50 ms (request 0 finished at 30 ms): no delay.
    reqs = [spec(0, 100, output=3), spec(1, 100, output=2, arrival=0.05)]
    res = _run(_one(True), reqs)
    assert _by_id(res, "ttft_s") == pytest.approx([D, D], rel=1e-12)
    # The last iteration's arrival while the engine empties: request 0's last token is in
    # [20, 30); request 1 arrives at 25 ms and starts at 30 ms, the engine having nothing else.
    reqs = [spec(0, 100, output=3), spec(1, 100, output=2, arrival=0.025)]
    assert _by_id(_run(_one(True), reqs), "ttft_s") == pytest.approx([D, 0.015], rel=1e-12)


def test_a_long_decode_run_is_cut_where_stepping_would_admit() -> None:
    # Request 0 decodes 200 tokens (a fast-forwarded run); request 1 arrives at 1.234 s, in
    # the iteration [1.23, 1.24): it is prefilled in [1.25, 1.26).
    reqs = [spec(0, 100, output=200), spec(1, 100, output=2, arrival=1.234)]
    res = _run(_one(True), reqs)
    assert _by_id(res, "ttft_s") == pytest.approx([D, 1.26 - 1.234], rel=1e-9)


def test_sglang_recv_interval_and_async_scheduling_together() -> None:
    # SGLang takes new requests every 4th decode iteration; arrivals ride the runs until then.
    # Whatever arrives in the iteration before a receiving one misses it (async) and waits for
    # the next; the oracle checks every arrival time of a dense grid.
    reqs = [spec(0, 100, output=60)] + [spec(i, 50, output=3, arrival=0.0037 * i) for i in range(1, 40)]
    res = _run(_one(True, backend="sglang", scheduler_recv_interval=4), reqs)
    sync = _run(_one(False, backend="sglang", scheduler_recv_interval=4), reqs)
    late = np.asarray(_by_id(res, "ttft_s")) - np.asarray(_by_id(sync, "ttft_s"))
    assert (late >= -1e-12).all() and late.max() > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_traffic_matches_the_oracle(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.02, 60))
    reqs = [
        spec(i, int(rng.integers(20, 900)), output=int(rng.integers(1, 80)), arrival=float(t[i]))
        for i in range(60)
    ]
    sync = _run(_one(False, max_num_seqs=8), reqs)
    res = _run(_one(True, max_num_seqs=8), reqs)
    assert res.summary["num_finished"] == 60
    assert res.requests.ttft_s.mean() > sync.requests.ttft_s.mean()


def test_attention_dp_ranks_hold_late_arrivals_too() -> None:
    # Two attention-DP ranks of a mixture of experts step together; request 1 (to rank 1) arrives
    # during the instance's second iteration and joins the one after the next.
    scenario = {
        "model": "qwen3-30b-a3b",
        "replicas": [{
            "gpu": "h100-sxm", "attention_dp": 2,
            "engine": {"max_num_batched_tokens": 1000, "block_size": 16, "async_scheduling": True},
            "cost_model": {"kind": "constant", "step_time_s": D},
        }],
        "router": {"kind": "round_robin"},
    }  # fmt: skip
    reqs = [spec(0, 100, output=6), spec(1, 100, output=2, arrival=0.015)]
    res = _run(scenario, reqs)
    assert _by_id(res, "ttft_s") == pytest.approx([D, 0.025], rel=1e-12)


def test_async_scheduling_must_be_a_boolean() -> None:
    scenario = _one(None)
    scenario["replicas"][0]["engine"]["async_scheduling"] = [1]
    with pytest.raises(ScenarioError, match=r"replicas\.0\.engine\.async_scheduling"):
        kvsim.load_scenario(scenario)
