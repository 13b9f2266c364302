"""Cluster-scale benchmark: does a cluster cost more per request than one replica?

    python benchmarks/cluster_scale.py --runs 3                       # 1 x 100k vs 64 x 100k
    python benchmarks/cluster_scale.py --runs 1 --replicas 1000 --requests 1000000 --no-single

Each run is a fresh process (``--child``) that builds the requests of the speed benchmark
(`benchmarks/simulate.py`: Azure 2023 conversation lengths, Poisson arrivals, Llama-2-7B
on A100-80GB), scaled so that every replica sees the single-replica load (6.45 req/s
each), simulates them behind the prefix-aware router reading its KV-event index, and
prints its simulation time, wall time and peak memory (max RSS). Single-replica and
cluster runs are interleaved; the report gives medians and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(replicas: int, requests: int, router: str, view: str) -> None:
    t0 = time.perf_counter()
    sys.path.insert(0, str(HERE))
    from simulate import azure_requests

    import kvsim

    scenario = kvsim.load_scenario(
        HERE / "azure_conv_10k.yaml",
        [
            f"workload.num_requests={requests}",
            f"replicas.0.count={replicas}",
            f"router.kind={router}",
            f"router.view.cache={view}",
        ],
    )
    reqs = azure_requests(requests, scenario.workload.arrival.rate_per_s * replicas, scenario.seed)
    t1, c1 = time.perf_counter(), time.process_time()
    result = kvsim.run(scenario, requests=reqs)
    t2, c2 = time.perf_counter(), time.process_time()
    s = result.summary
    out = {
        "replicas": replicas,
        "requests": requests,
        "router": router,
        "view": view,
        "simulate_s": t2 - t1,
        "simulate_cpu_s": c2 - c1,
        "wall_s": t2 - t0,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "iterations": s["num_iterations"],
        "finished": s["num_finished"],
        "sim_time_s": s["sim_time_s"],
        "prefix_cache_hit_rate": s["prefix_cache_hit_rate"],
    }
    print(json.dumps(out))


def measure(replicas: int, requests: int, router: str, view: str) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--replicas",
        str(replicas),
        "--requests",
        str(requests),
        "--router",
        router,
        "--view",
        view,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    result: dict[str, float] = json.loads(out)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--router", default="prefix_aware")
    ap.add_argument("--view", default="events", choices=["events", "exact"])
    ap.add_argument("--no-single", action="store_true", help="skip the one-replica runs")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.replicas, args.requests, args.router, args.view)
        return
    from peers import precompile  # benchmarks/ is this script's folder

    precompile()
    single: list[dict[str, float]] = []
    cluster: list[dict[str, float]] = []
    for i in range(args.runs):
        if not args.no_single:
            single.append(measure(1, args.requests, args.router, args.view))
            print(f"run {i + 1} single : {json.dumps(single[-1])}", flush=True)
        cluster.append(measure(args.replicas, args.requests, args.router, args.view))
        print(f"run {i + 1} cluster: {json.dumps(cluster[-1])}", flush=True)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    c_sim, c_cpu, c_wall = med(cluster, "simulate_s"), med(cluster, "simulate_cpu_s"), med(cluster, "wall_s")
    c_rss = max(r["peak_rss_gib"] for r in cluster)
    print(
        f"{args.replicas} replicas x {args.requests} requests: simulate {c_sim:.1f} s (CPU {c_cpu:.1f} s), "
        f"wall {c_wall:.1f} s, peak RSS {c_rss:.2f} GiB, {cluster[0]['iterations']} iterations "
        f"(median of {len(cluster)})"
    )
    if single:
        s_sim, s_cpu, s_wall = med(single, "simulate_s"), med(single, "simulate_cpu_s"), med(single, "wall_s")
        print(
            f"1 replica x {args.requests} requests: simulate {s_sim:.1f} s (CPU {s_cpu:.1f} s), "
            f"wall {s_wall:.1f} s, {single[0]['iterations']} iterations (median of {len(single)})"
        )
        print(
            f"ratio cluster / single: simulate {c_sim / s_sim:.2f}x, CPU {c_cpu / s_cpu:.2f}x, "
            f"wall {c_wall / s_wall:.2f}x, iterations {cluster[0]['iterations'] / single[0]['iterations']:.2f}x"
        )


if __name__ == "__main__":
    main()
