"""Random clusters (hypothesis): no request is lost or duplicated across routing, admission,
hand-off, tier moves and scale-down, and blocks are conserved in every pool and tier."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.core.request_state import Status
from kvsim.engine.cluster import Cluster
from kvsim.engine.simulator import _result, scenario_workload
from kvsim.kv.tiers import TierStack
from kvsim.scenario.resolved import resolve_plan

ROUTERS = [
    "round_robin",
    "random",
    "least_loaded",
    "least_kv_usage",
    "session_affinity",
    "prefix_aware",
    "consistent_hash",
]


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, Any]:
    blocks = draw(st.integers(40, 160))
    engine = {
        "num_gpu_blocks_override": blocks,
        "max_num_seqs": draw(st.integers(1, 8)),
        "max_num_batched_tokens": draw(st.sampled_from([64, 256, 2048])),
        "preemption_mode": draw(st.sampled_from(["recompute", "swap"])),
        "swap_space_gib": 0.01,
        "max_model_len": draw(st.sampled_from([None, 700])),
    }
    cost = {"kind": "constant", "step_time_s": 0.01}
    offload = draw(
        st.sampled_from(
            [
                None,
                {"dram": {"capacity_gib": 0.02}},
                {
                    "dram": {"capacity_gib": 0.01, "eviction_policy": "fifo"},
                    "nvme": {
                        "capacity_gib": 0.05,
                        "bandwidth_bytes_per_s": 7e9,
                        "write_policy": "write_through",
                    },
                },
            ]
        )
    )
    disaggregated = draw(st.booleans())
    if disaggregated:
        groups = [
            {
                "name": "p",
                "role": "prefill",
                "count": draw(st.integers(1, 2)),
                "engine": engine,
                "cost_model": cost,
            },
            {
                "name": "d",
                "role": "decode",
                "count": draw(st.integers(1, 2)),
                "engine": engine,
                "cost_model": cost,
            },
        ]
    else:
        count = draw(st.integers(1, 3))
        groups = [{"name": "r", "count": count, "engine": engine, "cost_model": cost, "offload": offload}]
        if draw(st.booleans()):
            groups[0]["autoscale"] = {
                "metric": draw(st.sampled_from(["queue_length", "kv_usage", "outstanding"])),
                "scale_up_above": 0.5,
                "scale_down_below": 0.2,
                "interval_s": 0.5,
                "cold_start_s": draw(st.sampled_from([0.0, 1.0])),
                "scale_down_delay_s": 1.0,
                "min_count": 1,
                "max_count": count + 2,
            }
    scenario: dict[str, Any] = {
        "seed": draw(st.integers(0, 1000)),
        "model": "llama-3-8b",
        "replicas": groups,
        "router": {
            "kind": draw(st.sampled_from(ROUTERS)),
            "view": {
                "cache": draw(st.sampled_from(["events", "exact"])),
                "kv_events_delay_s": draw(st.sampled_from([0.0, 0.05])),
                "load_refresh_s": draw(st.sampled_from([0.0, 0.2])),
            },
        },
        "admission": {
            "max_waiting_per_replica": draw(st.sampled_from([None, 2])),
            "max_cluster_waiting": draw(st.sampled_from([None, 5])),
            "max_kv_usage": draw(st.sampled_from([None, 0.7])),
        },
        "network": {"sharing": draw(st.sampled_from(["dedicated", "fair_share"]))},
        "workload": {
            "num_requests": draw(st.integers(20, 80)),
            "arrival": {"kind": "poisson", "rate_per_s": draw(st.sampled_from([5.0, 50.0]))},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 600},
            "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 80},
            "system_prompts": {"num_prompts": 3, "tokens": {"kind": "fixed", "tokens": 64}},
        },
        "sim": {"fast_forward": draw(st.booleans())},
    }
    if draw(st.booleans()):
        scenario["workload"]["sessions"] = {
            "turns": {"kind": "uniform", "min_tokens": 1, "max_tokens": 3},
            "think_time_s": 0.3,
        }
    if not disaggregated and draw(st.booleans()):
        scenario["shared_kv_pool"] = {
            "capacity_gib": 0.05,
            "write_policy": draw(st.sampled_from(["write_on_evict", "write_through"])),
        }
    return scenario


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_request_is_lost_or_duplicated_and_blocks_are_conserved(data: dict[str, Any]) -> None:
    scenario = kvsim.load_scenario(data)
    specs = scenario_workload(scenario).requests
    cluster = Cluster(resolve_plan(scenario), specs)
    cluster.run()
    res = _result(cluster, {}, specs)
    r = res.requests
    # Every request exactly once, and each either finished or rejected with a reason.
    assert sorted(r.request_id) == sorted(s.request_id for s in specs)
    assert r.request_id.is_unique
    assert (r.finished ^ r.rejected).all()
    assert ((r.reject_reason != "") == r.rejected).all()
    # Each finished request got its requested output, cut where prompt + output reach
    # max_model_len (vLLM's length cap; every group has the same engine, None: far above).
    cap = scenario.replicas[0].engine.max_model_len
    wanted = {
        s.request_id: s.output_tokens if cap is None else min(s.output_tokens, cap - s.prompt_tokens)
        for s in specs
    }
    fin = r[r.finished]
    assert (fin.output_tokens == fin.request_id.map(wanted)).all()
    assert res.summary["num_unfinished"] == 0
    assert cluster.num_finished == len(specs)
    assert all(req.status in (Status.FINISHED, Status.REJECTED) for req in cluster.requests.values())
    # Nothing left anywhere, and every block accounted for.
    assert cluster.total_outstanding == 0 and cluster.entry_waiting == 0
    for replica in cluster.replicas:
        sched, pool = replica.engine.scheduler, replica.engine.scheduler.pool
        assert not sched.has_work() and replica.num_outstanding == 0
        pool.check_invariants()
        assert pool.num_free_blocks == pool.num_blocks
        assert sched.swap.num_used_blocks == 0
        if isinstance(pool.offload, TierStack):
            pool.offload.check_invariants()
    if cluster.shared_pool is not None:
        cluster.shared_pool.check_invariants()
    # Disaggregated: every finished request that was prefilled elsewhere had its KV moved once.
    moved = r.prefill_replica_id != ""
    assert (res.events.kind == "kv_transfer").sum() == moved.sum()
    assert r.loc[moved, "kv_transfer_s"].notna().all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_fast_forward_equals_stepping_on_random_clusters(data: dict[str, Any]) -> None:
    fast = kvsim.run(data | {"sim": {"fast_forward": True}})
    slow = kvsim.run(data | {"sim": {"fast_forward": False}})
    assert_frame_equal(fast.requests, slow.requests)
    assert_frame_equal(fast.iterations, slow.iterations)
    assert_frame_equal(fast.events, slow.events)
