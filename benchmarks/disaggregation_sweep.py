"""When does prefill/decode disaggregation pay? Goodput per prompt length, TPOT SLO and split.

    python benchmarks/disaggregation_sweep.py [--requests 600] [--jobs 2]

Base: `scenarios/disaggregation_ratio.yaml` (Qwen2.5-7B, 4 x H100, KV over fair-shared
400 Gb/s NICs). For every prompt length (lognormal mean, cv 0.5) and every way to use the
four GPUs (4 colocated; 1, 2 or 3 prefill replicas with the rest decoding), the arrival
rate climbs a ladder (x1.2 a step); each run's request table gives the SLO attainment
for several TPOT targets (TTFT target 2 s) at once. The goodput capacity of a setup is the
highest rate on the ladder up to which at least 90% of requests meet both targets
(DistServe's measure, Zhong et al., OSDI 2024). Prints a markdown table (docs/cluster.md shows it).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import kvsim

BASE = Path(__file__).resolve().parents[1] / "scenarios" / "disaggregation_ratio.yaml"
SPLITS = {
    "4 colocated": [
        "replicas.0.role=both",
        "replicas.1.role=both",
        "replicas.0.count=2",
        "replicas.1.count=2",
    ],
    "1P:3D": ["replicas.0.count=1", "replicas.1.count=3"],
    "2P:2D": ["replicas.0.count=2", "replicas.1.count=2"],
    "3P:1D": ["replicas.0.count=3", "replicas.1.count=1"],
}
#: prompt mean tokens -> the first rate of its ladder (req/s)
PROMPTS = {512: 40.0, 2048: 8.0, 8192: 2.0}
TPOT_SLOS_S = (0.010, 0.015, 0.025, 0.050)
TTFT_SLO_S = 2.0
STEPS = 16
FACTOR = 1.2
TARGET = 0.9


def attainment(prompt: int, split: str, rate: float, requests: int) -> list[float]:
    overrides = [
        *SPLITS[split],
        f"workload.prompt_tokens.mean_tokens={prompt}",
        f"workload.prompt_tokens.max_tokens={min(3 * prompt, 30000)}",
        f"workload.arrival.rate_per_s={rate}",
        f"workload.num_requests={requests}",
    ]
    q = kvsim.run(BASE, overrides=overrides).requests
    fin = q[q.finished]
    return [float(((fin.ttft_s <= TTFT_SLO_S) & ~(fin.tpot_s > slo)).sum() / len(q)) for slo in TPOT_SLOS_S]


def _point(args: tuple[int, str, float, int]) -> tuple[int, str, float, list[float]]:
    prompt, split, rate, requests = args
    return prompt, split, rate, attainment(prompt, split, rate, requests)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    points = [
        (prompt, split, round(first * FACTOR**k, 2), args.requests)
        for prompt, first in PROMPTS.items()
        for split in SPLITS
        for k in range(STEPS)
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(_point, points))
    # The capacity: the last rate before the first one that misses the target.
    best: dict[tuple[int, str, float], float] = {}
    failed: set[tuple[int, str, float]] = set()
    for prompt, split, rate, attained in sorted(results, key=lambda r: (r[0], r[1], r[2])):
        for slo, a in zip(TPOT_SLOS_S, attained, strict=True):
            key = (prompt, split, slo)
            if a < TARGET:
                failed.add(key)
            elif key not in failed:
                best[key] = rate
    head = " | ".join(f"TPOT {slo * 1000:.0f} ms" for slo in TPOT_SLOS_S)
    print(f"Goodput capacity (req/s at >= {TARGET:.0%} SLO attainment, TTFT <= {TTFT_SLO_S} s), 4 x H100:\n")
    print(f"| prompt (mean tokens) | setup | {head} |")
    print("| ---: | --- |" + " ---: |" * len(TPOT_SLOS_S))
    for prompt in PROMPTS:
        for split in SPLITS:
            cells = " | ".join(f"{best.get((prompt, split, slo), 0.0):g}" for slo in TPOT_SLOS_S)
            print(f"| {prompt:,} | {split} | {cells} |")


if __name__ == "__main__":
    main()
