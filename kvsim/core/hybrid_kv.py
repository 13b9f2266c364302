"""Models that mix sliding-window and full-attention layers: one block table per layer group.

vLLM's hybrid KV cache manager (vLLM 0.32 ``kv_cache_coordinator.HybridKVCacheCoordinator``)
splits the layers into groups of one attention kind and equal size
(`kvsim.model.kv_sizing.kv_layer_groups`); every group has its own block table per request, all
drawn from the one block pool, so one pool block holds a block of tokens of one group:

    Gemma-3-1B: 4 full + 22 sliding-window (512) layers -> groups of 4 layers
    request of 1,000 tokens, block_size 16:
      group 0 (full)      [b0 b1 ... b62]                  63 blocks, every token
      group 1..6 (window) [None ... None b.. b..]          the last cdiv(511, 16) + 1 blocks each

A prefix hit of L blocks needs every full group to have the L blocks cached and every
window group the blocks of the window before L (and the sinks'): vLLM's
``find_longest_cache_hit``, searched downwards from the full groups' hit. Each group
hashes its blocks apart (the request's chain hash with the group number), so their cache
entries never collide; group 0 uses the request's own hashes, which routers look up.

`GroupView` gives a group's block table the interface the single-kind managers
(`kvsim.core.kv_manager`) work on, with the request's token counters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kvsim.core.block import KVBlock
from kvsim.core.block_pool import BlockPool
from kvsim.core.kv_manager import NO_SPAN, FullAttentionManager, SlidingWindowManager, make_kv_manager
from kvsim.core.request_state import NEVER_PRIVATE, Request
from kvsim.model.kv_sizing import kv_layer_groups
from kvsim.model.specs import ModelSpec

_GROUP_MARK = 0x68796272  # mixes the group number into a group's block hashes


class GroupView(Request):
    """One layer group's block table of ``parent``: its own blocks and hashes, the parent's tokens.

    A `Request` for the single-kind managers; never queued or scheduled itself.
    """

    __slots__ = ("group", "parent")

    def __init__(self, parent: Request, group: int) -> None:  # no Request.__init__: a view
        self.parent = parent
        self.group = group
        self.blocks: list[KVBlock | None] = []
        self.num_cached_blocks = 0
        self.num_skipped_blocks = 0
        self.block_hashes: list[int] = []

    @property
    def num_computed_tokens(self) -> int:  # type: ignore[override]
        return self.parent.num_computed_tokens

    @property
    def num_tokens(self) -> int:  # type: ignore[override]
        return self.parent.num_tokens

    @property
    def private_from_token(self) -> int:  # type: ignore[override]
        return self.parent.private_from_token

    @property
    def request_id(self) -> int:  # type: ignore[override]
        return self.parent.request_id

    def ensure_hashes(self, num_blocks: int, block_size: int) -> list[int]:
        chain = self.parent.ensure_hashes(num_blocks, block_size)
        own, group = self.block_hashes, self.group
        for j in range(len(own), min(num_blocks, len(chain))):
            own.append(hash((chain[j], _GROUP_MARK, group)))
        return own


class HybridKvManager(FullAttentionManager):
    """Full-attention and sliding-window layer groups of one model, each with its block table."""

    supports_decode_fast_path = False
    windowed = True

    def __init__(
        self,
        pool: BlockPool,
        block_size: int,
        *,
        num_full_groups: int,
        num_window_groups: int,
        sliding_window: int,
        num_sink_tokens: int = 0,
        layer_counts: tuple[int, int] = (1, 1),
    ) -> None:
        super().__init__(pool, block_size)
        if num_full_groups < 1 or num_window_groups < 1:
            raise ValueError("a hybrid model needs full-attention and sliding-window groups")
        self.window = SlidingWindowManager(pool, block_size, sliding_window, num_sink_tokens)
        self.num_full_groups, self.num_window_groups = num_full_groups, num_window_groups
        self.num_full_layers, self.num_window_layers = layer_counts
        self._pending: dict[int, list[list[KVBlock | None]]] = {}  # hits of groups 1.., by request
        self.blocks_per_slot = num_full_groups + num_window_groups
        # Past the span, attended_tokens(n) = round((full * n + window * span) / layers): it
        # grows by full * period / layers every `attended_period` tokens, an even number
        # so that round()'s ties-to-even land alike (`kvsim.core.windowed_cohort`).
        full, layers = self.num_full_layers, self.num_full_layers + self.num_window_layers
        period = layers // math.gcd(full, layers)
        if full * period // layers % 2:
            period *= 2
        self.attended_period = period
        self.attended_increment = full * period // layers

    # -- groups ------------------------------------------------------------------------
    def groups(self, req: Request) -> list[tuple[FullAttentionManager, Request]]:
        """(manager, block table) of every group; group 0 is the request itself."""
        if req.group_views is None:
            n = self.num_full_groups + self.num_window_groups
            req.group_views = [GroupView(req, g) for g in range(1, n)]
        out: list[tuple[FullAttentionManager, Request]] = [(self, req)]
        for g, view in enumerate(req.group_views, start=1):
            out.append((self if g < self.num_full_groups else self.window, view))
        return out

    def all_blocks(self, req: Request) -> list[KVBlock]:
        """Every block the request holds, all groups."""
        return [b for _, view in self.groups(req) for b in view.blocks if b is not None]

    # -- what the attention kinds imply ------------------------------------------------
    def attended_tokens(self, num_tokens: int) -> int:
        """Tokens of every layer's KV the next token reads, in whole-model tokens (rounded)."""
        full, window = self.num_full_layers, self.num_window_layers
        w = self.window
        span = w.sliding_window + w.num_sink_tokens
        if num_tokens >= span:  # the window and the sinks, whole: w.attended_tokens inline
            return round((full * num_tokens + window * span) / (full + window))
        read = full * num_tokens + window * w.attended_tokens(num_tokens)
        return round(read / (full + window))

    def max_blocks_needed(self, num_tokens: int) -> int:
        full = -(-num_tokens // self.block_size)
        return self.num_full_groups * full + self.num_window_groups * self.window.max_blocks_needed(
            num_tokens
        )

    def num_held_blocks(self, req: Request) -> int:
        return len(self.all_blocks(req))

    def remove_skipped_blocks(self, req: Request) -> None:
        self.drop_skipped_at(req, req.num_computed_tokens)

    def drop_skipped_at(self, req: Request, nc: int) -> None:
        if req.group_views is None:
            self.groups(req)
        assert req.group_views is not None
        window = self.window
        # The window groups, in group order (group 0, the request itself, is full attention).
        for view in req.group_views[self.num_full_groups - 1 :]:
            window.drop_skipped_at(view, nc)

    @property
    def attended_span(self) -> int:
        return self.window.attended_span

    def saturated_attended(self, n: int) -> int:
        full, window = self.num_full_layers, self.num_window_layers
        return round((full * n + window * self.window.attended_span) / (full + window))

    def saturated_attended_array(self, n: np.ndarray) -> np.ndarray:
        """`saturated_attended` of each of ``n``: the same float division, and np.rint
        rounds ties to even as round() does."""
        full, window = self.num_full_layers, self.num_window_layers
        read = full * n + window * self.window.attended_span
        return np.rint(read / (full + window)).astype(np.int64)

    def serve_decode(self, req: Request, nc: int) -> int:
        """`FullAttentionManager.serve_decode` in one pass over the groups: the window
        groups drop what left the window; then, if a group's table lacks the slot,
        `_allocate_upto` (the allocator's path), else the block the token fills is
        registered in every group (`_register_filled`)."""
        bs, window = self.block_size, self.window
        views = req.group_views
        assert views is not None
        w = window.sliding_window
        n_skip = max(0, nc - w + 1) // bs
        first_window = self.num_full_groups - 1  # group 0, the request itself, is full
        new_slot = len(req.blocks) * bs <= nc
        ns = NO_SPAN
        for g, view in enumerate(views):
            if len(view.blocks) * bs <= nc:
                new_slot = True
            if g >= first_window:
                k = view.num_skipped_blocks
                if k < n_skip and k < len(view.blocks):  # blocks left the window: drop them
                    self._drop_window_blocks(view, nc, n_skip)
                    k = view.num_skipped_blocks
                if k < ns:
                    ns = k
        if new_slot:
            if not self._allocate_upto(req, nc + 1, nc + 1):
                return 0
        elif self.enable_caching and (nc + 1) % bs == 0:
            self._register_filled(req, views, (nc + 1) // bs)
        n = len(req.blocks)
        j = n * bs - nc
        if self.enable_caching and j > 1:
            j -= 1
        if ns < n:
            j = min(j, (ns + 1) * bs + w - 1 - nc)
        return j

    def _drop_window_blocks(self, view: Request, nc: int, n_skip: int) -> None:
        """`SlidingWindowManager.drop_skipped_at(view, nc)`; the usual case (one block
        leaves, no sink in the way) without its lists."""
        window = self.window
        first = view.num_skipped_blocks
        if first >= window.num_sink_blocks and n_skip == first + 1:
            blocks = view.blocks
            block = blocks[first]
            blocks[first] = None
            view.num_skipped_blocks = n_skip
            if block is not None:
                self.pool.free_blocks((block,))
        else:
            window.drop_skipped_at(view, nc)

    def _register_filled(self, req: Request, views: list[Request], num_full: int) -> None:
        """`cache_full_blocks(view, num_full)` in every group, the usual case (one private
        block: `BlockPool.mark_private`) without its arithmetic."""
        bs, pool, n_full = self.block_size, self.pool, self.num_full_groups
        private_from = req.private_from_token
        for g, view in enumerate((req, *views)):
            start = view.num_cached_blocks
            if num_full <= start:
                continue
            if num_full == start + 1 and private_from <= start * bs:
                block = view.blocks[start]
                if block is not None:
                    pool.mark_private(block)
                view.num_cached_blocks = num_full
            else:
                FullAttentionManager.cache_full_blocks(self if g < n_full else self.window, view, num_full)

    def next_decode_event(self, req: Request, nc: int) -> int:
        """`SlidingWindowManager.next_decode_event` over the groups (their tables have one
        length; each window group's blocks leave from its own skipped prefix)."""
        j = FullAttentionManager.next_decode_event(self, req, nc)
        views = req.group_views
        assert views is not None
        ns = min(view.num_skipped_blocks for view in views[self.num_full_groups - 1 :])
        if ns < len(req.blocks):
            j = min(j, (ns + 1) * self.block_size + self.window.sliding_window - 1 - nc)
        return j

    def decode_slot_ready(self, req: Request, nc: int) -> bool:
        """`FullAttentionManager.decode_slot_ready` in every group (a window group's
        blocks leave the window at the same tokens in all of them)."""
        views = req.group_views
        bs = self.block_size
        if views is None or len(req.blocks) * bs <= nc or (self.enable_caching and (nc + 1) % bs == 0):
            return False
        n_full = self.num_full_groups - 1  # group 0 is the request itself
        n_skip = max(0, nc - self.window.sliding_window + 1) // bs  # window._first_attended_block
        for g, view in enumerate(views):
            n = len(view.blocks)
            if n * bs <= nc or (g >= n_full and min(n_skip, n) > view.num_skipped_blocks):
                return False
        return True

    def fit_chunk(self, req: Request, num_new_tokens: int, num_hit_blocks: int = 0) -> int:
        """The longest chunk whose blocks, in every group, fit the pool together."""
        bs, w = self.block_size, self.window
        c = req.num_computed_tokens + num_hit_blocks * bs
        start = w._first_attended_block(c)
        dropped = start - min(w.num_sink_blocks, start)  # window blocks no longer held
        groups = self.num_full_groups + self.num_window_groups
        total_blocks = (self.pool.num_blocks + self.num_window_groups * dropped) // groups
        return max(0, min(num_new_tokens, total_blocks * bs - c))

    # -- prefix lookup -------------------------------------------------------------------
    def get_computed_blocks(self, req: Request) -> list[KVBlock]:
        """The longest hit every group can serve; the other groups' hits wait for `allocate_slots`."""
        self._pending.pop(req.request_id, [])
        if not self.enable_caching:
            return []
        bs, lookup = self.block_size, self.pool.cached.get
        hits = req.match_prefix(bs, lookup)
        groups = self.groups(req)[1:]
        full_hits = [view.match_prefix(bs, lookup) for m, view in groups if m is self]
        length = min([len(hits), *(len(h) for h in full_hits)])
        windows = [view for m, view in groups if m is self.window]
        while length and not all(self._window_hit(view, length) for view in windows):
            length -= 1
        if length:
            pending: list[list[KVBlock | None]] = [list(h[:length]) for h in full_hits]
            pending += [self._window_blocks(v, length) for v in windows]
            self._pending[req.request_id] = pending
        return hits[:length]

    def _window_needed(self, length: int) -> range:
        """Blocks of a window group a hit of ``length`` blocks must have: the window before it."""
        w = self.window
        return range(max(w._first_attended_block(length * self.block_size), w.num_sink_blocks), length)

    def _window_hit(self, view: Request, length: int) -> bool:
        hashes = view.ensure_hashes(length, self.block_size)
        cached = self.pool.cached
        sinks = range(min(self.window.num_sink_blocks, length))
        return all(hashes[j] in cached for j in (*sinks, *self._window_needed(length)))

    def _window_blocks(self, view: Request, length: int) -> list[KVBlock | None]:
        cached, hashes = self.pool.cached, view.block_hashes
        keep = set(self._window_needed(length)) | set(range(min(self.window.num_sink_blocks, length)))
        return [cached[hashes[j]] if j in keep else None for j in range(length)]

    def offload_hits(self, req: Request, start: int) -> int:
        return 0  # no offload tier for hybrid models (refused by the scenario checks)

    # -- allocation ------------------------------------------------------------------------
    def allocate_slots(
        self,
        req: Request,
        num_new_tokens: int,
        new_computed: Sequence[KVBlock | None] = (),
        num_loaded: int = 0,
    ) -> bool:
        """Room for ``num_new_tokens`` more tokens in every group, or nothing (returns False)."""
        assert num_loaded == 0, "no offload tier for hybrid models"
        if not new_computed and req.request_id not in self._pending:
            return self._allocate_no_hits(req, num_new_tokens)
        return self._allocate_with_hits(req, num_new_tokens, new_computed)

    def _allocate_with_hits(
        self, req: Request, num_new_tokens: int, new_computed: Sequence[KVBlock | None]
    ) -> bool:
        """`allocate_slots` in general: every group's hits (from `get_computed_blocks`) attached."""
        bs, pool = self.block_size, self.pool
        groups = self.groups(req)
        others = self._pending.pop(req.request_id, []) or [[] for _ in groups[1:]]
        hits: list[list[KVBlock | None]] = [list(new_computed), *others]
        assert all(len(h) == len(new_computed) for h in hits), (
            "hits of every group come from get_computed_blocks"
        )
        num_computed = req.num_computed_tokens + len(new_computed) * bs
        required = -(-(num_computed + num_new_tokens) // bs)
        need = sum(
            max(required - len(view.blocks) - len(h), 0) for (_, view), h in zip(groups, hits, strict=True)
        )
        evictable = sum(1 for h in hits for b in h if b is not None and b.ref_cnt == 0)
        if need > pool.num_free_blocks - evictable:
            return False
        for (manager, view), h in zip(groups, hits, strict=True):
            self._extend(manager, view, h, required, min(num_computed + num_new_tokens, req.num_tokens))
        return True

    def _allocate_no_hits(self, req: Request, num_new_tokens: int) -> bool:
        """`allocate_slots` without prefix hits (every decode and later chunk): the same
        blocks taken, group by group, and the same blocks registered, minus the hit lists."""
        return self._allocate_upto(req, req.num_computed_tokens + num_new_tokens, req.num_tokens)

    def decode_alloc_at(self, req: Request, nc: int) -> bool:
        """`SlidingWindowManager.decode_alloc_at` in every group: `_allocate_no_hits` for
        the decode of token ``nc``."""
        return self._allocate_upto(req, nc + 1, nc + 1)

    def _allocate_upto(self, req: Request, end: int, num_tokens: int) -> bool:
        """`_allocate_no_hits` for slots up to token ``end`` of a request of ``num_tokens``."""
        bs, pool = self.block_size, self.pool
        if req.group_views is None:
            self.groups(req)
        assert req.group_views is not None
        views = (req, *req.group_views)
        required = -(-end // bs)
        need = 0
        for view in views:
            if required > len(view.blocks):
                need += required - len(view.blocks)
        if need > pool.num_free_blocks:
            return False
        num_full = min(end, num_tokens) // bs
        caching, n_full = self.enable_caching, self.num_full_groups
        for g, view in enumerate(views):
            lacking = required - len(view.blocks)
            if lacking == 1:  # a decode's next block (`get_one_block`: get_new_blocks(1))
                view.blocks.append(pool.get_one_block())
            elif lacking > 0:
                view.blocks.extend(pool.get_new_blocks(lacking))
            if caching and num_full > view.num_cached_blocks:
                FullAttentionManager.cache_full_blocks(self if g < n_full else self.window, view, num_full)
        return True

    def _extend(
        self,
        manager: FullAttentionManager,
        view: Request,
        hits: list[KVBlock | None],
        required: int,
        filled: int,
    ) -> None:
        pool, bs = self.pool, self.block_size
        if hits:
            pool.touch([b for b in hits if b is not None])
            view.blocks.extend(hits)
            view.num_cached_blocks = len(view.blocks)
            if manager is self.window:
                view.num_skipped_blocks = max(
                    view.num_skipped_blocks, self.window._skipped_prefix(view.blocks)
                )
        if required > len(view.blocks):
            view.blocks.extend(pool.get_new_blocks(required - len(view.blocks)))
        if self.enable_caching and filled // bs > view.num_cached_blocks:
            FullAttentionManager.cache_full_blocks(manager, view, filled // bs)

    def publish_private_blocks(self, req: Request) -> None:
        first_private_token = req.private_from_token
        req.private_from_token = NEVER_PRIVATE  # as FullAttentionManager: nothing private after this
        for manager, view in self.groups(req):
            FullAttentionManager.publish_blocks_from(manager, view, first_private_token // manager.block_size)

    def rollback(self, req: Request) -> None:
        for manager, view in self.groups(req):
            FullAttentionManager.rollback(manager, view)

    def drop_own_cache(self, req: Request) -> None:
        keep = req.metrics.prefix_cache_hits_tokens // self.block_size
        for _, view in self.groups(req):
            for block in view.blocks[keep:]:
                if block is not None and block.ref_cnt == 1 and block.block_hash is not None:
                    self.pool.uncache(block)

    def free(self, req: Request) -> None:
        """Every group's blocks, group by group (vLLM frees manager by manager), tail first."""
        for manager, view in self.groups(req):
            if manager is self:
                FullAttentionManager.free(self, view)
            else:
                manager.free(view)
        self._pending.pop(req.request_id, [])


def make_model_kv_manager(pool: BlockPool, block_size: int, model: ModelSpec) -> FullAttentionManager:
    """The KV manager for ``model``: full, sliding window (with sinks), or hybrid groups."""
    if not model.is_hybrid:
        return make_kv_manager(pool, block_size, model.sliding_window, model.num_sink_tokens)
    assert model.sliding_window is not None
    groups = kv_layer_groups(model)
    return HybridKvManager(
        pool,
        block_size,
        num_full_groups=groups.num_full_groups,
        num_window_groups=groups.num_window_groups,
        sliding_window=model.sliding_window,
        num_sink_tokens=model.num_sink_tokens,
        layer_counts=(model.num_full_layers, model.num_window_layers),
    )
