"""Offload tiers: prefix caches below the GPU block pool, holding block contents by hash.

Cached blocks the GPU pool evicts are written back to the tier; a prefix lookup that runs
out of GPU hits continues in the tier, and the blocks found there are loaded back (over
PCIe for host memory) instead of recomputed. The tier holds copies, never references:
loading copies a block back, the tier keeps its copy.

`CpuOffloadTier` is the write-back host-DRAM tier of vLLM's CPU KV offloading, LMCache's
local CPU backend and SGLang's HiCache, with LRU replacement.

Blocks that only their own request could ever hit (`kvsim.core.block.PRIVATE`) are
stored under a unique placeholder key: they take capacity as the real bytes would, and
nobody can look them up.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol


class OffloadTier(Protocol):
    """A bounded store of block hashes below the GPU pool."""

    capacity_blocks: int

    def __len__(self) -> int: ...

    def __contains__(self, block_hash: int) -> bool: ...

    def lookup(self, block_hash: int) -> bool | None:
        """True if the tier holds the block, None if not (a prefix-walk lookup)."""
        ...

    def store(self, block_hash: int | None) -> None:
        """Write back a block the GPU evicted (None: a private block, no hash)."""
        ...

    def touch(self, block_hash: int) -> None:
        """A hit: the block was loaded back to the GPU."""
        ...


class CpuOffloadTier:
    """LRU set of block hashes in host memory, with a capacity in blocks."""

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

    def lookup(self, block_hash: int) -> bool | None:
        return True if block_hash in self._lru else None

    def store(self, block_hash: int | None) -> None:
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
        self._lru.move_to_end(block_hash)
