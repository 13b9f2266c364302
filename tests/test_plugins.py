"""Policies are pluggable: a router, an eviction policy and a cost model defined here, in
the test file, registered (or passed in) and run through whole scenarios."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from conftest import spec

import kvsim
from kvsim.core.block import KVBlock
from kvsim.core.block_pool import BlockPool
from kvsim.cost.base import ConstantCostModel
from kvsim.engine.view import ClusterView, ReplicaView, Request
from kvsim.errors import ScenarioError
from kvsim.registry import EVICTION_POLICIES, ROUTERS
from kvsim.scenario.loading import scenario_json_schema
from kvsim.scenario.schema import RouterConfig


class AlwaysLast:
    """Sends everything to the last candidate replica."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.seen: list[int] = []

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        self.seen.append(req.request_id)
        return view.replicas[-1]


class MostRecentlyFreedFirst:
    """Eviction by MRU: the block freed last is reused first (a stack of free blocks)."""

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self._stack: list[KVBlock] = list(reversed(list(blocks)))  # block 0 on top

    def __len__(self) -> int:
        return len(self._stack)

    def append(self, block: KVBlock) -> None:
        self._stack.append(block)

    def appendleft(self, block: KVBlock) -> None:  # holds nothing: the very next to go
        self._stack.append(block)

    def popleft(self) -> KVBlock:
        if not self._stack:
            raise IndexError("no free blocks")
        return self._stack.pop()

    def remove(self, block: KVBlock) -> None:
        self._stack.remove(block)

    def __iter__(self) -> Iterator[KVBlock]:
        return iter(reversed(self._stack))


@pytest.fixture
def registered():
    ROUTERS.register("always_last")(AlwaysLast)
    EVICTION_POLICIES.register("mru")(MostRecentlyFreedFirst)
    yield
    ROUTERS.unregister("always_last")
    EVICTION_POLICIES.unregister("mru")


def scenario(**extra) -> dict:
    return {"workload": {"num_requests": 60, "arrival": {"kind": "poisson", "rate_per_s": 20.0}}} | extra


def test_a_registered_router_is_named_by_a_scenario(registered):
    res = kvsim.run(scenario(replicas=[{"count": 3}], router={"kind": "always_last"}))
    assert set(res.requests.replica_id) == {"replica-2"} and res.summary["num_finished"] == 60
    assert "always_last" in scenario_json_schema()["$defs"]["RouterConfig"]["properties"]["kind"]["enum"]


def test_a_router_instance_replaces_the_scenario_router():
    router = AlwaysLast()
    res = kvsim.run(scenario(replicas=[{"count": 2}]), router=router)
    assert set(res.requests.replica_id) == {"replica-1"}
    assert sorted(router.seen) == list(range(60))


def test_a_registered_eviction_policy_reuses_blocks_in_its_own_order(registered):
    pool = BlockPool(4, eviction_policy="mru")
    a = pool.get_new_blocks(2)
    assert [b.block_id for b in a] == [0, 1]
    pool.cache_block(a[0], 100)
    pool.free_blocks(reversed(a))  # freed 1 (nothing cached: on top) then 0 (cached)
    assert [b.block_id for b in pool.free_queue] == [1, 0, 2, 3]
    assert [b.block_id for b in pool.get_new_blocks(2)] == [1, 0]  # then evicts cached block 0
    assert pool.num_evicted == 1 and pool.get_cached_block(100) is None
    pool.check_invariants()


def test_a_registered_eviction_policy_runs_a_whole_scenario(registered):
    over = ["workload.num_requests=200", "replicas.0.engine.num_gpu_blocks_override=600"]
    lru = kvsim.run(None, overrides=over)
    mru = kvsim.run(None, overrides=[*over, "replicas.0.engine.eviction_policy=mru"])
    assert mru.scenario.replicas[0].engine.eviction_policy == "mru"
    assert mru.summary["num_finished"] == lru.summary["num_finished"] == 200
    # Reusing the freshest blocks first evicts other blocks than LRU does (pinned seed).
    assert lru.summary["num_evicted_blocks"] == 15_154
    assert mru.summary["num_evicted_blocks"] == 18_087


def test_unknown_policy_names_list_the_registered_ones():
    with pytest.raises(ScenarioError) as err:
        kvsim.load_scenario({"replicas": [{"engine": {"eviction_policy": "nope"}}], "router": {"kind": "x"}})
    problems = dict(err.value.problems)
    assert (
        "unknown eviction policy 'nope'; registered: lru, lfu"
        in problems["replicas.0.engine.eviction_policy"]
    )
    assert (
        "unknown router 'x'; registered: round_robin, least_loaded, prefix_aware" in problems["router.kind"]
    )


def test_a_cost_model_instance_prices_every_iteration():
    res = kvsim.run(
        scenario(), requests=[spec(0, 100, output=5, arrival=1.0)], cost_model=ConstantCostModel(0.02)
    )
    r = res.requests.iloc[0]
    assert r.ttft_s == pytest.approx(0.02) and r.e2e_s == pytest.approx(0.10)
    assert set(res.iterations.duration_s) == {0.02}
