"""Scenario fields of the cluster layer: ranges, NaN refused, cross-field rules, resolved sizes."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.errors import ScenarioError
from kvsim.model.kv_sizing import GIB
from kvsim.scenario.resolved import resolve_plan


def problems(data: dict) -> dict[str, str]:
    with pytest.raises(ScenarioError) as err:
        kvsim.load_scenario(data)
    return dict(err.value.problems)


def test_defaults_change_nothing_and_are_described():
    s = kvsim.load_scenario(None)
    assert s.router.view.cache == "events" and s.router.view.kv_events_delay_s == 0.0
    assert s.admission.max_waiting_per_replica is None and s.network.sharing == "dedicated"
    assert s.shared_kv_pool is None and s.replicas[0].offload is None and s.replicas[0].autoscale is None
    schema = kvsim.scenario.loading.scenario_json_schema()
    for name in (
        "RouterViewConfig",
        "AdmissionConfig",
        "NetworkConfig",
        "SharedPoolConfig",
        "TierConfig",
        "AutoscaleConfig",
    ):
        for field, spec in schema["$defs"][name]["properties"].items():
            assert spec.get("description"), (name, field)


def test_nan_and_infinite_values_are_refused_where_they_mean_nothing():
    bad = problems(
        {
            "router": {"view": {"kv_events_delay_s": float("nan")}},
            "admission": {"max_estimated_wait_s": float("inf")},
        }
    )
    assert "router.view.kv_events_delay_s" in bad and "admission.max_estimated_wait_s" in bad


def test_autoscaling_bounds_must_hold_the_starting_count():
    bad = problems(
        {
            "replicas": [
                {
                    "count": 5,
                    "autoscale": {"scale_up_above": 1, "scale_down_below": 2, "min_count": 1, "max_count": 4},
                }
            ]
        }
    )
    assert "min_count (1) <= count (5) <= max_count (4)" in bad["replicas.0.count"]
    assert "scale_down_below (2.0) must be < scale_up_above (1.0)" in bad["replicas.0.autoscale"]


def test_tier_rules():
    bad = problems(
        {
            "replicas": [
                {"engine": {"cpu_offload_gib": 4}, "offload": {"dram": {"capacity_gib": 8}}},
            ]
        }
    )
    assert "offload.dram or engine.cpu_offload_gib, not both" in bad["replicas.0.offload.dram"]
    bad = problems({"replicas": [{"offload": {"nvme": {"capacity_gib": 8}}}]})
    assert "an nvme tier needs its bandwidth_bytes_per_s" in bad["replicas.0.offload.nvme"]
    bad = problems(
        {"replicas": [{"engine": {"enable_prefix_caching": False}, "offload": {"dram": {"capacity_gib": 1}}}]}
    )
    assert "enable_prefix_caching: true" in bad["replicas.0.offload"]


def test_the_shared_pool_needs_one_block_geometry():
    bad = problems(
        {
            "replicas": [{"name": "a"}, {"name": "b", "engine": {"block_size": 32}}],
            "shared_kv_pool": {"capacity_gib": 10},
        }
    )
    assert "the same engine.block_size" in bad["shared_kv_pool"]


def test_plan_resolves_tiers_pool_and_autoscaled_replica_names():
    s = kvsim.load_scenario(
        {
            "replicas": [
                {
                    "count": 2,
                    "offload": {
                        "dram": {"capacity_gib": 1.0, "eviction_policy": "fifo"},
                        "nvme": {"capacity_gib": 4.0, "bandwidth_bytes_per_s": 7e9, "latency_s": 1e-4},
                    },
                    "autoscale": {"scale_up_above": 2, "scale_down_below": 1, "min_count": 1, "max_count": 5},
                }
            ],
            "shared_kv_pool": {"capacity_gib": 64.0, "write_policy": "write_through"},
        }
    )
    plan = resolve_plan(s)
    g = plan.groups[0]
    per_block = g.kv.bytes_per_block_per_shard  # Llama-3-8B bf16: 2 MiB per 16-token block
    assert [t.kind for t in g.tiers] == ["dram", "nvme"]
    assert g.tiers[0].capacity_blocks == int(GIB // per_block) and g.tiers[0].eviction_policy == "fifo"
    assert g.tiers[1].capacity_blocks == int(4 * GIB // per_block) and g.tiers[1].bandwidth_bytes_per_s == 7e9
    assert g.replica_names == tuple(f"replica-{i}" for i in range(5)) and g.initial_count == 2
    assert plan.shared_pool is not None and plan.shared_pool.write_through
    assert plan.shared_pool.capacity_blocks == int(64 * GIB // g.kv.bytes_per_block)
    assert s.num_replicas == 2
