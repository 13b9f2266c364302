"""A decode replica's blocks for a request whose prompt KV came over the KV link.

Disaggregated serving (`kvsim.engine.cluster`): the prefill replica sends what it keeps of
the sequence -- every token of the full-attention layer groups, only the window (and the
sinks) of the sliding-window ones (`kvsim.scenario.resolved.KvGeometry.bytes_for_tokens`) --
so the decode replica takes no block the next token's window has passed: those table entries
are skipped (None), as if the window had slid past them here. Taking every block and
dropping the passed ones at the next step would hold a 8k-token prompt's whole table in
every window group for one iteration, and refuse a request whose window fits the pool but
whose whole prompt does not.

    window 8, blocks of 4, 14 tokens transferred, 1 new:
      full group     [b0][b1][b2][b3]
      window group   [None][b4][b5][b6]      blocks 1-3 hold tokens 4..14
"""

from __future__ import annotations

from kvsim.core.hybrid_kv import HybridKvManager
from kvsim.core.kv_manager import FullAttentionManager, SlidingWindowManager
from kvsim.core.request_state import Request


def allocate_transferred(kv: FullAttentionManager, req: Request, num_new_tokens: int) -> bool:
    """`allocate_slots` for ``req``, whose ``num_computed_tokens`` arrived from a prefill
    replica, and ``num_new_tokens`` more: without the blocks its windows passed. False, and
    nothing changed, when the pool cannot supply the rest."""
    window = kv.window if isinstance(kv, HybridKvManager) else kv
    if not isinstance(window, SlidingWindowManager):
        return kv.allocate_slots(req, num_new_tokens)
    skip = window._first_attended_block(req.num_computed_tokens)
    sinks = min(window.num_sink_blocks, skip)
    groups = kv.groups(req) if isinstance(kv, HybridKvManager) else [(window, req)]
    if skip <= sinks or any(view.blocks for _, view in groups):
        return kv.allocate_slots(req, num_new_tokens)
    required = -(-(req.num_computed_tokens + num_new_tokens) // kv.block_size)
    windowed = [view for manager, view in groups if manager is window]
    need = (len(groups) - len(windowed)) * required + len(windowed) * (required - skip + sinks)
    if need > kv.pool.num_free_blocks:
        return False
    for view in windowed:  # the sinks' blocks, then the skipped ones; the cache starts after
        view.blocks = [*(kv.pool.get_new_blocks(sinks) if sinks else ()), *([None] * (skip - sinks))]
        view.num_skipped_blocks = view.num_cached_blocks = skip
    return kv.allocate_slots(req, num_new_tokens)
