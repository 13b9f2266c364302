"""Workloads: turning a scenario's ``workload`` section into requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvsim.request import RequestSpec
from kvsim.workload.config import SyntheticWorkload, WorkloadConfig
from kvsim.workload.synthetic import generate_synthetic


def generate_requests(
    cfg: WorkloadConfig, rng: np.random.Generator, *, base_dir: Path | None = None
) -> list[RequestSpec]:
    """All requests of a workload, sorted by arrival time (ties: by request id).

    ``base_dir`` resolves relative trace paths (the scenario file's folder).
    """
    if isinstance(cfg, SyntheticWorkload):
        return generate_synthetic(cfg, rng)
    raise TypeError(f"unsupported workload kind {cfg.kind!r}")


__all__ = ["generate_requests"]
