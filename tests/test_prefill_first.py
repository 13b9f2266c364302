"""SGLang's iterations run prompts or decodes, never both (``engine.enable_mixed_chunk``, off
as in SGLang): whenever a prompt can start or is part-way through its chunks, the iteration
prefills and the decoding requests wait. By hand on a constant-cost engine, and bit for bit
equal to stepping every iteration (the oracle, ``tests/oracle.py``) on random small scenarios.

The hand-computed cases: every iteration takes D = 10 ms whatever it does, the token budget
(SGLang's chunked_prefill_size) is 1,000; iteration k runs [10 k, 10 k + 10) ms.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import run_eager
from test_cohort import assert_identical
from test_engine import _small_engine_runs

import kvsim
from kvsim.errors import KvsimError

D = 0.01


def _one(backend: str = "sglang", **engine: Any) -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "replicas": [
            {
                "gpu": "h100-sxm",
                "engine": {"backend": backend, "max_num_batched_tokens": 1000, "block_size": 16, **engine},
                "cost_model": {"kind": "constant", "step_time_s": D},
            }
        ],
    }


def _run(scenario: dict[str, Any], reqs: list[Any]) -> kvsim.Result:
    res = kvsim.run(scenario, requests=reqs)
    assert_identical(res, run_eager(scenario, requests=reqs))
    return res


def _times(res: kvsim.Result) -> list[float]:
    """First token and finish of each request, in request order, seconds (flat)."""
    r = res.requests.sort_values("request_id")
    return [t for pair in zip(r.first_token_s.tolist(), r.finish_s.tolist(), strict=True) for t in pair]


def _steps(res: kvsim.Result) -> list[tuple[int, int]]:
    """(prefill tokens, decode tokens) of each iteration."""
    it = res.iterations
    return list(zip(it.prefill_tokens.tolist(), it.decode_tokens.tolist(), strict=True))


def test_a_new_prompt_runs_alone_and_the_decodes_wait() -> None:
    # Request 0 (100 tokens, 10 out) is prefilled in iteration 0 (first token 10 ms) and
    # decodes in iteration 1. Request 1 (100 tokens, 3 out) arrives at 15 ms: iteration 2
    # ([20, 30) ms) is its prefill alone (first token 30 ms), request 0 waits. From iteration 3
    # both decode: request 0's tokens at 10, 20, 40, 50, ..., 110 ms; request 1's at 30, 40, 50.
    reqs = [spec(0, 100, output=10), spec(1, 100, output=3, arrival=0.015)]
    res = _run(_one(), reqs)
    assert _times(res) == pytest.approx([0.01, 0.11, 0.03, 0.05], rel=1e-12)
    assert _steps(res)[:4] == [(100, 0), (0, 1), (100, 0), (0, 2)]
    assert res.requests.sort_values("request_id").max_itl_s.tolist()[0] == pytest.approx(0.02, rel=1e-12)


def test_mixed_chunks_put_the_prompt_beside_the_decodes() -> None:
    # --enable-mixed-chunk: iteration 2 holds request 1's prompt and request 0's decode, so
    # request 0 is done at 100 ms, as in vLLM.
    reqs = [spec(0, 100, output=10), spec(1, 100, output=3, arrival=0.015)]
    res = _run(_one(enable_mixed_chunk=True), reqs)
    assert _times(res) == pytest.approx([0.01, 0.10, 0.03, 0.05], rel=1e-12)
    assert _steps(res)[2] == (100, 1)
    assert _times(_run(_one("vllm"), reqs)) == _times(res)


def test_a_chunked_prompt_keeps_the_iterations_until_it_is_done() -> None:
    # Request 1 (2,500 tokens) arrives at 15 ms: chunks of 1,000, 1,000 and 500 in iterations
    # 2, 3 and 4 (first token 50 ms); request 0 waits three iterations: its tokens at 10, 20,
    # 60, 70, ... 130 ms.
    reqs = [spec(0, 100, output=10), spec(1, 2500, output=2, arrival=0.015)]
    res = _run(_one(), reqs)
    assert _times(res) == pytest.approx([0.01, 0.13, 0.05, 0.06], rel=1e-12)
    assert _steps(res)[:6] == [(100, 0), (0, 1), (1000, 0), (1000, 0), (500, 0), (0, 2)]


def test_a_prefill_batch_packs_waiting_prompts_up_to_the_budget() -> None:
    # Three 600-token prompts at 0: iteration 0 prefills request 0 and 400 tokens of request 1;
    # iteration 1 the last 200 of request 1 and request 2, while request 0, which has its first
    # token, waits. Iterations 2 and 3 decode all three: done together at 40 ms.
    reqs = [spec(i, 600, output=3) for i in range(3)]
    res = _run(_one(), reqs)
    assert _steps(res) == [(1000, 0), (800, 0), (0, 3), (0, 3)]
    assert _times(res) == pytest.approx([0.01, 0.04, 0.02, 0.04, 0.02, 0.04], rel=1e-12)


def test_a_prompt_that_does_not_fit_lets_the_decodes_run() -> None:
    # 11 blocks of 16 tokens, one the null block: 160 tokens. Request 0 (100 + 10) holds 7
    # blocks; request 1 (100 tokens, at 15 ms) needs 7 of the 3 left, so it cannot start and
    # the iterations decode: request 0 is done at 100 ms as if alone. Iteration 10 (100 ms)
    # prefills request 1: first token at 110 ms.
    reqs = [spec(0, 100, output=10), spec(1, 100, output=3, arrival=0.015)]
    res = _run(_one(num_gpu_blocks_override=11), reqs)
    assert _times(res) == pytest.approx([0.01, 0.10, 0.11, 0.13], rel=1e-12)


def test_a_full_batch_decodes() -> None:
    # max_running_requests 1: request 1 waits for request 0 to finish (100 ms), and request
    # 0 is never stalled.
    reqs = [spec(0, 100, output=10), spec(1, 100, output=3, arrival=0.015)]
    res = _run(_one(max_num_seqs=1), reqs)
    assert _times(res) == pytest.approx([0.01, 0.10, 0.11, 0.13], rel=1e-12)


def test_prompts_stay_in_step_in_a_closed_loop() -> None:
    # Two clients, fixed lengths (1,000-token prompts, 3 tokens out), 6 prompts: SGLang
    # prefills each pair's prompts in two iterations, then decodes them together, so a pair
    # finishes together and the next pair's prompts arrive together. Per pair: prefill
    # request a (1,000), prefill b (1,000), then 2 decodes: 4 iterations, 40 ms.
    # Mixed, request b's prompt shares iterations with a's decodes (b's first token at 30 ms),
    # and the two clients drift apart: they finish 20 ms apart from the first pair on.
    scenario = _one() | {
        "workload": {
            "kind": "bench_serve",
            "max_concurrency": 2,
            "num_prompts": 6,
            "random_input_len": 1000,
            "random_output_len": 3,
        }
    }
    res = kvsim.run(scenario)
    assert_identical(res, run_eager(scenario))
    r = res.requests.sort_values("arrival_s")
    assert r.finish_s.tolist() == pytest.approx([0.04, 0.04, 0.08, 0.08, 0.12, 0.12], rel=1e-12)
    assert r.ttft_s.tolist() == pytest.approx([0.01, 0.02] * 3, rel=1e-12)
    mixed = kvsim.run(scenario | {"replicas": [_one(enable_mixed_chunk=True)["replicas"][0]]})
    r = mixed.requests.sort_values("arrival_s")
    assert r.finish_s.tolist() == pytest.approx([0.03, 0.05, 0.08, 0.10, 0.13, 0.15], rel=1e-12)


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_mixed_chunks_are_sglangs_knob(backend: str) -> None:
    with pytest.raises(KvsimError, match="enable_mixed_chunk"):
        kvsim.run(_one(backend, enable_mixed_chunk=True), requests=[spec(0, 10, output=2)])


@st.composite
def _sglang_runs(draw: Any) -> tuple[dict[str, Any], list[Any]]:
    scenario, reqs = draw(_small_engine_runs())
    engine = scenario["replicas"][0]["engine"]
    engine["backend"] = "sglang"
    if draw(st.booleans()):
        engine["scheduler_recv_interval"] = draw(st.integers(2, 20))
    return scenario, reqs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sglang_runs())
def test_prompt_iterations_change_nothing_between_fast_forward_and_stepping(case: Any) -> None:
    """Prompt-only iterations take the decode cohort's members out and let them back in;
    decode runs end where a prompt can start: bit for bit as stepping every iteration."""
    scenario, reqs = case
    for fast_forward in (True, False):
        run = scenario | {"sim": {"fast_forward": fast_forward}}
        assert_identical(kvsim.run(run, requests=reqs), run_eager(run, requests=reqs))
