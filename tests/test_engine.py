"""The SimPy engine end to end: hand-computed timelines, queueing theory, determinism,
fast-forward equivalence, closed-loop follow-ups and time limits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.request import RequestSpec, Segment


def constant_scenario(step_s: float = 0.01, **engine) -> dict:
    return {
        "model": "llama-3-8b",
        "replicas": [
            {"gpu": "h100-sxm", "engine": engine, "cost_model": {"kind": "constant", "step_time_s": step_s}}
        ],
    }


def test_lone_request_timeline_with_constant_steps():
    res = kvsim.run(constant_scenario(0.01), requests=[spec(0, 100, output=5, arrival=1.0)])
    r = res.requests.iloc[0]
    assert r.first_scheduled_s == 1.0 and r.queueing_s == 0.0
    assert r.ttft_s == pytest.approx(0.01)  # one iteration prefills 100 tokens and samples
    assert r.e2e_s == pytest.approx(0.05)  # + 4 decode iterations
    assert r.tpot_s == pytest.approx(0.01) and r.max_itl_s == pytest.approx(0.01)
    assert list(res.iterations.prefill_tokens) == [100, 0, 0, 0, 0]
    assert list(res.iterations.decode_tokens) == [0, 1, 1, 1, 1]


def test_chunked_prefill_spreads_a_prompt_over_iterations():
    res = kvsim.run(constant_scenario(0.01, max_num_batched_tokens=32), requests=[spec(0, 100, output=3)])
    assert list(res.iterations.prefill_tokens) == [32, 32, 32, 4, 0, 0]
    assert res.requests.ttft_s[0] == pytest.approx(0.04)
    assert res.requests.e2e_s[0] == pytest.approx(0.06)


def test_lone_request_under_the_roofline_matches_the_hand_computation():
    # Llama-3-8B on one H100-SXM, bf16, default efficiencies (compute 0.6, memory 0.8,
    # 0.5 ms per iteration); see kvsim/cost/roofline.py for the formula. Prompt 1000
    # tokens, 3 output tokens.
    params, vocab, hidden, layers, heads, hd = 8_030_261_248, 128_256, 4096, 32, 32, 128
    lm = vocab * hidden  # LM head, run once per sequence; the embedding is not a GEMM
    p_lin = params - 2 * lm  # 6,979,588,096 parameters in the transformer layers
    kv_per_token = 2 * 32 * 8 * 128 * 2  # 131,072 bytes
    flops_rate, bytes_rate = 989.5e12 * 0.6, 3.35e12 * 0.8

    def step(tokens: int, pairs: int, kv_tokens: int) -> float:
        linear = max((2.0 * p_lin * tokens + 2.0 * lm) / flops_rate, (p_lin + lm) * 2 / bytes_rate)
        attention = max(4.0 * layers * heads * hd * pairs / flops_rate, kv_per_token * kv_tokens / bytes_rate)
        return linear + attention + 0.0005

    prefill = step(1000, 1000 * 1001 // 2, 1000)
    decode1, decode2 = step(1, 1001, 1001), step(1, 1002, 1002)
    scenario = {"model": "llama-3-8b", "replicas": [{"gpu": "h100-sxm"}]}
    res = kvsim.run(scenario, requests=[spec(0, 1000, output=3)])
    r = res.requests.iloc[0]
    assert r.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert r.e2e_s == pytest.approx(prefill + decode1 + decode2, rel=1e-12)
    # Prefill is compute-bound, a decode step memory-bound (weights + KV over HBM).
    assert prefill > 0.02
    assert decode1 == pytest.approx((p_lin + lm) * 2 / bytes_rate + 1001 * kv_per_token / bytes_rate + 0.0005)


@pytest.mark.slow
def test_waiting_time_matches_md1_closed_form():
    # One request at a time, service = 10 constant iterations -> M/D/1 with D = 0.1 s.
    step_s, out, lam = 0.01, 10, 5.0
    service = out * step_s
    rho = lam * service
    expected_wq = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    scenario = constant_scenario(step_s, max_num_seqs=1) | {
        "seed": 7,
        "workload": {
            "num_requests": 40_000,
            "arrival": {"kind": "poisson", "rate_per_s": lam},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": out},
        },
    }
    res = kvsim.run(scenario)
    wq = res.requests.queueing_s.to_numpy()
    assert res.summary["num_finished"] == 40_000
    assert np.allclose(res.requests.e2e_s - res.requests.queueing_s, service)
    assert wq.mean() == pytest.approx(expected_wq, rel=0.05)


def test_same_scenario_and_seed_give_identical_results():
    ov = ["workload.num_requests=300", "replicas.0.engine.num_gpu_blocks_override=400"]
    a, b = kvsim.run(None, overrides=ov), kvsim.run(None, overrides=ov)
    assert_frame_equal(a.requests, b.requests)
    assert_frame_equal(a.iterations, b.iterations)
    assert_frame_equal(a.events, b.events)
    assert a.summary == b.summary or all(
        (x == y) or (isinstance(x, float) and math.isnan(x) and math.isnan(y))
        for x, y in zip(a.summary.values(), b.summary.values(), strict=True)
    )
    c = kvsim.run(None, overrides=[*ov, "seed=1"])
    assert not c.requests.arrival_s.equals(a.requests.arrival_s)


FF_CASES = {
    "ample": [],
    "recompute": ["replicas.0.engine.num_gpu_blocks_override=500"],
    "swap": ["replicas.0.engine.num_gpu_blocks_override=500", "replicas.0.engine.preemption_mode=swap"],
    "priority-lfu": [
        "replicas.0.engine.num_gpu_blocks_override=700",
        "replicas.0.engine.scheduling_policy=priority",
        "replicas.0.engine.eviction_policy=lfu",
    ],
    "seq-limit-time-limit": ["replicas.0.engine.max_num_seqs=4", "sim.max_time_s=20"],
    "two-replicas": ["replicas.0.count=2", "router.kind=least_loaded"],
    "tp2-no-cache": ["replicas.0.tp=2", "replicas.0.engine.enable_prefix_caching=false"],
    "cpu-offload": ["replicas.0.engine.num_gpu_blocks_override=500", "replicas.0.engine.cpu_offload_gib=2"],
    # Contiguous reservations: a decode run must not allocate blocks a request already holds.
    "orca-pow2": [
        "replicas.0.engine.num_gpu_blocks_override=1500",
        "replicas.0.engine.kv_allocation=reserve_pow2",
        "replicas.0.engine.enable_prefix_caching=false",
    ],
    "orca-oracle-swap": [
        "replicas.0.engine.num_gpu_blocks_override=900",
        "replicas.0.engine.kv_allocation=reserve_oracle",
        "replicas.0.engine.enable_prefix_caching=false",
        "replicas.0.engine.preemption_mode=swap",
    ],
}


@pytest.mark.parametrize("case", sorted(FF_CASES))
def test_fast_forward_equals_step_by_step(case):
    ov = ["workload.num_requests=250", *FF_CASES[case]]
    fast = kvsim.run(None, overrides=ov)
    slow = kvsim.run(None, overrides=[*ov, "sim.fast_forward=false"])
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert_frame_equal(fast.events, slow.events, check_exact=True)
    assert len(fast.iterations) > 1000  # long enough to exercise many decode runs


@st.composite
def _small_engine_runs(draw):
    """A one-replica scenario (roofline cost: durations that differ every iteration) and
    up to 40 requests with shared prefixes, bursts and long outputs."""
    engine = {
        "block_size": draw(st.sampled_from([1, 4, 16])),
        "num_gpu_blocks_override": draw(st.integers(40, 400)),
        "max_num_seqs": draw(st.integers(1, 16)),
        "max_num_batched_tokens": draw(st.sampled_from([64, 256, 2048])),
        "enable_chunked_prefill": draw(st.booleans()),
        "preemption_mode": draw(st.sampled_from(["recompute", "swap"])),
        "scheduling_policy": draw(st.sampled_from(["fcfs", "fcfs", "priority"])),
        "enable_prefix_caching": draw(st.booleans()),
        "kv_allocation": draw(st.sampled_from(["paged", "paged", "paged", "reserve_pow2", "reserve_oracle"])),
    }
    if engine["kv_allocation"] != "paged":  # a contiguous reservation is private memory: no prefix cache
        engine["enable_prefix_caching"] = False
    scenario = {"model": "llama-3-8b", "replicas": [{"gpu": "h100-sxm", "engine": engine}]}
    n = draw(st.integers(1, 40))
    t = 0.0
    reqs = []
    for rid in range(n):
        t += draw(st.sampled_from([0.0, 0.001, 0.02, 0.3]))
        shared = draw(st.sampled_from([0, 0, 1, 2]))
        own = draw(st.integers(1, 300))
        prompt = [(shared, draw(st.integers(1, 200))), (1000 + rid, own)] if shared else [(1000 + rid, own)]
        reqs.append(
            spec(rid, prompt, output=draw(st.integers(1, 120)), arrival=t, priority=draw(st.integers(0, 2)))
        )
    return scenario, reqs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_small_engine_runs())
def test_fast_forward_equals_stepping_on_random_small_scenarios(case):
    """Decode runs, arrivals riding along them and every table: bit for bit as stepping."""
    scenario, reqs = case
    fast = kvsim.run(scenario | {"sim": {"fast_forward": True}}, requests=reqs)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}}, requests=reqs)
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert_frame_equal(fast.events, slow.events, check_exact=True)


def test_arrival_exactly_at_an_iteration_boundary_joins_that_iteration():
    reqs = [spec(0, 10, output=5, arrival=0.0), spec(1, 10, output=2, arrival=0.02)]
    for ff in (True, False):
        res = kvsim.run(constant_scenario(0.01) | {"sim": {"fast_forward": ff}}, requests=reqs)
        r1 = res.requests.iloc[1]
        assert r1.first_scheduled_s == 0.02 and r1.ttft_s == pytest.approx(0.01)


def test_follow_up_turn_is_released_after_the_parent_finishes_plus_think_time():
    parent = spec(0, [(1, 64)], output=4)
    child = RequestSpec(
        request_id=1,
        arrival_s=0.0,
        prompt=(Segment(1, 64), parent.output_segment, Segment(2, 8)),
        output_tokens=2,
        parent_id=0,
        think_time_s=1.5,
    )
    res = kvsim.run(constant_scenario(0.01), requests=[parent, child])
    p, c = res.requests.iloc[0], res.requests.iloc[1]
    assert c.arrival_s == pytest.approx(p.finish_s + 1.5)
    # The child re-sends prompt + answer: 64 + 4 cached tokens minus the unfinished last block
    # (the parent's 4th token was sampled, never computed) -> 64 hit tokens.
    assert c.prefix_cache_hits_tokens == 64


def test_time_limit_leaves_requests_unfinished_and_reported():
    ov = ["workload.num_requests=400", "sim.max_time_s=10"]
    res = kvsim.run(None, overrides=ov)
    s = res.summary
    assert s["num_requests"] == 400 and 0 < s["num_finished"] < 400
    # Rejected requests are not "unfinished": they are counted apart, with their reason.
    assert s["num_unfinished"] == 400 - s["num_finished"] - s["num_rejected"]
    assert (res.iterations.start_s < 10).all()
    assert res.requests.loc[~res.requests.finished, "e2e_s"].isna().all()


def test_rejected_requests_are_logged_and_not_lost():
    # As in vLLM, a prompt of max_model_len tokens or more is refused; a longer requested
    # output is cut at max_model_len (request 1: 60 + 10 > 64, it stops after 4 tokens).
    res = kvsim.run(
        constant_scenario(0.01, max_model_len=64),
        requests=[spec(0, 64, output=1), spec(1, 60, output=10), spec(2, 10, output=2)],
    )
    assert list(res.requests.finished) == [False, True, True]
    assert list(res.requests.output_tokens) == [0, 4, 2]
    assert list(res.events.kind) == ["reject"]
    assert list(res.requests.reject_reason) == ["max_model_len", "", ""]
    assert res.summary["num_unfinished"] == 0
    assert res.summary["num_rejected"] == res.summary["num_rejected_max_model_len"] == 1


def test_every_record_carries_a_replica_id():
    res = kvsim.run(None, overrides=["workload.num_requests=60", "replicas.0.count=3"])
    assert set(res.requests.replica_id) == {"replica-0", "replica-1", "replica-2"}
    assert set(res.iterations.replica_id) == {"replica-0", "replica-1", "replica-2"}
    counts = res.requests.replica_id.value_counts()
    assert list(counts) == [20, 20, 20]  # round robin


def test_trace_replay_reports_its_workload_in_the_summary(traces_dir):
    res = kvsim.run(ROOT / "scenarios" / "azure_code.yaml", overrides=["workload.max_requests=40"])
    s = res.summary
    assert s["workload_kind"] == "trace" and s["workload_num_requests"] == 40 == s["num_requests"]
    assert s["trace_num_requests"] == 40 and "trace_num_dropped" in s
    # The saved scenario carries an absolute trace path: it reloads from anywhere.
    assert Path(res.scenario.workload.path).is_absolute()


class _EverythingShared:
    def __contains__(self, content_id: object) -> bool:
        return True


@pytest.mark.parametrize("case", ["write_through", "write_on_evict", "disaggregated"])
def test_no_private_marks_where_a_tier_would_see_them(monkeypatch, case):
    """A write-through tier or a shared pool would store a private block under a placeholder
    (again when its hash is published; once per replica in a shared pool): there every block
    is hashed, and the run equals the all-hashed one (before, write-through and the
    disaggregated case differed: shared-pool hits, tier writes, latencies)."""
    pool = {
        "capacity_gib": 0.3,
        "write_policy": "write_on_evict" if case == "write_on_evict" else "write_through",
    }
    workload = {
        "num_requests": 200,
        "arrival": {"kind": "poisson", "rate_per_s": 10.0},
        "shared_prefix_tokens": 512,
    }
    if case == "disaggregated":
        scenario = _disaggregated(num_gpu_blocks_override=600)
    else:
        scenario = {"replicas": [{"count": 2, "engine": {"num_gpu_blocks_override": 400}}]}
    scenario |= {"workload": workload, "shared_kv_pool": pool}
    fast = kvsim.run(scenario)
    assert fast.summary["shared_pool_hits_tokens"] > 0
    monkeypatch.setattr("kvsim.engine.cluster.shared_content_ids", lambda specs: _EverythingShared())
    plain = kvsim.run(scenario)
    assert_frame_equal(fast.requests, plain.requests)
    assert_frame_equal(fast.events, plain.events)


@pytest.mark.parametrize("mode", ["recompute", "swap", "offload", "beams"])
def test_private_blocks_change_nothing_but_speed(monkeypatch, mode):
    # Unique prompt text is cached without hashing; preempted requests publish the real
    # hashes. Turning that off (every id treated as shared) must give identical tables.
    ov = [
        f"workload.num_requests={60 if mode == 'beams' else 250}",
        "replicas.0.engine.num_gpu_blocks_override=450",
        f"replicas.0.engine.preemption_mode={'swap' if mode == 'swap' else 'recompute'}",
    ]
    if mode in ("offload", "beams"):  # private blocks take host capacity under placeholders
        ov.append("replicas.0.engine.cpu_offload_gib=0.05")  # small: capacity pressure matters
    if mode == "beams":  # forks share blocks between beams, whose outputs no other request holds
        ov.append("workload.beam_width=4")
    fast = kvsim.run(None, overrides=ov)
    assert fast.summary["num_preemptions"] > 20
    if mode == "recompute":
        assert fast.summary["recompute_hits_tokens"] > 0
    elif mode == "beams":
        assert fast.summary["beam_num_forks"] > 100 and fast.summary["offload_hits_tokens"] > 0
    elif mode == "swap":
        assert fast.summary["num_swaps"] > 20
    else:
        assert fast.summary["offload_hits_tokens"] > 0
    monkeypatch.setattr("kvsim.engine.cluster.shared_content_ids", lambda specs: _EverythingShared())
    plain = kvsim.run(None, overrides=ov)
    assert_frame_equal(fast.requests, plain.requests)
    assert_frame_equal(fast.iterations, plain.iterations)
    assert_frame_equal(fast.events, plain.events)


def test_a_finished_request_leaves_no_published_hash_behind():
    """A preempted request publishes its private blocks' hashes (it may hit them again);
    once it finishes nobody can look them up, so the pool forgets them: what stays indexed
    is the shared prefix, and no evicted hash is remembered (the set used to keep every
    block of every preempted request, 60 MB at 100k requests)."""
    from kvsim.core.request_state import NEVER_PRIVATE
    from kvsim.engine.cluster import Cluster
    from kvsim.engine.simulator import scenario_workload
    from kvsim.scenario.resolved import resolve_plan

    scenario = kvsim.load_scenario(
        None, ["workload.num_requests=250", "replicas.0.engine.num_gpu_blocks_override=450"]
    )
    cluster = Cluster(resolve_plan(scenario), scenario_workload(scenario).requests)
    cluster.run()
    published = [r for r in cluster.requests.values() if r.published_from != NEVER_PRIVATE]
    assert len(published) > 20
    pool = cluster.replicas[0].engine.scheduler.pool
    assert pool.evicted_hashes == set()
    assert len(pool.cached) == scenario.workload.shared_prefix_tokens // 16  # the shared prefix
    pool.check_invariants()


def test_without_a_kv_cache_each_decode_recomputes_the_sequence():
    # A lone request: with the cache, decode i attends to P + i tokens; without it, step i
    # prefills all P + i tokens again, so the total grows quadratically with the output.
    from kvsim.cost.base import Batch
    from kvsim.cost.roofline import RooflineCostModel
    from kvsim.model.presets import resolve_gpu, resolve_model

    cost = RooflineCostModel(resolve_model("llama-3-8b"), resolve_gpu("h100-sxm"))
    prompt, out = 16, 1024
    scenario = {
        "model": "llama-3-8b",
        "replicas": [{"gpu": "h100-sxm", "engine": {"enable_kv_cache": False}}],
    }
    res = kvsim.run(scenario, requests=[spec(0, prompt, output=out)])
    expected = 0.0
    for i in range(out):  # step 0 is the prompt, step i recomputes prompt + i tokens
        expected += cost.step_time_s(Batch(prefill_chunks=[(prompt + i, 0)]))
    assert res.requests.e2e_s[0] == pytest.approx(expected, rel=1e-12)
    cached = kvsim.run(
        {**scenario, "replicas": [{"gpu": "h100-sxm"}]}, requests=[spec(0, prompt, output=out)]
    )
    assert res.requests.e2e_s[0] > 2 * cached.requests.e2e_s[0]
    # Doubling the output: about 2x with the cache, nearly 4x without (the quadratic term).
    longer = kvsim.run(scenario, requests=[spec(0, prompt, output=2 * out)])
    longer_cached = kvsim.run(
        {**scenario, "replicas": [{"gpu": "h100-sxm"}]}, requests=[spec(0, prompt, output=2 * out)]
    )
    assert longer.requests.e2e_s[0] > 3.3 * res.requests.e2e_s[0]
    assert longer_cached.requests.e2e_s[0] < 2.1 * cached.requests.e2e_s[0]


def test_fast_forward_equals_step_by_step_under_a_prefix_aware_router():
    # The router reads every pool at each arrival, also in the middle of a decode run:
    # Replica.sync must first make the allocations (and evictions) stepping would have
    # made by then. Multi-turn sessions with a system-prompt pool on a small pool evict
    # prefixes the router is looking for (without sync the tables differ).
    ov = [
        "workload.num_requests=400",
        "replicas.0.count=2",
        "router.kind=prefix_aware",
        "replicas.0.engine.num_gpu_blocks_override=600",
    ]
    fast = kvsim.run(ROOT / "scenarios" / "chat_sessions.yaml", overrides=ov)
    slow = kvsim.run(ROOT / "scenarios" / "chat_sessions.yaml", overrides=[*ov, "sim.fast_forward=false"])
    assert fast.summary["num_evicted_blocks"] > 10_000
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert_frame_equal(fast.events, slow.events, check_exact=True)


def test_prefix_aware_routing_keeps_sessions_on_their_cache():
    ov = ["workload.num_requests=600", "replicas.0.count=4"]
    spread = kvsim.run(ROOT / "scenarios" / "chat_sessions.yaml", overrides=[*ov, "router.kind=least_loaded"])
    aware = kvsim.run(ROOT / "scenarios" / "chat_sessions.yaml", overrides=[*ov, "router.kind=prefix_aware"])
    assert aware.summary["prefix_cache_hit_rate"] > spread.summary["prefix_cache_hit_rate"] + 0.1
    assert aware.summary["ttft_p50_s"] < spread.summary["ttft_p50_s"]
    # load_weight keeps it from piling everything on one replica
    counts = aware.requests.replica_id.value_counts()
    assert counts.min() > 0.1 * len(aware.requests)


def test_host_tier_loads_cost_pcie_time():
    # Constant 10 ms iterations, host bandwidth = H100 PCIe (64 GB/s). Request 0 caches a
    # 64-token prefix (4 blocks); a filler evicts it to the offload tier; request 2 loads the
    # 4 blocks back: its prefill iteration takes 10 ms + 4 blocks x 2 MiB / 64 GB/s.
    block_bytes = 16 * 2 * 32 * 8 * 128 * 2  # Llama-3-8B bf16: 128 KiB per token, 16 tokens
    engine = {"num_gpu_blocks_override": 11, "cpu_offload_gib": 1, "max_num_seqs": 1}  # 10 + the null block
    reqs = [
        spec(0, [(1, 64), (2, 1)], output=1, arrival=0.0),
        spec(1, 159, output=1, arrival=0.1),  # 160 tokens: all 10 blocks
        spec(2, [(1, 64), (3, 8)], output=1, arrival=0.2),
    ]
    res = kvsim.run(constant_scenario(0.01, **engine), requests=reqs)
    r2 = res.requests.iloc[2]
    assert r2.offload_hits_tokens == 64 and r2.prefix_cache_hits_tokens == 0
    assert r2.ttft_s == pytest.approx(0.01 + 4 * block_bytes / 64e9, rel=1e-12)
    assert list(res.events.kind).count("offload_load") == 1
    assert res.summary["offload_hits_tokens"] == 64


def _disaggregated(step_s: float | None = None, **engine) -> dict:
    cost = {"kind": "constant", "step_time_s": step_s} if step_s else "roofline"
    return {
        "model": "llama-3-8b",
        "replicas": [
            {"name": "prefill", "gpu": "h100-sxm", "role": "prefill", "engine": engine, "cost_model": cost},
            {"name": "decode", "gpu": "h100-sxm", "role": "decode", "engine": engine, "cost_model": cost},
        ],
        "kv_transfer": {"bandwidth_bytes_per_s": 50e9, "latency_s": 1e-4},
    }


def test_disaggregated_request_prefills_on_one_replica_and_decodes_on_another():
    # Constant 10 ms iterations. Prefill replica: one iteration computes the 100-token
    # prompt and samples token 1 (TTFT 10 ms). Its KV, 100 tokens x 128 KiB, crosses the
    # 50 GB/s link after 0.1 ms latency; the decode replica then runs 4 iterations.
    res = kvsim.run(_disaggregated(0.01), requests=[spec(0, 100, output=5)])
    r = res.requests.iloc[0]
    transfer = 1e-4 + 100 * 131072 / 50e9
    assert (r.prefill_replica_id, r.replica_id) == ("prefill-0", "decode-0")
    assert r.ttft_s == pytest.approx(0.01)
    assert r.e2e_s == pytest.approx(0.01 + transfer + 4 * 0.01, rel=1e-12)
    assert r.max_itl_s == pytest.approx(transfer + 0.01, rel=1e-12)  # the transfer shows as a gap
    (ev,) = res.events.itertuples()
    assert (ev.kind, ev.replica_id, ev.num_blocks, ev.num_bytes) == (
        "kv_transfer",
        "prefill-0",
        7,
        100 * 131072,
    )
    it = res.iterations
    assert list(it.replica_id) == ["prefill-0"] + ["decode-0"] * 4
    assert list(it.prefill_tokens) == [100, 0, 0, 0, 0]  # the decode replica prefills nothing
    assert res.summary["prefix_cache_queries_tokens"] == 100  # counted once, where it was prefilled


def test_disaggregated_fast_forward_equals_step_by_step():
    scenario = _disaggregated(num_gpu_blocks_override=600) | {
        "workload": {
            "num_requests": 250,
            "arrival": {"kind": "poisson", "rate_per_s": 8.0},
            "shared_prefix_tokens": 512,
        }
    }
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    assert fast.summary["num_finished"] > 200 and fast.summary["num_preemptions"] > 0
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert_frame_equal(fast.events, slow.events, check_exact=True)


def test_the_replica_engine_runs_without_simpy():
    """`ReplicaEngine` behind its boundary, driven by a plain loop (no SimPy): the same
    finish times as `kvsim.run` for requests that all arrive at once, its decode runs
    included (constant 10 ms steps: finish = steps taken x 10 ms, by hand below)."""
    from kvsim.core.request_state import Request
    from kvsim.cost.base import ConstantCostModel
    from kvsim.engine.build import build_scheduler
    from kvsim.engine.replica_engine import ReplicaEngine
    from kvsim.results.recorder import Recorder
    from kvsim.scenario.loading import load_scenario
    from kvsim.scenario.resolved import resolve_plan

    reqs = [spec(i, 40 + 8 * i, output=20 + 5 * i) for i in range(6)]
    scenario = load_scenario(None, ["replicas.0.engine.num_gpu_blocks_override=200"])
    plan = resolve_plan(scenario)
    group = plan.groups[0]
    sched = build_scheduler(plan, group, None)
    engine = ReplicaEngine(0, sched, ConstantCostModel(0.01), Recorder(["r"], [200], [16]), group.kv)
    engine.attach(None, tiers=None, tier_plans=(), kv_events=False, stamped=False, fast_forward=True)
    state = [Request(s) for s in reqs]
    for r in state:
        assert engine.add_request(r, 0.0) is None
    now, runs = 0.0, 0
    while engine.has_work():
        out = engine.schedule(now)
        run = engine.plan_run(out)
        if run is None:
            dt = engine.price_step(out).duration_s
            engine.end_step(out, now + dt)
            now += dt
        else:
            ends, k = engine.start_run(now, run)
            engine.commit_run(k, [], float(ends[k - 1]))
            now, runs = float(ends[k - 1]), runs + 1
    assert runs > 0  # the decode cohort's fast-forward ran, not only single steps
    # All prefills fit the first step (6 prompts, 2,040-token budget): request i samples its
    # last token at step 20 + 5i, so it finishes at 10 ms x (20 + 5i).
    assert [r.metrics.finish_s for r in state] == pytest.approx([0.01 * (20 + 5 * i) for i in range(6)])
    simulated = kvsim.run(scenario, requests=reqs, cost_model=ConstantCostModel(0.01)).requests.set_index(
        "request_id"
    )
    assert [r.metrics.finish_s for r in state] == list(simulated.finish_s)
