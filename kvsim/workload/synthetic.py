"""Synthetic workloads: requests drawn from arrival and length distributions."""

from __future__ import annotations

import numpy as np

from kvsim.request import RequestSpec, Segment
from kvsim.workload.config import FixedLength, LengthConfig, LognormalLength, SyntheticWorkload


def sample_lengths(cfg: LengthConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` token counts (integers >= 1) from a length distribution."""
    if isinstance(cfg, FixedLength):
        return np.full(n, cfg.tokens, dtype=np.int64)
    if isinstance(cfg, LognormalLength):
        x = np.rint(rng.lognormal(cfg.mu, cfg.sigma, size=n))
        hi = cfg.max_tokens if cfg.max_tokens is not None else np.inf
        return np.clip(x, cfg.min_tokens, hi).astype(np.int64)
    raise TypeError(f"unsupported length distribution {type(cfg).__name__}")


def generate_synthetic(cfg: SyntheticWorkload, rng: np.random.Generator) -> list[RequestSpec]:
    """Requests of a synthetic workload, sorted by arrival.

    Content ids: 0 is the shared system prompt; request i's own prompt text is i + 1.
    """
    n = cfg.num_requests
    gaps = rng.exponential(1.0 / cfg.arrival.rate_per_s, size=n)
    arrivals = np.cumsum(gaps)
    prompts = sample_lengths(cfg.prompt_tokens, n, rng)
    outputs = sample_lengths(cfg.output_tokens, n, rng)
    shared = (Segment(0, cfg.shared_prefix_tokens),) if cfg.shared_prefix_tokens else ()
    return [
        RequestSpec(
            request_id=i,
            arrival_s=float(arrivals[i]),
            prompt=(*shared, Segment(i + 1, int(prompts[i]))),
            output_tokens=int(outputs[i]),
            tenant=cfg.tenant,
        )
        for i in range(n)
    ]
