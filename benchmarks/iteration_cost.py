"""Per-iteration cost of the scheduler against batch size: one stepped iteration's
``schedule`` + ``update`` with N running requests, for N from 1 to 256.

    python benchmarks/iteration_cost.py                 # both kinds of iteration
    python benchmarks/iteration_cost.py --sizes 1,16,256 --repeat 7

Two kinds of iteration, each with N requests decoding (block size 16, caching on, a pool
large enough that nothing is preempted or evicted):

- ``decode``: every running request decodes one token (what a fast-forwarded decode run
  replaces; stepping pays it when fast-forward is off or a run cannot start);
- ``decode+prefill``: the same plus one new request's 512-token prompt admitted and
  prefilled in the iteration (the common stepped iteration of a loaded replica: an arrival
  while the batch decodes).

The pool's blocks are all made before the timing (a pool makes each block the first time it
hands it out, once per run: a cost of the run's first pass through the pool, not of the
iteration). Each is timed twice: with the decode cohort (``lazy``, what the engine uses: plain
decoders are advanced lazily, `kvsim.core.cohort`) and without it (``eager``: every running
request is walked every iteration).

Reported: the median over ``--repeat`` timings of the mean microseconds per iteration
(over 200 iterations each), and that figure divided by N (the cost per running request).
The per-request figure is flat when the iteration is O(batch): the work grows with the
decodes, not with the events; the per-iteration figure is flat when it is O(changes).
Timings are noisy on shared machines: compare sizes within one run.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.request import RequestSpec, Segment
from kvsim.scenario.schema import EngineConfig

ITERATIONS = 200
BLOCK_SIZE = 16


def _request(rid: int, prompt: int, output: int) -> Request:
    spec = RequestSpec(
        request_id=rid, arrival_s=0.0, prompt=(Segment(10_000 + rid, prompt),), output_tokens=output
    )
    return Request(spec)


def time_iterations(num_running: int, with_prefill: bool, lazy: bool) -> float:
    """Mean seconds of one stepped iteration with ``num_running`` decoding requests."""
    cfg = EngineConfig(block_size=BLOCK_SIZE, max_num_seqs=num_running + 1, max_num_batched_tokens=8192)
    blocks = (num_running + ITERATIONS) * 64 + 1024
    pool = BlockPool(blocks, enable_caching=True)
    # Every block made before the timing, as after a run's first pass through its pool: the
    # pool makes a block the first time it hands it out (a few hundred nanoseconds: more than
    # unlinking it), and this pool is never used up, so every prompt here would pay it.
    # Trees before the lazy pool (c95d1ed) made them all when the pool was built.
    make_all = getattr(pool, "all_blocks", None)
    if make_all is not None:
        make_all()
    sched = Scheduler(cfg, pool, num_swap_blocks=0)
    if lazy:
        sched.enable_cohort()
    for rid in range(num_running):  # prefill them all, then they decode
        sched.add_request(_request(rid, 100, 10_000))
    t = 0.0
    while any(r.num_output_tokens == 0 for r in sched.running) or len(sched.running) < num_running:
        sched.update(sched.schedule(t), t + 0.01)
        t += 0.01
    rid = num_running
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(ITERATIONS):
            if with_prefill:
                sched.add_request(_request(rid, 512, 1))  # done at its first token: N stays N
                rid += 1
            sched.update(sched.schedule(t), t + 0.01)
            t += 0.01
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed / ITERATIONS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4,16,64,128,256", help="comma-separated running-batch sizes")
    ap.add_argument("--repeat", type=int, default=5, help="timings per size (median reported)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'kind':>15}  {'running':>7}  {'lazy us/it':>10}  {'eager us/it':>11}  {'eager us/request':>16}")
    for with_prefill in (False, True):
        kind = "decode+prefill" if with_prefill else "decode"
        for n in sizes:
            lazy, eager = [], []
            for _ in range(args.repeat):  # interleaved
                lazy.append(time_iterations(n, with_prefill, lazy=True))
                eager.append(time_iterations(n, with_prefill, lazy=False))
            us_lazy, us_eager = 1e6 * statistics.median(lazy), 1e6 * statistics.median(eager)
            print(
                f"{kind:>15}  {n:>7}  {us_lazy:>10.1f}  {us_eager:>11.1f}  {us_eager / n:>16.2f}", flush=True
            )


if __name__ == "__main__":
    main()
