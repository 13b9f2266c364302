"""What a run will cost, from the scenario alone, before anything is built.

`estimate_work` counts the engine requests (prompts x parallel samples x beams; a trace's
rows), the KV blocks of every pool and the token work, and from them the memory a run
needs. `check_work` refuses a scenario whose estimate is beyond ``sim.max_requests`` or
``sim.max_memory_gib`` with the numbers and the way out (raise the knob, or ``--force``);
`kvsim.run`, `kvsim validate` and the dashboard call it before simulating, so that
``num_requests: 1e9`` or 10,000 replicas are refused in well under a second instead of
allocating gigabytes first.

The memory model is measured, not guessed: about 10 KiB per request (its state, block
table and hash chain, and its rows in the result tables) and about 120 bytes per KV block
object (kvsim 0.2 on CPython 3.11; `tests/test_estimate.py` checks the order of magnitude
against a real run).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kvsim.errors import ScenarioError
from kvsim.inputs import open_input
from kvsim.limits import MAX_TRACE_BYTES, MAX_TRACE_LINES
from kvsim.scenario.resolved import Plan
from kvsim.workload.config import (
    BenchServeWorkload,
    EmpiricalLength,
    FixedLength,
    LengthConfig,
    LognormalLength,
    MixtureWorkload,
    SyntheticWorkload,
    TraceWorkload,
    UniformLength,
    ZipfLength,
)
from kvsim.workload.traces import check_trace_file

#: Bytes of one request over a whole run, result tables included (measured with tracemalloc:
#: 9.5-10.6 KiB on the default scenario at 2k-8k requests; 5.7 KiB without shared prefixes).
BYTES_PER_REQUEST = 10 * 1024
#: Bytes of one KV block object and its share of the pool's index (measured: 121 bytes).
BYTES_PER_BLOCK = 128
#: Fixed cost of one replica (its scheduler, cost model, SimPy process, recorder columns).
BYTES_PER_REPLICA = 64 * 1024
#: Mean output length assumed where a distribution's mean is not known up front.
DEFAULT_MEAN_TOKENS = 256
GIB = 1024**3


@dataclass(frozen=True)
class WorkEstimate:
    """Sizes of one run, estimated before it starts."""

    num_requests: int
    num_replicas: int
    num_kv_blocks: int
    output_tokens: float  # expected output tokens of all requests
    memory_bytes: float

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    def describe(self) -> str:
        replicas = "replica" if self.num_replicas == 1 else "replicas"
        return (
            f"{self.num_requests:,} requests, {self.num_replicas:,} {replicas}, "
            f"{self.num_kv_blocks:,} KV blocks, ~{self.output_tokens:,.0f} output tokens, "
            f"~{self.memory_gib:,.2f} GiB of memory"
        )


def mean_tokens(cfg: LengthConfig) -> float:
    """The mean of a length distribution, as far as the config tells (clips included)."""
    if isinstance(cfg, FixedLength):
        return float(cfg.tokens)
    if isinstance(cfg, UniformLength):
        return (cfg.min_tokens + cfg.max_tokens) / 2
    if isinstance(cfg, LognormalLength):
        mean = max(cfg.mean_tokens, cfg.min_tokens)
        return min(mean, cfg.max_tokens) if cfg.max_tokens is not None else mean
    if isinstance(cfg, ZipfLength):
        return float(cfg.max_tokens)  # an upper bound: the tail is heavy
    assert isinstance(cfg, EmpiricalLength)
    return float(DEFAULT_MEAN_TOKENS)


def _count_trace_rows(cfg: TraceWorkload, base_dir: Path | None) -> int:
    """Rows of a trace file (lines; at most ``max_requests``): a cheap upper bound.

    Only a regular file of at most `MAX_TRACE_BYTES` is counted, and only up to the
    lines the loader would read: a FIFO or ``/dev/zero`` as ``path`` never ends, so it is
    refused here with the loader's `TraceError`. A missing file counts 0 rows (the loader
    reports it when the run reads the trace).
    """
    path = Path(cfg.path)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not os.path.lexists(path):
        return 0
    check_trace_file(path)  # a TraceError unless a regular file within MAX_TRACE_BYTES
    stop = MAX_TRACE_LINES + 1 if cfg.max_requests is None else min(cfg.max_requests, MAX_TRACE_LINES + 1)
    rows = 0
    try:
        with open_input(path, MAX_TRACE_BYTES) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                rows += chunk.count(b"\n")
                if rows >= stop or f.tell() > MAX_TRACE_BYTES:
                    break
    except (OSError, ValueError):  # gone or swapped since the check: the loader reports it
        rows = 0
    return min(rows, cfg.max_requests) if cfg.max_requests is not None else rows


def _requests_and_output(workload: object, base_dir: Path | None) -> tuple[int, float]:
    """Requests a workload sends and their mean output length (a mixture: its components')."""
    if isinstance(workload, BenchServeWorkload):
        low, high = workload.output_range
        return workload.total_requests, (low + high) / 2
    if isinstance(workload, SyntheticWorkload):
        n = workload.num_requests * workload.parallel_samples * workload.beam_width
        return n, mean_tokens(workload.output_tokens)
    if isinstance(workload, TraceWorkload):
        return _count_trace_rows(workload, base_dir), float(DEFAULT_MEAN_TOKENS)
    if isinstance(workload, MixtureWorkload):
        parts = [_requests_and_output(c, base_dir) for c in workload.components]
        total = sum(n for n, _ in parts)
        return total, (sum(n * m for n, m in parts) / total if total else float(DEFAULT_MEAN_TOKENS))
    # A kind registered in kvsim.registry.WORKLOAD_KINDS: its config's num_requests, if it says.
    num_requests = getattr(workload, "num_requests", 0)
    return (num_requests if isinstance(num_requests, int) else 0), float(DEFAULT_MEAN_TOKENS)


def estimate_work(
    plan: Plan, *, num_requests: int | None = None, base_dir: Path | None = None
) -> WorkEstimate:
    """The estimate for ``plan``; ``num_requests`` replaces the workload's count (custom requests)."""
    output_mean = float(DEFAULT_MEAN_TOKENS)
    if num_requests is None:
        num_requests, output_mean = _requests_and_output(plan.scenario.workload, base_dir)
    num_replicas = sum(len(g.replica_names) for g in plan.groups)
    num_blocks = sum(g.kv.num_blocks * len(g.replica_names) for g in plan.groups)
    memory = (
        num_requests * BYTES_PER_REQUEST + num_blocks * BYTES_PER_BLOCK + num_replicas * BYTES_PER_REPLICA
    )
    return WorkEstimate(num_requests, num_replicas, num_blocks, num_requests * output_mean, float(memory))


def check_work(estimate: WorkEstimate, plan: Plan, source: str = "<scenario>") -> None:
    """Raise `ScenarioError` if the estimate exceeds the scenario's ``sim.max_*`` limits."""
    sim = plan.scenario.sim
    problems: list[tuple[str, str]] = []
    if estimate.num_requests > sim.max_requests:
        problems.append(
            (
                "sim.max_requests",
                f"the run would simulate {estimate.num_requests:,} requests, more than "
                f"sim.max_requests ({sim.max_requests:,}); raise sim.max_requests or pass --force",
            )
        )
    if estimate.memory_gib > sim.max_memory_gib:
        problems.append(
            (
                "sim.max_memory_gib",
                f"the run would need about {estimate.memory_gib:,.1f} GiB ({estimate.describe()}), "
                f"more than sim.max_memory_gib ({sim.max_memory_gib:g}); shrink the scenario, raise "
                "sim.max_memory_gib or pass --force",
            )
        )
    if problems:
        raise ScenarioError(source, problems)


__all__ = ["WorkEstimate", "check_work", "estimate_work", "mean_tokens"]
