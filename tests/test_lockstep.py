"""Attention-DP ranks of a mixture of experts step in lockstep (`kvsim.engine.lockstep`), and
TensorRT-LLM's attention-DP balancing (``engine.attention_dp_balance``), by hand.

The hand-computed cases run Mixtral-8x7B as tp 1 x attention_dp 2 (two ranks sharing the
experts, moe_ep 2) behind a round-robin router (requests 0, 2, ... on rank 0; 1, 3, ... on
rank 1), on a cost model where a rank's iteration takes A + B x its tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import spec
from oracle import run_eager
from test_cohort import assert_identical

import kvsim
from kvsim.cost.base import Batch, ConstantCostModel
from kvsim.engine.lockstep import instance_moe_tokens
from kvsim.errors import KvsimError

A, B = 1e-3, 1e-5  # 1 ms + 10 us per token


class TokenCost:
    """A rank's iteration: A + B x its tokens; keeps the MoE token counts it was told."""

    def __init__(self) -> None:
        self.moe_tokens: list[int | None] = []

    def step_time_s(self, batch: Batch) -> float:
        self.moe_tokens.append(batch.moe_tokens)
        return A + B * batch.num_tokens

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        return np.full(len(context_tokens), A + B * num_seqs)

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return 0.0


def _instance(backend: str = "vllm", model: str = "mixtral-8x7b", **engine: Any) -> dict[str, Any]:
    return {
        "model": model,
        "router": {"kind": "round_robin"},
        "replicas": [
            {
                "gpu": "h100-sxm",
                "tp": 1,
                "attention_dp": 2,
                "moe_ep": 2 if model == "mixtral-8x7b" else None,
                "engine": {"backend": backend, "max_num_batched_tokens": 2048, **engine},
            }
        ],
    }


def _run(scenario: dict[str, Any], reqs: list[Any], cost: Any) -> kvsim.Result:
    res = kvsim.run(scenario, requests=reqs, cost_model=cost)
    assert_identical(res, run_eager(scenario, requests=reqs, cost_model=cost))
    return res


def test_the_busiest_rank_sets_both_ranks_iterations() -> None:
    # Iteration 0: rank 0 prefills 1,000 tokens (11 ms), rank 1 100 (2 ms): both take 11 ms,
    # so both first tokens come at 11 ms; two decode iterations of 1.01 ms end both at 13.02.
    reqs = [spec(0, 1000, output=3), spec(1, 100, output=3)]
    res = _run(_instance(), reqs, TokenCost()).requests.sort_values("request_id")
    assert res.ttft_s.tolist() == pytest.approx([0.011, 0.011], rel=1e-12)
    assert res.e2e_s.tolist() == pytest.approx([0.01302, 0.01302], rel=1e-12)


def test_a_prompt_on_one_rank_stalls_the_other_rank_s_decodes() -> None:
    # Rank 0: request 0 (100 tokens) prefilled in [0, 2 ms), then decodes of 1.01 ms:
    # [2, 3.01), [3.01, 4.02), [4.02, 5.03). Request 1 (1,000 tokens) reaches rank 1 at 5 ms;
    # iteration 4 [5.03, 16.03) prefills it (11 ms) while rank 0 decodes one token in the same
    # 11 ms. Request 1's TTFT: 16.03 - 5 = 11.03 ms. Request 0's 10 tokens: 2, 3.01, 4.02,
    # 5.03, 16.03, then 1.01 ms apart from iteration 5 (rank 1 decodes too, still 1 token
    # each): 17.04, 18.05, 19.06, 20.07, 21.08 ms.
    reqs = [spec(0, 100, output=10), spec(1, 1000, output=3, arrival=0.005)]
    res = _run(_instance(), reqs, TokenCost())
    by_id = res.requests.set_index("request_id")
    assert by_id.ttft_s[1] == pytest.approx(0.01103, rel=1e-12)
    assert by_id.e2e_s[0] == pytest.approx(0.02108, rel=1e-12)
    rank0 = res.iterations[res.iterations.replica_id == "replica-0"]
    assert rank0.duration_s.tolist()[:6] == pytest.approx([0.002, 0.00101, 0.00101, 0.00101, 0.011, 0.00101])


def test_a_dense_model_s_ranks_are_independent_replicas() -> None:
    # Llama-3-8B with attention_dp 2: two data-parallel replicas; rank 1's 100-token prompt
    # takes its own 2 ms.
    reqs = [spec(0, 1000, output=3), spec(1, 100, output=3)]
    res = _run(_instance(model="llama-3-8b"), reqs, TokenCost()).requests.sort_values("request_id")
    assert res.ttft_s.tolist() == pytest.approx([0.011, 0.002], rel=1e-12)


