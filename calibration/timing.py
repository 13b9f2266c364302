"""Timing of torch work: warm-up, then the median of repeated measurements.

On CUDA the work is captured once in a CUDA graph and the graph is replayed, each replay
bracketed by CUDA events on the current stream, with one synchronisation at the end.
Replaying a graph removes the host's launch gaps between the kernels of one measurement,
as serving engines do by running their forward passes from CUDA graphs (vLLM captures
decode and, in v1, piecewise prefill graphs). Work that cannot be captured is timed
eagerly instead. On CPU each repetition is timed with `time.perf_counter`.

The function timed receives an index; ``variants`` distinct indices are captured (one
graph each) and replayed in turn, so that callers can rotate between buffer copies and
keep data out of the L2 cache.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable

import torch


def time_median_s(
    fn: Callable[[int], object],
    device: torch.device,
    *,
    warmup: int,
    repeats: int,
    variants: int = 1,
    cuda_graph: bool = True,
) -> float:
    """Median duration of ``fn(i)`` over ``repeats`` calls after ``warmup`` calls, seconds."""
    if repeats < 1:
        raise ValueError('"repeats" must be >= 1')
    if device.type != "cuda":
        for i in range(warmup):
            fn(i)
        times = []
        for i in range(repeats):
            t0 = time.perf_counter()
            fn(warmup + i)
            times.append(time.perf_counter() - t0)
        return float(statistics.median(times))
    run = _graphed(fn, device, warmup, variants) if cuda_graph else None
    if run is None:
        run = fn
        for i in range(warmup):
            fn(i)
    torch.cuda.synchronize(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for i in range(repeats):
        starts[i].record()
        run(warmup + i)
        ends[i].record()
    torch.cuda.synchronize(device)
    return float(statistics.median(s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)))


def _graphed(
    fn: Callable[[int], object], device: torch.device, warmup: int, variants: int
) -> Callable[[int], object] | None:
    """``fn`` replayed from CUDA graphs (one per variant), warmed up; None if capture fails."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):  # warm-up outside capture, on a side stream (torch's recipe)
            for i in range(max(warmup, 1)):
                fn(i)
        torch.cuda.current_stream(device).wait_stream(side)
        graphs = []
        for v in range(max(1, variants)):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn(v)
            graphs.append(g)
    except RuntimeError as exc:
        torch.cuda.synchronize(device)
        warnings.warn(f"CUDA graph capture failed, timing eagerly: {exc}", RuntimeWarning, stacklevel=3)
        return None
    for i in range(warmup):
        graphs[i % len(graphs)].replay()
    return lambda i: graphs[i % len(graphs)].replay()
