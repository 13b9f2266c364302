"""How a request's KV memory is reserved: paged on demand, or one contiguous run up front.

    paged            blocks are allocated as tokens arrive (vLLM)
    reserve_max      one run of consecutive blocks for max_model_len tokens, at admission
    reserve_pow2     ... for prompt + output rounded up to a power of two
    reserve_oracle   ... for exactly prompt + output

The ``reserve_*`` allocators are the Orca-style baselines of the vLLM paper (Kwon et al.,
SOSP 2023, section 6.1), which places each reservation with the buddy allocation algorithm:
the run is rounded up to a power of two of blocks and aligned to its size. Memory sits
reserved and unfilled (internal fragmentation), and a long enough run may not exist
although enough blocks are free (external fragmentation). Once admitted, a request never
allocates again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request


class KvAllocator(Protocol):
    """Reservation policy of one replica's block pool."""

    #: Whether blocks are allocated on demand (the scheduler then allocates slot by slot).
    paged: bool

    def reserved_tokens(self, req: Request) -> int:
        """Token slots the request holds at most (its feasibility against the pool)."""
        ...

    def reserve(self, req: Request) -> bool:
        """Reserve memory at admission, before slots are allocated; False if impossible now."""
        ...


class PagedAllocator:
    """Blocks on demand: nothing is reserved at admission."""

    paged = True

    def reserved_tokens(self, req: Request) -> int:
        return req.total_tokens

    def reserve(self, req: Request) -> bool:
        return True


class ContiguousAllocator:
    """One run of consecutive block ids per request, placed by a buddy allocator at admission."""

    paged = False

    def __init__(self, pool: BlockPool, block_size: int, tokens: Callable[[Request], int]) -> None:
        self.pool = pool
        self.block_size = block_size
        self._tokens = tokens

    def reserved_tokens(self, req: Request) -> int:
        num_blocks = -(-self._tokens(req) // self.block_size)
        return (1 << (num_blocks - 1).bit_length()) * self.block_size

    def reserve(self, req: Request) -> bool:
        num_blocks = -(-self._tokens(req) // self.block_size)
        buddy = 1 << (num_blocks - 1).bit_length()  # the power of two the buddy system hands out
        run = self.pool.get_contiguous_blocks(buddy, align=buddy)
        if run is None:
            return False  # no free aligned run that long, however much is free
        req.blocks = list(run)
        return True


def make_allocator(kind: str, pool: BlockPool, block_size: int, max_model_len: int | None) -> KvAllocator:
    """The allocator an engine's ``kv_allocation`` names.

    No reservation exceeds ``max_model_len``: a request stops there (vLLM's length cap).
    """
    limit = max_model_len if max_model_len is not None else 1 << 62
    if kind == "paged":
        return PagedAllocator()
    if kind == "reserve_max":
        if max_model_len is None:
            raise ValueError('kv_allocation "reserve_max" needs max_model_len')
        return ContiguousAllocator(pool, block_size, lambda r: limit)
    if kind == "reserve_pow2":
        return ContiguousAllocator(
            pool,
            block_size,
            lambda r: min(r.prompt_tokens + (1 << (r.target_output_tokens - 1).bit_length()), limit),
        )
    if kind == "reserve_oracle":
        return ContiguousAllocator(pool, block_size, lambda r: min(r.total_tokens, limit))
    raise ValueError(f"unknown kv_allocation {kind!r}")
