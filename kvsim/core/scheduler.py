"""Continuous-batching scheduler of one replica, after vLLM v1's scheduler.

Each iteration gets one token budget (``max_num_batched_tokens``) and three phases:

    1. running   in order, each request catches its computed tokens up with its tokens
                 (one for a decode, a chunk for a prefill); one that cannot get blocks
                 preempts the queue policy's victim until it fits or is the victim itself
    2. swapped   only if nobody was preempted: swapped-out requests come back first
    3. waiting   then waiting requests are admitted, head of line first, while budget,
                 max_num_seqs and blocks allow (the first that does not fit stops admission)

The scheduler is a plain object built from parts, each in its own module: a waiting
queue per policy (`kvsim.core.queues`), an allocator per ``kv_allocation``
(`kvsim.core.allocators`), a KV manager per attention kind (`kvsim.core.kv_manager`),
and the swap space (`kvsim.kv.swap`). `schedule` decides an iteration and returns it
with the events it caused; `update` applies its outcome at the iteration's end and
returns the requests that left. Runs of identical pure-decode iterations are advanced at
once by `kvsim.core.decode_run`; with `enable_cohort` (the engine's default), plain
decoders are advanced lazily by a `kvsim.core.cohort.DecodeCohort`, so that an iteration
looks only at the requests whose state changes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from kvsim.core.allocators import PagedAllocator, make_allocator
from kvsim.core.beam_search import BeamGroups
from kvsim.core.block import KVBlock
from kvsim.core.block_pool import BlockPool
from kvsim.core.cohort import DecodeCohort
from kvsim.core.kv_manager import FullAttentionManager, make_kv_manager
from kvsim.core.outcome import CacheStats, EventKind, KvEvent, SchedulerOutput, SpecDecodeStats, StepOutcome
from kvsim.core.queues import RequestQueue
from kvsim.core.request_state import NEVER_PRIVATE, Request, Status
from kvsim.core.speculative import Speculator
from kvsim.cost.base import Batch
from kvsim.kv.swap import SwapSpace
from kvsim.registry import SCHEDULING_POLICIES
from kvsim.scenario.schema import EngineConfig

#: ``max_model_len`` of a scheduler without one.
_NO_LIMIT = 1 << 62


#: A running request's place in the running list (sort key).
_run_seq = attrgetter("run_seq")


@dataclass(slots=True)
class _Step:
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


def _take_back(victim: Request, scheduled: dict[Request, int]) -> tuple[int, int]:
    """Unschedule ``victim`` (scheduled earlier in this iteration, now preempted): the tokens
    it gives back to the budget, and its context if it was a hot-path decode (marked 0),
    else 0."""
    n = scheduled.pop(victim)
    return (1, victim.num_computed_tokens + 1) if n == 0 else (n, 0)


class Scheduler:
    """Waiting/running/swapped queues and the per-iteration scheduling decision."""

    def __init__(
        self,
        config: EngineConfig,
        pool: BlockPool,
        *,
        sliding_window: int | None = None,
        num_sink_tokens: int = 0,
        kv_manager: FullAttentionManager | None = None,
        num_swap_blocks: int = 0,
        max_model_len: int | None = None,
        role: str = "both",
        seed: int = 0,
    ) -> None:
        self.pool = pool
        self.kv = kv_manager or make_kv_manager(pool, config.block_size, sliding_window, num_sink_tokens)
        self.queue: RequestQueue = SCHEDULING_POLICIES[config.scheduling_policy]()
        self.allocator = make_allocator(config.kv_allocation, pool, config.block_size, max_model_len)
        self.swap = SwapSpace(num_swap_blocks)
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.enable_chunked_prefill
        self.long_prefill_threshold = config.long_prefill_token_threshold
        self.kv_cache_enabled = config.enable_kv_cache
        self.swap_mode = config.preemption_mode == "swap"
        self.max_model_len = max_model_len
        # Disaggregated serving: a prefill replica hands each request over after its first
        # token; a decode replica admits them with their KV already computed.
        self.hands_off = role == "prefill"
        # Tokens whose KV the running requests hold (their computed tokens), kept exactly
        # with O(1) work per iteration; shared prefix blocks count once per request.
        self.num_tokens_stored = 0
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.stats = CacheStats()
        # Speculative decoding: drafts proposed after each sampled token, verified next step.
        spec = config.speculative_config
        self.speculator = (
            None if spec is None else Speculator(spec.num_speculative_tokens, spec.acceptance(), seed)
        )
        self.spec_stats = SpecDecodeStats()
        # Beam search: beams of a group share blocks and fork copy-on-write (kvsim.core.beam_search).
        self.beams = BeamGroups(self.kv)
        self.can_fork = (
            type(self.kv) is FullAttentionManager
            and type(self.allocator) is PagedAllocator
            and self.kv_cache_enabled
            and self.speculator is None
        )
        # Decoders advanced lazily (`kvsim.core.cohort`), once `enable_cohort` is called;
        # `explicit` holds the running requests outside the cohort (order: `Request.run_seq`).
        self.cohort: DecodeCohort | None = None
        self.explicit: dict[Request, None] = {}
        self._next_run_seq = 0

    def enable_cohort(self) -> bool:
        """Advance plain decoders lazily from now on, where this engine's decode hot path
        applies (full attention, paged blocks, no speculation); returns whether it does.

        With the cohort, iterations cost what changes in them, and running requests'
        counters are exact only after `materialize` (the engine calls it when it stops);
        `SchedulerOutput.tokens` then lists the requests outside the cohort.
        """
        if self.can_fork and not self.running and self.cohort is None:
            self.cohort = DecodeCohort(self.pool, self.kv.block_size, self.max_model_len or _NO_LIMIT)
        return self.cohort is not None

    def materialize(self) -> None:
        """Make every running request's counters exact (the cohort's members included)."""
        if self.cohort is None:
            return
        for req in self.cohort.release_all(self.running):
            self.explicit[req] = None
            self._catch_up_private_block(req)

    # -- queues ----------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        """Requests waiting for admission, swapped-out ones included."""
        return len(self.queue) + len(self.swapped)

    def arrivals_wait_for_now(self) -> bool:
        """Whether no request arriving now could be admitted by the next schedule unless
        something else changes first: the batch is full, or the waiting queue keeps
        arrivals behind a head the last schedule could not admit.

        Meant for the start of a decode run (every running request decodes, nobody
        admitted): until the run ends free blocks only shrink, so the head stays blocked."""
        if len(self.running) >= self.max_num_seqs:
            return True
        return bool(len(self.queue)) and getattr(self.queue, "arrivals_queue_behind", False)

    def has_work(self) -> bool:
        return bool(self.running or self.swapped or len(self.queue))

    def add_request(self, req: Request) -> KvEvent | None:
        """Queue a new request; returns its rejection (and marks it) if it can never run.

        As in vLLM, a prompt of ``max_model_len`` tokens or more is refused, while a longer
        requested output is accepted and cut at ``max_model_len`` (`update`).
        """
        limit = self.max_model_len
        reserved = self.allocator.reserved_tokens(req)
        needed_blocks = self.kv.max_blocks_needed(reserved if limit is None else min(reserved, limit))
        # Without chunked prefill a prompt must fit one iteration's budget (vLLM refuses
        # such configurations; kvsim rejects the requests that could never start).
        too_long_prompt = not self.chunked_prefill and req.prompt_tokens > self.max_num_batched_tokens
        reason = (
            "max_model_len"
            if limit is not None and req.prompt_tokens >= limit
            else "kv_capacity"
            if needed_blocks > self.pool.num_blocks
            else "prompt_budget"
            if too_long_prompt
            else ""
        )
        if reason:
            return self._reject(req, needed_blocks, reason)
        req.status = Status.WAITING
        self.queue.push(req)
        if req.spec.beam_group is not None:
            if self.can_fork:
                self.beams.add(req)
            elif req.spec.beam_index == 0:  # a KV manager that cannot fork: beams share nothing
                self.beams.stats.num_forks_skipped += len(req.spec.beam_forks)
        return None

    @staticmethod
    def _reject(req: Request, num_blocks: int, reason: str) -> KvEvent:
        """Mark ``req`` rejected; ``reason`` is one of kvsim.result.REJECT_REASONS."""
        req.status = Status.REJECTED
        return KvEvent(EventKind.REJECT, req.request_id, num_blocks, reason)

    # -- scheduling ------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        """Decide the next iteration: which requests compute how many tokens."""
        # The cap on one request's prefill chunk stops a long prompt from starving others;
        # with nobody else running or waiting there is nobody to starve (vLLM 0.32).
        alone = len(self.running) + self.num_waiting <= 1
        step = _Step(self.max_num_batched_tokens, 0 if alone else self.long_prefill_threshold)
        self.pool.set_time(now)  # retention priorities expire by it
        evicted_before = self.pool.num_evicted
        if self.cohort is None or not self._schedule_cohort(step):
            self._schedule_running(step)
            if self.cohort is not None and not self.beams:
                self._join_cohort(step)
        if not step.num_preempted:
            self._resume_swapped(step)
            self._admit_waiting(step, now)
            if not step.scheduled and not self.running and not self.swapped and len(self.queue):
                self._reject_unschedulable(step, now)
        return self._make_output(step, self.pool.num_evicted - evicted_before)

    def _reject_unschedulable(self, step: _Step, now: float) -> None:
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

    @staticmethod
    def _chunk(num_new: int, step: _Step) -> int:
        """``num_new`` capped by the step's prefill threshold and its remaining budget."""
        thr = step.long_prefill_threshold
        if thr and num_new > thr:
            num_new = thr
        return min(num_new, step.budget)

    def _schedule_running(self, step: _Step) -> None:
        """Phase 1: every running request, in order, preempting when blocks run out.

        The hot path of the whole simulator: a decode whose slot is already allocated
        skips the allocator (what allocate_slots would do, minus the block arithmetic),
        and everything it touches is a local.
        """
        kv = self.kv
        bs = kv.block_size
        caching = kv.enable_caching
        hot_path_ok = kv.supports_decode_fast_path and self.kv_cache_enabled and self.speculator is None
        running = self.running
        scheduled = step.scheduled
        budget = step.budget
        num_fast = fast_ctx = 0
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            nc = req.num_computed_tokens
            if (
                hot_path_ok
                and req.num_tokens - nc == 1
                and req.num_output_tokens
                and (
                    (len(req.blocks) * bs > nc and (not caching or (nc + 1) % bs))
                    or self._decode_at_block_boundary(req, nc)
                )
            ):
                scheduled[req] = 0  # 0 marks a fast-path decode (one token)
                num_fast += 1
                fast_ctx += nc + 1
                budget -= 1
                i += 1
                continue
            step.budget = budget
            # The next token, or a prefill chunk; speculating, the drafts after it too.
            num_new = self._chunk(req.num_tokens - nc + req.num_spec_tokens, step)
            kv.remove_skipped_blocks(req)
            num_new = max(kv.fit_chunk(req, num_new), 1)
            preempted_itself = False
            while not kv.allocate_slots(req, num_new):
                victim = running.pop(self.queue.victim_index(running))
                if victim in scheduled:  # already scheduled this iteration: give its budget back
                    n_victim, ctx = _take_back(victim, scheduled)
                    budget += n_victim
                    if ctx:
                        num_fast -= 1
                        fast_ctx -= ctx
                    i -= 1
                self._preempt(victim, step)
                if victim is req:
                    preempted_itself = True
                    break
            if preempted_itself:
                break  # nothing left to preempt: the running phase ends here (as in vLLM)
            scheduled[req] = num_new
            budget -= num_new
            i += 1
        step.budget = budget
        step.num_fast_decodes = num_fast
        step.fast_decode_ctx = fast_ctx

    def _schedule_cohort(self, step: _Step) -> bool:
        """Phase 1 with the decode cohort: the members decode a token each, and only the
        running requests outside it and the members due now (at a block boundary, or
        finishing) are looked at, in running order. When the new blocks they need are not
        all free, a request that cannot get its blocks preempts as the step-by-step phase 1
        does (`_make_room`), in the same order. False, with the cohort emptied, when this
        iteration could run out of token budget: the step-by-step phase 1 then decides who
        gets what, exactly."""
        co = self.cohort
        assert co is not None
        if self.beams:  # beams fork at steps of their own: never lazy
            if len(co):
                self.materialize()
            return False
        s = co.step
        due = co.pop_due(s)
        todo = [*self.explicit, *due] if due else list(self.explicit)
        if len(todo) > 1:
            todo.sort(key=_run_seq)
        tokens_fit, blocks_fit = self._cohort_step_fits(todo, step)
        if not tokens_fit:
            self.materialize()
            return False
        kv, bs, caching = self.kv, self.kv.block_size, self.kv.enable_caching
        members = co.members
        scheduled = step.scheduled
        step.num_lazy = len(co)
        step.num_fast_decodes, step.fast_decode_ctx = len(co), co.context_tokens()
        step.budget -= len(co)
        for req in todo:
            if not blocks_fit and req.status is not Status.RUNNING:
                continue  # preempted earlier in this iteration
            if req in members:  # due: a block boundary, or its last token
                if not blocks_fit:
                    nc = req.num_computed_tokens + s - req.lazy_step
                    if len(req.blocks) * bs == nc and not self._make_room(req, 1, step):
                        break
                if self._serve_due(req, s):  # update finishes it: counted already, now explicit
                    self.explicit[req] = None
                    scheduled[req] = 0
                    step.num_lazy -= 1
                continue
            nc = req.num_computed_tokens
            if req.num_tokens - nc == 1 and req.num_output_tokens:
                at_boundary = not (len(req.blocks) * bs > nc and (not caching or (nc + 1) % bs))
                if at_boundary and not self._decode_at_block_boundary(req, nc):
                    if not self._make_room(req, 1, step):
                        break
                    fits = self._decode_at_block_boundary(req, nc)
                    assert fits, "room was made for it"
                step.num_fast_decodes += 1
                step.fast_decode_ctx += nc + 1
                step.budget -= 1
                if co.accepts(req):
                    co.join(req)
                    del self.explicit[req]
                    step.num_lazy += 1
                else:
                    scheduled[req] = 0
                continue
            num_new = self._chunk(req.num_tokens - nc, step)
            if not kv.allocate_slots(req, num_new):
                need = -(-(nc + num_new) // bs) - len(req.blocks)
                if not self._make_room(req, need, step):
                    break
                fits = kv.allocate_slots(req, num_new)
                assert fits, "room was made for it"
            scheduled[req] = num_new
            step.budget -= num_new
        else:
            return True
        # `req` preempted itself: as in the step-by-step phase 1, nobody after it in running
        # order runs in this iteration (with FCFS nobody is left: it was the last).
        for later in self.running[bisect_left(self.running, req.run_seq, key=_run_seq) :]:
            if later in members:
                self._undo_lazy_decode(later, step, decoded=False)
                self.explicit[later] = None
        return True

    def _make_room(self, req: Request, need: int, step: _Step) -> bool:
        """Preempt, as the step-by-step phase 1 does, until ``need`` new blocks are free for
        ``req``; False if ``req`` itself had to go. A victim scheduled earlier in this
        iteration (a cohort member always is) gives its token back."""
        co = self.cohort
        assert co is not None
        running = self.running
        while need > self.pool.num_free_blocks:
            victim = running.pop(self.queue.victim_index(running))
            if victim in co.members:
                self._undo_lazy_decode(victim, step, decoded=victim.run_seq < req.run_seq)
            elif victim in step.scheduled:
                n_victim, ctx = _take_back(victim, step.scheduled)
                step.budget += n_victim
                if ctx:
                    step.num_fast_decodes -= 1
                    step.fast_decode_ctx -= ctx
            self._preempt(victim, step)
            if victim is req:
                return False
        return True

    def _undo_lazy_decode(self, req: Request, step: _Step, *, decoded: bool) -> None:
        """Take member ``req`` out of the cohort, its counters exact, and out of this
        iteration's decodes (it is preempted, or runs after a request that preempted itself).
        ``decoded``: it comes before the request being scheduled in running order, so the
        step-by-step phase 1 has already scheduled its token, and registered the block that
        token fills, before taking it back."""
        co = self.cohort
        assert co is not None
        co.drop(req)
        self._catch_up_private_block(req, int(decoded))
        step.num_lazy -= 1
        step.num_fast_decodes -= 1
        step.fast_decode_ctx -= req.num_computed_tokens + 1
        step.budget += 1

    def _catch_up_private_block(self, req: Request, scheduled_tokens: int = 0) -> None:
        """Register the private block a former member's allocation step was to register
        (`DecodeCohort.refile`), now that it has left the cohort; with ``scheduled_tokens``
        also the one the tokens scheduled for it in this iteration fill."""
        kv = self.kv
        full = (req.num_computed_tokens + scheduled_tokens) // kv.block_size
        if kv.enable_caching and full > req.num_cached_blocks:
            kv.cache_full_blocks(req, full)

    def _join_cohort(self, step: _Step) -> None:
        """After a step-by-step phase 1: the plain decodes it scheduled join the cohort now
        (phase 1 is over: nobody else is preempted this iteration)."""
        co = self.cohort
        assert co is not None
        scheduled = step.scheduled
        for req in [r for r, n in scheduled.items() if n == 0]:
            if co.accepts(req):
                co.join(req)
                del scheduled[req]
                del self.explicit[req]
                step.num_lazy += 1

    def schedule_cohort_only(self) -> tuple[int, list[Request]]:
        """Schedule an iteration of a decode run in which only the cohort runs (everyone
        decodes, nobody else is running): the members due now get their block or register
        their full block, as `_schedule_cohort` would. Returns the blocks allocated and the
        members that sample their last token in this iteration (out of the cohort now: the
        run ends with it, `finish_decoders`). The caller knows the free blocks suffice."""
        co = self.cohort
        assert co is not None and not self.explicit
        s = co.step
        due = co.pop_due(s)
        if len(due) > 1:
            due.sort(key=_run_seq)
        free_before = self.pool.num_free_blocks
        finishing = [req for req in due if self._serve_due(req, s)]
        return free_before - self.pool.num_free_blocks, finishing

    def _serve_due(self, req: Request, s: int) -> bool:
        """A cohort member due at iteration ``s``: its block boundary handled as stepping
        handles it, then filed again; True (and out of the cohort) if it samples its last
        token in this iteration. The caller has checked that the free blocks suffice."""
        co = self.cohort
        assert co is not None
        nc = req.num_computed_tokens + s - req.lazy_step
        bs = self.kv.block_size
        if not (len(req.blocks) * bs > nc and (not self.kv.enable_caching or (nc + 1) % bs)):
            fits = self._decode_at_block_boundary(req, nc)
            assert fits, "the free blocks were checked before the iteration"
        if req.lazy_finish == s:
            co.leave(req)
            return True
        co.refile(req, nc)
        return False

    def finish_decoders(self, reqs: list[Request], t_end: float) -> StepOutcome:
        """End an iteration for decoders that sampled their last token in it (in running
        order): what `update` does for them."""
        outcome = StepOutcome()
        for req in reqs:
            nc = req.num_computed_tokens + 1
            req.num_computed_tokens = nc
            req.num_output_tokens += 1
            req.num_tokens = nc + 1
            gap = t_end - req.last_token_s
            if not gap <= req.max_itl_s:
                req.max_itl_s = gap
            req.last_token_s = t_end
            assert req.num_output_tokens == req.target_output_tokens or nc + 1 >= (
                self.max_model_len or _NO_LIMIT
            )
            self.finish(req, t_end)
            outcome.finished.append(req)
        if outcome:
            self.prune_running(outcome.finished)
        return outcome

    def _cohort_step_fits(self, todo: list[Request], step: _Step) -> tuple[bool, bool]:
        """Whether every running request gets all it asks for this iteration: (the members,
        one token each, and the others in ``todo`` within the token budget; the new blocks
        of ``todo``, members due now included, free)."""
        co = self.cohort
        assert co is not None
        bs = self.kv.block_size
        thr = step.long_prefill_threshold
        members, s = co.members, co.step
        tokens = len(co)
        blocks = 0
        for req in todo:
            if req in members:
                blocks += len(req.blocks) * bs == req.num_computed_tokens + s - req.lazy_step
                continue
            nc = req.num_computed_tokens
            n = req.num_tokens - nc
            if thr and n > thr:
                n = thr
            tokens += n
            need = -(-(nc + n) // bs) - len(req.blocks)
            if need > 0:
                blocks += need
        return tokens <= step.budget, blocks <= self.pool.num_free_blocks

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

    def _preempt(self, victim: Request, step: _Step) -> None:
        """Take ``victim``'s blocks: to the swap space if it fits there, else recompute."""
        kv = self.kv
        self.explicit.pop(victim, None)
        victim.num_preemptions += 1
        victim.num_spec_tokens = 0  # drafted for a step it will not get
        step.num_preempted += 1
        if self.swap_mode:
            need = min(-(-victim.num_computed_tokens // kv.block_size), kv.num_held_blocks(victim))
            if self.swap.try_store(need):
                self.num_tokens_stored -= victim.num_computed_tokens
                kv.free(victim)
                victim.swapped_blocks = need
                victim.num_swaps += 1
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

    def _resume_swapped(self, step: _Step) -> None:
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

    def _admit_waiting(self, step: _Step, now: float) -> None:
        """Phase 3: waiting requests (new, or preempted for recompute), head of line first."""
        queue = self.queue
        while step.budget > 0 and len(self.running) < self.max_num_seqs:
            req = queue.peek()
            if req is None or not self._try_admit(req, step, now):
                break

    def _try_admit(self, req: Request, step: _Step, now: float) -> bool:
        """Admit the waiting queue's head if budget and blocks allow."""
        kv = self.kv
        bs = kv.block_size
        if req.kv_transferred:  # KV computed on a prefill replica: just room for it
            num_new = self._chunk(req.num_tokens - req.num_computed_tokens, step)
            if not self._whole_sequence_fits(req, ()) or not kv.allocate_slots(req, num_new):
                return False
            self.queue.pop()
            req.kv_transferred = False
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
        self, req: Request, num_hit_tokens: int, num_loaded: int, step: _Step, now: float
    ) -> None:
        stats = self.stats
        if not self.kv.enable_caching:
            if not req.num_preemptions:
                req.first_scheduled_s = now
            return  # no lookup, nothing counted (vLLM records no prefix-cache stats then)
        if num_loaded:
            loaded_tokens = num_loaded * self.kv.block_size
            step.loaded_blocks += num_loaded
            stats.offload_hits_tokens += loaded_tokens
            req.offload_hits_tokens += loaded_tokens
            step.events.append(KvEvent(EventKind.OFFLOAD_LOAD, req.request_id, num_loaded))
        missed = self.kv.evicted_misses(req, num_hit_tokens // self.kv.block_size + num_loaded)
        if missed:
            req.evicted_miss_tokens += missed * self.kv.block_size
        if req.num_preemptions:
            stats.recompute_queries_tokens += req.num_tokens
            stats.recompute_hits_tokens += num_hit_tokens
            req.recompute_hits_tokens += num_hit_tokens
        else:
            stats.prefix_cache_queries_tokens += req.num_tokens
            stats.prefix_cache_hits_tokens += num_hit_tokens
            req.prefix_cache_hits_tokens = num_hit_tokens
            req.first_scheduled_s = now

    def _start(self, req: Request, num_new: int, step: _Step) -> None:
        """The one admission epilogue: ``req`` runs, computing ``num_new`` tokens now."""
        self.num_tokens_stored += req.num_computed_tokens
        req.status = Status.RUNNING
        req.run_seq = self._next_run_seq
        self._next_run_seq += 1
        self.explicit[req] = None
        self.running.append(req)
        step.scheduled[req] = num_new
        step.budget -= num_new

    def _make_output(self, step: _Step, num_evicted: int) -> SchedulerOutput:
        """Classify what was scheduled; the hot path's decodes (marked 0) are counted already."""
        kv = self.kv
        scheduled = step.scheduled
        num_decode, decode_ctx = step.num_fast_decodes, step.fast_decode_ctx
        chunks: list[tuple[int, int]] = []
        verifies: list[tuple[int, int]] = []  # speculative decoding: 1 + drafts after the context
        if num_decode - step.num_lazy != len(scheduled):  # classify what the hot path did not
            kv_cache = self.kv_cache_enabled
            for req, n in scheduled.items():
                if n == 0:
                    continue
                c = req.num_computed_tokens
                decoding = req.num_output_tokens and c == req.num_tokens - 1 and kv_cache
                if n == 1 and decoding:
                    num_decode += 1
                    decode_ctx += kv.attended_tokens(c + 1)
                elif decoding:
                    verifies.append((n, kv.attended_tokens(c)))
                elif not kv_cache:
                    chunks.append((c + n, 0))  # no KV cache: every step recomputes the sequence
                else:
                    chunks.append((n, kv.attended_tokens(c)))
        batch = Batch(
            prefill_chunks=chunks + verifies,
            num_decode_seqs=num_decode,
            decode_context_tokens=decode_ctx,
            num_verify_chunks=len(verifies),
        )
        return SchedulerOutput(
            tokens=scheduled,
            batch=batch,
            events=step.events,
            rejected=step.rejected,
            num_evicted=num_evicted,
            num_prefill_seqs=len(chunks),
            prefill_tokens=sum(q for q, _ in chunks),
            decode_tokens=num_decode + sum(q for q, _ in verifies),
            num_preempted=step.num_preempted,
            num_scheduled_tokens=self.max_num_batched_tokens - step.budget,
            num_lazy_decodes=step.num_lazy,
            offload_load_blocks=step.loaded_blocks,
            swap_out_blocks=step.swap_out_blocks,
            swap_in_blocks=step.swap_in_blocks,
            all_running_decode=(
                not chunks
                and not verifies
                and not step.num_preempted
                and not step.swap_in_blocks
                and not step.loaded_blocks
                and num_decode == len(self.running)
            ),
        )

    # -- the iteration's end -----------------------------------------------------------
    def update(self, out: SchedulerOutput, t_end: float) -> StepOutcome:
        """Apply an iteration's outcome at its end time: advance tokens, sample, finish.

        A request finishes with its last requested token, or when its tokens reach
        ``max_model_len`` (vLLM's length cap).
        """
        outcome = StepOutcome()
        self.pool.set_time(t_end)
        if self.cohort is not None:
            self.cohort.end_iteration(t_end)
        self.num_tokens_stored += out.num_scheduled_tokens
        limit = self.max_model_len or _NO_LIMIT
        spec = self.speculator
        beams = self.beams if self.beams else None  # checked once: the loop below is the hot path
        forked: list[int] = []  # beam groups that sampled a token
        for req, n in out.tokens.items():
            nc = req.num_computed_tokens + (n or 1)
            if nc > req.num_tokens:  # a verify pass: its rejected drafts' slots are rolled back
                nc -= self._settle_verify(req, n - 1)
            req.num_computed_tokens = nc
            if nc < req.num_tokens:
                continue  # a prefill chunk that does not reach the end samples nothing
            n_out = req.num_output_tokens + nc + 1 - req.num_tokens  # one, or accepted drafts + 1
            req.num_output_tokens = n_out
            req.num_tokens = nc + 1
            if spec is not None:  # the drafts the next step verifies
                req.num_spec_tokens = spec.num_drafts(req, limit)
            if beams is not None and req.spec.beam_group is not None:
                forked.append(req.spec.beam_group)
            if n_out == 1:
                req.first_token_s = req.last_token_s = t_end
                if n_out == req.target_output_tokens or nc + 1 >= limit:
                    self.finish(req, t_end)
                    outcome.finished.append(req)
                elif self.hands_off:  # first token out: send the KV to a decode replica
                    self._hand_off(req)
                    outcome.handoffs.append(req)
                continue
            gap = t_end - req.last_token_s
            if not gap <= req.max_itl_s:  # also replaces the initial NaN
                req.max_itl_s = gap
            req.last_token_s = t_end
            if n_out == req.target_output_tokens or nc + 1 >= limit:
                self.finish(req, t_end)
                outcome.finished.append(req)
        if beams is not None:
            for group in dict.fromkeys(forked):
                beams.after_step(group)
        if outcome:
            self.prune_running([*outcome.finished, *outcome.handoffs])
        return outcome

    def _settle_verify(self, req: Request, num_drafts: int) -> int:
        """Draw how many of a verify pass's drafts the target accepts; roll the rest back.

        Returns the rejected drafts, whose KV slots are given up (`rollback`).
        """
        assert self.speculator is not None, "only a speculating engine verifies drafts"
        accepted = self.speculator.accept(req, num_drafts)
        stats = self.spec_stats
        stats.num_drafts += 1
        stats.num_draft_tokens += num_drafts
        stats.num_accepted_tokens += accepted
        rejected = num_drafts - accepted
        self.num_tokens_stored -= rejected
        req.num_computed_tokens += 1 + accepted  # the last sampled token and the accepted drafts
        if type(self.allocator) is PagedAllocator:  # a contiguous reservation keeps its blocks
            self.kv.rollback(req)
        return rejected

    def _hand_off(self, req: Request) -> None:
        req.num_spec_tokens = 0  # the decode replica proposes its own drafts
        req.status = Status.TRANSFERRING
        self.explicit.pop(req, None)
        self.num_tokens_stored -= req.num_computed_tokens
        self.kv.free(req)  # freed tail first; the prompt stays cached here for later hits

    def finish(self, req: Request, t_end: float) -> None:
        """``req`` produced its last token at ``t_end``: free its blocks (call `prune_running`)."""
        self.num_tokens_stored -= req.num_computed_tokens
        self.explicit.pop(req, None)
        req.status = Status.FINISHED
        req.finish_s = t_end
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
            i = bisect_left(running, req.run_seq, key=_run_seq)
            assert running[i] is req, "the running list is in run_seq order"
            del running[i]
