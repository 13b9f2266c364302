"""Per-request block bookkeeping over a `BlockPool`: prefix lookup, slot allocation, freeing.

Mirrors vLLM v1's KVCacheManager for full attention, plus a sliding window that drops
blocks whose tokens every future token has stopped attending to.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.core.block_pool import PRIVATE, BlockPool, KVBlock
from kvsim.core.request_state import Request


class KVCacheManager:
    """Allocates and frees a request's blocks and keeps the prefix cache up to date."""

    def __init__(self, pool: BlockPool, block_size: int, *, sliding_window: int | None = None) -> None:
        if block_size < 1:
            raise ValueError('"block_size" must be >= 1')
        self.pool = pool
        self.block_size = block_size
        self.enable_caching = pool.enable_caching
        self.sliding_window = sliding_window

    def get_computed_blocks(self, req: Request) -> list[KVBlock]:
        """Longest run of cached blocks matching the start of the request's tokens.

        At least one token is always left to compute (its logits give the next token),
        so at most ``(num_tokens - 1) // block_size`` blocks can hit.
        """
        if not self.enable_caching:
            return []
        max_blocks = (req.num_tokens - 1) // self.block_size
        if max_blocks <= 0:
            return []
        cached = self.pool.cached
        hashes = req.block_hashes  # extended in place, lazily: stop hashing at the first miss
        hits: list[KVBlock] = []
        for j in range(max_blocks):
            if j == len(hashes):
                req.ensure_hashes(j + 1, self.block_size)
            block = cached.get(hashes[j])
            if block is None:
                break
            hits.append(block)
        return hits

    def host_hits(self, req: Request, start: int) -> int:
        """Blocks ``start, start+1, ...`` of ``req`` found in the host tier (0 without one)."""
        tier = self.pool.offload
        if tier is None or not self.enable_caching:
            return 0
        max_blocks = (req.num_tokens - 1) // self.block_size
        hashes = req.block_hashes
        n = start
        while n < max_blocks:
            if n == len(hashes):
                req.ensure_hashes(n + 1, self.block_size)
            if hashes[n] not in tier:
                break
            n += 1
        return n - start

    def allocate_slots(
        self, req: Request, num_new_tokens: int, new_computed: Sequence[KVBlock] = (), num_loaded: int = 0
    ) -> bool:
        """Make room for ``num_new_tokens`` more tokens (after any prefix hits).

        ``new_computed`` are GPU hits; ``num_loaded`` more blocks after them come from the
        host tier: computed already, but they need fresh GPU blocks to be loaded into.
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
        if first_private < num_full:
            for j in range(max(start, first_private), num_full):
                block = blocks[j]
                if block is not None:
                    assert block.block_hash is None and block.ref_cnt > 0
                    block.block_hash = PRIVATE
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
        req.num_cached_blocks = num_full

    def publish_private_blocks(self, req: Request) -> None:
        """Give ``req``'s private cached blocks their real hashes (before it is preempted
        for recompute, when it may hit them again)."""
        first_private = req.private_from_token // self.block_size
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

    def remove_skipped_blocks(self, req: Request) -> None:
        """Sliding window: free blocks no future token attends to (kept as None holes)."""
        window = self.sliding_window
        if window is None:
            return
        num_skipped_tokens = req.num_computed_tokens - window + 1
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
        """Release all of the request's blocks, tail first (the tail is evicted first)."""
        if req.num_skipped_blocks:
            self.pool.free_blocks(b for b in reversed(req.blocks) if b is not None)
        else:
            self.pool.free_blocks(reversed(req.blocks))  # type: ignore[arg-type]
        req.blocks = []
        req.num_cached_blocks = 0
        req.num_skipped_blocks = 0

    def num_held_blocks(self, req: Request) -> int:
        return sum(1 for b in req.blocks if b is not None)
