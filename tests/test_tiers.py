"""Offload tiers and tier stacks: exact replacement orders, cascades, write-through, loads."""

from __future__ import annotations

import pytest
from conftest import spec

from kvsim.core.block import PRIVATE
from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.engine.cluster import shared_content_ids
from kvsim.kv.tiers import BlockTier, CpuOffloadTier, TierStack
from kvsim.scenario.schema import EngineConfig


def test_lru_tier_refreshes_hits_and_fifo_does_not():
    for policy, survivor in (("lru", 1), ("fifo", 2)):
        tier = BlockTier(2, policy)
        tier.store(1)
        tier.store(2)
        tier.touch(1)  # a hit
        tier.store(3)  # full: lru drops 2 (1 was hit), fifo drops 1 (stored first)
        assert survivor in tier and 3 in tier and len(tier) == 2, policy
        assert tier.num_dropped == 1
        tier.check_invariants()


def test_a_block_already_held_is_not_written_again():
    tier = BlockTier(4)
    assert tier.put(7) == (True, None)
    assert tier.put(7) == (False, None)
    assert tier.num_stored == 1


def test_private_blocks_take_room_under_placeholders_nobody_can_hit():
    tier = BlockTier(2)
    tier.store(None)
    tier.store(PRIVATE)
    assert len(tier) == 2 and tier.lookup(PRIVATE) is None
    written, dropped = tier.put(5)
    assert written and isinstance(dropped, float)  # the oldest placeholder went


def test_stack_cascades_blocks_pushed_out_of_dram_to_nvme():
    dram, nvme = BlockTier(2, kind="dram"), BlockTier(3, kind="nvme")
    stack = TierStack([dram, nvme])
    for h in (1, 2, 3, 4):  # GPU evictions
        stack.store(h)
    assert list(dram._blocks) == [3, 4] and list(nvme._blocks) == [1, 2]
    assert stack.lookup(3) == 0 and stack.lookup(1) == 1 and stack.lookup(9) is None
    stack.touch(1)
    stack.touch(4)
    assert stack.drain() == ([4, 2], [1, 0])  # writes per tier; tiers of the loads in order
    assert stack.drain() == ([0, 0], [])
    stack.check_invariants()


def test_write_through_tiers_take_every_cached_block_and_no_evictions():
    dram, pool = BlockTier(8, kind="dram"), BlockTier(8, kind="shared_pool")
    stack = TierStack([dram, pool], [False, True])
    stack.write_through_block(11)  # cached on the GPU: written to the pool at once
    stack.write_through_block(None)  # a private block takes room too
    stack.store(11)  # evicted from the GPU: written to DRAM (write-on-evict), not again to the pool
    assert 11 in dram and 11 in pool and len(pool) == 2
    assert stack.drain()[0] == [1, 2]


def test_the_gpu_pool_writes_evicted_blocks_through_a_stack():
    stack = TierStack([CpuOffloadTier(4)])
    pool = BlockPool(2, offload=stack)
    a, b = pool.get_new_blocks(2)
    pool.cache_block(a, 101)
    pool.cache_block(b, 102)
    pool.free_blocks([b, a])
    pool.get_new_blocks(2)  # evicts both: written to the tier
    assert 101 in stack and 102 in stack
    assert stack.drain()[0] == [2]


def test_a_swapped_request_writes_its_blocks_to_the_tier_once():
    """Request 1 (unique content: private blocks) is swapped out at step 6; its freed blocks,
    still cached, are evicted to the tier by request 0's growth. Swapped back in at 16, it
    caches copies of the same content, which request 2 evicts at 23: the tier holds those
    already, by hash, and does not write them again (placeholders would take room twice)."""
    specs = [spec(0, 4, output=16), spec(1, 8, output=12, arrival=1.0), spec(2, 23, output=1, arrival=12.0)]

    def run(shared: set[int] | None) -> tuple[list[tuple], CpuOffloadTier]:
        cfg = EngineConfig(block_size=4, enable_prefix_caching=True, preemption_mode="swap")
        tier = CpuOffloadTier(16)
        s = Scheduler(cfg, BlockPool(6, offload=tier), num_swap_blocks=8)
        reqs = [Request(x, shared_content_ids=shared) for x in specs]
        log = []
        for t in range(24):
            for r in reqs:
                if r.arrival_s == t:
                    s.add_request(r)
            out = s.schedule(t)
            log.append(([(e.kind.value, e.request_id) for e in out.events], out.num_evicted, tier.num_stored))
            s.update(out, t + 1.0)
        return log, tier

    hashed, tier = run(None)
    log, private_tier = run(shared_content_ids(specs))
    assert log == hashed and private_tier.num_stored == tier.num_stored == 8
    assert hashed[6][0] == [("swap_out", 1)] and hashed[16][0] == [("swap_in", 1)]
    assert hashed[23] == ([], 5, 8)  # 5 blocks evicted, 3 written: request 1's first 2 are held


def test_stack_needs_tiers_and_one_flag_each():
    with pytest.raises(ValueError, match="at least one tier"):
        TierStack([])
    with pytest.raises(ValueError, match="one write_through flag per tier"):
        TierStack([BlockTier(1)], [True, False])
    with pytest.raises(ValueError, match='"policy" must be one of'):
        BlockTier(1, "mru")
