"""kvsim's speed benchmark: whole-process wall time, median of several runs.

    python benchmarks/run.py [--runs 5] [--scale 100000]

Each run is a fresh process (`benchmarks/simulate.py`): imports, scenario loading, request
generation from the Azure 2023 conversation trace, simulation and writing the result
folder, as a user would time `kvsim run`. Each line gives the wall time and the CPU time
the process used (user + system), and the first and last lines the machine's CPU count and
load average: figures are comparable only at a similar load (on a shared 2-core machine at
load average 4.3 the median went from 2.1 s to 7.0 s of wall time, and the CPU time from
about 2 s to 4.7 s: shared caches and cores slow the process itself too). With --scale it also times a run with that many
requests and reports the ratio to the 10,000-request median (linear cost: 10x requests
should take about 10x time). Needs ../shared/traces beside the repository.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine() -> str:
    """CPU count, processor and load averages (1, 5, 15 min): what the figures depend on."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), load average {load}"


def wall_time(num_requests: int, extra: list[str]) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            str(HERE / "simulate.py"),
            "--requests",
            str(num_requests),
            "--out",
            f"{tmp}/out",
        ]
        t0, cpu0 = time.perf_counter(), _children_cpu_s()
        out = subprocess.run([*cmd, *extra], check=True, capture_output=True, text=True).stdout.strip()
        cpu = _children_cpu_s() - cpu0
        return time.perf_counter() - t0, f"CPU {cpu:.3f} s; {out}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--scale", type=int, default=0, help="also time one run with this many requests")
    ap.add_argument("--no-fast-forward", action="store_true", help="step every iteration (for comparison)")
    args = ap.parse_args()
    extra = ["--no-fast-forward"] if args.no_fast_forward else []
    print(f"machine: {machine()}", flush=True)
    times = []
    for i in range(args.runs):
        t, line = wall_time(args.requests, extra)
        times.append(t)
        print(f"run {i + 1}: {t:.3f} s  ({line})", flush=True)
    med = statistics.median(times)
    print(
        f"median of {args.runs} runs, {args.requests} requests: {med:.3f} s (min {min(times):.3f}, max {max(times):.3f})"
    )
    print(f"machine after: {machine()}")
    if args.scale:
        t, line = wall_time(args.scale, extra)
        print(f"{args.scale} requests: {t:.3f} s ({line}); ratio to the median above: {t / med:.2f}x")


if __name__ == "__main__":
    main()
