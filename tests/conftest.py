"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.request import RequestSpec, Segment

#: Summary keys every summary.json must hold (the headline figures users read first).
REQUIRED_SUMMARY_KEYS = (
    "num_requests",
    "num_finished",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "e2e_p99_s",
    "throughput_tokens_per_s",
    "prefix_cache_hit_rate",
    "num_preemptions",
    "kv_usage_peak",
)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"


def spec(
    rid: int, prompt: int | list[tuple[int, int]], output: int, arrival: float = 0.0, **kw
) -> RequestSpec:
    """A request; ``prompt`` is a token count (unique content) or (content_id, tokens) pairs."""
    segs = [Segment(1000 + rid, prompt)] if isinstance(prompt, int) else [Segment(c, n) for c, n in prompt]
    return RequestSpec(request_id=rid, arrival_s=arrival, prompt=tuple(segs), output_tokens=output, **kw)


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"real traces not found at {TRACES} (they live in ../shared beside the repo)")
    return TRACES
