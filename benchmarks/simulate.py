"""One benchmark run as a whole process: load, simulate, write results (what users time).

    python benchmarks/simulate.py --requests 10000 --out /tmp/bench-out
    python benchmarks/simulate.py --requests 100000 --replicas 64 --blocks 7434 --out /tmp/o

Lengths are resampled (with a pinned seed) from the Azure 2023 conversation trace in
../shared/traces/azure, capped so that prompt + output <= 4,096 tokens; arrivals are
Poisson at the scenario's rate per replica (6.45 req/s each), routed round-robin.
``--blocks`` fixes the pool (vLLM's num_gpu_blocks, null block included).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

T0 = time.perf_counter()

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import kvsim  # noqa: E402
from kvsim.request import RequestSpec, Segment  # noqa: E402
from kvsim.results.io import save_result  # noqa: E402

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent.parent / "shared" / "traces" / "azure" / "AzureLLMInferenceTrace_conv.csv"
MAX_TOKENS = 4096


def azure_lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, output, Poisson arrival gaps at rate 1) for ``n`` requests, pinned by ``seed``."""
    trace = pd.read_csv(TRACE, usecols=["ContextTokens", "GeneratedTokens"])
    prompt = trace["ContextTokens"].to_numpy(dtype=np.int64).clip(1, MAX_TOKENS - 1)
    output = trace["GeneratedTokens"].to_numpy(dtype=np.int64).clip(1, None)
    output = np.minimum(output, MAX_TOKENS - prompt)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(trace), size=n)
    gaps = rng.exponential(1.0, size=n)
    return prompt[idx], output[idx], gaps


def azure_requests(n: int, rate: float, seed: int) -> list[RequestSpec]:
    prompt, output, gaps = azure_lengths(n, seed)
    arrivals = np.cumsum(gaps / rate)
    return [
        RequestSpec(
            request_id=i,
            arrival_s=float(arrivals[i]),
            prompt=(Segment(i, int(prompt[i])),),
            output_tokens=int(output[i]),
        )
        for i in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=None, help="num_gpu_blocks_override (null block included)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-fast-forward", action="store_true")
    args = ap.parse_args()
    overrides = [
        f"workload.num_requests={args.requests}",
        f"replicas.0.count={args.replicas}",
        f"sim.fast_forward={'false' if args.no_fast_forward else 'true'}",
    ]
    if args.blocks is not None:
        overrides.append(f"replicas.0.engine.num_gpu_blocks_override={args.blocks}")
    scenario = kvsim.load_scenario(HERE / "azure_conv_10k.yaml", overrides)
    rate = scenario.workload.arrival.rate_per_s * args.replicas
    reqs = azure_requests(args.requests, rate, scenario.seed)
    t1 = time.perf_counter()
    result = kvsim.run(scenario, requests=reqs, force=True)
    t2 = time.perf_counter()
    save_result(result, args.out)
    t3 = time.perf_counter()
    s = result.summary
    print(
        f"requests={args.requests} replicas={args.replicas} iterations={s['num_iterations']} "
        f"finished={s['num_finished']} preemptions={s['num_preemptions']} "
        f"setup_s={t1 - T0:.3f} simulate_s={t2 - t1:.3f} write_s={t3 - t2:.3f} total_in_process_s={t3 - T0:.3f}"
    )


if __name__ == "__main__":
    main()
