"""A measurement aid, not part of kvsim: vLLM 0.32's behaviours patched into kvsim's core.

    .venv/bin/python -m kvsim.validation.prototype --fixes all         # 309/309 identical
    .venv/bin/python -m kvsim.validation.prototype --fixes isl,head    # what two fixes buy
    .venv/bin/python -m kvsim.validation.prototype --fixes all --drop-each

It monkeypatches `kvsim.core` (within `patched`, restored afterwards) with the
differences the fixtures show, each switchable, and compares with the recorded fixtures,
so each fix's effect is measured before the core is changed. Its ``schedule`` is a
reduced copy of `kvsim.core.scheduler.Scheduler.schedule` (recompute preemption,
paged allocation, no offload / swap / sliding window / disaggregation, no statistics);
it is valid for the harness's workloads only. Delete it once the core follows vLLM.

    head       freed blocks without a hash (all blocks with caching off) go to the head of
               the free queue, in freeing order (vLLM block_pool.py:774-803)
    isl        a waiting request is admitted only if its whole sequence fits in the free
               blocks (scheduler_reserve_full_isl; kv_cache_manager.py:522-538)
    lone       long_prefill_token_threshold is ignored when only one request is running
               or waiting (scheduler.py:642-649)
    nochunk    without chunked prefill the threshold caps a waiting request before the
               budget test (scheduler.py:1155-1168)
    selfbreak  a running request that preempts itself ends the running loop
               (scheduler.py:842-848)
    mml        prompts >= max_model_len are rejected; longer outputs are cut at
               max_model_len instead of rejecting the request (input_processor.py:574-600,
               sched/utils.py:114-119, scheduler.py:715-720)
    dupe       evicting the block a hash points to promotes the earliest duplicate
               (block_pool.py:62-127); no fixture depends on it
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvsim.core import block_pool as bp
from kvsim.core import scheduler as sc
from kvsim.core.request_state import Request, Status
from kvsim.validation import compare, fixtures, kvsim_side

ALL_FIXES = ("head", "isl", "lone", "nochunk", "selfbreak", "mml", "dupe")


def _free_blocks(fixes: set[str], orig: Any) -> Any:
    def free_blocks(self: bp.BlockPool, ordered_blocks: Iterable[bp.KVBlock]) -> None:
        if "head" not in fixes or type(self.free_queue) is not bp.LruFreeQueue:
            return orig(self, ordered_blocks)
        fq = self.free_queue
        first: list[bp.KVBlock] = []
        last: list[bp.KVBlock] = []
        for b in ordered_blocks:
            b.ref_cnt -= 1
            assert b.ref_cnt >= 0
            if b.ref_cnt == 0:
                (last if b.block_hash is not None and self.enable_caching else first).append(b)
        for b in reversed(first):  # first[0] ends at the head
            head = fq._head
            nxt = head.next
            assert nxt is not None
            head.next, b.prev, b.next, nxt.prev = b, head, nxt, b
            fq.num_free_blocks += 1
        for b in last:
            fq.append(b)
            self.num_cached_free += 1
        return None

    return free_blocks


def _evict(fixes: set[str], orig: Any) -> Any:
    def evict(self: bp.BlockPool, block: bp.KVBlock, *, write_back: bool = True) -> None:
        h = block.block_hash
        dupes = self._dupes.get(h) if h is not None else None
        if "dupe" in fixes and dupes and self.cached.get(h) is block:  # type: ignore[arg-type]
            self.cached[h] = dupes.pop(0)  # type: ignore[index]
            if not dupes:
                del self._dupes[h]  # type: ignore[arg-type]
            block.block_hash = None
            block.num_hits = 0
            self.num_cached_free -= 1
            self.num_evicted += 1
            return None
        return orig(self, block, write_back=write_back)

    return evict


def _schedule(fixes: set[str]) -> Any:
    def schedule(self: sc.Scheduler, now: float) -> sc.SchedulerOutput:
        kv, bs = self.kv, self.block_size
        budget = self.max_num_batched_tokens
        scheduled: dict[Request, int] = {}
        running = self.running
        num_preempted = 0
        threshold = self.long_prefill_threshold
        if "lone" in fixes and len(running) + len(self._waiting_fifo) + len(self._waiting_heap) <= 1:
            threshold = 0

        def cap(n: int) -> int:
            return threshold if threshold and n > threshold else n

        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            num_new = min(cap(req.num_tokens - req.num_computed_tokens), budget)
            if "mml" in fixes and self.max_model_len:
                num_new = min(num_new, self.max_model_len - req.num_computed_tokens - 1)
            ok = True
            while not kv.allocate_slots(req, num_new):
                victim = self._pick_victim()
                running.pop(running.index(victim) if self.priority_policy else len(running) - 1)
                if victim in scheduled:
                    budget += scheduled.pop(victim)
                    i -= 1
                self._preempt(victim)
                num_preempted += 1
                if victim is req:
                    ok = False
                    break
            if not ok:
                if "selfbreak" in fixes:
                    break
                continue
            scheduled[req] = num_new
            budget -= num_new
            i += 1
        if not num_preempted:
            while budget > 0 and len(running) < self.max_num_seqs:
                req = self._peek_waiting()
                if req is None:
                    break
                hits = kv.get_computed_blocks(req)
                num_hit = len(hits) * bs
                num_new = req.num_tokens - num_hit
                if "nochunk" in fixes:
                    num_new = cap(num_new)
                    if not self.chunked_prefill and num_new > budget:
                        break
                else:
                    if not self.chunked_prefill and num_new > budget:
                        break
                    num_new = cap(num_new)
                num_new = min(num_new, budget)
                if "isl" in fixes:
                    need = -(-req.num_tokens // bs) - len(hits) + sum(1 for b in hits if b.ref_cnt == 0)
                    if need > self.pool.num_free_blocks:
                        break
                if not kv.allocate_slots(req, num_new, hits, 0):
                    break
                self._pop_waiting()
                req.num_computed_tokens = num_hit
                req.status = Status.RUNNING
                running.append(req)
                scheduled[req] = num_new
                budget -= num_new
        return sc.SchedulerOutput(
            tokens=scheduled,
            batch=None,  # type: ignore[arg-type]
            num_preempted=num_preempted,
            num_scheduled_tokens=self.max_num_batched_tokens - budget,
        )

    return schedule


def _update(fixes: set[str]) -> Any:
    def update(self: sc.Scheduler, out: sc.SchedulerOutput, t_end: float) -> None:
        mml = self.max_model_len if "mml" in fixes else None
        for req, n in out.tokens.items():
            req.num_computed_tokens += n
            if req.num_computed_tokens < req.num_tokens:
                continue
            req.num_output_tokens += 1
            req.num_tokens = req.num_computed_tokens + 1
            if req.num_output_tokens == req.target_output_tokens or (mml and req.num_tokens >= mml):
                req.status = Status.FINISHED
                self.kv.free(req)
                self.finished.append(req)
        self.running = [r for r in self.running if r.status is Status.RUNNING]

    return update


def _add_request(fixes: set[str], orig: Any) -> Any:
    def add_request(self: sc.Scheduler, req: Request) -> bool:
        if "mml" in fixes and self.max_model_len:
            if req.prompt_tokens >= self.max_model_len:
                req.status = Status.REJECTED
                return False
            self._push_waiting(req)
            return True
        return orig(self, req)

    return add_request


@contextmanager
def patched(fixes: Iterable[str]) -> Iterator[None]:
    """kvsim's core with ``fixes`` (names from `ALL_FIXES`) patched in."""
    fx = set(fixes)
    unknown = fx - set(ALL_FIXES)
    if unknown:
        raise ValueError(f"unknown fixes {sorted(unknown)}; known: {ALL_FIXES}")
    saved = {
        (bp.BlockPool, "free_blocks"): bp.BlockPool.free_blocks,
        (bp.BlockPool, "_evict"): bp.BlockPool._evict,
        (sc.Scheduler, "schedule"): sc.Scheduler.schedule,
        (sc.Scheduler, "update"): sc.Scheduler.update,
        (sc.Scheduler, "add_request"): sc.Scheduler.add_request,
    }
    bp.BlockPool.free_blocks = _free_blocks(fx, saved[(bp.BlockPool, "free_blocks")])  # type: ignore[method-assign]
    bp.BlockPool._evict = _evict(fx, saved[(bp.BlockPool, "_evict")])  # type: ignore[method-assign]
    sc.Scheduler.schedule = _schedule(fx)  # type: ignore[method-assign]
    sc.Scheduler.update = _update(fx)  # type: ignore[method-assign]
    sc.Scheduler.add_request = _add_request(fx, saved[(sc.Scheduler, "add_request")])  # type: ignore[method-assign]
    try:
        yield
    finally:
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)


