"""Before / after: `simulate.py` of two checkouts, interleaved, CPU time of each process.

    git worktree add --detach /tmp/kvsim-base <commit>
    python benchmarks/compare_trees.py /tmp/kvsim-base . --requests 10000 --rounds 6
    python benchmarks/compare_trees.py /tmp/kvsim-base . --requests 100000 --replicas 64 --rounds 2

Each round runs both trees' `benchmarks/simulate.py` (the order alternates), each with its
own kvsim first on the path and its bytecode compiled first; the report is the median CPU
time (user + system) of each and the median of the per-round ratios new / base. CPU time,
not wall time: a busy machine slows both alike instead of whichever ran at the wrong moment.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def cpu_seconds(tree: Path, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as out:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cmd = [sys.executable, str(tree / "benchmarks" / "simulate.py"), "--requests", str(args.requests)]
        cmd += ["--replicas", str(args.replicas), "--blocks", str(args.blocks), "--out", f"{out}/o"]
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(tree)})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", type=Path, help="checkout measured first in even rounds")
    ap.add_argument("new", type=Path)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=7434, help="num_gpu_blocks_override (null block included)")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    trees = {"base": args.base.resolve(), "new": args.new.resolve()}
    for tree in trees.values():
        if not (tree / "benchmarks" / "simulate.py").is_file():
            ap.error(f"{tree}: not a kvsim checkout (no benchmarks/simulate.py)")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "kvsim")], check=True)
    times: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in trees if r % 2 == 0 else reversed(trees):
            times[name].append(cpu_seconds(trees[name], args))
            print(f"round {r + 1} {name}: {times[name][-1]:.3f} s", flush=True)
    base, new = statistics.median(times["base"]), statistics.median(times["new"])
    ratio = statistics.median(n / b for n, b in zip(times["new"], times["base"], strict=True))
    print(f"median CPU time: base {base:.3f} s, new {new:.3f} s; median ratio new / base {ratio:.3f}")


if __name__ == "__main__":
    main()
