"""Paged KV block pool with prefix caching, following vLLM v1's block pool.

Every block has an id, a ref count and, once full and cached, a *block hash*. Blocks whose
ref count drops to 0 go to the tail of the free queue but keep their hash: a later request
with the same prefix can still hit them, which pulls them back out of the queue (O(1)).
A block is evicted, and its hash dropped, only when the free queue hands it out for new
data. The queue's order is the eviction order:

    free queue (LRU):  head -> [b7 h=..][b3 h=..][b9 -][b2 h=..] <- tail
                        evicted first                   freed last

A request frees its blocks tail first (vLLM passes them in reverse), so the end of a
prompt, the least likely part to be shared, is evicted before its shared beginning.

`LfuFreeQueue` is the alternative policy: among free blocks, the one hit least often is
reused first (ties: least recently freed).

A cached block whose content no other request can ever ask for (see
`kvsim.core.request_state`) carries the hash `PRIVATE` instead of its real hash and is not
indexed: it is cached and evicted like any other block, so every count and order stays
the same, but costs no hashing. Its owner publishes the real hashes when it is preempted,
the one case where it could look them up again.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from kvsim.core.offload import HostTier

#: Stand-in hash of a cached block that only its own request could hit (never indexed).
PRIVATE = -3


class KVBlock:
    """One block of KV slots. ``block_hash`` is None until the block is full and cached."""

    __slots__ = ("block_hash", "block_id", "next", "num_hits", "prev", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: int | None = None
        self.num_hits = 0  # times a prefix lookup reused this block (LFU's key)
        self.prev: KVBlock | None = None
        self.next: KVBlock | None = None

    def __repr__(self) -> str:
        return f"KVBlock(id={self.block_id}, ref={self.ref_cnt}, hash={self.block_hash})"


class LruFreeQueue:
    """Doubly linked list of free blocks; O(1) append, popleft and removal from the middle."""

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self._head = KVBlock(-1)  # sentinels
        self._tail = KVBlock(-1)
        self._head.next = self._tail
        self._tail.prev = self._head
        self.num_free_blocks = 0
        for b in blocks:
            self.append(b)

    def __len__(self) -> int:
        return self.num_free_blocks

    def append(self, block: KVBlock) -> None:
        last = self._tail.prev
        assert last is not None
        last.next = block
        block.prev = last
        block.next = self._tail
        self._tail.prev = block
        self.num_free_blocks += 1

    def popleft(self) -> KVBlock:
        block = self._head.next
        if block is self._tail or block is None:
            raise IndexError("no free blocks")
        nxt = block.next
        assert nxt is not None
        self._head.next = nxt
        nxt.prev = self._head
        block.prev = block.next = None
        self.num_free_blocks -= 1
        return block

    def remove(self, block: KVBlock) -> None:
        prev, nxt = block.prev, block.next
        assert prev is not None and nxt is not None, "block is not in the free queue"
        prev.next = nxt
        nxt.prev = prev
        block.prev = block.next = None
        self.num_free_blocks -= 1

    def __iter__(self) -> Iterator[KVBlock]:
        node = self._head.next
        while node is not None and node is not self._tail:
            yield node
            node = node.next


class LfuFreeQueue:
    """Free blocks ordered by (num_hits, time freed): the least used block is reused first.

    A heap with lazy deletion: removing a block from the middle only marks its entry stale.
    """

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self._heap: list[tuple[int, int, KVBlock]] = []
        self._entry: dict[int, int] = {}  # block_id -> tick of its live heap entry
        self._tick = 0
        for b in blocks:
            self.append(b)

    def __len__(self) -> int:
        return len(self._entry)

    @property
    def num_free_blocks(self) -> int:
        return len(self._entry)

    def append(self, block: KVBlock) -> None:
        self._tick += 1
        self._entry[block.block_id] = self._tick
        heapq.heappush(self._heap, (block.num_hits, self._tick, block))

    def popleft(self) -> KVBlock:
        while self._heap:
            _, tick, block = heapq.heappop(self._heap)
            if self._entry.get(block.block_id) == tick:
                del self._entry[block.block_id]
                return block
        raise IndexError("no free blocks")

    def remove(self, block: KVBlock) -> None:
        del self._entry[block.block_id]

    def __iter__(self) -> Iterator[KVBlock]:
        live = [(h, t, b) for h, t, b in self._heap if self._entry.get(b.block_id) == t]
        return iter(b for _, _, b in sorted(live, key=lambda e: (e[0], e[1])))


class BlockPool:
    """All KV blocks of one replica, the free queue and the prefix-cache index.

    ``num_evicted`` counts cached blocks handed out for new data (their hash dropped);
    the engine reads and resets it to log evictions.
    """

    def __init__(self, num_blocks: int, *, enable_caching: bool = True, eviction_policy: str = "lru") -> None:
        if num_blocks < 1:
            raise ValueError('"num_blocks" must be >= 1')
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        if eviction_policy == "lru":
            self.free_queue: LruFreeQueue | LfuFreeQueue = LruFreeQueue(self.blocks)
        elif eviction_policy == "lfu":
            self.free_queue = LfuFreeQueue(self.blocks)
        else:
            raise ValueError(f'"eviction_policy" must be "lru" or "lfu", got {eviction_policy!r}')
        # hash -> block. A second block with the same hash (the same content computed
        # twice at once) is kept in `_dupes` so that both can be found and evicted.
        self.cached: dict[int, KVBlock] = {}
        self._dupes: dict[int, list[KVBlock]] = {}
        self.num_cached_free = 0  # free blocks that still hold a hash
        self.num_evicted = 0
        # Second tier that evicted cached blocks are written back to (CPU offload), if any.
        self.offload: HostTier | None = None

    # -- queries -------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def get_cached_block(self, block_hash: int) -> KVBlock | None:
        return self.cached.get(block_hash)

    # -- allocation ----------------------------------------------------------------
    def get_new_blocks(self, n: int) -> list[KVBlock]:
        """Take ``n`` blocks from the head of the free queue, evicting cached ones."""
        fq = self.free_queue
        if n > len(fq):
            raise ValueError(f"cannot get {n} blocks, only {len(fq)} free")
        if type(fq) is not LruFreeQueue:
            out = [fq.popleft() for _ in range(n)]
            for block in out:
                if block.block_hash is not None:
                    self._evict(block)
                block.ref_cnt = 1
            return out
        # Hot path: unlink n blocks from the head of the LRU list in one sweep.
        out = []
        head = fq._head
        node = head.next
        cached = self.cached
        for _ in range(n):
            assert node is not None and node.ref_cnt == 0
            h = node.block_hash
            if h is not None:
                if h == PRIVATE:
                    node.block_hash = None
                    self.num_cached_free -= 1
                    self.num_evicted += 1
                    if self.offload is not None:
                        self.offload.store(None)
                elif not self._dupes and cached.get(h) is node:
                    del cached[h]
                    node.block_hash = None
                    node.num_hits = 0
                    self.num_cached_free -= 1
                    self.num_evicted += 1
                    if self.offload is not None:
                        self.offload.store(h)
                else:
                    self._evict(node)
            node.ref_cnt = 1
            out.append(node)
            nxt = node.next
            node.prev = node.next = None
            node = nxt
        assert node is not None
        head.next = node
        node.prev = head
        fq.num_free_blocks -= n
        return out

    def get_contiguous_blocks(self, n: int) -> list[KVBlock] | None:
        """Take the first run of ``n`` free blocks with consecutive ids (first fit), or None.

        For contiguous-reservation allocators (Orca-style baselines): free memory can be
        plentiful yet too scattered for a run of ``n`` (external fragmentation). O(blocks).
        """
        if n > len(self.free_queue):
            return None
        run_start = 0
        for block in self.blocks:
            if block.ref_cnt:
                run_start = block.block_id + 1
            elif block.block_id - run_start + 1 == n:
                out = self.blocks[run_start : run_start + n]
                for b in out:
                    self.free_queue.remove(b)
                    if b.block_hash is not None:
                        self._evict(b)
                    b.ref_cnt = 1
                return out
        return None

    def _evict(self, block: KVBlock, *, write_back: bool = True) -> None:
        h = block.block_hash
        assert h is not None
        dupes = self._dupes.get(h)
        if h == PRIVATE:
            pass
        elif self.cached.get(h) is block:
            if dupes:
                self.cached[h] = dupes.pop()
                if not dupes:
                    del self._dupes[h]
            else:
                del self.cached[h]
        else:
            assert dupes is not None
            dupes.remove(block)
            if not dupes:
                del self._dupes[h]
        block.block_hash = None
        block.num_hits = 0
        self.num_cached_free -= 1
        self.num_evicted += 1
        if write_back and self.offload is not None:
            self.offload.store(None if h == PRIVATE else h)

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take a reference on prefix-hit blocks, pulling free ones out of the queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
                if block.block_hash is not None:
                    self.num_cached_free -= 1
            block.ref_cnt += 1
            block.num_hits += 1

    def free_blocks(self, ordered_blocks: Iterable[KVBlock]) -> None:
        """Drop one reference on each block; blocks reaching 0 join the queue in this order."""
        fq = self.free_queue
        if type(fq) is not LruFreeQueue:
            for block in ordered_blocks:
                block.ref_cnt -= 1
                assert block.ref_cnt >= 0, f"block {block.block_id} freed more often than taken"
                if block.ref_cnt == 0:
                    fq.append(block)
                    if block.block_hash is not None:
                        self.num_cached_free += 1
            return
        # Hot path: splice freed blocks onto the tail of the LRU list.
        tail = fq._tail
        last = tail.prev
        assert last is not None
        n_freed = n_cached = 0
        for block in ordered_blocks:
            block.ref_cnt -= 1
            assert block.ref_cnt >= 0, f"block {block.block_id} freed more often than taken"
            if block.ref_cnt == 0:
                last.next = block
                block.prev = last
                last = block
                n_freed += 1
                if block.block_hash is not None:
                    n_cached += 1
        last.next = tail
        tail.prev = last
        fq.num_free_blocks += n_freed
        self.num_cached_free += n_cached

    def cache_block(self, block: KVBlock, block_hash: int) -> None:
        """Register a full, in-use block under its hash so later prefixes can hit it."""
        assert block.block_hash is None and block.ref_cnt > 0
        block.block_hash = block_hash
        if block_hash in self.cached:
            self._dupes.setdefault(block_hash, []).append(block)
        else:
            self.cached[block_hash] = block

    def reset_prefix_cache(self) -> None:
        """Drop every hash held by a free block (like vLLM's reset_prefix_cache)."""
        for block in list(self.free_queue):
            if block.block_hash is not None:
                self._evict(block, write_back=False)
                self.num_evicted -= 1

    def check_invariants(self) -> None:
        """Assert the pool's bookkeeping is consistent (used by tests)."""
        free = list(self.free_queue)
        assert len(free) == len(self.free_queue)
        assert all(b.ref_cnt == 0 for b in free)
        assert all(b.ref_cnt >= 0 for b in self.blocks)
        free_ids = {b.block_id for b in free}
        assert all((b.ref_cnt == 0) == (b.block_id in free_ids) for b in self.blocks)
        assert self.num_cached_free == sum(1 for b in free if b.block_hash is not None)
        indexed = set(map(id, self.cached.values())) | {id(b) for v in self._dupes.values() for b in v}
        hashed = {id(b) for b in self.blocks if b.block_hash is not None and b.block_hash != PRIVATE}
        assert indexed == hashed
