"""Disaggregated prefill/decode by hand (issue 22 item 4): one prefill and one decode worker on
constant-cost engines, the KV transfer between them, the benchmark's closed loop driving
both, and the first token as the benchmark client of such a deployment sees it
(``benchmarks/silicon.py``'s `client_times`).

Every number below follows from four constants: a prefill iteration takes P = 20 ms, a
decode iteration D = 5 ms, the KV link carries 1 GB/s after 1 ms of latency, and
Llama-3-8B's KV is 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes = 131,072 bytes per
token. A 100-token prompt's KV crosses in 1 ms + 13,107,200 B / 1 GB/s = 14.1072 ms, a
50-token one in 1 ms + 6.5536 ms = 7.5536 ms.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark, spec

import kvsim

ROOT = Path(__file__).resolve().parent.parent
P, D = 0.02, 0.005
KV_100, KV_50 = 1e-3 + 100 * 131072 / 1e9, 1e-3 + 50 * 131072 / 1e9


def _pd(workload: dict[str, Any] | None = None) -> dict[str, Any]:
    def group(role: str, step_s: float) -> dict[str, Any]:
        return {"name": role, "role": role, "gpu": "h100-sxm",
                "cost_model": {"kind": "constant", "step_time_s": step_s}}  # fmt: skip

    scenario: dict[str, Any] = {
        "model": "llama-3-8b",
        "replicas": [group("prefill", P), group("decode", D)],
        "kv_transfer": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3},
    }
    if workload is not None:
        scenario["workload"] = workload
    return scenario


def _staggered() -> kvsim.Result:
    # Request 0: 100-token prompt, 4 output tokens, sent at 0; request 1: 50 tokens, 3 out, at 5 ms.
    return kvsim.run(_pd(), requests=[spec(0, 100, output=4), spec(1, 50, output=3, arrival=0.005)])


def test_one_prefill_and_one_decode_worker_take_the_hand_computed_times() -> None:
    # Prefill worker: [0, P] prefills request 0 alone (request 1 arrives during it) and
    # samples its first token at 20 ms; [P, 2P] prefills request 1, first token at 40 ms.
    # Each first token hands the KV to the link at once: request 0's arrives at the decode
    # worker at 20 + 14.1072 = 34.1072 ms, request 1's at 40 + 7.5536 = 47.5536 ms.
    # Decode worker: idle until 34.1072 ms, then request 0 samples tokens 2, 3, 4 in three
    # iterations (34.1072, 39.1072, 44.1072 ms): finished at 49.1072 ms. Request 1's KV lands
    # during the third, so it waits for the next one: iterations at 49.1072 and 54.1072 ms
    # sample its tokens 2 and 3; finished at 59.1072 ms.
    res = _staggered()
    r = res.requests.set_index("request_id")
    arrive0, arrive1 = P + KV_100, 2 * P + KV_50
    finish0, finish1 = arrive0 + 3 * D, arrive0 + 3 * D + 2 * D
    assert arrive0 + 2 * D < arrive1 < finish0  # request 1's KV lands during request 0's third iteration
    assert r.kv_transfer_s.tolist() == pytest.approx([KV_100, KV_50], rel=1e-12)
    assert r.first_token_s.tolist() == pytest.approx([P, 2 * P], rel=1e-12)
    assert r.ttft_s.tolist() == pytest.approx([P, 2 * P - 0.005], rel=1e-12)  # from each arrival
    assert r.finish_s.tolist() == pytest.approx([finish0, finish1], rel=1e-12)
    # Each request's first iteration on the decode worker: at its KV's arrival, and after
    # request 0 finished (request 1 waited for the iteration in flight).
    assert r.decode_scheduled_s.tolist() == pytest.approx([arrive0, finish0], rel=1e-12)
    # TPOT = (finish - first token) / (output - 1): the transfer and the wait on the decode
    # worker fall in the first gap.
    assert r.tpot_s.tolist() == pytest.approx([(finish0 - P) / 3, (finish1 - 2 * P) / 2], rel=1e-12)
    assert r.max_itl_s.tolist() == pytest.approx([KV_100 + D, finish1 - 2 * D - 2 * P + D], rel=1e-12)
    assert list(r.prefill_replica_id) == ["prefill-0"] * 2 and list(r.replica_id) == ["decode-0"] * 2
    # The transfers start when the first tokens are sampled (the KV_TRANSFER events' times).
    events = res.events[res.events.kind == "kv_transfer"]
    assert events.time_s.tolist() == pytest.approx([P, 2 * P], rel=1e-12)
    assert events.num_bytes.tolist() == [100 * 131072, 50 * 131072]
    dec = res.iterations[res.iterations.replica_id == "decode-0"]
    starts = [arrive0, arrive0 + D, arrive0 + 2 * D, finish0, finish0 + D]
    assert dec.start_s.tolist() == pytest.approx(starts, rel=1e-12)
    assert dec.batch_size.tolist() == [1] * 5 and dec.prefill_tokens.tolist() == [0] * 5
    pre = res.iterations[res.iterations.replica_id == "prefill-0"]
    assert pre.start_s.tolist() == pytest.approx([0.0, P]) and pre.prefill_tokens.tolist() == [100, 50]


def test_the_benchmarks_closed_loop_drives_both_workers_by_hand() -> None:
    # Two clients, four 100-token prompts of 4 output tokens each. Round 1: both prompts in
    # one prefill iteration [0, P] (200 tokens, within the token budget), first tokens at 20
    # ms; both transfers take the whole link (dedicated links), so both KVs land at 34.1072
    # ms and decode together in 3 iterations: both finish at 49.1072 ms, when the clients
    # send the next two prompts, which take the same path again: finished at 98.2144 ms.
    workload = {"kind": "bench_serve", "max_concurrency": 2, "num_prompts": 4, "num_warmups": 0,
                "random_input_len": 100, "random_output_len": 4, "random_range_ratio": 1.0,
                "random_range_ratio_rule": "legacy", "num_special_tokens": 0}  # fmt: skip
    res = kvsim.run(_pd(workload))
    r = res.requests.sort_values("request_id")
    round_s = P + KV_100 + 3 * D
    assert r.prompt_tokens.tolist() == [100] * 4 and r.output_tokens.tolist() == [4] * 4
    assert r.arrival_s.tolist() == pytest.approx([0, 0, round_s, round_s], abs=1e-15)
    assert r.finish_s.tolist() == pytest.approx([round_s] * 2 + [2 * round_s] * 2, rel=1e-12)
    assert r.ttft_s.tolist() == pytest.approx([P] * 4, rel=1e-12)
    assert res.summary["tpot_mean_s"] == pytest.approx((KV_100 + 3 * D) / 3, rel=1e-12)
    dec = res.iterations[res.iterations.replica_id == "decode-0"]
    assert dec.batch_size.tolist() == [2] * 6
    assert dec.start_s.tolist() == pytest.approx(
        [P + KV_100 + k * D for k in range(3)] + [round_s + P + KV_100 + k * D for k in range(3)], rel=1e-12
    )


def test_the_client_sees_the_first_token_from_the_decode_worker() -> None:
    # The client's stream comes from the decode worker: the first token shows at the end of
    # the first decode iteration that holds the request (the decode worker recomputes the
    # prompt's last token and samples the first, as vLLM's NIXL connector does).
    #   request 0: KV in at 34.1072 ms, that iteration ends at 39.1072 ms: TTFT 39.1072 ms;
    #              the rest (49.1072 - 39.1072 ms) over output - 2 = 2 iterations: TPOT 5 ms.
    #   request 1: KV in at 47.5536 ms, the next iteration starts at 49.1072 and ends at
    #              54.1072 ms: TTFT 54.1072 - 5 = 49.1072 ms; TPOT (59.1072 - 54.1072) / 1 = 5 ms.
    ttft, tpot = load_benchmark("silicon").client_times(_staggered())
    first0 = P + KV_100 + D
    first1 = P + KV_100 + 3 * D + D
    assert ttft == pytest.approx((first0 + (first1 - 0.005)) / 2, rel=1e-12)
    assert tpot == pytest.approx(D, rel=1e-12)
    # A one-token request finishes on the prefill worker (no transfer): kvsim's own times.
    alone = kvsim.run(_pd(), requests=[spec(0, 100, output=1)])
    ttft, tpot = load_benchmark("silicon").client_times(alone)
    assert ttft == pytest.approx(P, rel=1e-12) and math.isnan(tpot)


def test_a_decode_worker_takes_a_prompt_longer_than_its_token_budget() -> None:
    """A decode worker that does not chunk prompts (TensorRT-LLM's generation servers) still
    admits a transferred prompt longer than its token budget: only one token is computed
    there. The times are those of the first test's request 0 (a bug rejected it as
    ``prompt_budget``)."""
    scenario = _pd()
    scenario["replicas"][1]["engine"] = {"enable_chunked_prefill": False, "max_num_batched_tokens": 64}
    r = kvsim.run(scenario, requests=[spec(0, 100, output=4)]).requests.iloc[0]
    assert r.finished and r.reject_reason == ""
    assert r.finish_s == pytest.approx(P + KV_100 + 3 * D, rel=1e-12)


def test_the_client_view_waits_for_a_slot_when_the_decode_worker_is_full() -> None:
    # The decode worker holds one sequence. Request 0 (100 tokens, 6 out) decodes in five
    # iterations from 34.1072 ms: finished at 59.1072 ms. Request 1's KV lands at 47.5536
    # ms but waits for a free slot until 59.1072 ms, then decodes at 59.1072 and 64.1072 ms:
    # finished at 69.1072 ms. Its client's first token: 64.1072 ms (TTFT 59.1072 ms from its
    # arrival at 5 ms), not the end of the first iteration after its KV arrived (54.1072 ms).
    scenario = _pd()
    scenario["replicas"][1]["engine"] = {"max_num_seqs": 1}
    res = kvsim.run(scenario, requests=[spec(0, 100, output=6), spec(1, 50, output=3, arrival=0.005)])
    finish1 = P + KV_100 + 5 * D + 2 * D
    assert res.requests.decode_scheduled_s[1] == pytest.approx(finish1 - 2 * D, rel=1e-12)  # the slot freed
    assert res.requests.finish_s.tolist() == pytest.approx([P + KV_100 + 5 * D, finish1], rel=1e-12)
    ttft, tpot = load_benchmark("silicon").client_times(res)
    assert ttft == pytest.approx(((P + KV_100 + D) + (finish1 - D - 0.005)) / 2, rel=1e-12)
    assert tpot == pytest.approx(D, rel=1e-12)


def test_the_client_view_of_a_request_the_decode_worker_preempted() -> None:
    # Two 20-token outputs on a decode worker of 11 blocks (64- and 50-token prompts):
    # request 1 is preempted once, sits out and recomputes, so counting back from its
    # finish would land after its real first token. The client's first token is still the
    # end of its first decode iteration (its decode_scheduled_s): KV at 40 + 7.5536 =
    # 47.5536 ms, the next iteration starts at 49.3886 ms (request 0's KV arrived at 20 +
    # 9.3886 ms, then every 5 ms), ends at 54.3886 ms: TTFT 54.3886 - 5 = 49.3886 ms.
    # Request 0, never preempted: 18 iterations before its finish at 124.3886 ms.
    scenario = _pd()
    scenario["replicas"][1]["engine"] = {"num_gpu_blocks_override": 11}
    res = kvsim.run(scenario, requests=[spec(0, 64, output=20), spec(1, 50, output=20, arrival=0.005)])
    r = res.requests
    assert r.num_preemptions.tolist() == [0, 1]
    kv_64 = 1e-3 + 64 * 131072 / 1e9
    first0, first1 = P + kv_64 + D, P + kv_64 + 4 * D + D
    assert r.finish_s[0] == pytest.approx(first0 + 18 * D, rel=1e-12)
    ttft, tpot = load_benchmark("silicon").client_times(res)
    assert ttft == pytest.approx((first0 + (first1 - 0.005)) / 2, rel=1e-12)
    assert tpot == pytest.approx((D + (r.finish_s[1] - first1) / 18) / 2, rel=1e-12)


def test_round_robin_decode_routing_sends_a_request_to_a_busy_worker() -> None:
    # Two decode replicas of one slot each. Request 0 (20 tokens to decode) takes decode-0
    # from 34.1072 ms to 134.1072 ms; request 1 (prefilled 20-40 ms) decode-1 from 54.1072 to
    # 64.1072 ms. Request 2 arrives at 70 ms, is prefilled by 90 ms and its KV lands at
    # 104.1072 ms. least_loaded sends it to the idle decode-1: it runs at once, finished at
    # 114.1072 ms. round_robin (decode-0, decode-1, decode-0: Dynamo's frontend default)
    # sends it to decode-0, where it waits for request 0's slot: 134.1072 to 144.1072 ms.
    def run(kind: str | None) -> Any:
        scenario = _pd()
        scenario["replicas"][1].update(count=2, engine={"max_num_seqs": 1})
        if kind is not None:
            scenario["decode_router"] = kind
        reqs = [
            spec(0, 100, output=21),
            spec(1, 100, output=3, arrival=0.005),
            spec(2, 100, output=3, arrival=0.07),
        ]
        return kvsim.run(scenario, requests=reqs).requests.set_index("request_id")

    first0 = P + KV_100
    least, turns = run("least_loaded"), run("round_robin")
    assert list(least.replica_id) == ["decode-0", "decode-1", "decode-1"]
    assert list(turns.replica_id) == ["decode-0", "decode-1", "decode-0"]
    assert least.finish_s.tolist() == pytest.approx(
        [first0 + 20 * D, 2 * P + KV_100 + 2 * D, 0.09 + KV_100 + 2 * D]
    )
    assert turns.decode_scheduled_s[2] == pytest.approx(first0 + 20 * D, rel=1e-12)  # request 0's slot freed
    assert turns.finish_s[2] == pytest.approx(first0 + 22 * D, rel=1e-12)
    # The default is least_loaded; outside disaggregated serving the knob is refused.
    assert run(None).equals(least)
    with pytest.raises(kvsim.ScenarioError, match="decode_router"):
        kvsim.run({"model": "llama-3-8b", "decode_router": "round_robin"}, requests=[spec(0, 10, output=2)])


# -- sliding-window models: only the window crosses the link ------------------------------


def test_a_sliding_window_model_sends_only_the_window_and_the_decode_worker_holds_only_it() -> None:
    # Mistral-7B: every layer attends to the last 4,096 tokens; its KV is 32 layers x 8 KV
    # heads x 128 x (K, V) x 2 bytes = 131,072 bytes a token, as Llama-3-8B's. A 5,000-token
    # prompt leaves 4,096 tokens in the window: 1 ms + 4,096 x 131,072 B / 1 GB/s crosses the
    # link (a 100-token prompt all of its tokens). On the decode worker the request holds the
    # blocks of 16 tokens from the window's first one: tokens 905..5,000 of its 5,001, blocks
    # 56..312 (floor(905 / 16) = 56 skipped of cdiv(5,001, 16) = 313): 257 blocks.
    scenario = _pd()
    scenario["model"] = "mistral-7b"
    res = kvsim.run(scenario, requests=[spec(0, 5000, output=3), spec(1, 100, output=3, arrival=1.0)])
    events = res.events[res.events.kind == "kv_transfer"]
    assert events.num_bytes.tolist() == [4096 * 131072, 100 * 131072]
    assert events.num_blocks.tolist() == [257, 7]
    r = res.requests.set_index("request_id")
    assert r.kv_transfer_s.tolist() == pytest.approx([1e-3 + 4096 * 131072 / 1e9, KV_100], rel=1e-12)
    dec = res.iterations[res.iterations.replica_id == "decode-0"]
    assert dec.kv_blocks_used.iloc[0] == 257  # the first decode iteration of request 0
    assert r.finished.all()


def test_a_hybrid_models_window_groups_send_only_their_window() -> None:
    # Gemma-3-1B: 4 full-attention and 22 sliding-window (512-token) layers of 1 KV head x 256
    # x (K, V) x 2 bytes = 1,024 bytes a token each, in groups of 4 layers (1 full group, 6
    # window groups, 2 padding layers: 4,096 bytes a token a group). A 1,000-token prompt's
    # transfer: (1 x 1,000 + 6 x 512) x 4,096 = 16,678,912 bytes, where all of its groups'
    # tokens would be 7 x 1,000 x 4,096 = 28,672,000.
    scenario = _pd()
    scenario["model"] = "gemma-3-1b"
    res = kvsim.run(scenario, requests=[spec(0, 1000, output=3)])
    events = res.events[res.events.kind == "kv_transfer"]
    assert events.num_bytes.tolist() == [(1000 + 6 * 512) * 4096]
    # Blocks of 16 tokens: the full group's cdiv(1,000, 16) = 63, each window group's from
    # block floor((1,000 - 512 + 1) / 16) = 30 on: 33.
    assert events.num_blocks.tolist() == [63 + 6 * 33]
    r = res.requests.set_index("request_id")
    assert r.kv_transfer_s[0] == pytest.approx(1e-3 + (1000 + 6 * 512) * 4096 / 1e9, rel=1e-12)
    assert r.finished.all()


def test_a_transferred_request_takes_no_block_its_window_has_passed() -> None:
    # One full group and two window groups (window 8) of blocks of 4 tokens. A 16-token prompt
    # prefilled elsewhere arrives with its first token: 17 tokens, 16 computed. Its next token
    # (the 17th) attends to tokens 9..16, so every window group skips blocks 0 and 1 (tokens
    # 0..7): 5 blocks in the full group and 3 in each window group, 11 in all -- the whole of an
    # 11-block decode pool, where taking every block and dropping the passed ones after would
    # need 15 and never admit the request.
    from kvsim.core.block_pool import BlockPool
    from kvsim.core.hybrid_kv import HybridKvManager
    from kvsim.core.request_state import Request, Status
    from kvsim.core.scheduler import Scheduler
    from kvsim.scenario.schema import EngineConfig

    def worker(role: str, blocks: int) -> tuple[BlockPool, HybridKvManager, Scheduler]:
        pool = BlockPool(blocks)
        kv = HybridKvManager(
            pool, 4, num_full_groups=1, num_window_groups=2, sliding_window=8, layer_counts=(1, 2)
        )
        return pool, kv, Scheduler(EngineConfig(block_size=4), pool, kv_manager=kv, role=role)

    _, _, prefill = worker("prefill", 24)
    pool, kv, decode = worker("decode", 11)
    req = Request(spec(0, 16, output=3))
    prefill.add_request(req)
    out = prefill.schedule(0.0)
    assert prefill.update(out, 1.0).handoffs == [req]
    assert (req.num_computed_tokens, req.num_tokens) == (16, 17)
    req.kv_transferred = True  # what the cluster sets when the KV lands
    decode.add_request(req)
    out = decode.schedule(2.0)
    assert [(r.request_id, n) for r, n in out.scheduled] == [(0, 1)]
    tables = [[None if b is None else b.block_id for b in view.blocks] for _, view in kv.groups(req)]
    assert tables == [[0, 1, 2, 3, 4], [None, None, 5, 6, 7], [None, None, 8, 9, 10]]
    assert kv.num_held_blocks(req) == 11 and pool.num_free_blocks == 0
    decode.update(out, 3.0)
    for t in (3.0, 4.0):  # tokens 18 and 19: the window passes block 2 after token 18
        decode.update(decode.schedule(t), t + 1.0)
    assert req.status is Status.FINISHED and pool.num_free_blocks == 11


def test_a_linear_attention_models_state_crosses_the_link_with_its_kv() -> None:
    # Qwen3.5-35B-A3B: 10 full-attention layers of 2 KV heads x 256 x (K, V) x 2 bytes =
    # 20,480 bytes a token, and 30 Gated DeltaNet layers whose state a request carries whatever
    # its length: a conv state of (4 - 1) x (2 x 16 x 128 + 32 x 128) x 2 bytes = 49,152 and an
    # fp32 SSM state of 32 x 128 x 128 x 4 = 2,097,152, 64,389,120 bytes in all. A 1,000-token
    # prompt sends 20,480,000 + 64,389,120 bytes: the state is three quarters of it.
    scenario = _pd()
    scenario["model"] = "qwen3.5-35b-a3b"
    for group in scenario["replicas"]:
        group["gpu"] = "h200"
    res = kvsim.run(scenario, requests=[spec(0, 1000, output=3)])
    sent = 1000 * 20480 + 30 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4)
    assert res.events[res.events.kind == "kv_transfer"].num_bytes.tolist() == [sent]
    assert res.requests.kv_transfer_s[0] == pytest.approx(1e-3 + sent / 1e9, rel=1e-12)
