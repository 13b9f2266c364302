"""Retention on tiny pools: a finished request's blocks dropped uncached (none), kept by priority
until their duration runs out (priority), exact block ids; end to end with a mixture of tiers."""

from __future__ import annotations

import pytest
from conftest import spec
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.request import Retention
from kvsim.scenario.schema import EngineConfig


def make(num_blocks: int = 12, policy: str = "lru") -> Scheduler:
    cfg = EngineConfig(block_size=4, eviction_policy=policy)
    return Scheduler(cfg, BlockPool(num_blocks, eviction_policy=policy))


def run_one(s: Scheduler, req: Request, t: float) -> None:
    s.add_request(req)
    while req.status.value != "finished":
        out = s.schedule(t)
        s.update(out, t + 1.0)
        t += 1.0


def free_ids(s: Scheduler) -> list[int]:
    return [b.block_id for b in s.pool.free_queue]


def test_retention_none_drops_what_the_request_computed_and_keeps_what_it_hit() -> None:
    s = make()
    shared = Request(spec(0, [(1, 8), (2, 5)], output=1))  # 13 tokens: blocks 0, 1, 2 full, 3 partial
    run_one(s, shared, 0.0)
    assert free_ids(s)[:1] == [3] and s.pool.num_cached_free == 3
    clf = Request(spec(1, [(1, 8), (3, 5)], output=1, retention=Retention("none")))
    run_one(s, clf, 10.0)
    # It hit blocks 0, 1 (the shared 8 tokens: someone else's, kept) and computed 3 + 1 more:
    # blocks 3 (full) and 4 (partial) from the free queue's head. Both are dropped uncached,
    # to the head: nothing of its own stays to be hit, nor pushes anyone's prefix out.
    assert clf.metrics.prefix_cache_hits_tokens == 8
    assert free_ids(s)[:2] == [4, 3]
    assert s.pool.blocks[3].block_hash is None and s.pool.blocks[0].block_hash is not None
    assert s.pool.num_cached_free == 3  # 0, 1, 2: as before the classifier came
    again = Request(spec(2, [(1, 8), (3, 5)], output=1))
    s.add_request(again)
    s.schedule(20.0)
    assert again.metrics.prefix_cache_hits_tokens == 8  # its own 4 tokens were not kept


def test_retention_none_is_not_counted_as_eviction() -> None:
    s = make()
    run_one(s, Request(spec(0, 9, output=1, retention=Retention("none"))), 0.0)
    assert s.pool.num_evicted == 0 and s.pool.num_cached_free == 0


def test_priorities_decide_eviction_order_until_their_duration_runs_out() -> None:
    s = make(num_blocks=6, policy="retention")
    keep = Request(spec(0, [(1, 8)], output=1, retention=Retention("priority", 80, 10.0)))
    run_one(s, keep, 0.0)  # 8 tokens: blocks 0, 1 cached at priority 80 until t = 1 + 10
    plain = Request(spec(1, [(2, 8)], output=1))
    run_one(s, plain, 2.0)  # blocks 2, 3 cached at the default 35
    assert free_ids(s) == [4, 5, 3, 2, 1, 0]
    # A newcomer needing 4 blocks takes the uncached 4, 5, then evicts the default-priority
    # prefix (3, 2) before the kept one, although the kept one was freed first.
    new = Request(spec(2, 15, output=1))
    s.add_request(new)
    s.schedule(4.0)
    assert [b.block_id for b in new.blocks] == [4, 5, 3, 2]
    assert s.pool.blocks[0].block_hash is not None and s.pool.blocks[2].block_hash is None


def test_an_expired_priority_falls_back_to_the_default_level_in_time_order() -> None:
    s = make(num_blocks=6, policy="retention")
    run_one(s, Request(spec(0, [(1, 8)], output=1, retention=Retention("priority", 80, 3.0))), 0.0)
    run_one(s, Request(spec(1, [(2, 8)], output=1)), 10.0)  # freed at 11, after the expiry at 4
    # Block 0, 1's priority ran out at t = 4, before 2, 3 were freed: LRU again, they go first.
    assert free_ids(s) == [4, 5, 1, 0, 3, 2]


def test_retention_priorities_need_the_retention_policy() -> None:
    with pytest.raises(Exception, match="need eviction_policy: retention"):
        kvsim.load_scenario({"workload": {"retention": {"kind": "priority", "priority": 90}}})
    with pytest.raises(Exception, match=r"need engine\.eviction_policy: retention"):
        kvsim.run(
            {"replicas": [{"cost_model": {"kind": "constant", "step_time_s": 0.01}}]},
            requests=[spec(0, 8, output=1, retention=Retention("priority", 90))],
        )


def retention_scenario(policy: str) -> dict:
    """250 requests of two tenants on a 600-block pool; the second tier keeps nothing
    (``lru``) or keeps its blocks at a priority for 5 s (``retention``)."""
    ret = {"kind": "priority", "priority": 80, "duration_s": 5.0} if policy == "retention" else "none"
    return {
        "replicas": [{"engine": {"num_gpu_blocks_override": 600, "eviction_policy": policy}}],
        "workload": {
            "num_requests": 250,
            "arrival": {"kind": "poisson", "rate_per_s": 8.0},
            "system_prompts": {"num_prompts": 8, "tokens": {"kind": "fixed", "tokens": 512}},
            "tenants": [{"name": "chat"}, {"name": "tier2", "retention": ret}],
        },
    }


@pytest.mark.parametrize("policy", ["lru", "retention"])
def test_fast_forward_equals_stepping_with_retention(policy: str) -> None:
    scenario = retention_scenario(policy)
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    assert fast.summary["num_evicted_blocks"] > 1000
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(fast, attr), getattr(slow, attr))
