"""Paged KV block pool with prefix caching, following vLLM v1's block pool.

Every block has an id, a ref count and, once full and cached, a *block hash*. Blocks whose
ref count drops to 0 go to the tail of the free queue but keep their hash: a later request
with the same prefix can still hit them, which pulls them back out of the queue (O(1)).
A block is evicted, and its hash dropped, only when the free queue hands it out for new
data. The queue's order is the eviction order:

    free queue (LRU):  head -> [b7 h=..][b3 h=..][b9 -][b2 h=..] <- tail
                        evicted first                   freed last

A request frees its blocks tail first (vLLM passes them in reverse), so the end of a
prompt, the least likely part to be shared, is evicted before its shared beginning. A
freed block that holds no hash (a partial last block, or any block with caching off) goes
to the head instead: nothing is lost by reusing it first.
Other reuse orders are pluggable (`kvsim.core.eviction`).

A cached block whose content no other request can ever ask for (see
`kvsim.core.request_state`) carries the hash `PRIVATE` instead of its real hash and is not
indexed: it is cached and evicted like any other block, so every count and order stays
the same, but costs no hashing. Its owner publishes the real hashes when it is preempted,
the one case where it could look them up again, and retires them when it finishes
(`retire_hash`: nobody can look them up any more, so the index and the set of evicted
hashes forget them; the blocks turn private again).

An evicted cached block is written back to the offload tier below the pool, if any
(`kvsim.kv.tiers`).

With ``kv_events`` set to a list, the pool logs what a prefix-cache index outside the
engine needs, as vLLM's KV events do: ``(True, hash)`` when a hash enters the index
(BlockStored), ``(False, hash)`` when it leaves (BlockRemoved); with ``kv_events_private``
also ``(True, PRIVATE)`` for a block cached without a hash (it takes room in a
write-through tier). The owner drains it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kvsim.core.block import PRIVATE, KVBlock
from kvsim.core.eviction import FreeQueue, LruFreeQueue
from kvsim.kv.tiers import OffloadTier
from kvsim.registry import EVICTION_POLICIES

__all__ = ["PRIVATE", "BlockPool", "KVBlock"]


class BlockPool:
    """All KV blocks of one replica, the free queue and the prefix-cache index.

    ``num_evicted`` counts every cached block handed out for new data since the pool was
    built (a running total: readers take differences).
    """

    def __init__(
        self,
        num_blocks: int,
        *,
        enable_caching: bool = True,
        eviction_policy: str | Callable[[Iterable[KVBlock]], FreeQueue] = "lru",
        offload: OffloadTier | None = None,
    ) -> None:
        if num_blocks < 1:
            raise ValueError('"num_blocks" must be >= 1')
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        if isinstance(eviction_policy, str):
            if eviction_policy not in EVICTION_POLICIES:
                raise ValueError(f'"eviction_policy": {EVICTION_POLICIES.unknown(eviction_policy)}')
            make_queue: Callable[[Iterable[KVBlock]], FreeQueue] = EVICTION_POLICIES[eviction_policy]
        else:
            make_queue = eviction_policy
        self.free_queue: FreeQueue = make_queue(self.blocks)
        self._timed = hasattr(self.free_queue, "set_time")
        # hash -> block. A second block with the same hash (the same content computed
        # twice at once) is kept in `_dupes` so that both can be found and evicted.
        self.cached: dict[int, KVBlock] = {}
        self._dupes: dict[int, list[KVBlock]] = {}
        self.num_cached_free = 0  # free blocks that still hold a hash
        self.num_evicted = 0
        # Hashes that left the cache by eviction (a later miss on one is a hit lost to
        # eviction). Real hashes only: private blocks never have one, so a workload
        # without shared content keeps this empty.
        self.evicted_hashes: set[int] = set()
        # Tier below the pool that evicted cached blocks are written back to, if any.
        self.offload = offload
        # KV event log (None: nobody listens), see the module docstring.
        self.kv_events: list[tuple[bool, int]] | None = None
        self.kv_events_private = False

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
        return self._take_lru_head(fq, n)

    def get_one_block(self) -> KVBlock:
        """`get_new_blocks` for one block (a decode's next block: the hot path of decoding)."""
        fq = self.free_queue
        if type(fq) is not LruFreeQueue or self._dupes:
            return self.get_new_blocks(1)[0]
        head = fq.head
        node = head.next
        assert node is not None and node is not fq.tail, "no free block"
        h = node.block_hash
        if h is not None:
            if h == PRIVATE:
                node.block_hash = None
                self.num_cached_free -= 1
                self.num_evicted += 1
                if self.offload is not None:
                    self.offload.store(None)
            else:
                self._evict(node)
        node.ref_cnt = 1
        nxt = node.next
        assert nxt is not None
        head.next = nxt
        nxt.prev = head
        node.prev = node.next = None
        fq.num_free_blocks -= 1
        return node

    def _take_lru_head(self, fq: LruFreeQueue, n: int) -> list[KVBlock]:
        """Hot path of `get_new_blocks`: unlink n blocks from the head of the LRU list at once."""
        out: list[KVBlock] = []
        append = out.append
        head = fq.head
        node = head.next
        cached = self.cached
        offload = self.offload
        # Nobody to tell (no tier, no event log) and no duplicates: a real hash is indexed
        # under this very block, and the counters move once for the whole call.
        quiet = offload is None and self.kv_events is None and not self._dupes
        num_quiet = 0
        for _ in range(n):
            assert node is not None and node.ref_cnt == 0
            h = node.block_hash
            if h is not None:
                if quiet:
                    num_quiet += 1
                    node.block_hash = None
                    if h != PRIVATE:
                        del cached[h]
                        self.evicted_hashes.add(h)
                        node.num_hits = 0
                elif h == PRIVATE:
                    node.block_hash = None
                    self.num_cached_free -= 1
                    self.num_evicted += 1
                    if offload is not None:
                        offload.store(None)
                elif not self._dupes and cached.get(h) is node:
                    del cached[h]
                    self.evicted_hashes.add(h)
                    if self.kv_events is not None:
                        self.kv_events.append((False, h))
                    node.block_hash = None
                    node.num_hits = 0
                    self.num_cached_free -= 1
                    self.num_evicted += 1
                    if offload is not None:
                        offload.store(h)
                else:
                    self._evict(node)
            node.ref_cnt = 1
            append(node)
            nxt = node.next
            node.prev = node.next = None
            node = nxt
        assert node is not None
        head.next = node
        node.prev = head
        fq.num_free_blocks -= n
        self.num_cached_free -= num_quiet
        self.num_evicted += num_quiet
        return out

    def get_contiguous_blocks(self, n: int, *, align: int = 1) -> list[KVBlock] | None:
        """Take the lowest run of ``n`` free blocks with consecutive ids starting at a multiple
        of ``align``, or None.

        For contiguous-reservation allocators (Orca-style baselines): free memory can be
        plentiful yet too scattered for a run of ``n`` (external fragmentation). A buddy
        allocator asks for a power-of-two ``n`` aligned to itself. O(blocks).
        """
        if n > len(self.free_queue):
            return None
        run_start = 0
        for block in self.blocks:
            if block.ref_cnt:
                run_start = -(-(block.block_id + 1) // align) * align
            elif block.block_id >= run_start and block.block_id - run_start + 1 == n:
                out = self.blocks[run_start : run_start + n]
                for b in out:
                    self.free_queue.remove(b)
                    if b.block_hash is not None:
                        self._evict(b)
                    b.ref_cnt = 1
                return out
        return None

    def _unindex(self, block: KVBlock) -> int:
        """Take ``block`` out of the prefix index and drop its hash; returns the hash it had."""
        h = block.block_hash
        assert h is not None
        dupes = self._dupes.get(h)
        if h == PRIVATE:
            pass
        elif self.cached.get(h) is block:
            if dupes:  # the earliest duplicate takes over, as in vLLM's hash-to-block map
                self.cached[h] = dupes.pop(0)
                if not dupes:
                    del self._dupes[h]
            else:
                del self.cached[h]
                self.evicted_hashes.add(h)
                if self.kv_events is not None:
                    self.kv_events.append((False, h))
        else:
            assert dupes is not None
            dupes.remove(block)
            if not dupes:
                del self._dupes[h]
        block.block_hash = None
        block.num_hits = 0
        return h

    def retire_hash(self, block_hash: int) -> None:
        """``block_hash`` can never be looked up again: the blocks holding it become `PRIVATE`
        (cached as before, in the same place of the free queue) and it is forgotten, by the
        index and by the set of evicted hashes."""
        self.evicted_hashes.discard(block_hash)
        block = self.cached.pop(block_hash, None)
        if block is not None:
            block.block_hash = PRIVATE
            for dupe in self._dupes.pop(block_hash, ()):
                dupe.block_hash = PRIVATE

    def uncache(self, block: KVBlock) -> None:
        """Drop the hash of an in-use block (its owner keeps nothing for later requests:
        retention none). Not an eviction: nothing is counted or written to the offload tier."""
        assert block.ref_cnt > 0
        self._unindex(block)

    # -- time, for retention priorities (kvsim.core.eviction.RetentionFreeQueue) ----------
    @property
    def timed(self) -> bool:
        """Whether the free queue keeps retention priorities (and so needs the time)."""
        return hasattr(self.free_queue, "set_time")

    def set_time(self, now: float) -> None:
        """The simulated time, for a free queue whose priorities expire."""
        if self._timed:
            self.free_queue.set_time(now)  # type: ignore[attr-defined]

    def set_retention(self, priority: int, expiry_s: float | None) -> None:
        """The retention priority (and its expiry) of the blocks freed next."""
        if self._timed:
            self.free_queue.set_retention(priority, expiry_s)  # type: ignore[attr-defined]

    def _evict(self, block: KVBlock) -> None:
        h = self._unindex(block)
        self.num_cached_free -= 1
        self.num_evicted += 1
        if self.offload is not None:
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
        """Drop one reference on each block; return those reaching 0 to the free queue.

        A block that holds a cached prefix joins the tail, in the given order (evicted last);
        one that holds nothing reusable (no hash, or caching off) goes to the head, the first
        of them first: reusing it loses nothing (vLLM 0.32 `BlockPool.free_blocks`, LIFO for
        uncached blocks).
        """
        fq = self.free_queue
        caching = self.enable_caching
        first: list[KVBlock] = []
        if type(fq) is not LruFreeQueue:
            for block in ordered_blocks:
                block.ref_cnt -= 1
                assert block.ref_cnt >= 0, f"block {block.block_id} freed more often than taken"
                if block.ref_cnt == 0:
                    if caching and block.block_hash is not None:
                        fq.append(block)
                        self.num_cached_free += 1
                    else:
                        first.append(block)
            for block in reversed(first):
                fq.appendleft(block)
            return
        # Hot path: splice cached blocks onto the tail of the LRU list, the rest at its head.
        tail = fq.tail
        last = tail.prev
        assert last is not None
        n_cached = 0
        for block in ordered_blocks:
            rc = block.ref_cnt - 1
            block.ref_cnt = rc
            if rc:  # still held by another request
                if rc < 0:
                    raise AssertionError(f"block {block.block_id} freed more often than taken")
                continue
            if caching and block.block_hash is not None:
                last.next = block
                block.prev = last
                last = block
                n_cached += 1
            else:
                first.append(block)
        last.next = tail
        tail.prev = last
        if first:
            prev = fq.head
            after = prev.next
            assert after is not None
            for block in first:
                prev.next = block
                block.prev = prev
                prev = block
            prev.next = after
            after.prev = prev
        fq.num_free_blocks += n_cached + len(first)
        self.num_cached_free += n_cached

    def cache_block(self, block: KVBlock, block_hash: int) -> None:
        """Register a full, in-use block under its hash so later prefixes can hit it."""
        assert block.block_hash is None and block.ref_cnt > 0
        block.block_hash = block_hash
        if block_hash in self.cached:
            self._dupes.setdefault(block_hash, []).append(block)
        else:
            self.cached[block_hash] = block
            if self.kv_events is not None:
                self.kv_events.append((True, block_hash))

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
