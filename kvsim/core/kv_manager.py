"""Per-request block bookkeeping over a `BlockPool`: prefix lookup, slot allocation, freeing.

Mirrors vLLM v1's KVCacheManager for full attention, plus a sliding window that drops
blocks whose tokens every future token has stopped attending to.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.core.block_pool import BlockPool, KVBlock
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

    def allocate_slots(self, req: Request, num_new_tokens: int, new_computed: Sequence[KVBlock] = ()) -> bool:
        """Make room for ``num_new_tokens`` more tokens (after any prefix hits).

        Returns False, changing nothing, when the pool cannot supply the blocks. Hit
        blocks that are currently free count against the free blocks, since taking a
        reference pulls them out of the free queue.
        """
        bs = self.block_size
        pool = self.pool
        num_computed = req.num_computed_tokens + len(new_computed) * bs
        num_required = -(-(num_computed + num_new_tokens) // bs)
        num_new_blocks = num_required - len(req.blocks) - len(new_computed)
        num_evictable = sum(1 for b in new_computed if b.ref_cnt == 0) if new_computed else 0
        if num_new_blocks > pool.num_free_blocks - num_evictable:
            return False
        if new_computed:
            pool.touch(new_computed)
            req.blocks.extend(new_computed)
            req.num_cached_blocks = len(req.blocks)
        if num_new_blocks > 0:
            req.blocks.extend(pool.get_new_blocks(num_new_blocks))
        if self.enable_caching:
            num_full = min(num_computed + num_new_tokens, req.num_tokens) // bs
            if num_full > req.num_cached_blocks:
                self.cache_full_blocks(req, num_full)
        return True

    def cache_full_blocks(self, req: Request, num_full: int) -> None:
        """Register blocks ``num_cached_blocks .. num_full - 1`` of ``req`` in the cache."""
        hashes = req.ensure_hashes(num_full, self.block_size)
        blocks = req.blocks
        cached = self.pool.cached
        cache = self.pool.cache_block
        for j in range(req.num_cached_blocks, num_full):
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
