"""Block pool: exact block ids, ref counts and eviction order on tiny pools."""

from __future__ import annotations

import pytest

from kvsim.core.block_pool import PRIVATE, BlockPool


def ids(blocks) -> list[int]:
    return [b.block_id for b in blocks]


def test_fresh_pool_hands_out_blocks_in_id_order():
    pool = BlockPool(6)
    assert ids(pool.get_new_blocks(3)) == [0, 1, 2]
    assert pool.num_free_blocks == 3 and pool.num_used_blocks == 3
    assert ids(pool.free_queue) == [3, 4, 5]


def test_freed_cached_blocks_join_the_tail_in_the_given_order():
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(3)
    for i, b in enumerate(blocks):
        pool.cache_block(b, 100 + i)
    pool.free_blocks(reversed(blocks))  # a request frees tail first
    assert ids(pool.free_queue) == [3, 4, 5, 2, 1, 0]
    assert ids(pool.get_new_blocks(5)) == [3, 4, 5, 2, 1]


def test_freed_blocks_without_a_hash_go_to_the_head_last_freed_deepest():
    # vLLM 0.32: blocks holding nothing reusable are reused first (LIFO), in freeing order.
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(3)
    pool.cache_block(blocks[0], 100)  # only the first block is full and cached
    pool.free_blocks(reversed(blocks))  # frees 2, 1 (no hash) and 0 (cached)
    assert ids(pool.free_queue) == [2, 1, 3, 4, 5, 0]
    assert ids(pool.get_new_blocks(2)) == [2, 1]
    pool.check_invariants()


def test_without_caching_every_freed_block_is_reused_first():
    pool = BlockPool(6, enable_caching=False)
    blocks = pool.get_new_blocks(3)
    pool.free_blocks(reversed(blocks))
    assert ids(pool.free_queue) == [2, 1, 0, 3, 4, 5]
    lfu = BlockPool(6, enable_caching=False, eviction_policy="lfu")
    blocks = lfu.get_new_blocks(3)
    lfu.free_blocks(reversed(blocks))
    assert ids(lfu.free_queue) == [2, 1, 0, 3, 4, 5]
    assert ids(lfu.get_new_blocks(4)) == [2, 1, 0, 3]


def test_cached_free_block_can_be_hit_and_leaves_the_queue_from_the_middle():
    pool = BlockPool(6)
    b = pool.get_new_blocks(3)
    pool.cache_block(b[1], 111)
    pool.free_blocks(reversed(b))
    assert ids(pool.free_queue) == [2, 0, 3, 4, 5, 1]  # unhashed 2, 0 first; cached 1 last
    assert pool.num_cached_free == 1
    hit = pool.get_cached_block(111)
    assert hit is b[1]
    pool.touch([hit])
    assert hit.ref_cnt == 1
    assert ids(pool.free_queue) == [2, 0, 3, 4, 5]
    assert pool.num_cached_free == 0
    pool.check_invariants()


def test_eviction_drops_the_hash_only_when_the_block_is_reused():
    pool = BlockPool(4)
    b = pool.get_new_blocks(2)
    pool.cache_block(b[0], 7)
    pool.cache_block(b[1], 8)
    pool.free_blocks(reversed(b))  # queue: 2, 3, 1(h8), 0(h7)
    assert pool.get_cached_block(7) is b[0]
    got = pool.get_new_blocks(3)  # takes 2, 3 and evicts block 1
    assert ids(got) == [2, 3, 1]
    assert pool.num_evicted == 1
    assert pool.get_cached_block(8) is None and b[1].block_hash is None
    assert pool.get_cached_block(7) is b[0]  # the head of the prompt survives longest
    pool.check_invariants()


def test_shared_block_is_freed_only_when_the_last_reference_goes():
    pool = BlockPool(3)
    (blk,) = pool.get_new_blocks(1)
    pool.cache_block(blk, 5)
    pool.touch([blk])
    assert blk.ref_cnt == 2
    pool.free_blocks([blk])
    assert blk.ref_cnt == 1 and pool.num_free_blocks == 2
    pool.free_blocks([blk])
    assert blk.ref_cnt == 0 and ids(pool.free_queue) == [1, 2, 0]
    with pytest.raises(AssertionError):
        pool.free_blocks([blk])


def test_duplicate_hashes_are_both_indexed_and_evicted_cleanly():
    pool = BlockPool(3)
    a, b = pool.get_new_blocks(2)
    pool.cache_block(a, 9)
    pool.cache_block(b, 9)  # same content computed twice concurrently
    pool.free_blocks([a, b])
    assert ids(pool.get_new_blocks(2)) == [2, 0]  # evicts a; b stays findable
    assert pool.get_cached_block(9) is b
    pool.check_invariants()


