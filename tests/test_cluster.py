"""The cluster layer end to end: what routers see, admission, shared links, tiers, the shared
pool and autoscaling; hand-computed timelines, queueing theory, fast-forward equivalence."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ROOT, spec
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.engine.simulator import scenario_workload
from kvsim.request import RequestSpec, Segment

CHAT = ROOT / "scenarios" / "chat_sessions.yaml"
BLOCK_BYTES = 16 * 2 * 32 * 8 * 128 * 2  # Llama-3-8B bf16: 128 KiB per token, 16 tokens a block


def constant(step_s: float = 0.01, count: int = 1, **engine) -> dict:
    return {
        "model": "llama-3-8b",
        "replicas": [
            {
                "gpu": "h100-sxm",
                "count": count,
                "engine": engine,
                "cost_model": {"kind": "constant", "step_time_s": step_s},
            }
        ],
    }


def assert_same_run(a: kvsim.Result, b: kvsim.Result) -> None:
    assert_frame_equal(a.requests, b.requests)
    assert_frame_equal(a.iterations, b.iterations)
    assert_frame_equal(a.events, b.events)


# --------------------------------------------------------------------------- what routers see

ROUTED = [
    "workload.num_requests=300",
    "replicas.0.count=3",
    "router.kind=prefix_aware",
    "replicas.0.engine.num_gpu_blocks_override=600",
]


def test_the_event_index_without_delay_routes_exactly_as_reading_the_pools():
    exact = kvsim.run(CHAT, overrides=[*ROUTED, "router.view.cache=exact"])
    events = kvsim.run(CHAT, overrides=ROUTED)
    assert events.scenario.router.view.cache == "events"  # the default
    assert exact.summary["num_evicted_blocks"] > 5_000  # the index saw many removals
    assert_same_run(exact, events)
    expected = events.requests.router_expected_hits_tokens
    assert (expected >= 0).all() and expected.sum() > 0


def test_a_stale_index_sends_requests_to_caches_that_are_gone():
    fresh = kvsim.run(CHAT, overrides=ROUTED).summary
    stale = kvsim.run(CHAT, overrides=[*ROUTED, "router.view.kv_events_delay_s=2.0"]).summary
    assert stale["router_overestimated_tokens"] > fresh["router_overestimated_tokens"] + 5_000
    assert stale["router_mispredicted_requests"] > fresh["router_mispredicted_requests"]
    assert stale["prefix_cache_hit_rate"] < fresh["prefix_cache_hit_rate"]


def test_load_snapshots_hide_the_routers_own_decisions():
    # Eight requests at t=0.5; the snapshot taken at t=0 says every replica is idle, so the
    # least-loaded router sends them all to replica 0 (live loads spread them 2 per replica).
    reqs = [spec(i, 64, output=4, arrival=0.5) for i in range(8)]
    live = kvsim.run(constant(count=4) | {"router": {"kind": "least_loaded"}}, requests=reqs)
    stale = kvsim.run(
        constant(count=4) | {"router": {"kind": "least_loaded", "view": {"load_refresh_s": 1.0}}},
        requests=reqs,
    )
    assert list(live.requests.replica_id.value_counts()) == [2, 2, 2, 2]
    assert set(stale.requests.replica_id) == {"replica-0"}


FF_CASES = {
    "delayed-index": ["router.view.kv_events_delay_s=0.5"],
    "load-snapshots": ["router.view.load_refresh_s=0.5", "router.kind=least_kv_usage"],
    "session-affinity": ["router.kind=session_affinity"],
    "consistent-hash": ["router.kind=consistent_hash"],
    "admission": ["admission.max_waiting_per_replica=1", "admission.max_kv_usage=0.6"],
    "estimated-wait": ["admission.max_estimated_wait_s=1.0", "replicas.0.engine.max_num_seqs=8"],
    "dram-nvme": [
        "replicas.0.offload={dram: {capacity_gib: 0.05}, nvme: {capacity_gib: 0.2, bandwidth_bytes_per_s: 7.0e9}}"
    ],
    "shared-pool": ["shared_kv_pool={capacity_gib: 1.0}"],
    "write-through-pool": ["shared_kv_pool={capacity_gib: 1.0, write_policy: write_through}"],
    "fair-share-tiers": ["network.sharing=fair_share", "replicas.0.offload={dram: {capacity_gib: 0.05}}"],
    "autoscale": [
        "replicas.0.count=1",
        "replicas.0.autoscale={metric: outstanding, scale_up_above: 3, scale_down_below: 1, "
        "interval_s: 5, cold_start_s: 10, scale_down_delay_s: 20, min_count: 1, max_count: 3}",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(FF_CASES))
def test_fast_forward_equals_stepping_for_every_cluster_feature(case):
    ov = [*ROUTED, "workload.num_requests=200", *FF_CASES[case]]
    fast = kvsim.run(CHAT, overrides=ov)
    slow = kvsim.run(CHAT, overrides=[*ov, "sim.fast_forward=false"])
    assert_same_run(fast, slow)
    assert fast.summary["num_finished"] + fast.summary["num_rejected"] == 200


def test_fast_forward_equals_stepping_with_fair_share_disaggregation():
    scenario = _disaggregated(2, 1, sharing="fair_share") | {
        "workload": {"num_requests": 150, "arrival": {"kind": "poisson", "rate_per_s": 8.0}}
    }
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    assert_same_run(fast, slow)
    assert fast.summary["kv_transfer_queueing_mean_s"] > 0


# --------------------------------------------------------------------------- admission


def test_a_bounded_waiting_queue_rejects_with_its_reason():
    # One request runs at a time; all five arrive at t=0, before the first iteration: two
    # wait (queue limit 2), three are refused.
    res = kvsim.run(
        constant(max_num_seqs=1) | {"admission": {"max_waiting_per_replica": 2}},
        requests=[spec(i, 32, output=3) for i in range(5)],
    )
    r = res.requests
    assert list(r.rejected) == [False, False, True, True, True]
    assert list(r.reject_reason) == ["", "", "queue_full", "queue_full", "queue_full"]
    s = res.summary
    assert (s["num_finished"], s["num_rejected"], s["num_unfinished"]) == (2, 3, 0)
    assert s["num_rejected_queue_full"] == 3
    rejects = res.events[res.events.kind == "reject"]
    assert list(rejects.request_id) == [2, 3, 4] and set(rejects.replica_id) == {"replica-0"}


def test_a_cluster_wide_queue_limit_refuses_before_routing():
    res = kvsim.run(
        constant(count=2, max_num_seqs=1) | {"admission": {"max_cluster_waiting": 3}},
        requests=[spec(i, 32, output=3) for i in range(6)],
    )
    assert list(res.requests.reject_reason) == ["", "", "", "cluster_queue", "cluster_queue", "cluster_queue"]
    assert set(res.events.loc[res.events.kind == "reject", "replica_id"]) == {""}  # no replica chosen


def test_estimated_wait_bounds_the_queueing_of_admitted_requests():
    # One at a time, 1 s each (100 x 10 ms); a request every 0.5 s: the queue grows without
    # admission control. The estimate is waiting / admissions per second over 10 s.
    reqs = [spec(i, 16, output=100, arrival=0.5 * i) for i in range(60)]
    free = kvsim.run(constant(max_num_seqs=1), requests=reqs)
    capped = kvsim.run(constant(max_num_seqs=1) | {"admission": {"max_estimated_wait_s": 3.0}}, requests=reqs)
    assert free.summary["num_rejected"] == 0 and free.requests.queueing_s.max() > 20
    s = capped.summary
    assert s["num_rejected_estimated_wait"] > 10 and s["num_rejected"] == s["num_rejected_estimated_wait"]
    assert capped.requests.queueing_s.max() < 5.0


def test_kv_usage_admission_refuses_when_the_chosen_replica_is_full():
    # 20 blocks; a 200-token request holds 13 of them (65%) while it runs.
    reqs = [spec(0, 200, output=20), spec(1, 16, output=2, arrival=0.05), spec(2, 16, output=2, arrival=0.5)]
    res = kvsim.run(
        constant(num_gpu_blocks_override=20) | {"admission": {"max_kv_usage": 0.5}}, requests=reqs
    )
    assert list(res.requests.reject_reason) == ["", "kv_usage", ""]


def test_a_run_where_nothing_can_finish_says_so():
    res = kvsim.run(constant(max_model_len=64), requests=[spec(i, 100, output=4) for i in range(3)])
    s = res.summary
    assert (s["num_finished"], s["num_unfinished"], s["num_rejected_max_model_len"]) == (0, 0, 3)
    assert s["completion_note"] == "no request can finish: every one was rejected (max_model_len 3)"
    ok = kvsim.run(constant(), requests=[spec(0, 10, output=2)])
    assert ok.summary["completion_note"] == ""


def test_the_turns_after_a_rejected_one_are_rejected_too_never_sent():
    first = spec(0, 100, output=4)
    second = RequestSpec(
        request_id=1,
        arrival_s=0.0,
        prompt=(Segment(1000, 100), first.output_segment),
        output_tokens=2,
        parent_id=0,
    )
    third = RequestSpec(request_id=2, arrival_s=0.0, prompt=(Segment(5, 8),), output_tokens=2, parent_id=1)
    res = kvsim.run(constant(max_model_len=64), requests=[first, second, third])
    assert list(res.requests.reject_reason) == ["max_model_len", "parent_rejected", "parent_rejected"]
    assert res.requests.arrival_s.isna().tolist() == [False, True, True]
    assert res.summary["num_rejected"] == 3 and res.summary["num_unfinished"] == 0


# --------------------------------------------------------------------------- queueing theory


def _poisson(replicas: int, rate: float, router: str, n: int, seed: int = 11) -> kvsim.Result:
    scenario = constant(0.01, count=replicas, max_num_seqs=1) | {
        "seed": seed,
        "router": {"kind": router},
        "workload": {
            "num_requests": n,
            "arrival": {"kind": "poisson", "rate_per_s": rate},
            "prompt_tokens": {"kind": "fixed", "tokens": 16},
            "output_tokens": {"kind": "fixed", "tokens": 10},
        },
    }
    return kvsim.run(scenario)


@pytest.mark.slow
def test_random_routing_splits_poisson_load_into_md1_queues():
    # Random routing thins a Poisson stream into independent Poisson streams: each of 4
    # replicas is an M/D/1 queue at 5 req/s with D = 0.1 s: Wq = rho D / (2 (1 - rho)) = 0.05 s.
    res = _poisson(4, 20.0, "random", 40_000)
    wq = res.requests.queueing_s.to_numpy()
    assert wq.mean() == pytest.approx(0.5 * 0.1 / (2 * 0.5), rel=0.05)
    assert res.requests.replica_id.value_counts().min() > 9_500


def _batch_means(df, col: str, k: int = 20) -> tuple[float, float]:
    """Mean of ``col`` and its standard error by batch means over arrival order (requests
    sharing batches are correlated, so the iid standard error would be too small)."""
    v = df.sort_values("arrival_s")[col].dropna().to_numpy()
    means = np.array([b.mean() for b in np.array_split(v, k)])
    return float(v.mean()), float(means.std(ddof=1) / math.sqrt(k))


def _lognormal(count: int, rate: float, n: int, router: str) -> dict:
    return {
        "seed": 5,
        "model": "llama-3-8b",
        "replicas": [{"gpu": "h100-sxm", "count": count}],
        "router": {"kind": router},
        "workload": {"num_requests": n, "arrival": {"kind": "poisson", "rate_per_s": rate}},
    }


@pytest.mark.slow
def test_n_round_robin_replicas_match_one_replica_at_a_nth_of_the_rate():
    # Lognormal lengths, continuous batching, 2 req/s per replica. Round robin hands each
    # replica every 4th arrival (Erlang-4 gaps, more regular than Poisson): mean E2E and TTFT
    # agree with one replica at 2 req/s within 4 standard errors; TPOT is a little lower
    # (steadier batches). Random routing thins Poisson into Poisson: everything agrees.
    one = kvsim.run(_lognormal(1, 2.0, 2_500, "round_robin")).requests
    rr = kvsim.run(_lognormal(4, 8.0, 10_000, "round_robin")).requests
    rnd = kvsim.run(_lognormal(4, 8.0, 10_000, "random")).requests
    assert rr.groupby("replica_id").size().tolist() == [2_500] * 4

    def z(a, b, col: str) -> float:
        (ma, sa), (mb, sb) = _batch_means(a, col), _batch_means(b, col)
        return (ma - mb) / math.sqrt(sa**2 + sb**2)

    for col in ("e2e_s", "ttft_s"):
        assert abs(z(one, rr, col)) < 4, col
    assert _batch_means(rr, "tpot_s")[0] < _batch_means(one, "tpot_s")[0]
    for col in ("e2e_s", "ttft_s", "tpot_s"):
        assert abs(z(one, rnd, col)) < 4, col


def test_a_round_robin_cluster_is_its_replicas_each_run_alone():
    # Replicas share nothing under round robin: replica k's rows are exactly those of one
    # replica fed replica k's requests.
    scenario = {"seed": 3, "replicas": [{"count": 3}], "workload": {"num_requests": 240}}
    whole = kvsim.run(scenario)
    specs = scenario_workload(kvsim.load_scenario(scenario)).requests
    for k in range(3):
        name = f"replica-{k}"
        mine = set(whole.requests.loc[whole.requests.replica_id == name, "request_id"])
        alone = kvsim.run(
            {"seed": 3, "replicas": [{"count": 1}]}, requests=[s for s in specs if s.request_id in mine]
        )
        got = whole.requests[whole.requests.replica_id == name].reset_index(drop=True)
        want = alone.requests.assign(replica_id=name)
        assert_frame_equal(got, want)
        its = whole.iterations[whole.iterations.replica_id == name].reset_index(drop=True)
        assert_frame_equal(its, alone.iterations.assign(replica_id=name))


# --------------------------------------------------------------------------- shared links


def _disaggregated(
    prefill: int, decode: int, *, sharing: str = "dedicated", step_s: float | None = None
) -> dict:
    cost = {"kind": "constant", "step_time_s": step_s} if step_s else "roofline"
    return {
        "model": "llama-3-8b",
        "replicas": [
            {"name": "prefill", "count": prefill, "gpu": "h100-sxm", "role": "prefill", "cost_model": cost},
            {"name": "decode", "count": decode, "gpu": "h100-sxm", "role": "decode", "cost_model": cost},
        ],
        "router": {"kind": "round_robin"},
        "kv_transfer": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4},
        "network": {"sharing": sharing},
    }


def test_two_kv_transfers_overlapping_on_the_decode_nic_take_the_hand_computed_times():
    # 10 ms iterations, NICs of 1 GB/s. Request 0 prefills on prefill-0 in [0, 0.01], request
    # 1 on prefill-1 in [0.01, 0.02]; both send 100 x 128 KiB = 13,107,200 bytes to decode-0.
    #   0.01-0.02  A alone at 1 GB/s: 10,000,000 sent, 3,107,200 left
    #   0.02-      A and B at 0.5 GB/s on decode-0's NIC: A done at 0.02 + 0.0062144
    #   then       B alone: 10,000,000 left at 1 GB/s -> done at 0.0362144
    # + 0.1 ms latency each. Alone, a transfer takes 0.0131072 s + latency.
    reqs = [spec(0, 100, output=3, arrival=0.0), spec(1, 100, output=3, arrival=0.01)]
    res = kvsim.run(_disaggregated(2, 1, sharing="fair_share", step_s=0.01), requests=reqs)
    r = res.requests
    assert list(r.prefill_replica_id) == ["prefill-0", "prefill-1"] and set(r.replica_id) == {"decode-0"}
    assert r.kv_transfer_s[0] == pytest.approx(0.0162144 + 1e-4, rel=1e-9)
    assert r.kv_transfer_s[1] == pytest.approx(0.0162144 + 1e-4, rel=1e-9)
    assert r.kv_transfer_queueing_s.tolist() == pytest.approx([0.0031072, 0.0031072], rel=1e-9)
    # The decode replica starts request 0 when its KV has arrived.
    dec = res.iterations[res.iterations.replica_id == "decode-0"]
    assert dec.start_s.iloc[0] == pytest.approx(0.01 + 0.0162144 + 1e-4, rel=1e-9)
    s = res.summary
    assert s["num_kv_transfers"] == 2 and s["link_nic_rx_utilization_max"] > 0
    dedicated = kvsim.run(_disaggregated(2, 1, step_s=0.01), requests=reqs).requests
    assert dedicated.kv_transfer_s.tolist() == pytest.approx([0.0131072 + 1e-4] * 2, rel=1e-9)
    assert dedicated.kv_transfer_queueing_s.tolist() == [0.0, 0.0]


def test_a_fabric_limit_slows_every_transfer_between_replicas():
    reqs = [spec(0, 100, output=3)]
    scenario = _disaggregated(1, 1, sharing="fair_share", step_s=0.01)
    scenario["network"]["fabric_bandwidth_bytes_per_s"] = 0.5e9
    r = kvsim.run(scenario, requests=reqs).requests
    assert r.kv_transfer_s[0] == pytest.approx(13_107_200 / 0.5e9 + 1e-4, rel=1e-9)


# --------------------------------------------------------------------------- tiers and the pool


def test_nvme_and_dram_hits_are_counted_per_tier_and_priced_on_their_links():
    # The 64-token prefix of request 0 (4 blocks) is pushed out of a 10-block GPU pool (11
    # blocks less vLLM's null block) by a filler, into a 1-block DRAM tier that pushes older
    # blocks down to NVMe. Request 2 loads the prefix from both tiers: PCIe (64 GB/s) for
    # DRAM, 1 GB/s + 1 ms for NVMe.
    engine = {"num_gpu_blocks_override": 11, "max_num_seqs": 1}
    scenario = constant(0.01, **engine)
    scenario["replicas"][0]["offload"] = {
        "dram": {"capacity_gib": BLOCK_BYTES / 2**30},
        "nvme": {"capacity_gib": 16 * BLOCK_BYTES / 2**30, "bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3},
    }
    reqs = [
        spec(0, [(1, 64), (2, 1)], output=1, arrival=0.0),
        spec(1, 159, output=1, arrival=0.1),
        spec(2, [(1, 64), (3, 8)], output=1, arrival=0.2),
    ]
    res = kvsim.run(scenario, requests=reqs)
    r2 = res.requests.iloc[2]
    assert r2.offload_hits_tokens == 64 == r2.dram_hits_tokens + r2.nvme_hits_tokens
    assert r2.nvme_hits_tokens > 0
    dram_blocks, nvme_blocks = r2.dram_hits_tokens // 16, r2.nvme_hits_tokens // 16
    expected = 0.01 + dram_blocks * BLOCK_BYTES / 64e9 + 1e-3 + nvme_blocks * BLOCK_BYTES / 1e9
    assert r2.ttft_s == pytest.approx(expected, rel=1e-12)
    s = res.summary
    assert s["nvme_hits_tokens"] == r2.nvme_hits_tokens and s["nvme_write_bytes"] > 0
    assert s["cluster_hit_rate"] > s["prefix_cache_hit_rate"]


def _pool_cluster(write_policy: str) -> dict:
    # 10 usable blocks per replica (11 less the null block): a 160-token filler fills one.
    scenario = constant(0.01, count=2, num_gpu_blocks_override=11, max_num_seqs=1)
    scenario["router"] = {"kind": "round_robin"}
    scenario["shared_kv_pool"] = {
        "capacity_gib": 1.0,
        "bandwidth_bytes_per_s": 10e9,
        "latency_s": 1e-4,
        "write_policy": write_policy,
    }
    return scenario


def test_a_replica_loads_what_another_replica_evicted_from_the_shared_pool():
    # Round robin: request 0 -> replica 0 caches a 64-token prefix; request 1 -> replica 1,
    # request 2 (a filler) -> replica 0 evicts the prefix into the pool; request 3 -> replica 1
    # finds it there: 4 blocks over 10 GB/s plus 0.1 ms.
    reqs = [
        spec(0, [(1, 64), (2, 1)], output=1, arrival=0.0),
        spec(1, 8, output=1, arrival=0.05),
        spec(2, 159, output=1, arrival=0.1),
        spec(3, [(1, 64), (3, 8)], output=1, arrival=0.2),
    ]
    res = kvsim.run(_pool_cluster("write_on_evict"), requests=reqs)
    r3 = res.requests.iloc[3]
    assert r3.replica_id == "replica-1" and r3.shared_pool_hits_tokens == 64
    assert r3.ttft_s == pytest.approx(0.01 + 1e-4 + 4 * BLOCK_BYTES / 10e9, rel=1e-12)
    assert res.summary["shared_pool_write_bytes"] > 0


def test_write_through_puts_blocks_in_the_pool_before_any_eviction():
    reqs = [
        spec(0, [(1, 64), (2, 1)], output=1, arrival=0.0),
        spec(1, [(1, 64), (3, 8)], output=1, arrival=0.1),
    ]
    on_evict = kvsim.run(_pool_cluster("write_on_evict"), requests=reqs).requests
    through = kvsim.run(_pool_cluster("write_through"), requests=reqs).requests
    assert on_evict.shared_pool_hits_tokens.tolist() == [0, 0]  # nothing evicted yet
    assert through.shared_pool_hits_tokens.tolist() == [0, 64]


def test_write_through_writes_every_block_a_request_fills_decoded_ones_too():
    # 64 prompt tokens + 41 output tokens, the last never fed back: 104 tokens in the KV, 6 full
    # blocks of 16 (4 of prompt, 2 of output, private to the request). Write-through sends each to the pool as it fills, whether the
    # scheduler's decode hot path or the allocator filled it; the 7th (8 tokens) never fills.
    for fast_forward in (True, False):
        scenario = _pool_cluster("write_through")
        scenario["sim"] = {"fast_forward": fast_forward}
        res = kvsim.run(scenario, requests=[spec(0, 64, output=41)])
        assert res.summary["shared_pool_write_bytes"] == 6 * BLOCK_BYTES, fast_forward


# --------------------------------------------------------------------------- autoscaling


def _autoscaled(**autoscale) -> dict:
    scenario = constant(0.01, count=1, max_num_seqs=2)
    scenario["replicas"][0]["autoscale"] = {
        "metric": "queue_length",
        "scale_up_above": 2,
        "scale_down_below": 0.5,
        "interval_s": 1.0,
        "cold_start_s": 3.0,
        "scale_down_delay_s": 5.0,
        "min_count": 1,
        "max_count": 3,
    } | autoscale
    scenario["router"] = {"kind": "least_loaded"}
    return scenario


def test_the_autoscaler_adds_replicas_under_a_burst_and_drains_them_after():
    # One-second requests (100 x 10 ms), four a second for 10 s, on a replica running 2 at a
    # time: the queue grows, the autoscaler starts replicas (ready 3 s after the decision),
    # the newcomers take the later arrivals, and once the queues are empty they drain.
    reqs = [spec(i, 16, output=100, arrival=0.25 * i) for i in range(40)] + [
        spec(40, 16, output=2, arrival=60.0)
    ]
    res = kvsim.run(_autoscaled(), requests=reqs)
    ev = res.events
    ups = ev[ev.kind == "scale_up"]
    assert list(ups.replica_id) == ["replica-1", "replica-2"]
    assert all(t == int(t) for t in ups.time_s)  # decisions every interval_s (1 s)
    ready = ev[ev.kind == "replica_ready"]
    assert list(ready.time_s) == [t + 3.0 for t in ups.time_s]
    assert set(ev.loc[ev.kind == "replica_stopped", "replica_id"]) == {"replica-1", "replica-2"}
    s = res.summary
    assert s["num_finished"] == 41 and s["num_scale_ups"] == 2 and s["num_scale_downs"] == 2
    assert s["replicas_peak"] == 3
    assert set(res.requests.replica_id) == {"replica-0", "replica-1", "replica-2"}
    fixed = kvsim.run(
        constant(0.01, count=3, max_num_seqs=2) | {"router": {"kind": "least_loaded"}}, requests=reqs
    )
    assert s["replica_seconds"] < fixed.summary["replica_seconds"]
    assert fixed.summary["replica_seconds"] == pytest.approx(3 * fixed.summary["sim_time_s"])
    # Replica-seconds: replica 0 the whole run, the others from their scale-up to their stop.
    stops = ev[ev.kind == "replica_stopped"].set_index("replica_id").time_s
    started = ups.set_index("replica_id").time_s
    want = s["sim_time_s"] + sum(stops[r] - started[r] for r in ("replica-1", "replica-2"))
    assert s["replica_seconds"] == pytest.approx(want)
    assert s["gpu_hours"] == pytest.approx(want / 3600)


def test_a_restarted_replica_comes_back_cold():
    reqs = [spec(i, [(7, 64), (100 + i, 16)], output=100, arrival=0.0) for i in range(30)]
    reqs += [spec(30 + i, [(7, 64), (200 + i, 16)], output=100, arrival=40.0 + 0.01 * i) for i in range(30)]
    res = kvsim.run(_autoscaled(scale_down_delay_s=2.0), requests=reqs)
    ev = res.events
    assert (ev.kind == "scale_up").sum() >= 3  # replica-1 or -2 started twice
    assert res.summary["num_finished"] == 60
    assert np.isfinite(res.requests.e2e_s).all()
