"""A second-tier prefix cache in host memory (CPU offload), below the GPU block pool.

Cached blocks the GPU pool evicts are written back to a bounded host tier (LRU); a
prefix lookup that runs out of GPU hits continues in the host tier, and the blocks found
there are loaded back over PCIe instead of recomputed. This is the write-back flavour of
vLLM's CPU KV offloading, LMCache's local CPU backend and SGLang's HiCache: the tier holds
block contents by hash, never references; loading copies a block, the host keeps its copy.

Blocks that only their own request could ever hit (`kvsim.core.block_pool.PRIVATE`) are
stored under a unique placeholder key: they take host capacity as the real bytes would,
and nobody can look them up.
"""

from __future__ import annotations

from collections import OrderedDict


class HostTier:
    """LRU set of block hashes with a capacity in blocks."""

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError('"capacity_blocks" must be >= 1')
        self.capacity_blocks = capacity_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._next_placeholder = -(2**62)
        self.num_stored = 0  # blocks written (write-backs)
        self.num_dropped = 0  # blocks pushed out of the tier by newer ones

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def store(self, block_hash: int | None) -> None:
        """Write back an evicted block (None: a private block, stored under a placeholder)."""
        if block_hash is None:
            self._next_placeholder -= 1
            block_hash = self._next_placeholder
        lru = self._lru
        if block_hash in lru:
            lru.move_to_end(block_hash)
            return
        if len(lru) >= self.capacity_blocks:
            lru.popitem(last=False)
            self.num_dropped += 1
        lru[block_hash] = None
        self.num_stored += 1

    def touch(self, block_hash: int) -> None:
        """A hit: the block becomes the most recently used."""
        self._lru.move_to_end(block_hash)
