"""Per-request block bookkeeping over a `BlockPool`: prefix lookup, slot allocation, freeing.

One manager class per attention kind, after vLLM v1's single-type KV cache managers:

    FullAttentionManager    every token's KV is kept while the request runs
    SlidingWindowManager    blocks whose tokens every future token has stopped attending
                            to are freed as the request advances (left as None holes),
                            attention sinks kept:

        window 8, block_size 4, 16 tokens computed:
        block table   [None][None][ b2 ][ b3 ]      tokens 0..7 out of the window
                                 ^ tokens 8.. still attended by token 16

`make_kv_manager` picks the class for a model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvsim.core.block import PRIVATE, KVBlock
from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import NEVER_PRIVATE, Request
from kvsim.request import DEFAULT_RETENTION_PRIORITY

#: `FullAttentionManager.attended_span`: every token is attended, however many.
NO_SPAN = 1 << 62


class FullAttentionManager:
    """Allocates and frees a request's blocks and keeps the prefix cache up to date."""

    #: Whether a decode whose slot is allocated can skip the allocator (the scheduler's
    #: hot path) and runs of decode iterations can be fast-forwarded.
    supports_decode_fast_path = True
    #: Whether blocks leave a window as a request advances: a decode's block events then
    #: include window exits, and the decode cohort asks the manager for them
    #: (`next_decode_event`, `drop_skipped_at`, `decode_alloc_at`).
    windowed = False
    #: Blocks a decode takes when its token starts a new block (one per layer group).
    blocks_per_slot = 1

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

    def decode_slot_ready(self, req: Request, nc: int) -> bool:
        """Whether a decode of ``req`` (``nc`` tokens computed, one more now) would change
        nothing here: its slot is allocated, it fills no block (with caching) and, with a
        window, no block leaves it. Then `remove_skipped_blocks`, `fit_chunk` and
        `allocate_slots` are no-ops for it and the scheduler may skip them."""
        bs = self.block_size
        return len(req.blocks) * bs > nc and (not self.enable_caching or (nc + 1) % bs != 0)

    def fit_chunk(self, req: Request, num_new_tokens: int, num_hit_blocks: int = 0) -> int:
        """``num_new_tokens`` capped so that computing them, alone, fits the pool.

        Full attention needs no cap: a request whose whole sequence exceeds the pool is
        rejected on arrival. (``num_hit_blocks``: prefix blocks found, about to be attached.)
        """
        return num_new_tokens

    # -- the decode cohort's view of a decode (`kvsim.core.windowed_cohort`) ------------
    def drop_skipped_at(self, req: Request, nc: int) -> None:
        """`remove_skipped_blocks` for ``req`` as if ``nc`` tokens were computed (a decode
        cohort member's own counters lag behind)."""

    def decode_alloc_at(self, req: Request, nc: int) -> bool:
        """`allocate_slots(req, 1)` for the decode of token ``nc`` (no hits: a running
        request has none; ``num_tokens`` is ``nc + 1``), with ``nc`` given: the block its
        slot starts, the block its token fills registered. False, changing nothing, when
        the block is not free."""
        bs = self.block_size
        need = nc // bs + 1 - len(req.blocks)
        if need > 0:
            if need > self.pool.num_free_blocks:
                return False
            req.blocks.extend(self.pool.get_new_blocks(need))
        if self.enable_caching:
            num_full = (nc + 1) // bs
            if num_full > req.num_cached_blocks:
                self.cache_full_blocks(req, num_full)
        return True

    def next_decode_event(self, req: Request, nc: int) -> int:
        """Steps from the decode of token ``nc`` (handled) to the next decode of ``req`` that
        is not `decode_slot_ready`: its token starts a new block or (with caching) fills
        one; with a window, also the next block leaving it."""
        j = len(req.blocks) * self.block_size - nc
        if self.enable_caching and j > 1:
            j -= 1
        return j

    def serve_decode(self, req: Request, nc: int) -> int:
        """A decode cohort member's decode of token ``nc`` at one of its events: stepping's
        allocator path for it (`drop_skipped_at`, then `decode_alloc_at`), and the steps to
        its next event (`next_decode_event`); 0 if its new block is not free (only the
        drop done)."""
        self.drop_skipped_at(req, nc)
        if not self.decode_alloc_at(req, nc):
            return 0
        return self.next_decode_event(req, nc)

    @property
    def attended_span(self) -> int:
        """`attended_tokens(n)` is ``n`` below this, `saturated_attended(n)` from it on."""
        return NO_SPAN

    #: saturated_attended(n + attended_period) == saturated_attended(n) + attended_increment
    attended_period = 1
    attended_increment = 1

    def saturated_attended(self, n: int) -> int:
        """`attended_tokens(n)` for ``n >= attended_span``."""
        return n

    def saturated_attended_array(self, n: np.ndarray) -> np.ndarray:
        """`saturated_attended` of each of ``n``."""
        return n

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
        self,
        req: Request,
        num_new_tokens: int,
        new_computed: Sequence[KVBlock | None] = (),
        num_loaded: int = 0,
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
        # A sliding window's hits hold no block (None) where the window has moved past them.
        num_evictable = (
            sum(1 for b in new_computed if b is not None and b.ref_cnt == 0) if new_computed else 0
        )
        if num_new_blocks > pool.num_free_blocks - num_evictable:
            return False
        if new_computed:
            pool.touch([b for b in new_computed if b is not None])
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
        first_private = req.private_from_token // self.block_size
        if first_private < num_full:
            self.pool.cache_private(req.blocks[max(start, first_private) : num_full])
            num_hashed = max(first_private, start)
        else:
            num_hashed = num_full
        if num_hashed > start:
            self.pool.cache_blocks(
                req.blocks, req.ensure_hashes(num_hashed, self.block_size), start, num_hashed
            )
        req.num_cached_blocks = num_full

    def publish_private_blocks(self, req: Request) -> None:
        """Give ``req``'s private cached blocks their real hashes (before it is preempted
        for recompute, when it may hit them again)."""
        first_private = req.private_from_token // self.block_size
        # From now on the request can hit its own blocks (in the GPU cache or in an
        # offload tier below it), so none of its blocks is private any more: those it
        # computes after resuming are hashed like everyone's.
        req.published_from = min(req.published_from, req.private_from_token)
        req.private_from_token = NEVER_PRIVATE
        self.publish_blocks_from(req, first_private)

    def retire_published_hashes(self, req: Request) -> None:
        """``req`` finished: the hashes its preemptions published (`publish_private_blocks`)
        name content no other request holds, so nobody can look them up again. Its blocks
        that carry them become `PRIVATE` (cached and evicted exactly as before) and the
        hashes leave the index and the set of evicted hashes, which would otherwise grow
        by every block of every preempted request (60 MB at 100k requests).

        Only where nothing outside the scheduler sees the difference: an LRU free queue,
        no KV event log and no offload tier (which store evicted hashes).
        """
        pool = self.pool
        first = req.published_from // self.block_size
        n = req.num_cached_blocks
        if first >= n or not pool.hashes_unobserved:
            return
        for h in req.ensure_hashes(n, self.block_size)[first:n]:
            pool.retire_hash(h)

    def publish_blocks_from(self, req: Request, first_private: int) -> None:
        """Give ``req``'s private cached blocks from block ``first_private`` on their real hashes."""
        n = req.num_cached_blocks
        if first_private >= n:
            return
        hashes = req.ensure_hashes(n, self.block_size)
        publish = self.pool.publish
        for j in range(first_private, n):
            block = req.blocks[j]
            if block is not None and block.block_hash == PRIVATE:
                publish(block, hashes[j])

    def rollback(self, req: Request) -> None:
        """Speculative decoding: free the blocks past the request's computed tokens, which hold
        only rejected drafts' slots (vLLM keeps them and overwrites them next step)."""
        keep = -(-req.num_computed_tokens // self.block_size)
        blocks = req.blocks
        if len(blocks) > keep:
            tail = blocks[keep:]
            del blocks[keep:]
            self.pool.free_blocks(b for b in reversed(tail) if b is not None)

    def fork(self, child: Request, parent: Request) -> bool:
        """Beam search: the pruned ``child`` continues as a copy of ``parent`` (same computed tokens).

        The child drops its own blocks and shares the parent's full blocks (one more
        reference each); the parent's partial last block is copied on write, into a new
        block, as both beams write their next token into it (vLLM paper section 4.4):

            parent  [ b0 ][ b1 ][ b2: 2 of 4 ]      child  [ b0 ][ b1 ][ b5: copy of b2 ]

        Returns False, changing nothing, when no block is free for the copy.
        """
        bs = self.block_size
        num_full = parent.num_computed_tokens // bs
        shared = parent.blocks[:num_full]
        partial = len(parent.blocks) > num_full
        keep = {id(b) for b in shared}
        freed = sum(1 for b in child.blocks if b is not None and b.ref_cnt == 1 and id(b) not in keep)
        if partial and self.pool.num_free_blocks + freed < 1:
            return False
        held = [b for b in shared if b is not None]
        assert len(held) == len(shared), "a running parent holds its blocks"
        self.pool.share(held)
        self.pool.free_blocks(b for b in reversed(child.blocks) if b is not None)
        child.blocks = [*shared, *(self.pool.get_new_blocks(1) if partial else ())]
        child.num_cached_blocks = min(parent.num_cached_blocks, num_full)
        return True

    def free_finished(self, req: Request, now: float) -> None:
        """Release a finished request's blocks as its retention says (`kvsim.request.Retention`).

        ``default``: `free`, its blocks stay cached. ``none``: the blocks it computed and no
        one else holds are dropped uncached first (they go to the head of the free queue);
        the prefix it hit on arrival was someone else's and stays. ``priority``: freed at
        that retention priority until ``now + duration_s`` (a retention free queue keeps it).
        """
        retention = req.spec.retention
        if retention.kind == "none" and self.enable_caching:
            self.drop_own_cache(req)
        elif retention.kind == "priority" and self.pool.timed:
            expiry = None if retention.duration_s is None else now + retention.duration_s
            self.pool.set_retention(retention.priority, expiry)
            try:
                self.free(req)
            finally:
                self.pool.set_retention(DEFAULT_RETENTION_PRIORITY, None)
            return
        self.free(req)

    def drop_own_cache(self, req: Request) -> None:
        """Uncache the blocks ``req`` computed (past its first-admission hits) that only it holds."""
        keep = req.metrics.prefix_cache_hits_tokens // self.block_size
        for block in req.blocks[keep:]:
            if block is not None and block.ref_cnt == 1 and block.block_hash is not None:
                self.pool.uncache(block)

    def free(self, req: Request) -> None:
        """Release all of the request's blocks, tail first (the tail is evicted first)."""
        self.pool.free_blocks_reversed(req.blocks)  # type: ignore[arg-type]  # no holes here
        req.blocks = []
        req.num_cached_blocks = 0


class SlidingWindowManager(FullAttentionManager):
    """Full attention's bookkeeping, minus the blocks that fell out of the window.

    Prefix hits still need the whole chain of blocks from the start (vLLM can hit with
    only the last window's blocks cached): conservative, see docs/engine.md. Hit blocks
    the window has already passed are not taken (None holes, vLLM's null blocks).

    Attention sinks (StreamingLLM): the first ``num_sink_tokens`` tokens stay attended, so
    their blocks stay while the window slides past them:

        window 8, 4 sink tokens, block_size 4, 20 tokens computed:
        block table   [ b0 ][None][None][ b3 ][ b4 ]     b0: the sinks; tokens 4..11 gone
    """

    supports_decode_fast_path = False
    windowed = True

    def __init__(
        self, pool: BlockPool, block_size: int, sliding_window: int, num_sink_tokens: int = 0
    ) -> None:
        super().__init__(pool, block_size)
        if sliding_window < 1:
            raise ValueError('"sliding_window" must be >= 1')
        if num_sink_tokens < 0:
            raise ValueError('"num_sink_tokens" must be >= 0')
        self.sliding_window = sliding_window
        self.num_sink_tokens = num_sink_tokens
        self.num_sink_blocks = -(-num_sink_tokens // block_size)

    def attended_tokens(self, num_tokens: int) -> int:
        window = self.sliding_window
        return min(num_tokens, window) + min(self.num_sink_tokens, max(0, num_tokens - window))

    def max_blocks_needed(self, num_tokens: int) -> int:
        window = -(-self.sliding_window // self.block_size) + 1 + self.num_sink_blocks
        return min(-(-num_tokens // self.block_size), window)

    def num_held_blocks(self, req: Request) -> int:
        return sum(1 for b in req.blocks if b is not None)

    def _first_attended_block(self, num_computed_tokens: int) -> int:
        """Blocks wholly before the window of the token after ``num_computed_tokens``."""
        return max(0, num_computed_tokens - self.sliding_window + 1) // self.block_size

    def fit_chunk(self, req: Request, num_new_tokens: int, num_hit_blocks: int = 0) -> int:
        """The longest chunk whose blocks, with the window before it and the sinks, fit the pool.

        Computing tokens [c, c + n) holds the blocks from the window's start to c + n, plus
        the sinks: it can never run if that exceeds the pool, however empty (vLLM refuses to
        start such an engine; kvsim, given a smaller pool, computes smaller chunks).
        """
        bs = self.block_size
        c = req.num_computed_tokens + num_hit_blocks * bs
        start = self._first_attended_block(c)
        room = (self.pool.num_blocks + start - min(self.num_sink_blocks, start)) * bs - c
        return max(0, min(num_new_tokens, room))

    def get_computed_blocks(self, req: Request) -> list[KVBlock | None]:  # type: ignore[override]
        hits: list[KVBlock | None] = list(super().get_computed_blocks(req))
        skip = min(self._first_attended_block(len(hits) * self.block_size), len(hits))
        for j in range(self.num_sink_blocks, skip):
            hits[j] = None
        return hits

    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        new_computed: Sequence[KVBlock | None] = (),
        num_loaded: int = 0,
    ) -> bool:
        if not super().allocate_slots(req, num_new_tokens, new_computed, num_loaded):
            return False
        if new_computed:  # the holes of the hits are skipped blocks
            req.num_skipped_blocks = max(req.num_skipped_blocks, self._skipped_prefix(req.blocks))
        return True

    def _skipped_prefix(self, blocks: list[KVBlock | None]) -> int:
        n = self.num_sink_blocks
        while n < len(blocks) and blocks[n] is None:
            n += 1
        return n if n > self.num_sink_blocks else 0

    def decode_slot_ready(self, req: Request, nc: int) -> bool:
        bs = self.block_size
        return (
            len(req.blocks) * bs > nc
            and (not self.enable_caching or (nc + 1) % bs != 0)
            and min(self._first_attended_block(nc), len(req.blocks)) <= req.num_skipped_blocks
        )

    def remove_skipped_blocks(self, req: Request) -> None:
        self.drop_skipped_at(req, req.num_computed_tokens)

    def drop_skipped_at(self, req: Request, nc: int) -> None:
        """`remove_skipped_blocks` for ``req`` as if ``nc`` tokens were computed (a decode
        cohort member's own counters lag behind)."""
        n_skip = min(self._first_attended_block(nc), len(req.blocks))
        if n_skip <= req.num_skipped_blocks:
            return
        blocks = req.blocks
        first = max(req.num_skipped_blocks, self.num_sink_blocks)
        dropped = [b for b in blocks[first:n_skip] if b is not None]
        for j in range(first, n_skip):
            blocks[j] = None
        req.num_skipped_blocks = n_skip
        self.pool.free_blocks(reversed(dropped))

    def free(self, req: Request) -> None:
        self.pool.free_blocks(b for b in reversed(req.blocks) if b is not None)
        req.blocks = []
        req.num_cached_blocks = 0
        req.num_skipped_blocks = 0

    # -- the decode cohort's view of a decode (`kvsim.core.windowed_cohort`) ------------
    def next_decode_event(self, req: Request, nc: int) -> int:
        j = super().next_decode_event(req, nc)
        n, ns = len(req.blocks), req.num_skipped_blocks
        if ns < n:  # the first token whose window starts past block ns
            j = min(j, (ns + 1) * self.block_size + self.sliding_window - 1 - nc)
        return j

    @property
    def attended_span(self) -> int:
        return self.sliding_window + self.num_sink_tokens

    #: Past the span a window reads the window and the sinks: a constant.
    attended_increment = 0

    def saturated_attended(self, n: int) -> int:
        return self.sliding_window + self.num_sink_tokens

    def saturated_attended_array(self, n: np.ndarray) -> np.ndarray:
        return np.full_like(n, self.sliding_window + self.num_sink_tokens)


def make_kv_manager(
    pool: BlockPool, block_size: int, sliding_window: int | None = None, num_sink_tokens: int = 0
) -> FullAttentionManager:
    """The manager for a model's attention: sliding window (with sinks) if it has one, else full."""
    if sliding_window is None:
        return FullAttentionManager(pool, block_size)
    return SlidingWindowManager(pool, block_size, sliding_window, num_sink_tokens)
