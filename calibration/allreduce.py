"""All-reduce timing across the GPUs of one machine (torch.distributed over NCCL).

`measure_allreduce` spawns one process per GPU; each times ``all_reduce`` of every
message size (warm-up, then CUDA events around each call, median over repetitions) and
rank 0 reports the medians. Used by the harness only when more than one GPU is visible.
"""

from __future__ import annotations

import os
import statistics
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(
    rank: int,
    world: int,
    init_file: str,
    sizes: list[int],
    dtype: torch.dtype,
    warmup: int,
    repeats: int,
    result: dict[str, list[float]],
) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        medians = []
        for nbytes in sizes:
            x = torch.ones(max(1, nbytes // dtype.itemsize), dtype=dtype, device="cuda")
            for _ in range(warmup):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
            for i in range(repeats):
                dist.barrier()
                starts[i].record()
                dist.all_reduce(x)
                ends[i].record()
            torch.cuda.synchronize()
            medians.append(
                statistics.median(s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True))
            )
        if rank == 0:
            result["time_s"] = medians
    finally:
        dist.destroy_process_group()


def measure_allreduce(
    world: int, sizes: list[int], *, dtype: torch.dtype, warmup: int, repeats: int
) -> list[float]:
    """Median time of one all-reduce over ``world`` GPUs for each message size, seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        result = manager.dict()
        mp.spawn(
            _worker,
            args=(world, os.path.join(tmp, "init"), sizes, dtype, warmup, repeats, result),
            nprocs=world,
            join=True,
        )
        return [float(t) for t in result["time_s"]]
