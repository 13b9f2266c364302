"""Workloads: turning a scenario's ``workload`` section into requests.

workload = generate_workload(scenario.workload, rng, base_dir=Path("scenarios"))
workload.requests        # list[RequestSpec], sorted by arrival
workload.info.summary()  # {"workload_num_requests": ..., "trace_num_dropped": ...}

Each kind's generator is registered in `kvsim.registry.WORKLOAD_KINDS` with its config
class: ``generate(cfg, rng, *, base_dir) -> list[RequestSpec]``. A new kind is one more
(docs/engine.md, "Extending kvsim"); trace replays and benchmark clients also report what
they dropped and bring their client, so `generate_workload` calls those two itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from kvsim.errors import KvsimError
from kvsim.registry import WORKLOAD_KINDS
from kvsim.request import RequestSpec
from kvsim.workload.bench_serve import BenchClient, generate_bench_serve
from kvsim.workload.config import (
    BUILTIN_WORKLOAD_KINDS,
    BenchServeWorkload,
    EmpiricalLength,
    MixtureWorkload,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadConfig,
)
from kvsim.workload.mixture import generate_mixture
from kvsim.workload.synthetic import generate_synthetic
from kvsim.workload.traces import TraceReport, replay_trace, trace_lengths


@dataclass(frozen=True)
class WorkloadInfo:
    """What the workload produced, for the run summary."""

    kind: str
    num_requests: int
    num_sessions: int
    trace: TraceReport | None = None

    def summary(self) -> dict[str, Any]:
        """Flat fields for a run summary: ``workload_*`` always, ``trace_*`` for replays."""
        out: dict[str, Any] = {
            "workload_kind": self.kind,
            "workload_num_requests": self.num_requests,
            "workload_num_sessions": self.num_sessions,
        }
        if self.trace is not None:
            out.update(self.trace.summary())
        return out


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival plus what produced them.

    ``client``: a benchmark client (``bench_serve``) that decides when each request is sent
    (its requests' ``arrival_s`` are then placeholders); None: each is sent at its
    ``arrival_s``, a follow-up turn think time after its parent finishes.
    """

    requests: list[RequestSpec]
    info: WorkloadInfo
    client: BenchClient | None = None


def generate_workload(
    cfg: WorkloadConfig,
    rng: np.random.Generator,
    *,
    base_dir: Path | None = None,
    seed: int | None = None,
) -> Workload:
    """All requests of a workload (sorted by arrival, ties by request id) with their `WorkloadInfo`.

    ``base_dir`` resolves relative trace paths (the scenario file's folder). ``seed`` is the
    scenario's seed: a benchmark client draws from generators seeded with it, as vLLM's
    client does with --seed, unless its workload names a seed (None: one drawn from ``rng``).
    """
    if isinstance(cfg, BenchServeWorkload):
        if seed is None:
            seed = int(rng.integers(2**32))
        specs, client = generate_bench_serve(cfg, seed)
        return Workload(specs, WorkloadInfo(cfg.kind, len(specs), len(specs)), client)
    report: TraceReport | None = None
    if isinstance(cfg, TraceWorkload):
        requests, report = replay_trace(cfg, base_dir=base_dir)
    else:
        requests = WORKLOAD_KINDS[cfg.kind](cfg, rng, base_dir=base_dir)
        if cfg.kind not in BUILTIN_WORKLOAD_KINDS:  # a registered kind's requests, in any order
            requests = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    sessions = sum(1 for r in requests if r.parent_id is None)
    return Workload(requests, WorkloadInfo(cfg.kind, len(requests), sessions, report))


def _trace_requests(
    cfg: TraceWorkload, rng: np.random.Generator, *, base_dir: Path | None = None
) -> list[RequestSpec]:
    return replay_trace(cfg, base_dir=base_dir)[0]


def _bench_serve_requests(
    cfg: BenchServeWorkload, rng: np.random.Generator, *, base_dir: Path | None = None
) -> list[RequestSpec]:
    """The client's requests without the client (their arrival times are placeholders)."""
    return generate_bench_serve(cfg, int(rng.integers(2**32)))[0]


WORKLOAD_KINDS.register("synthetic", config=SyntheticWorkload)(generate_synthetic)
WORKLOAD_KINDS.register("trace", config=TraceWorkload)(_trace_requests)
WORKLOAD_KINDS.register("mixture", config=MixtureWorkload)(generate_mixture)
WORKLOAD_KINDS.register("bench_serve", config=BenchServeWorkload)(_bench_serve_requests)


def generate_requests(
    cfg: WorkloadConfig, rng: np.random.Generator, *, base_dir: Path | None = None
) -> list[RequestSpec]:
    """All requests of a workload, sorted by arrival time (ties: by request id).

    ``base_dir`` resolves relative trace paths (the scenario file's folder).
    """
    return generate_workload(cfg, rng, base_dir=base_dir).requests


def workload_file_problems(
    cfg: WorkloadConfig, base_dir: Path | None = None, where: str = "workload"
) -> list[tuple[str, str]]:
    """Read every file a workload names, as the run will, and return ``(field_path, rule)``
    problems: a trace (replayed as `replay_trace` does, so a trace with no usable row is one),
    and the trace of every empirical length distribution anywhere in the workload.

    `kvsim validate` calls it, so that a file the run would refuse is refused there too.
    """
    problems: list[tuple[str, str]] = []

    def visit(node: Any, path: str) -> None:
        if isinstance(node, TraceWorkload):
            try:
                replay_trace(node, base_dir=base_dir)
            except KvsimError as exc:
                problems.append((f"{path}.path", str(exc)))
        elif isinstance(node, EmpiricalLength):
            file = Path(node.path)
            if not file.is_absolute() and base_dir is not None:
                file = base_dir / file
            try:
                trace_lengths(file, node.format, node.field, columns=node.columns)
            except KvsimError as exc:
                problems.append((f"{path}.path", str(exc)))
        elif isinstance(node, BaseModel):
            for name in type(node).model_fields:
                visit(getattr(node, name), f"{path}.{name}")
        elif isinstance(node, list | tuple):
            for i, item in enumerate(node):
                visit(item, f"{path}.{i}")

    visit(cfg, where)
    return problems


def resolve_workload_paths(data: dict[str, Any], base_dir: str | Path) -> dict[str, Any]:
    """Copy of plain scenario data with relative trace paths made absolute against ``base_dir``.

    Call it on a scenario file's data before validation so that the scenario stays valid
    wherever it is run from (a sweep point, a saved result). Covers ``workload.path`` and
    the ``path`` of empirical length distributions anywhere in the workload.
    """

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: fix(v) for k, v in node.items()}
            if out.get("kind") in ("trace", "empirical") and isinstance(out.get("path"), str):
                try:
                    p = Path(out["path"]).expanduser()
                    out["path"] = str(p if p.is_absolute() else (Path(base_dir) / p).resolve())
                except (OSError, ValueError, RuntimeError):
                    pass  # a path no file can have (a NUL byte, a loop): reading it reports it
            return out
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    data = dict(data)
    if "workload" in data:
        data["workload"] = fix(data["workload"])
    return data


__all__ = [
    "BenchClient",
    "Workload",
    "WorkloadInfo",
    "generate_requests",
    "generate_workload",
    "resolve_workload_paths",
    "workload_file_problems",
]
