"""Block pool: exact block ids, ref counts and eviction order on tiny pools."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.core.block_pool import PRIVATE, BlockPool, KVBlock
from kvsim.core.eviction import LruFreeQueue


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


def test_a_pool_makes_only_the_blocks_it_hands_out():
    """SGLang's page size 1 on a large GPU gives pools of millions of blocks: the LRU queue
    makes each block when it first hands it out, in id order, and the pool's counts are
    those of the whole pool."""
    pool = BlockPool(50_000_000)
    assert len(pool.blocks) == 0 and pool.num_free_blocks == 50_000_000
    first = pool.get_new_blocks(3)
    assert ids(first) == [0, 1, 2] and ids(pool.blocks) == [0, 1, 2]
    pool.free_blocks(reversed(first))  # no hash: back at the head (the last freed deepest)
    assert ids(pool.get_new_blocks(4)) == [2, 1, 0, 3]  # then the first block not made yet
    assert pool.num_used_blocks == 4 and len(pool.blocks) == 4
    assert ids([pool.get_one_block()]) == [4]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.sampled_from("ABPQLNR"), st.integers(0, 12)), max_size=40))
def test_the_lazy_lru_queue_keeps_the_eager_queues_order(size: int, ops: list[tuple[str, int]]) -> None:
    """`LruFreeQueue.fresh` against the queue built from every block: the same blocks taken,
    in the same order, under any mix of takes, gives back at either end and removals."""
    made: list[KVBlock] = []

    def make() -> KVBlock:
        made.append(KVBlock(len(made)))
        return made[-1]

    lazy = LruFreeQueue.fresh(size, make)
    eager = LruFreeQueue(KVBlock(i) for i in range(size))
    held_lazy: list[KVBlock] = []
    held_eager: list[KVBlock] = []
    for op, k in ops:
        if op in "PN":  # take one / take k
            n = 1 if op == "P" else min(k, len(eager))
            if n > len(eager):
                continue
            got_lazy = [lazy.popleft()] if op == "P" else lazy.popleft_n(n)
            got_eager = [eager.popleft()] if op == "P" else eager.popleft_n(n)
            assert ids(got_lazy) == ids(got_eager)
            held_lazy += got_lazy
            held_eager += got_eager
        elif held_eager and op in "ABQL":  # give back the k-th held block(s) at an end
            i = k % len(held_eager)
            back_lazy, back_eager = [held_lazy.pop(i)], [held_eager.pop(i)]
            if op == "Q" and held_eager:  # a run of two
                j = k % len(held_eager)
                back_lazy.append(held_lazy.pop(j))
                back_eager.append(held_eager.pop(j))
            {"A": lambda q, b: q.append(b[0]), "B": lambda q, b: q.appendleft(b[0]),
             "Q": lambda q, b: q.append_n(b), "L": lambda q, b: q.appendleft_n(b)}[op](lazy, back_lazy)  # fmt: skip
            {"A": lambda q, b: q.append(b[0]), "B": lambda q, b: q.appendleft(b[0]),
             "Q": lambda q, b: q.append_n(b), "L": lambda q, b: q.appendleft_n(b)}[op](eager, back_eager)  # fmt: skip
        elif op == "R":  # a prefix hit takes a made free block out of the middle
            free = [b for b in _linked(lazy)]
            if free:
                victim = free[k % len(free)]
                lazy.remove(victim)
                eager.remove(next(b for b in _linked(eager) if b.block_id == victim.block_id))
        assert len(lazy) == len(eager)
    assert ids(lazy) == ids(eager)  # iterating makes the rest, in place
    assert len(made) == size


def _linked(queue: LruFreeQueue) -> list[KVBlock]:
    """The queue's made blocks, head first, without making the rest."""
    out, node = [], queue.head.next
    while node is not None and node is not queue.tail:
        if node.block_id >= 0:
            out.append(node)
        node = node.next
    return out
