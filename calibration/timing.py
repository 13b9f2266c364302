"""Timing of torch work: warm-up, then the median of repeated measurements.

On CUDA each repetition is bracketed by CUDA events recorded on the current stream, and
the host synchronises once at the end, so host overhead between launches is not
counted; on CPU each repetition is timed with `time.perf_counter`. The function timed
receives the repetition index, so that callers can rotate between buffer copies and
keep data out of the L2 cache.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_median_s(fn: Callable[[int], object], device: torch.device, *, warmup: int, repeats: int) -> float:
    """Median duration of ``fn(i)`` over ``repeats`` calls after ``warmup`` calls, seconds."""
    if repeats < 1:
        raise ValueError('"repeats" must be >= 1')
    for i in range(warmup):
        fn(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for i in range(repeats):
            starts[i].record()
            fn(warmup + i)
            ends[i].record()
        torch.cuda.synchronize(device)
        times = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
    else:
        times = []
        for i in range(repeats):
            t0 = time.perf_counter()
            fn(warmup + i)
            times.append(time.perf_counter() - t0)
    return float(statistics.median(times))
