"""Offload tiers: prefix caches below the GPU block pool, holding block contents by hash.

    GPU pool ──evict (write-on-evict) / cache (write-through)──> TierStack of one replica
       ^                                                           [dram] -> [nvme] -> [shared pool]
       └──────────── load (a prefix hit below the GPU) ────────────    each a BlockTier

Cached blocks the GPU pool evicts are written to the replica's first tier; a block a tier
pushes out goes down to the next one (write-on-evict all the way). With write-through,
every block the GPU caches is written to every tier at once, and evictions write nothing.
A prefix lookup that runs out of GPU hits continues through the tiers, fastest first, and
the blocks found are loaded back instead of recomputed. Tiers hold copies, never
references: loading copies a block back, the tier keeps its copy.

`BlockTier` is one tier (host DRAM as vLLM's CPU offloading, LMCache's local CPU backend
and SGLang's HiCache hold it; local NVMe; or the cluster-wide store every replica reads
over the network, as Mooncake's), with a capacity in blocks and its replacement policy:

    lru   the block stored or hit longest ago goes first
    fifo  the block stored first goes first (hits do not refresh it)

`TierStack` chains one replica's tiers behind the `OffloadTier` protocol the GPU pool
and the KV manager use, and counts what moved: blocks written per tier, and the tier of
every loaded block in load order (the engine prices them on that tier's link).

Blocks that only their own request could ever hit (`kvsim.core.block.PRIVATE`) are
stored under a unique placeholder key (a float ending in .5, which no integer block hash
equals): they take capacity as the real bytes would, and nobody can look them up.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

from kvsim.core.block import PRIVATE

TIER_POLICIES = ("lru", "fifo")
#: The kinds of tier, in lookup order.
TIER_KINDS = ("dram", "nvme", "shared_pool")


class OffloadTier(Protocol):
    """A bounded store of block hashes below the GPU pool."""

    capacity_blocks: int

    def __len__(self) -> int: ...

    def __contains__(self, block_hash: int) -> bool: ...

    def lookup(self, block_hash: int) -> int | bool | None:
        """Not None if the tier holds the block (a prefix-walk lookup)."""
        ...

    def store(self, block_hash: int | None) -> None:
        """Write back a block the GPU evicted (None: a private block, no hash)."""
        ...

    def touch(self, block_hash: int) -> None:
        """A hit: the block was loaded back to the GPU."""
        ...


class BlockTier:
    """One tier: a set of block hashes with a capacity in blocks and a replacement policy."""

    def __init__(self, capacity_blocks: int, policy: str = "lru", kind: str = "dram") -> None:
        if capacity_blocks < 1:
            raise ValueError('"capacity_blocks" must be >= 1')
        if policy not in TIER_POLICIES:
            raise ValueError(f'"policy" must be one of {", ".join(TIER_POLICIES)}, got {policy!r}')
        self.capacity_blocks = capacity_blocks
        self.policy = policy
        self.kind = kind
        self._refresh = policy == "lru"
        self._blocks: OrderedDict[float, None] = OrderedDict()  # first: replaced first
        self._next_placeholder = 0.5
        self.num_stored = 0  # blocks written
        self.num_dropped = 0  # blocks pushed out by newer ones

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def lookup(self, block_hash: int) -> bool | None:
        return True if block_hash in self._blocks else None

    def put(self, block_hash: float | None) -> tuple[bool, float | None]:
        """Write a block: (whether bytes were written, the block pushed out to make room).

        A block already held is not written again (its bytes are there); LRU refreshes it.
        """
        if block_hash is None or block_hash == PRIVATE:
            block_hash = self._next_placeholder
            self._next_placeholder += 1.0
        blocks = self._blocks
        if block_hash in blocks:
            if self._refresh:
                blocks.move_to_end(block_hash)
            return False, None
        dropped = None
        if len(blocks) >= self.capacity_blocks:
            dropped, _ = blocks.popitem(last=False)
            self.num_dropped += 1
        blocks[block_hash] = None
        self.num_stored += 1
        return True, dropped

    def store(self, block_hash: int | None) -> None:
        self.put(block_hash)

    def touch(self, block_hash: int) -> None:
        if self._refresh:
            self._blocks.move_to_end(block_hash)

    def check_invariants(self) -> None:
        """Blocks are conserved: every block written is held or was pushed out."""
        assert len(self._blocks) <= self.capacity_blocks
        assert self.num_stored - self.num_dropped == len(self._blocks)


class CpuOffloadTier(BlockTier):
    """The host-DRAM LRU tier of ``engine.cpu_offload_gib`` (kept for existing callers)."""

    def __init__(self, capacity_blocks: int) -> None:
        super().__init__(capacity_blocks, "lru", "dram")


class TierStack:
    """One replica's tiers, fastest first, as the single `OffloadTier` below its GPU pool.

    ``write_through[i]`` says whether tier i takes every block the GPU caches
    (`write_through_block`) instead of the blocks pushed down to it (`store`: a GPU eviction
    goes to the first write-on-evict tier; what that one pushes out goes to the next, and
    so on). ``writes[i]`` counts the blocks written to tier i and ``loads`` lists the tier
    of every block loaded back, in order, since the engine last drained them (`drain`).
    """

    def __init__(self, tiers: Sequence[BlockTier], write_through: Sequence[bool] | None = None) -> None:
        if not tiers:
            raise ValueError("a tier stack needs at least one tier")
        self.tiers = list(tiers)
        self.write_through = list(write_through) if write_through is not None else [False] * len(self.tiers)
        if len(self.write_through) != len(self.tiers):
            raise ValueError("one write_through flag per tier")
        self._on_evict = [i for i, wt in enumerate(self.write_through) if not wt]
        self.capacity_blocks = sum(t.capacity_blocks for t in self.tiers)
        self.writes = [0] * len(self.tiers)
        self.loads: list[int] = []

    def __len__(self) -> int:
        return sum(len(t) for t in self.tiers)

    def __contains__(self, block_hash: int) -> bool:
        return any(block_hash in t for t in self.tiers)

    def lookup(self, block_hash: int) -> int | None:
        for i, tier in enumerate(self.tiers):
            if block_hash in tier:
                return i
        return None

    def store(self, block_hash: int | None) -> None:
        """A block the GPU evicted: to the first write-on-evict tier, pushed-out blocks on down."""
        h: float | None = block_hash
        tiers = self.tiers
        for i in self._on_evict:
            written, dropped = tiers[i].put(h)
            if written:
                self.writes[i] += 1
            if dropped is None:
                return
            # The pushed-out block goes one tier down (a private one under a new placeholder).
            h = None if isinstance(dropped, float) else dropped

    def write_through_block(self, block_hash: int | None) -> None:
        """A block the GPU just cached goes to every write-through tier."""
        for i, tier in enumerate(self.tiers):
            if self.write_through[i] and tier.put(block_hash)[0]:
                self.writes[i] += 1

    def touch(self, block_hash: int) -> None:
        i = self.lookup(block_hash)
        assert i is not None, "a loaded block must be in a tier"
        self.tiers[i].touch(block_hash)
        self.loads.append(i)

    def drain(self) -> tuple[list[int], list[int]]:
        """(blocks written per tier, tier of each loaded block) since the last drain."""
        writes, loads = self.writes, self.loads
        self.writes = [0] * len(self.tiers)
        self.loads = []
        return writes, loads

    def check_invariants(self) -> None:
        for tier in self.tiers:
            tier.check_invariants()
