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

from collections.abc import Callable, Iterable, Sequence

from kvsim.core.block import PRIVATE, KVBlock
from kvsim.core.eviction import FreeQueue, LruFreeQueue, bulk_ops
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
        if isinstance(eviction_policy, str):
            if eviction_policy not in EVICTION_POLICIES:
                raise ValueError(f'"eviction_policy": {EVICTION_POLICIES.unknown(eviction_policy)}')
            make_queue: Callable[[Iterable[KVBlock]], FreeQueue] = EVICTION_POLICIES[eviction_policy]
        else:
            make_queue = eviction_policy
        # The blocks made so far, by id. The LRU queue makes each block when it first hands it
        # out (`LruFreeQueue.fresh`): a pool of millions of blocks costs the ones it uses.
        self.blocks: list[KVBlock] = []
        if make_queue is LruFreeQueue:
            self.free_queue: FreeQueue = LruFreeQueue.fresh(num_blocks, self._make_block)
        else:
            self.blocks = [KVBlock(i) for i in range(num_blocks)]
            self.free_queue = make_queue(self.blocks)
        # The queue's own list surgery for runs of blocks (the pool never touches its links).
        self._popleft_n, self._append_n, self._appendleft_n = bulk_ops(self.free_queue)
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

    def _make_block(self) -> KVBlock:
        """The next block the LRU queue hands out for the first time (ids in order)."""
        block = KVBlock(len(self.blocks))
        self.blocks.append(block)
        return block

    def all_blocks(self) -> list[KVBlock]:
        """Every block of the pool, by id (made now where the queue has not made them yet)."""
        if len(self.blocks) < self.num_blocks:
            make_all = getattr(self.free_queue, "make_all", None)
            assert make_all is not None
            make_all()
        return self.blocks

    # -- the KV event log ---------------------------------------------------------------
    def log_kv_events(self, on: bool, *, private: bool = False) -> None:
        """Start (a fresh log) or stop logging KV events; ``private``: log private blocks'
        arrivals too (``(True, PRIVATE)``), for a write-through tier that needs to know they
        take room."""
        self.kv_events = [] if on else None
        self.kv_events_private = private

    def take_kv_events(self) -> list[tuple[bool, int]]:
        """The KV events logged since the last take (empty if none or not logging)."""
        log = self.kv_events
        if not log:
            return []
        self.kv_events = []
        return log

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
        if n > len(self.free_queue):
            raise ValueError(f"cannot get {n} blocks, only {len(self.free_queue)} free")
        out = self._popleft_n(n)
        self._evict(out)
        return out

    def get_one_block(self) -> KVBlock:
        """`get_new_blocks` for one block (a decode's next block: the hot path of decoding)."""
        block = self.free_queue.popleft()
        if block.block_hash is None:  # nothing to evict: only its first reference
            block.ref_cnt = 1
        else:
            self._evict((block,))
        return block

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
        blocks = self.all_blocks()
        for block in blocks:
            if block.ref_cnt:
                run_start = -(-(block.block_id + 1) // align) * align
            elif block.block_id >= run_start and block.block_id - run_start + 1 == n:
                out = blocks[run_start : run_start + n]
                for b in out:
                    self.free_queue.remove(b)
                self._evict(out)
                return out
        return None

    def _unindex(self, block: KVBlock, h: int) -> None:
        """Take ``block``, which held real hash ``h``, out of the prefix index."""
        cached = self.cached
        dupes = self._dupes.get(h) if self._dupes else None
        if cached.get(h) is block:
            if dupes:  # the earliest duplicate takes over, as in vLLM's hash-to-block map
                cached[h] = dupes.pop(0)
                if not dupes:
                    del self._dupes[h]
            else:
                del cached[h]
                self.evicted_hashes.add(h)
                if self.kv_events is not None:
                    self.kv_events.append((False, h))
        else:
            assert dupes is not None
            dupes.remove(block)
            if not dupes:
                del self._dupes[h]

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
        h = block.block_hash
        assert h is not None
        block.block_hash = None
        block.num_hits = 0
        if h != PRIVATE:
            self._unindex(block, h)

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

    def _evict(self, taken: Sequence[KVBlock]) -> None:
        """The pool's one eviction, for blocks just taken from the free queue for new data:
        each gets its first reference, and each that held a hash (a cached prefix) loses
        it: the hash leaves the prefix index (`PRIVATE` ones were never in it) and the
        content goes to the offload tier below, if any.

        The hot path of a full pool (every allocation evicts): everything is a local and
        the counters move once per call.
        """
        offload, dupes = self.offload, self._dupes
        cached, evicted_hashes, log = self.cached, self.evicted_hashes, self.kv_events
        n = 0
        for block in taken:  # free blocks, ref_cnt 0 (`check_invariants`)
            block.ref_cnt = 1
            h = block.block_hash
            if h is None:
                continue
            n += 1
            block.block_hash = None
            block.num_hits = 0
            if h == PRIVATE:
                if offload is not None:
                    offload.store(None)
                continue
            if dupes:
                self._unindex(block, h)
            else:  # `_unindex` without duplicates: the hash is indexed under this very block
                del cached[h]
                evicted_hashes.add(h)
                if log is not None:
                    log.append((False, h))
            if offload is not None:
                offload.store(h)
        self.num_cached_free -= n
        self.num_evicted += n

    def share(self, blocks: Iterable[KVBlock]) -> None:
        """Another reference on blocks in use (a beam fork shares its parent's full blocks)."""
        for block in blocks:
            assert block.ref_cnt > 0, "only a block in use is shared"
            block.ref_cnt += 1

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
        caching = self.enable_caching
        cached: list[KVBlock] = []
        first: list[KVBlock] = []
        for block in ordered_blocks:
            rc = block.ref_cnt - 1
            block.ref_cnt = rc
            if rc:  # still held by another request
                if rc < 0:
                    raise AssertionError(f"block {block.block_id} freed more often than taken")
                continue
            if caching and block.block_hash is not None:
                cached.append(block)  # (method form: 3.11 specialises list.append calls)
            else:
                first.append(block)
        if cached:
            self._append_n(cached)
            self.num_cached_free += len(cached)
        if first:
            self._appendleft_n(first)

    def free_blocks_reversed(self, blocks: list[KVBlock]) -> None:
        """`free_blocks(reversed(blocks))` for a request's whole block list (no holes), the hot
        case: when the blocks it releases that hold a hash form one run of ``blocks`` (the
        usual finished request: uncached partial tail, cached run, prefix still shared), that
        run goes to the free queue as one slice, without a list built block by block."""
        caching = self.enable_caching
        first: list[KVBlock] = []
        cached: list[KVBlock] | None = None  # the run broke: the list, as `free_blocks` keeps
        run = ended = False  # in the run / past its end (a block not in it followed it)
        held = pos = 0  # blocks still held; blocks seen before the run (reversed order)
        end: KVBlock | None = None  # the first block after the run (reversed order)
        for block in reversed(blocks):
            rc = block.ref_cnt - 1
            block.ref_cnt = rc
            if rc:  # still held by another request
                if rc < 0:
                    raise AssertionError(f"block {block.block_id} freed more often than taken")
                if run:
                    run, ended, end = False, True, block
                held += 1
                continue
            if caching and block.block_hash is not None:
                if run:
                    continue
                if cached is not None:
                    cached.append(block)
                elif ended:  # a second run: back to the list
                    assert end is not None
                    cached = blocks[blocks.index(end) + 1 : len(blocks) - pos]
                    cached.reverse()
                    cached.append(block)
                else:
                    run, pos = True, len(first) + held
                continue
            if run:
                run, ended, end = False, True, block
            first.append(block)
        if cached is None and (run or ended):
            lo = 0 if end is None else blocks.index(end) + 1
            cached = blocks[lo : len(blocks) - pos]
            cached.reverse()
        if cached:
            self._append_n(cached)
            self.num_cached_free += len(cached)
        if first:
            self._appendleft_n(first)

    def cache_block(self, block: KVBlock, block_hash: int) -> None:
        """Register a full, in-use block under its hash so later prefixes can hit it (a hash
        already indexed under another block keeps that block; this one is a duplicate)."""
        assert block.block_hash is None and block.ref_cnt > 0
        block.block_hash = block_hash
        if block_hash in self.cached:
            self._dupes.setdefault(block_hash, []).append(block)
        else:
            self.cached[block_hash] = block
            if self.kv_events is not None:
                self.kv_events.append((True, block_hash))

    def cache_blocks(
        self, blocks: Sequence[KVBlock | None], hashes: Sequence[int], start: int, stop: int
    ) -> None:
        """`cache_block` for ``blocks[start:stop]`` under ``hashes[start:stop]`` (None: a hole
        of a sliding window, skipped); its loop body is `cache_block`'s, inline (a prefill
        registers its blocks at once)."""
        cached, log = self.cached, self.kv_events
        for j in range(start, stop):
            block = blocks[j]
            if block is None:
                continue
            assert block.block_hash is None and block.ref_cnt > 0
            h = hashes[j]
            block.block_hash = h
            if h in cached:
                self._dupes.setdefault(h, []).append(block)
            else:
                cached[h] = block
                if log is not None:
                    log.append((True, h))

    def cache_private(self, blocks: Iterable[KVBlock | None]) -> None:
        """Cache full, in-use blocks that only their own request could hit: `PRIVATE`, not
        indexed (None: a hole, skipped). Logged only for a write-through tier that needs
        to know they take room (``kv_events_private``)."""
        log = self.kv_events if self.kv_events_private else None
        for block in blocks:  # in use, not cached yet
            if block is not None:
                block.block_hash = PRIVATE
                if log is not None:
                    log.append((True, PRIVATE))

    def mark_private(self, block: KVBlock) -> None:
        """`cache_private` for one block (a decode filling its block: the hot path)."""
        block.block_hash = PRIVATE
        if self.kv_events_private and self.kv_events is not None:
            self.kv_events.append((True, PRIVATE))

    def publish(self, block: KVBlock, block_hash: int) -> None:
        """A `PRIVATE` block gets its real hash (its request may now hit it again)."""
        assert block.block_hash == PRIVATE
        block.block_hash = None
        self.cache_block(block, block_hash)

    @property
    def hashes_unobserved(self) -> bool:
        """Whether forgetting a hash (`retire_hash`) changes nothing outside the pool: an LRU
        free queue (whose order never reads a block's history), no KV event log and no
        offload tier (which store evicted hashes)."""
        return type(self.free_queue) is LruFreeQueue and self.kv_events is None and self.offload is None

    def check_invariants(self) -> None:
        """Assert the pool's bookkeeping is consistent (used by tests)."""
        free = list(self.free_queue)
        blocks = self.all_blocks()
        assert [b.block_id for b in blocks] == list(range(self.num_blocks))
        assert len(free) == len(self.free_queue)
        assert all(b.ref_cnt == 0 for b in free)
        assert all(b.ref_cnt >= 0 for b in blocks)
        free_ids = {b.block_id for b in free}
        assert all((b.ref_cnt == 0) == (b.block_id in free_ids) for b in blocks)
        assert self.num_cached_free == sum(1 for b in free if b.block_hash is not None)
        indexed = set(map(id, self.cached.values())) | {id(b) for v in self._dupes.values() for b in v}
        hashed = {id(b) for b in blocks if b.block_hash is not None and b.block_hash != PRIVATE}
        assert indexed == hashed