def test_what_the_experts_run_on_follows_each_engine() -> None:
    # vLLM pads every rank to the busiest within the CUDA-graph size (None: own x D), else
    # the sum; SGLang the sum with a prompt in the batch, and in decodes max x D when twice
    # the sum exceeds it; TensorRT-LLM the sum.
    assert instance_moe_tokens("vllm", [8, 5], False, 512) is None
    assert instance_moe_tokens("vllm", [1000, 8], True, 512) == 1008
    assert instance_moe_tokens("sglang", [100, 8], True, 512) == 108
    assert instance_moe_tokens("sglang", [8, 8, 8, 1], False, 512) is None  # 50 > 32
    assert instance_moe_tokens("sglang", [8, 0, 0, 0], False, 512) == 8  # 16 <= 32
    assert instance_moe_tokens("trtllm", [8, 8], False, 512) == 16


def test_the_instance_tells_the_cost_model_the_experts_tokens() -> None:
    # TensorRT-LLM: both ranks' iterations are priced with the experts on the sum (1,100
    # tokens at the prefill, 2 per decode iteration); the custom cost model has no CUDA graphs.
    cost = TokenCost()
    _run(_instance("trtllm"), [spec(0, 1000, output=3), spec(1, 100, output=3)], cost)
    assert cost.moe_tokens[:6] == [1100, 1100, 2, 2, 2, 2]


def _balance_ttfts(reqs: list[Any], **balance: int) -> list[float]:
    scenario = _instance("trtllm", attention_dp_balance=balance) if balance else _instance("trtllm")
    res = _run(scenario, reqs, ConstantCostModel(0.01))
    return res.requests.sort_values("request_id").ttft_s.tolist()


def test_trtllm_balancing_holds_a_prompt_until_the_timeout() -> None:
    # 10 ms iterations. Requests 0 and 1 start together at 0. Request 2 reaches rank 0 at 15
    # ms. The waiting counter counts every iteration some rank has no prompt: iteration 1
    # (10 ms) 1, iteration 2 (20 ms) 2, iteration 3 (30 ms) 3 = timeout_iters: released, so
    # request 2 is prefilled in [30, 40): TTFT 25 ms (15 ms without balancing).
    reqs = [spec(0, 100, output=20), spec(1, 100, output=20), spec(2, 100, output=3, arrival=0.015)]
    assert _balance_ttfts(reqs)[2] == pytest.approx(0.015, rel=1e-12)
    assert _balance_ttfts(reqs, timeout_iters=3, batching_wait_iters=0) == pytest.approx(
        [0.01, 0.01, 0.025], rel=1e-12
    )


def test_trtllm_balancing_batches_prompts_once_every_rank_has_one() -> None:
    # Requests 2 and 3 reach ranks 0 and 1 at 15 ms: iteration 2 (20 ms) sees a prompt on
    # every rank and every rank decoding: batching wait 1, then 2 at 30 ms; iteration 4 (40 ms)
    # starts both: TTFT 35 ms.
    reqs = [
        spec(0, 100, output=20),
        spec(1, 100, output=20),
        spec(2, 100, output=3, arrival=0.015),
        spec(3, 100, output=3, arrival=0.015),
    ]
    ttfts = _balance_ttfts(reqs, timeout_iters=50, batching_wait_iters=2)
    assert ttfts == pytest.approx([0.01, 0.01, 0.035, 0.035], rel=1e-12)


def test_trtllm_balancing_lets_a_prompt_go_when_a_rank_decodes_nothing() -> None:
    # Request 0 alone on rank 0; request 1 reaches rank 1 at 15 ms while rank 1 is idle:
    # not every rank decodes, so nothing waits (prefilled at 20 ms: TTFT 15 ms).
    reqs = [spec(0, 100, output=20), spec(1, 100, output=3, arrival=0.015)]
    assert _balance_ttfts(reqs, timeout_iters=50, batching_wait_iters=10) == pytest.approx([0.01, 0.015])


@pytest.mark.parametrize(
    "scenario, match",
    [
        (_instance("vllm", attention_dp_balance={}), "needs backend trtllm, not vllm"),
        (_instance("trtllm", model="llama-3-8b", attention_dp_balance={}), "attention_dp > 1 and experts"),
        (
            {**_instance("trtllm", attention_dp_balance={}), "replicas": [
                {"gpu": "h100-sxm", "tp": 2, "engine": {"backend": "trtllm", "attention_dp_balance": {}}}
            ]},
            "attention_dp_balance",
        ),
    ],
)  # fmt: skip
def test_balancing_is_refused_where_it_does_not_apply(scenario: dict[str, Any], match: str) -> None:
    with pytest.raises(KvsimError, match=match):
        kvsim.run(scenario, requests=[spec(0, 100, output=3)], cost_model=ConstantCostModel(0.01))
