"""One KV block: an id, a reference count and, once full and cached, a block hash.

A block's hash is chained from the previous block's (see `kvsim.core.request_state`), so
equal hashes mean equal prefixes. ``prev`` / ``next`` link free blocks in the LRU free
queue (`kvsim.core.eviction`).
"""

from __future__ import annotations

#: Stand-in hash of a cached block that only its own request could hit (never indexed;
#: see `kvsim.core.block_pool`).
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
