"""A server's front end (``engine.frontend``): a request reaches the scheduler request_s +
per_prompt_token_s x prompt tokens after it was sent; TTFT and latency count that time, the
GPU does not.

The hand-computed cases run a constant-cost engine: every iteration takes D = 10 ms, the
token budget is 1,000, so a 100-token prompt is prefilled in one iteration.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import spec
from oracle import run_eager
from test_cohort import assert_identical

import kvsim
from kvsim.errors import ScenarioError

D = 0.01


def _one(frontend: dict[str, float] | None = None, backend: str = "vllm") -> dict[str, Any]:
    engine: dict[str, Any] = {"backend": backend, "max_num_batched_tokens": 1000, "block_size": 16}
    if frontend is not None:
        engine["frontend"] = frontend
    return {
        "model": "llama-3-8b",
        "replicas": [
            {"gpu": "h100-sxm", "engine": engine, "cost_model": {"kind": "constant", "step_time_s": D}}
        ],
    }


def _run(scenario: dict[str, Any], reqs: list[Any]) -> kvsim.Result:
    res = kvsim.run(scenario, requests=reqs)
    assert_identical(res, run_eager(scenario, requests=reqs))
    return res


def _by_id(res: kvsim.Result, column: str) -> list[float]:
    return res.requests.sort_values("request_id")[column].tolist()


def test_the_front_end_delays_the_scheduler_and_counts_in_ttft() -> None:
    # 5 ms + 100 tokens x 50 us = 10 ms: request 0 (sent at 0) reaches the scheduler at 10 ms,
    # is prefilled in [10, 20) ms (TTFT 20 ms) and decodes its 2 more tokens by 40 ms.
    reqs = [spec(0, 100, output=3)]
    res = _run(_one({"request_s": 0.005, "per_prompt_token_s": 5e-5}), reqs)
    assert _by_id(res, "arrival_s") == [0.0]
    assert _by_id(res, "ttft_s") == pytest.approx([0.02], rel=1e-12)
    assert _by_id(res, "finish_s") == pytest.approx([0.04], rel=1e-12)
    assert res.iterations.start_s.tolist()[0] == pytest.approx(0.01, rel=1e-12)
    # Without a front end the same request is done by 30 ms (the default: token ids in-process).
    assert _by_id(_run(_one(), reqs), "finish_s") == pytest.approx([0.03], rel=1e-12)
    assert _by_id(_run(_one({}), reqs), "finish_s") == pytest.approx([0.03], rel=1e-12)


def test_a_longer_prompt_spends_longer_in_the_front_end() -> None:
    # per token only, 100 us: request 0 (100 tokens) reaches the scheduler at 10 ms, request 1
    # (500 tokens, sent at the same time) at 50 ms, after request 0 (2 tokens out) is done at
    # 30 ms; so it has the engine to itself: prefilled in [50, 60) ms, TTFT 60 ms.
    reqs = [spec(0, 100, output=2), spec(1, 500, output=2)]
    res = _run(_one({"per_prompt_token_s": 1e-4}), reqs)
    assert _by_id(res, "ttft_s") == pytest.approx([0.02, 0.06], rel=1e-12)
    assert _by_id(res, "finish_s") == pytest.approx([0.03, 0.07], rel=1e-12)
    assert res.iterations.prefill_tokens.tolist() == [100, 0, 500, 0]


def test_a_request_overtaken_in_the_front_end_is_scheduled_after() -> None:
    # A 1,000-token prompt sent first (front end 100 ms) and a 100-token one sent 1 ms later
    # (front end 10 ms): the short one reaches the scheduler first and runs first, as it would
    # behind a server that tokenizes requests concurrently.
    reqs = [spec(0, 1000, output=2), spec(1, 100, output=2, arrival=0.001)]
    res = _run(_one({"per_prompt_token_s": 1e-4}), reqs)
    assert _by_id(res, "ttft_s") == pytest.approx([0.11, 0.02], rel=1e-12)


def test_a_closed_loop_client_waits_for_the_front_end_too() -> None:
    # The bench client (1 at a time) sends its next request when the last one is done; each
    # spends 10 ms in the front end, 10 ms in its prefill and 10 ms per further token.
    scenario = _one({"request_s": 0.01})
    scenario["workload"] = {
        "kind": "bench_serve",
        "max_concurrency": 1,
        "num_prompts": 3,
        "num_warmups": 0,
        "ready_check": False,
        "random_input_len": 100,
        "random_output_len": 2,
        "random_range_ratio": 0.0,
        "num_special_tokens": 0,
    }
    res = kvsim.run(scenario)
    r = res.requests[~res.requests.warmup.to_numpy(dtype=bool)].sort_values("arrival_s")
    assert r.ttft_s.tolist() == pytest.approx([0.02] * 3, rel=1e-9)
    assert r.arrival_s.diff().dropna().tolist() == pytest.approx([0.03] * 2, rel=1e-9)


@pytest.mark.parametrize(
    ("frontend", "field"),
    [
        ({"request_s": -0.001}, "request_s"),
        ({"per_prompt_token_s": float("inf")}, "per_prompt_token_s"),
        ({"per_prompt_token_s": float("nan")}, "per_prompt_token_s"),
        ({"request_s": 1e9}, "request_s"),
        ({"per_request_s": 0.01}, "per_request_s"),
    ],
)
def test_bad_front_ends_are_refused_with_the_field_named(frontend: dict[str, float], field: str) -> None:
    with pytest.raises(ScenarioError, match=rf"replicas\.0\.engine\.frontend\.{field}"):
        kvsim.load_scenario(_one(frontend))
