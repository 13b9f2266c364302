"""What every phase of the scheduler shares: its state, the step being decided, and the
moves more than one phase makes (preempting, a decode at a block boundary, finishing).

The phases are mixins of `SchedulerBase` (`kvsim.core.scheduler.running`,
`kvsim.core.scheduler.admission`, `kvsim.core.scheduler.update`); `Scheduler` composes
them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from kvsim.core.allocators import KvAllocator
from kvsim.core.beam_search import BeamGroups
from kvsim.core.block_pool import BlockPool
from kvsim.core.cohort import DecodeCohort
from kvsim.core.kv_manager import FullAttentionManager
from kvsim.core.outcome import CacheStats, EventKind, KvEvent, SpecDecodeStats
from kvsim.core.queues import RequestQueue
from kvsim.core.request_state import NEVER_PRIVATE, Request, Status
from kvsim.core.speculative import Speculator
from kvsim.kv.swap import SwapSpace

#: ``max_model_len`` of a scheduler without one.
NO_LIMIT = 1 << 62

#: A running request's place in the running list (sort key).
run_seq = attrgetter("run_seq")


@dataclass(slots=True)
class Step:
    """What `schedule` accumulates while it decides one iteration."""

    budget: int
    long_prefill_threshold: int = 0  # this step's cap on one request's prefill chunk (0: none)
    scheduled: dict[Request, int] = field(default_factory=dict)
    events: list[KvEvent] = field(default_factory=list)
    rejected: list[Request] = field(default_factory=list)  # found unschedulable this step
    num_preempted: int = 0
    num_fast_decodes: int = 0  # decodes taken by the hot path (marked 0 in `scheduled`)
    num_lazy: int = 0  # of which advanced by the decode cohort (not in `scheduled` at all)
    fast_decode_ctx: int = 0
    swap_out_blocks: int = 0
    swap_in_blocks: int = 0
    loaded_blocks: int = 0

    def take_back(self, victim: Request, attended: Callable[[int], int]) -> None:
        """Unschedule ``victim`` (scheduled earlier in this iteration, now preempted): its
        tokens go back to the budget, and a hot-path decode (marked 0) leaves the counts
        (its context as the KV manager counts it: ``attended``, the identity for full
        attention)."""
        n = self.scheduled.pop(victim)
        if n == 0:
            self.budget += 1
            self.num_fast_decodes -= 1
            self.fast_decode_ctx -= attended(victim.num_computed_tokens + 1)
        else:
            self.budget += n


class SchedulerBase:
    """The scheduler's state (built by `kvsim.core.scheduler.Scheduler`) and shared moves."""

    pool: BlockPool
    kv: FullAttentionManager
    queue: RequestQueue
    allocator: KvAllocator
    swap: SwapSpace
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    long_prefill_threshold: int
    kv_cache_enabled: bool
    swap_mode: bool
    max_model_len: int | None
    hands_off: bool
    num_tokens_stored: int
    running: list[Request]
    swapped: deque[Request]
    stats: CacheStats
    speculator: Speculator | None
    spec_stats: SpecDecodeStats
    beams: BeamGroups
    can_fork: bool
    cohort: DecodeCohort | None
    explicit: dict[Request, None]
    windowed: bool

    def materialize(self) -> None:
        """Make every running request's counters exact (the cohort's members included)."""
        if self.cohort is None:
            return
        for req in self.cohort.release_all(self.running):
            self.explicit[req] = None
            self._catch_up_private_block(req)

    @staticmethod
    def _reject(req: Request, num_blocks: int, reason: str) -> KvEvent:
        """Mark ``req`` rejected; ``reason`` is one of kvsim.results.result.REJECT_REASONS."""
        req.status = Status.REJECTED
        return KvEvent(EventKind.REJECT, req.request_id, num_blocks, reason)

    @staticmethod
    def _chunk(num_new: int, step: Step) -> int:
        """``num_new`` capped by the step's prefill threshold and its remaining budget."""
        thr = step.long_prefill_threshold
        if thr and num_new > thr:
            num_new = thr
        return min(num_new, step.budget)

    def _preempt(self, victim: Request, step: Step) -> None:
        """Take ``victim``'s blocks: to the swap space if it fits there, else recompute."""
        kv = self.kv
        self.explicit.pop(victim, None)
        victim.metrics.num_preemptions += 1
        victim.num_spec_tokens = 0  # drafted for a step it will not get
        step.num_preempted += 1
        if self.swap_mode:
            need = min(-(-victim.num_computed_tokens // kv.block_size), kv.num_held_blocks(victim))
            if self.swap.try_store(need):
                if self.pool.offload is not None:  # a tier holds its blocks and their swapped-in
                    kv.publish_private_blocks(victim)  # copies once, by hash, not twice
                self.num_tokens_stored -= victim.num_computed_tokens
                kv.free(victim)
                victim.swapped_blocks = need
                victim.metrics.num_swaps += 1
                victim.status = Status.SWAPPED
                self.swapped.append(victim)
                step.swap_out_blocks += need
                step.events.append(KvEvent(EventKind.SWAP_OUT, victim.request_id, need))
                return
        # Recompute: drop everything; the cached blocks may still be hit on re-admission.
        held = kv.num_held_blocks(victim)
        kv.publish_private_blocks(victim)
        kv.free(victim)
        self.num_tokens_stored -= victim.num_computed_tokens
        victim.num_computed_tokens = 0
        victim.status = Status.WAITING
        self.queue.push_preempted(victim)
        step.events.append(KvEvent(EventKind.PREEMPT_RECOMPUTE, victim.request_id, held))

    def _decode_at_block_boundary(self, req: Request, nc: int) -> bool:
        """The hot path's decode whose token fills its block or starts a new one: what
        allocate_slots and cache_full_blocks would do for it, without their general
        arithmetic. False (nothing changed) when it needs a block and none is free."""
        kv, pool = self.kv, self.pool
        bs = kv.block_size
        room = len(req.blocks) * bs
        if room <= nc:  # its slot starts a new block
            if room < nc or not len(pool.free_queue):
                return False
            req.blocks.append(pool.get_one_block())
            if not kv.enable_caching:
                return True
        # Register the blocks full once this token is in (the one it fills, or, when the
        # decode cohort let it wait, the private block the previous token filled).
        full = (nc + 1) // bs
        start = req.num_cached_blocks
        if full == start + 1 and req.private_from_token <= start * bs:
            # One private block: cache_full_blocks' private case, without its arithmetic.
            block = req.blocks[start]
            if block is not None:
                pool.mark_private(block)
            req.num_cached_blocks = full
        elif full > start:
            kv.cache_full_blocks(req, full)
        return True

    def _catch_up_private_block(self, req: Request, scheduled_tokens: int = 0) -> None:
        """Register the private block a former member's allocation step was to register
        (`DecodeCohort.refile`), now that it has left the cohort; with ``scheduled_tokens``
        also the one the tokens scheduled for it in this iteration fill."""
        kv = self.kv
        full = (req.num_computed_tokens + scheduled_tokens) // kv.block_size
        if kv.enable_caching and full > req.num_cached_blocks:
            kv.cache_full_blocks(req, full)

    def finish(self, req: Request, t_end: float) -> None:
        """``req`` produced its last token at ``t_end``: free its blocks (call `prune_running`)."""
        self.num_tokens_stored -= req.num_computed_tokens
        self.explicit.pop(req, None)
        req.status = Status.FINISHED
        req.metrics.finish_s = t_end
        if req.published_from != NEVER_PRIVATE:
            self.kv.retire_published_hashes(req)
        self.kv.free_finished(req, t_end)
        if self.speculator is not None:
            self.speculator.release(req)
        if self.beams:
            self.beams.remove(req)

    def prune_running(self, left: Sequence[Request] | None = None) -> None:
        """Drop requests that stopped running from the running list (order kept): those in
        ``left``, found by their `Request.run_seq` (the list is in that order), or all."""
        running = self.running
        if left is None or 8 * len(left) > len(running):
            self.running = [r for r in running if r.status is Status.RUNNING]
            return
        for req in left:
            i = bisect_left(running, req.run_seq, key=run_seq)
            assert running[i] is req, "the running list is in run_seq order"
            del running[i]
