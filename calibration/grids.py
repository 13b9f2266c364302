"""The grids the harness measures.

Three sizes: ``default`` (a full profile, under 5 minutes on an H100/H200-class GPU),
``quick`` (under 1 minute there) and ``cpu`` (tiny sizes, the same code paths; what the
tests run). Token grids are dense at small sizes, where launch overhead and tile
quantisation dominate, and geometric above.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Grids:
    """Points measured by one calibration run."""

    tokens: list[int]
    prefill_chunk_tokens: list[int]
    prefill_context_tokens: list[int]
    decode_batch_sizes: list[int]
    decode_context_tokens: list[int]
    hbm_copy_bytes: list[int]
    host_transfer_bytes: list[int]
    allreduce_bytes: list[int]
    warmup: int
    repeats: int
    block_size: int = 16
    l2_flush_bytes: int = field(default=0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MIB = 1 << 20

DEFAULT = Grids(
    tokens=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384],
    prefill_chunk_tokens=[16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    prefill_context_tokens=[0, 256, 1024, 2048, 4096, 8192, 16384],
    decode_batch_sizes=[1, 2, 4, 8, 16, 32, 64, 128, 256],
    decode_context_tokens=[16, 128, 512, 1024, 2048, 4096, 8192, 16384],
    hbm_copy_bytes=[16 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB, 4096 * MIB],
    host_transfer_bytes=[1 * MIB, 16 * MIB, 256 * MIB, 1024 * MIB],
    allreduce_bytes=[64 * 1024, 1 * MIB, 8 * MIB, 64 * MIB, 256 * MIB],
    warmup=3,
    repeats=10,
    l2_flush_bytes=256 * MIB,
)

QUICK = Grids(
    tokens=[1, 8, 64, 256, 1024, 4096, 16384],
    prefill_chunk_tokens=[64, 512, 2048, 8192],
    prefill_context_tokens=[0, 2048, 8192],
    decode_batch_sizes=[1, 8, 64, 256],
    decode_context_tokens=[128, 1024, 4096, 16384],
    hbm_copy_bytes=[64 * MIB, 1024 * MIB],
    host_transfer_bytes=[16 * MIB, 256 * MIB],
    allreduce_bytes=[1 * MIB, 64 * MIB],
    warmup=2,
    repeats=5,
    l2_flush_bytes=256 * MIB,
)

CPU = Grids(
    tokens=[1, 4, 16, 64],
    prefill_chunk_tokens=[4, 16, 64],
    prefill_context_tokens=[0, 16, 64],
    decode_batch_sizes=[1, 2, 4],
    decode_context_tokens=[16, 64, 256],
    hbm_copy_bytes=[1 * MIB, 8 * MIB],
    host_transfer_bytes=[1 * MIB],
    allreduce_bytes=[64 * 1024],
    warmup=1,
    repeats=3,
)

CPU_QUICK = Grids(
    tokens=[1, 16],
    prefill_chunk_tokens=[4, 16],
    prefill_context_tokens=[0, 16],
    decode_batch_sizes=[1, 2],
    decode_context_tokens=[16, 64],
    hbm_copy_bytes=[1 * MIB],
    host_transfer_bytes=[1 * MIB],
    allreduce_bytes=[64 * 1024],
    warmup=1,
    repeats=2,
)


def grids_for(device_type: str, quick: bool) -> Grids:
    """The grids for a device type ('cuda' or 'cpu') and the --quick flag."""
    if device_type == "cpu":
        return CPU_QUICK if quick else CPU
    return QUICK if quick else DEFAULT
