"""`kvsim plan` on the Azure 2023 conversation trace, timed as a user times it: whole processes.

    python benchmarks/plan_azure.py                      # every case, one process each
    python benchmarks/plan_azure.py --cases real,8x      # some of them

Each case is one ``kvsim plan`` process (imports, reading the trace, every run, the table)
over three GPU types, TP 1/2/4/8 and two ``max_num_batched_tokens`` settings, two worker
processes. It prints the wall time, the load average before and after (other work on the
machine slows a run down; compare figures taken at a similar load), and the answer line.
The figures in docs/planning.md are this script's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = [
    "plan", "scenarios/azure_conversation.yaml", "--slo", "ttft_p99_s=2", "--slo", "tpot_p99_s=0.1",
    "--gpus", "h100-sxm,h200,b200", "--tp", "1,2,4,8", "--max-num-batched-tokens", "2048,8192",
    "--set", "router.kind=least_loaded", "--jobs", "2",
]  # fmt: skip
CASES: dict[str, list[str]] = {
    "real": [],
    "8x": ["--set", "workload.time_scale=8"],
    "8x-no-early-stop": ["--set", "workload.time_scale=8", "--no-early-stop"],
    "real-front": ["--search", "front"],
    "8x-front": ["--set", "workload.time_scale=8", "--search", "front"],
    "8x-llama-3.1-8b": ["--set", "workload.time_scale=8", "--set", "model=llama-3.1-8b"],
    "8x-llama-3.1-8b-front": [
        "--set",
        "workload.time_scale=8",
        "--set",
        "model=llama-3.1-8b",
        "--search",
        "front",
    ],
}


def run_case(name: str) -> dict[str, object]:
    args = [sys.executable, "-m", "kvsim", *BASE, *CASES[name]]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    lines = proc.stdout.splitlines()
    answer = next((line for line in lines if line.startswith(("Cheapest", "No configuration"))), "")
    summary = next((line for line in reversed(lines) if "configurations (" in line), "")
    return {"case": name, "wall_s": wall, "load_before": load, "load_after": os.getloadavg()[0],
            "exit": proc.returncode, "answer": answer, "summary": summary}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = parser.parse_args()
    print("kvsim " + " ".join(BASE))
    for name in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if name not in CASES:
            parser.error(f"--cases: unknown case {name!r}")
        r = run_case(name)
        print(
            f"{r['case']}: {r['wall_s']:.1f} s wall (load {r['load_before']:.2f} -> {r['load_after']:.2f}), "
            f"exit {r['exit']}\n  {r['answer']}\n  {r['summary']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