def test_lfu_reuses_the_least_hit_block_first():
    pool = BlockPool(4, eviction_policy="lfu")
    blocks = pool.get_new_blocks(4)
    for i, blk in enumerate(blocks):
        pool.cache_block(blk, 100 + i)
    pool.touch([blocks[0], blocks[0], blocks[2]])  # hits: b0 2, b2 1
    pool.free_blocks([blocks[0], blocks[0], blocks[0]])
    pool.free_blocks([blocks[1], blocks[2], blocks[3], blocks[2]])
    # Least hits first, ties by time freed: b1 (0), b3 (0), b2 (1), b0 (2).
    assert ids(pool.free_queue) == [1, 3, 2, 0]
    assert ids(pool.get_new_blocks(3)) == [1, 3, 2]
    pool.check_invariants()


def test_too_many_blocks_requested_is_an_error():
    pool = BlockPool(2)
    with pytest.raises(ValueError, match="only 2 free"):
        pool.get_new_blocks(3)


def test_bad_policy_is_rejected():
    with pytest.raises(ValueError, match="eviction_policy"):
        BlockPool(2, eviction_policy="fifo")


def test_contiguous_reservation_is_first_fit_and_suffers_external_fragmentation():
    pool = BlockPool(8)
    a = pool.get_contiguous_blocks(3)
    b = pool.get_contiguous_blocks(2)
    c = pool.get_contiguous_blocks(3)
    assert (ids(a), ids(b), ids(c)) == ([0, 1, 2], [3, 4], [5, 6, 7])
    pool.free_blocks(reversed(a))
    pool.free_blocks(reversed(c))
    # 6 blocks are free, but the longest run is 3: a 4-block reservation must wait.
    assert pool.num_free_blocks == 6
    assert pool.get_contiguous_blocks(4) is None
    assert ids(pool.get_contiguous_blocks(3)) == [0, 1, 2]
    pool.check_invariants()


def test_evicted_cached_blocks_are_written_back_to_the_offload_tier_in_eviction_order():
    from kvsim.core.block_pool import PRIVATE
    from kvsim.kv.tiers import CpuOffloadTier

    pool = BlockPool(4)
    pool.offload = CpuOffloadTier(2)
    b = pool.get_new_blocks(3)
    pool.cache_block(b[0], 10)
    pool.cache_block(b[1], 11)
    b[2].block_hash = PRIVATE  # cached, but only its own request could ever hit it
    pool.free_blocks(reversed(b))  # queue: 3, 2(private), 1(h11), 0(h10)
    assert pool.num_cached_free == 3
    pool.get_new_blocks(4)  # evicts 2, 1, 0 in that order
    tier = pool.offload
    assert tier.num_stored == 3 and tier.num_dropped == 1  # capacity 2: the placeholder went first
    assert 11 in tier and 10 in tier and len(tier) == 2
    tier.touch(11)
    tier.store(12)  # drops the least recently used: 10
    assert 10 not in tier and 11 in tier and 12 in tier


def test_a_retired_hash_is_forgotten_and_its_blocks_stay_cached_in_place():
    pool = BlockPool(6)
    blocks = pool.get_new_blocks(3)
    for i, b in enumerate(blocks):
        pool.cache_block(b, 100 + i)
    pool.free_blocks(reversed(blocks))  # free queue: 3 4 5 2 1 0
    assert ids(pool.get_new_blocks(4)) == [3, 4, 5, 2]  # evicts block 2 (hash 102)
    assert pool.evicted_hashes == {102}
    pool.retire_hash(102)  # evicted already: only forgotten
    pool.retire_hash(101)  # cached in free block 1
    assert pool.evicted_hashes == set() and pool.get_cached_block(101) is None
    assert pool.get_cached_block(100) is blocks[0]
    assert ids(pool.free_queue) == [1, 0] and pool.num_cached_free == 2  # still cached, same order
    pool.check_invariants()
    evicted = pool.num_evicted
    assert ids(pool.get_new_blocks(1)) == [1]  # evicted as a private block: counted, not remembered
    assert pool.num_evicted == evicted + 1 and pool.evicted_hashes == set()
    pool.check_invariants()


def test_retiring_a_duplicated_hash_retires_every_block_holding_it():
    pool = BlockPool(3)
    a, b = pool.get_new_blocks(2)
    pool.cache_block(a, 9)
    pool.cache_block(b, 9)
    pool.retire_hash(9)
    assert a.block_hash == b.block_hash == PRIVATE and pool.get_cached_block(9) is None
    pool.free_blocks([a, b])
    assert pool.num_cached_free == 2
    pool.check_invariants()
