"""The retention free queue: LRU within priorities, expiry back to the default level, uncached first."""

from __future__ import annotations

from kvsim.core.block import KVBlock
from kvsim.core.eviction import LfuFreeQueue, LruFreeQueue, RetentionFreeQueue


def ids(queue) -> list[int]:
    return [b.block_id for b in queue]


def test_lowest_priority_goes_first_lru_within_a_level() -> None:
    blocks = [KVBlock(i) for i in range(6)]
    q = RetentionFreeQueue()
    q.append(blocks[0])  # default 35
    q.set_retention(80, None)
    q.append(blocks[1])
    q.append(blocks[2])
    q.set_retention(10, None)
    q.append(blocks[3])
    q.set_retention(35, None)
    q.append(blocks[4])
    q.appendleft(blocks[5])  # dropped uncached
    assert ids(q) == [5, 3, 0, 4, 1, 2]
    assert [q.popleft().block_id for _ in range(3)] == [5, 3, 0]
    q.remove(blocks[1])
    assert ids(q) == [4, 2] and len(q) == 2


def test_priority_runs_out_and_the_block_joins_the_default_level_in_time_order() -> None:
    b = [KVBlock(i) for i in range(4)]
    q = RetentionFreeQueue()
    q.set_time(0.0)
    q.set_retention(90, 10.0)  # kept at 90 until t = 10
    q.append(b[0])
    q.set_retention(35, None)
    q.append(b[1])  # default, freed at t = 0
    assert ids(q) == [1, 0]
    q.set_time(12.0)
    q.append(b[2])  # default, freed at t = 12: after b0, whose priority ran out at 10
    assert ids(q) == [1, 0, 2]
    assert q.level_of(b[0]) == 35
    # A block taken and freed again carries its new retention, not the stale expiry.
    q.remove(b[0])
    q.set_retention(90, 50.0)
    q.append(b[0])
    q.set_retention(35, None)
    q.set_time(20.0)
    assert ids(q) == [1, 2, 0] and q.level_of(b[0]) == 90
    q.set_time(50.0)
    assert q.popleft() is b[1] and q.popleft() is b[2] and q.popleft() is b[0]


def test_lru_and_lfu_reuse_an_uncached_block_first() -> None:
    lru = LruFreeQueue([KVBlock(0), KVBlock(1)])
    lru.appendleft(KVBlock(2))
    assert ids(lru) == [2, 0, 1] and lru.popleft().block_id == 2 and len(lru) == 2
    hot = KVBlock(0)
    hot.num_hits = 3
    lfu = LfuFreeQueue([hot, KVBlock(1)])
    lfu.appendleft(KVBlock(2))
    assert ids(lfu) == [2, 1, 0] and lfu.popleft().block_id == 2 and len(lfu) == 2
