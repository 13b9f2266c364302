"""Phases 2 and 3 of an iteration: swapped-out requests come back, then waiting ones are
admitted, head of line first, while budget, ``max_num_seqs`` and blocks allow (the first
that does not fit stops admission). Both run only if phase 1 preempted nobody.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.core.block import KVBlock
from kvsim.core.outcome import EventKind, KvEvent
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler.base import SchedulerBase, Step
from kvsim.core.transferred import allocate_transferred


class AdmissionPhase(SchedulerBase):
    """Phases 2 and 3: resuming swapped requests, admitting waiting ones."""

    _next_run_seq: int

    def _resume_swapped(self, step: Step) -> None:
        """Phase 2: swapped-out requests come back first (their KV is in the swap space)."""
        kv = self.kv
        while self.swapped and step.budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.swapped[0]
            num_new = kv.fit_chunk(req, self._chunk(req.num_tokens - req.num_computed_tokens, step))
            if not num_new or not kv.allocate_slots(req, num_new):
                break
            self.swapped.popleft()
            self.swap.release(req.swapped_blocks)
            step.swap_in_blocks += req.swapped_blocks
            step.events.append(KvEvent(EventKind.SWAP_IN, req.request_id, req.swapped_blocks))
            req.swapped_blocks = 0
            self._start(req, num_new, step)

    def _admit_waiting(self, step: Step, now: float) -> None:
        """Phase 3: waiting requests (new, or preempted for recompute), head of line first."""
        queue = self.queue
        while step.budget > 0 and len(self.running) < self.max_num_seqs:
            req = queue.peek()
            if req is None or not self._try_admit(req, step, now):
                break

    def _try_admit(self, req: Request, step: Step, now: float) -> bool:
        """Admit the waiting queue's head if budget and blocks allow."""
        kv = self.kv
        bs = kv.block_size
        if req.kv_transferred:  # KV computed on a prefill replica: just room for it
            num_new = self._chunk(req.num_tokens - req.num_computed_tokens, step)
            if not self._whole_sequence_fits(req, ()) or not allocate_transferred(kv, req, num_new):
                return False
            self.queue.pop()
            req.kv_transferred = False
            req.metrics.decode_scheduled_s = now
            self._start(req, num_new, step)
            return True
        hits = kv.get_computed_blocks(req)
        num_hit_tokens = len(hits) * bs
        num_loaded = kv.offload_hits(req, len(hits))
        num_new = req.num_tokens - num_hit_tokens - num_loaded * bs
        thr = step.long_prefill_threshold
        if thr and num_new > thr:
            num_new = thr
        if not self.chunked_prefill and num_new > step.budget:
            return False  # without chunking the (capped) prompt must fit this step's budget
        num_new = kv.fit_chunk(req, min(num_new, step.budget), len(hits) + num_loaded)
        if not num_new or not self._whole_sequence_fits(req, hits):
            return False
        if not self.allocator.reserve(req) or not kv.allocate_slots(req, num_new, hits, num_loaded):
            return False
        self.queue.pop()
        self._count_admission(req, num_hit_tokens, num_loaded, step, now)
        req.num_computed_tokens = num_hit_tokens + num_loaded * bs
        self._start(req, num_new, step)
        return True

    def _whole_sequence_fits(self, req: Request, hits: Sequence[KVBlock | None]) -> bool:
        """Whether the free blocks hold the request's whole sequence so far, not just its first
        chunk (vLLM 0.32's admission gate, ``scheduler_reserve_full_isl``, on by default): a
        long prompt is not admitted to be preempted chunks later. Hit blocks that are free
        count against the free blocks, since taking them pulls them out of the free queue."""
        kv = self.kv
        num_tokens = req.num_tokens if self.max_model_len is None else min(req.num_tokens, self.max_model_len)
        needed = max(kv.max_blocks_needed(num_tokens) - len(req.blocks) - len(hits), 0)
        needed += sum(1 for b in hits if b is not None and b.ref_cnt == 0)
        return needed <= self.pool.num_free_blocks

    def _count_admission(
        self, req: Request, num_hit_tokens: int, num_loaded: int, step: Step, now: float
    ) -> None:
        stats, metrics = self.stats, req.metrics
        if not self.kv.enable_caching:
            if not metrics.num_preemptions:
                metrics.first_scheduled_s = now
            return  # no lookup, nothing counted (vLLM records no prefix-cache stats then)
        if num_loaded:
            loaded_tokens = num_loaded * self.kv.block_size
            step.loaded_blocks += num_loaded
            stats.offload_hits_tokens += loaded_tokens
            metrics.offload_hits_tokens += loaded_tokens
            step.events.append(KvEvent(EventKind.OFFLOAD_LOAD, req.request_id, num_loaded))
        missed = self.kv.evicted_misses(req, num_hit_tokens // self.kv.block_size + num_loaded)
        if missed:
            metrics.evicted_miss_tokens += missed * self.kv.block_size
        if metrics.num_preemptions:
            stats.recompute_queries_tokens += req.num_tokens
            stats.recompute_hits_tokens += num_hit_tokens
            metrics.recompute_hits_tokens += num_hit_tokens
        else:
            stats.prefix_cache_queries_tokens += req.num_tokens
            stats.prefix_cache_hits_tokens += num_hit_tokens
            metrics.prefix_cache_hits_tokens = num_hit_tokens
            metrics.first_scheduled_s = now

    def _start(self, req: Request, num_new: int, step: Step) -> None:
        """The one admission epilogue: ``req`` runs, computing ``num_new`` tokens now."""
        self.num_tokens_stored += req.num_computed_tokens
        req.status = Status.RUNNING
        req.run_seq = self._next_run_seq
        self._next_run_seq += 1
        self.explicit[req] = None
        self.running.append(req)
        step.scheduled[req] = num_new
        step.budget -= num_new

    def _reject_unschedulable(self, step: Step, now: float) -> None:
        """Nothing runs and the head of the queue still cannot start: it never will (no block
        will be freed until something runs). Reject it, with the reason, and try the next."""
        while len(self.queue) and not step.scheduled:
            req = self.queue.pop()
            needed = self.kv.max_blocks_needed(req.num_tokens)
            step.events.append(self._reject(req, needed, "unschedulable"))
            step.rejected.append(req)
            if self.beams:
                self.beams.remove(req)
            self._admit_waiting(step, now)
