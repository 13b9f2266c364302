"""All-reduce timing across the GPUs of one machine (torch.distributed over NCCL).

`measure_allreduce` spawns one process per GPU; each times ``all_reduce`` of every
message size (warm-up, then CUDA events around each call, median over repetitions) and
rank 0 reports the medians. Used by the harness only when more than one GPU is visible,
and by ``kvsim calibrate --tables`` for each GPU count the machine has. With
``backend="gloo"`` the processes run on the CPU (timed with `time.perf_counter`): the
same code path without GPUs. `measure_allreduce_in_process` is one gloo process in the
caller's process (world size 1), what a CPU run of ``--tables`` records.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _time_sizes(
    sizes: list[int], dtype: torch.dtype, device: torch.device, warmup: int, repeats: int
) -> list[float]:
    """Median seconds of one ``all_reduce`` per message size (bytes), in the current process group."""
    medians = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // dtype.itemsize), dtype=dtype, device=device)
        for _ in range(warmup):
            dist.all_reduce(x)
        if device.type == "cuda":
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
        else:
            times = []
            for _ in range(repeats):
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times.append(time.perf_counter() - t0)
            medians.append(statistics.median(times))
    return medians


def _worker(
    rank: int,
    world: int,
    init_file: str,
    sizes: list[int],
    dtype: torch.dtype,
    warmup: int,
    repeats: int,
    result: dict[str, list[float]],
    backend: str = "nccl",
) -> None:
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        medians = _time_sizes(sizes, dtype, device, warmup, repeats)
        if rank == 0:
            result["time_s"] = medians
    finally:
        dist.destroy_process_group()


def measure_allreduce(
    world: int,
    sizes: list[int],
    *,
    dtype: torch.dtype,
    warmup: int,
    repeats: int,
    backend: str = "nccl",
) -> list[float]:
    """Median time of one all-reduce over ``world`` GPUs (or gloo CPU processes) for each
    message size in bytes, seconds."""
    if repeats < 1:
        raise ValueError('"repeats" must be >= 1')
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        result = manager.dict()
        mp.spawn(
            _worker,
            args=(world, os.path.join(tmp, "init"), sizes, dtype, warmup, repeats, result, backend),
            nprocs=world,
            join=True,
        )
        return [float(t) for t in result["time_s"]]


def measure_allreduce_in_process(
    sizes: list[int], *, dtype: torch.dtype, warmup: int, repeats: int
) -> list[float]:
    """One gloo process (world size 1) in this process: ``all_reduce`` of each size in bytes."""
    if repeats < 1:
        raise ValueError('"repeats" must be >= 1')
    if dist.is_initialized():
        raise RuntimeError("a torch.distributed process group is already initialised in this process")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(
            "gloo", init_method=f"file://{os.path.join(tmp, 'init')}", rank=0, world_size=1
        )
        try:
            return _time_sizes(sizes, dtype, torch.device("cpu"), warmup, repeats)
        finally:
            dist.destroy_process_group()
