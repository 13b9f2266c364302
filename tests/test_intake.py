"""How an engine takes requests in: SGLang's --scheduler-recv-interval and TensorRT-LLM's
batch waiting (``engine.scheduler_recv_interval``, ``engine.batch_wait_timeout_iters`` /
``batch_wait_max_tokens_ratio``), by hand on a constant-cost engine, and bit for bit equal to
stepping every iteration (the oracle, ``tests/oracle.py``) on random small scenarios.

The hand-computed cases: every iteration takes D = 10 ms whatever it does; request 0 (100
prompt tokens, 10 output tokens) arrives at 0 and request 1 (100 prompt tokens) at 15 ms,
during iteration 2 ([10, 20) ms is iteration 1; iteration k runs [10 k, 10 k + 10) ms).
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


def _one(backend: str, **engine: Any) -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "replicas": [
            {
                "gpu": "h100-sxm",
                "engine": {"backend": backend, "max_num_batched_tokens": 1000, **engine},
                "cost_model": {"kind": "constant", "step_time_s": D},
            }
        ],
    }


def _ttft(scenario: dict[str, Any], reqs: list[Any]) -> list[float]:
    res = kvsim.run(scenario, requests=reqs)
    assert_identical(res, run_eager(scenario, requests=reqs))
    return res.requests.sort_values("request_id").ttft_s.tolist()


REQS = [spec(0, 100, output=10), spec(1, 100, output=3, arrival=0.015)]


def test_without_intake_rules_a_request_is_prefilled_by_the_next_iteration() -> None:
    # Request 1 arrives during iteration 1 ([10, 20) ms) and is prefilled in iteration 2
    # ([20, 30) ms): first token at 30 ms, 15 ms after it arrived.
    assert _ttft(_one("sglang"), REQS) == pytest.approx([D, 0.015], rel=1e-12)
    assert _ttft(_one("trtllm"), REQS) == pytest.approx([D, 0.015], rel=1e-12)


def test_sglang_takes_requests_in_every_recv_interval_decode_iterations() -> None:
    # Interval 3. Iteration 0 prefills request 0 (a prefill batch: the next iteration polls).
    # Iteration 1 (10 ms) polls, nothing there, counter 0 -> decode, 1. Request 1 arrives at
    # 15 ms, unseen. Iteration 2 (20 ms): 1 < 3, decode, 2. Iteration 3 (30 ms): decode, 3.
    # Iteration 4 (40 ms) polls and prefills request 1: first token at 50 ms, TTFT 35 ms.
    assert _ttft(_one("sglang", scheduler_recv_interval=3), REQS) == pytest.approx([D, 0.035], rel=1e-12)
    # Interval 2: the poll comes at iteration 3 (30 ms): first token at 40 ms, TTFT 25 ms.
    assert _ttft(_one("sglang", scheduler_recv_interval=2), REQS) == pytest.approx([D, 0.025], rel=1e-12)


def test_an_idle_sglang_engine_takes_a_request_at_once() -> None:
    # Request 0 is done at 100 ms (10 iterations); request 1 comes at 0.5 s to an idle engine.
    reqs = [spec(0, 100, output=10), spec(1, 100, output=3, arrival=0.5)]
    assert _ttft(_one("sglang", scheduler_recv_interval=30), reqs) == pytest.approx([D, D], rel=1e-12)


def test_requests_unseen_count_as_waiting() -> None:
    scenario = _one("sglang", scheduler_recv_interval=3)
    it = kvsim.run(scenario, requests=REQS, overrides=["sim.fast_forward=false"]).iterations
    # Iterations 2 and 3 (20, 30 ms) see request 1 in the inbox; iteration 4 admits it.
    assert it.num_waiting.tolist()[:5] == [0, 0, 1, 1, 0]


def test_trtllm_holds_new_prompts_back_until_the_timeout() -> None:
    # Timeout 2 iterations, ratio 0.5 of 1,000 tokens: 500. Iteration 2 (20 ms) schedules
    # request 0's decode (1 token) and could start request 1 (100): 101 < 500, it waits (1).
    # Iteration 3 waits again (2). Iteration 4 (40 ms): 2 >= 2, request 1 starts: TTFT 35 ms.
    scenario = _one("trtllm", batch_wait_timeout_iters=2, batch_wait_max_tokens_ratio=0.5)
    assert _ttft(scenario, REQS) == pytest.approx([D, 0.035], rel=1e-12)


def test_trtllm_starts_held_prompts_once_they_fill_the_ratio() -> None:
    # Request 2's 600 tokens arrive at 45 ms: at iteration 5 (50 ms) 1 decode + 600 >= 500,
    # so it starts at once although the timeout (40 iterations) is far: first token at 60 ms.
    scenario = _one("trtllm", batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.5)
    reqs = [spec(0, 100, output=10), spec(2, 600, output=3, arrival=0.045)]
    assert _ttft(scenario, reqs) == pytest.approx([D, 0.015], rel=1e-12)
    # A 100-token prompt alone waits the whole timeout: prefilled at iteration 2 + 40 = 42.
    reqs = [spec(0, 100, output=60), spec(1, 100, output=3, arrival=0.015)]
    assert _ttft(scenario, reqs) == pytest.approx([D, 0.43 - 0.015], rel=1e-12)


def test_trtllm_does_not_wait_without_a_decoding_request() -> None:
    # Both arrive at 0: nobody decodes yet, so nothing waits (one prefill of 200 tokens).
    scenario = _one("trtllm", batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.9)
    reqs = [spec(0, 100, output=10), spec(1, 100, output=3)]
    assert _ttft(scenario, reqs) == pytest.approx([D, D], rel=1e-12)


@pytest.mark.parametrize("timeout, ratio", [(0, 0.5), (40, 0.0)])
def test_trtllm_batch_waiting_needs_both_knobs(timeout: int, ratio: float) -> None:
    # TensorRT-LLM stops waiting once iterations >= timeout or tokens >= ratio x budget: with
    # either at 0 that holds at once.
    scenario = _one("trtllm", batch_wait_timeout_iters=timeout, batch_wait_max_tokens_ratio=ratio)
    assert _ttft(scenario, REQS) == pytest.approx([D, 0.015], rel=1e-12)


@pytest.mark.parametrize(
    "backend, knob, value",
    [
        ("vllm", "scheduler_recv_interval", 30),
        ("trtllm", "scheduler_recv_interval", 2),
        ("sglang", "batch_wait_timeout_iters", 40),
        ("vllm", "batch_wait_max_tokens_ratio", 0.8),
    ],
)
def test_an_intake_knob_of_another_engine_is_refused(backend: str, knob: str, value: Any) -> None:
    with pytest.raises(KvsimError, match=knob.split("_")[0]):
        kvsim.run(_one(backend, **{knob: value}), requests=REQS)


@st.composite
def _intake_runs(draw: Any) -> tuple[dict[str, Any], list[Any]]:
    scenario, reqs = draw(_small_engine_runs())
    engine = scenario["replicas"][0]["engine"]
    if draw(st.booleans()):
        engine |= {"backend": "sglang", "scheduler_recv_interval": draw(st.integers(2, 40))}
    else:
        engine |= {
            "backend": "trtllm",
            "batch_wait_timeout_iters": draw(st.integers(1, 60)),
            "batch_wait_max_tokens_ratio": draw(st.sampled_from([0.1, 0.5, 0.8, 1.0])),
        }
    return scenario, reqs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_intake_runs())
def test_intake_rules_change_nothing_between_fast_forward_and_stepping(case: Any) -> None:
    """Decode runs end where the scheduler would poll or stop holding prompts back; arrivals
    ride along them: bit for bit as stepping every iteration over every request."""
    scenario, reqs = case
    for fast_forward in (True, False):
        run = scenario | {"sim": {"fast_forward": fast_forward}}
        assert_identical(kvsim.run(run, requests=reqs), run_eager(run, requests=reqs))
