"""Per-request block bookkeeping over a `BlockPool`: prefix lookup, slot allocation, freeing.

One manager class per attention kind, after vLLM v1's single-type KV cache managers:

    FullAttentionManager    every token's KV is kept while the request runs
    SlidingWindowManager    blocks whose tokens every future token has stopped attending
                            to are freed as the request advances (left as None holes):

        window 8, block_size 4, 16 tokens computed:
        block table   [None][None][ b2 ][ b3 ]      tokens 0..7 out of the window
                                 ^ tokens 8.. still attended by token 16

`make_kv_manager` picks the class for a model.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.core.block import PRIVATE, KVBlock
from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import NEVER_PRIVATE, Request


class FullAttentionManager:
    """Allocates and frees a request's blocks and keeps the prefix cache up to date."""

    #: Whether a decode whose slot is allocated can skip the allocator (the scheduler's
    #: hot path) and runs of decode iterations can be fast-forwarded.
    supports_decode_fast_path = True

    def __init__(self, pool: BlockPool, block_size: int) -> None:
        if block_size < 1:
            raise ValueError('"block_size" must be >= 1')
        self.pool = pool
        self.block_size = block_size
        self.enable_caching = pool.enable_caching

    # -- what the attention kind implies -------------------------------------------
    def attended_tokens(self, num_tokens: int) -> int:
        """Tokens the next token of a request with ``num_tokens`` computed attends to."""
        return num_tokens

    def max_blocks_needed(self, num_tokens: int) -> int:
        """Most blocks a request of ``num_tokens`` tokens ever holds at once."""
        return -(-num_tokens // self.block_size)

    def num_held_blocks(self, req: Request) -> int:
        return len(req.blocks)

    def remove_skipped_blocks(self, req: Request) -> None:
        """Free blocks no future token attends to (none under full attention)."""

    # -- prefix lookup -------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> list[KVBlock]:
        """Longest run of cached blocks matching the start of the request's tokens."""
        if not self.enable_caching:
            return []
        return req.match_prefix(self.block_size, self.pool.cached.get)

    def offload_hits(self, req: Request, start: int) -> int:
        """Blocks ``start, start+1, ...`` of ``req`` found in the offload tier (0 without one)."""
        tier = self.pool.offload
        if tier is None or not self.enable_caching:
            return 0
        return len(req.match_prefix(self.block_size, tier.lookup, start))

    def evicted_misses(self, req: Request, start: int) -> int:
        """Blocks ``start, start+1, ...`` of ``req`` missed because they were evicted: the
        run of hashes, after the hits, that the pool once cached (0 without caching)."""
        evicted = self.pool.evicted_hashes
        if not evicted or not self.enable_caching:
            return 0
        return len(req.match_prefix(self.block_size, lambda h: True if h in evicted else None, start))

    # -- allocation ----------------------------------------------------------------
    def allocate_slots(
        self, req: Request, num_new_tokens: int, new_computed: Sequence[KVBlock] = (), num_loaded: int = 0
    ) -> bool:
        """Make room for ``num_new_tokens`` more tokens (after any prefix hits).

        ``new_computed`` are GPU hits; ``num_loaded`` more blocks after them come from the
        offload tier: computed already, but they need fresh GPU blocks to be loaded into.
        Returns False, changing nothing, when the pool cannot supply the blocks. Hit
        blocks that are currently free count against the free blocks, since taking a
        reference pulls them out of the free queue.
        """
        bs = self.block_size
        pool = self.pool
        num_computed = req.num_computed_tokens + (len(new_computed) + num_loaded) * bs
        num_required = -(-(num_computed + num_new_tokens) // bs)
        num_new_blocks = num_required - len(req.blocks) - len(new_computed)
        num_evictable = sum(1 for b in new_computed if b.ref_cnt == 0) if new_computed else 0
        if num_new_blocks > pool.num_free_blocks - num_evictable:
            return False
        if new_computed:
            pool.touch(new_computed)
            req.blocks.extend(new_computed)
            req.num_cached_blocks = len(req.blocks)
        if num_loaded:
            tier = pool.offload
            assert tier is not None
            hashes = req.block_hashes
            for j in range(len(req.blocks), len(req.blocks) + num_loaded):
                tier.touch(hashes[j])
        if num_new_blocks > 0:
            req.blocks.extend(pool.get_new_blocks(num_new_blocks))
        if self.enable_caching:
            num_full = min(num_computed + num_new_tokens, req.num_tokens) // bs
            if num_full > req.num_cached_blocks:
                self.cache_full_blocks(req, num_full)
        return True

    def cache_full_blocks(self, req: Request, num_full: int) -> None:
        """Register blocks ``num_cached_blocks .. num_full - 1`` of ``req`` in the cache.

        Blocks from ``req``'s first private token on are marked `PRIVATE` (cached, not
        hashed): no other request can hit them.
        """
        start = req.num_cached_blocks
        blocks = req.blocks
        first_private = req.private_from_token // self.block_size
        log = self.pool.kv_events
        if first_private < num_full:
            for j in range(max(start, first_private), num_full):
                block = blocks[j]
                if block is not None:
                    assert block.block_hash is None and block.ref_cnt > 0
                    block.block_hash = PRIVATE
                    if log is not None and self.pool.kv_events_private:
                        log.append((True, PRIVATE))
            num_hashed = max(first_private, start)
        else:
            num_hashed = num_full
        if num_hashed > start:
            hashes = req.ensure_hashes(num_hashed, self.block_size)
            cached = self.pool.cached
            cache = self.pool.cache_block
            for j in range(start, num_hashed):
                block = blocks[j]
                if block is None:
                    continue
                h = hashes[j]
                if h in cached:
                    cache(block, h)  # a duplicate: the pool keeps both
                else:
                    assert block.block_hash is None and block.ref_cnt > 0
                    block.block_hash = h
                    cached[h] = block
                    if log is not None:
                        log.append((True, h))
        req.num_cached_blocks = num_full

    def publish_private_blocks(self, req: Request) -> None:
        """Give ``req``'s private cached blocks their real hashes (before it is preempted
        for recompute, when it may hit them again)."""
        first_private = req.private_from_token // self.block_size
        # From now on the request can hit its own blocks (in the GPU cache or in an
        # offload tier below it), so none of its blocks is private any more: those it
        # computes after resuming are hashed like everyone's.
        req.private_from_token = NEVER_PRIVATE
        n = req.num_cached_blocks
        if first_private >= n:
            return
        hashes = req.ensure_hashes(n, self.block_size)
        cache = self.pool.cache_block
        for j in range(first_private, n):
            block = req.blocks[j]
            if block is not None and block.block_hash == PRIVATE:
                block.block_hash = None
                cache(block, hashes[j])

    def free(self, req: Request) -> None:
        """Release all of the request's blocks, tail first (the tail is evicted first)."""
        self.pool.free_blocks(reversed(req.blocks))  # type: ignore[arg-type]  # no holes here
        req.blocks = []
        req.num_cached_blocks = 0


class SlidingWindowManager(FullAttentionManager):
    """Full attention's bookkeeping, minus the blocks that fell out of the window.

    Prefix hits still need the whole chain of blocks from the start (vLLM can hit with
    only the last window's blocks cached): conservative, see docs/engine.md.
    """

    supports_decode_fast_path = False

    def __init__(self, pool: BlockPool, block_size: int, sliding_window: int) -> None:
        super().__init__(pool, block_size)
        if sliding_window < 1:
            raise ValueError('"sliding_window" must be >= 1')
        self.sliding_window = sliding_window

    def attended_tokens(self, num_tokens: int) -> int:
        return min(num_tokens, self.sliding_window)

    def max_blocks_needed(self, num_tokens: int) -> int:
        return min(-(-num_tokens // self.block_size), -(-self.sliding_window // self.block_size) + 1)

    def num_held_blocks(self, req: Request) -> int:
        return sum(1 for b in req.blocks if b is not None)

    def remove_skipped_blocks(self, req: Request) -> None:
        num_skipped_tokens = req.num_computed_tokens - self.sliding_window + 1
        n_skip = min(num_skipped_tokens // self.block_size, len(req.blocks))
        if n_skip <= req.num_skipped_blocks:
            return
        blocks = req.blocks
        dropped = [b for b in blocks[req.num_skipped_blocks : n_skip] if b is not None]
        for j in range(req.num_skipped_blocks, n_skip):
            blocks[j] = None
        req.num_skipped_blocks = n_skip
        self.pool.free_blocks(reversed(dropped))

    def free(self, req: Request) -> None:
        self.pool.free_blocks(b for b in reversed(req.blocks) if b is not None)
        req.blocks = []
        req.num_cached_blocks = 0
        req.num_skipped_blocks = 0


def make_kv_manager(
    pool: BlockPool, block_size: int, sliding_window: int | None = None
) -> FullAttentionManager:
    """The manager for a model's attention: sliding window if it has one, else full."""
    if sliding_window is None:
        return FullAttentionManager(pool, block_size)
    return SlidingWindowManager(pool, block_size, sliding_window)
