"""Swap space: host memory holding the blocks of requests preempted by swap.

vLLM v0's ``swap_space`` (GiB per GPU): a preempted request's computed blocks are copied
out over PCIe and copied back before it resumes. The space is bounded; a victim that does
not fit is preempted by recompute instead. Only block counts matter here: the copies'
time is priced by the cost model's `pcie_transfer_s`.
"""

from __future__ import annotations


class SwapSpace:
    """Block-count accounting of one replica's swap space."""

    __slots__ = ("num_blocks", "num_used_blocks")

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError('"num_blocks" must be >= 0')
        self.num_blocks = num_blocks
        self.num_used_blocks = 0

    def try_store(self, num_blocks: int) -> bool:
        """Reserve room for ``num_blocks`` swapped-out blocks; False if they do not fit."""
        if not num_blocks or self.num_used_blocks + num_blocks > self.num_blocks:
            return False
        self.num_used_blocks += num_blocks
        return True

    def release(self, num_blocks: int) -> None:
        """The blocks were swapped back in."""
        assert 0 <= num_blocks <= self.num_used_blocks
        self.num_used_blocks -= num_blocks