def measure(fixes: Iterable[str], fxs: list[fixtures.Fixture]) -> dict[str, Any]:
    with patched(fixes):
        comps = [
            compare.compare_records(
                f.workload.name, f.record, kvsim_side.replay(f.workload), group=f.workload.group
            )
            for f in fxs
        ]
    return compare.totals(comps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure kvsim with vLLM 0.32's behaviours patched in.")
    ap.add_argument(
        "--fixes", default="all", help=f"Comma-separated from {','.join(ALL_FIXES)}, or all / none."
    )
    ap.add_argument("--drop-each", action="store_true", help="Also measure the set without each fix in turn.")
    ap.add_argument(
        "--fixtures", default=str(Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "vllm")
    )
    args = ap.parse_args(argv)
    chosen = (
        list(ALL_FIXES)
        if args.fixes == "all"
        else []
        if args.fixes == "none"
        else [f for f in args.fixes.split(",") if f]
    )
    fxs = fixtures.load_fixture_dir(args.fixtures)
    t = measure(chosen, fxs)
    print(f"fixes {','.join(chosen) or 'none'}:")
    print(compare.format_totals(t))
    if args.drop_each:
        print()
        for f in chosen:
            rest = [x for x in chosen if x != f]
            t = measure(rest, fxs)
            print(f"without {f:<10} {t['workloads_identical']}/{t['workloads']} workloads identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
