"""Fast-forward: many identical pure-decode iterations advanced at once, exactly as stepping.

When every running request decodes, nobody was preempted, swapped or admitted, nothing can
change the batch until a request finishes or the pool runs out of free blocks (admission
cannot open up meanwhile: free blocks only shrink, and max_num_seqs and the budget stay as
they are). A new arrival ends the stretch too, unless it could not be admitted before the
stretch ends anyway (FCFS behind a blocked head, or a full batch); the engine handles that
(`Scheduler.arrivals_wait_for_now`). Such a stretch is a
`DecodeRun`: the engine prices all its iterations in one vectorised cost-model call, waits
once, then commits the iterations that happened with the block allocations, cache
registrations and evictions stepping would have made, in the same order.

    step:        0        1        2        3   ...   k-1
    request a:   decode   decode  [new block] decode
    request b:   decode  [new block] decode   decode
                 ^ scheduled normally; 1.. are the run's
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kvsim.core.outcome import SchedulerOutput, StepOutcome
from kvsim.core.request_state import Request, advance_decoder
from kvsim.core.scheduler import NO_LIMIT, Scheduler


@dataclass(slots=True)
class DecodeRun:
    """A stretch of ``num_steps`` pure-decode iterations with an unchanged batch.

    Step 0 is the already-scheduled iteration; ``alloc_steps[i]`` / ``alloc_reqs[i]`` list
    the later block allocations in the order stepping would make them. The first
    ``num_allocated`` of them are done (`advance` can do them early, so that someone
    looking into the pool mid-run sees what stepping would show); ``new_blocks[j]`` /
    ``evicted[j]`` count what step j allocated and evicted.
    """

    scheduler: Scheduler
    num_steps: int
    reqs: list[Request]
    base_context_tokens: int
    alloc_steps: list[int] = field(default_factory=list)
    alloc_reqs: list[Request] = field(default_factory=list)
    num_allocated: int = 0
    new_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    evicted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Start time of each step, for a pool whose retention priorities expire (set by the engine).
    step_starts: np.ndarray | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.reqs)

    def context_tokens(self) -> np.ndarray:
        """``decode_context_tokens`` of each iteration of the run."""
        return self.base_context_tokens + len(self.reqs) * np.arange(self.num_steps, dtype=np.int64)

    def advance(self, num_started: int, on_step: Callable[[int], None] | None = None) -> None:
        """Make the block allocations of the run's first ``num_started`` iterations
        (``on_step(j)`` after those of each step j that made some)."""
        pool = self.scheduler.pool
        steps, reqs = self.alloc_steps, self.alloc_reqs
        starts = self.step_starts if pool.timed else None
        i = self.num_allocated
        while i < len(steps) and steps[i] < num_started:
            j = steps[i]
            if starts is not None:  # as stepping: the allocation happens when step j is scheduled
                pool.set_time(float(starts[j]))
            before = pool.num_evicted
            reqs[i].blocks.extend(pool.get_new_blocks(1))
            self.new_blocks[j] += 1
            self.evicted[j] += pool.num_evicted - before
            i += 1
            if on_step is not None and (i == len(steps) or steps[i] != j):
                self.num_allocated = i
                on_step(j)
        self.num_allocated = i

    def commit(
        self, num_steps: int, ends: np.ndarray, durations: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, StepOutcome]:
        """Commit the first ``num_steps`` iterations (step 0 included), ending at ``ends``.

        Returns the cumulative (new blocks, evicted blocks) after each step's allocations,
        for the engine's records, and the requests that finished.
        """
        sched = self.scheduler
        kv, bs = sched.kv, sched.kv.block_size
        self.advance(num_steps)
        new_blocks, evicted = self.new_blocks[:num_steps], self.evicted[:num_steps]
        caching = kv.enable_caching
        t_last = float(ends[num_steps - 1])
        # The gaps stepping sees are differences of end times (t_end - last_token_s), which
        # can differ from the durations in the last bit: take them the same way.
        rest_max = float(np.diff(ends[:num_steps]).max()) if num_steps > 1 else -1.0
        t_first = float(ends[0])
        limit = sched.max_model_len or NO_LIMIT
        outcome = StepOutcome()
        sched.pool.set_time(t_last)
        sched.num_tokens_stored += len(self.reqs) * num_steps
        for req in self.reqs:
            if caching:
                num_full = (req.num_computed_tokens + num_steps) // bs
                if num_full > req.num_cached_blocks:
                    kv.cache_full_blocks(req, num_full)
            gap = t_first - req.last_token_s
            if rest_max > gap:
                gap = rest_max
            advance_decoder(req, req.num_computed_tokens + num_steps, t_last, gap)
            if req.num_output_tokens == req.target_output_tokens or req.num_tokens >= limit:
                sched.finish(req, t_last)
                outcome.finished.append(req)
        if outcome:
            sched.prune_running(outcome.finished)
        return np.cumsum(new_blocks), np.cumsum(evicted), outcome


def plan_decode_run(sched: Scheduler, out: SchedulerOutput, max_steps: int) -> DecodeRun | None:
    """If ``out`` starts a stretch of identical pure-decode iterations, describe it."""
    if not out.all_running_decode or not sched.kv.supports_decode_fast_path or max_steps < 2:
        return None
    if sched.speculator is not None or sched.beams:
        # Speculating, each step's drafts come from a draw; beams fork at steps of their own:
        # both are stepped, never fast-forwarded.
        return None
    reqs = sched.running
    # Steps each request has left: its remaining output, or up to max_model_len (vLLM's cap).
    limit = sched.max_model_len or NO_LIMIT
    k = min(
        min(min(r.target_output_tokens - r.num_output_tokens, limit - r.num_tokens) for r in reqs), max_steps
    )
    if k < 2:
        return None
    bs = sched.kv.block_size
    # Blocks needed at step j >= 1: a request with c computed tokens before step 0 and room
    # for `capacity` tokens (step 0's slot included) needs a new block at step j when c + j
    # reaches the room it has: at capacity - c, then every block_size steps. Paged, that is
    # when c + j is a multiple of the block size; a contiguous reservation may never need one.
    events: list[tuple[int, int]] = []
    for idx, r in enumerate(reqs):
        j = len(r.blocks) * bs - r.num_computed_tokens
        while j < k:
            events.append((j, idx))
            j += bs
    free = sched.pool.num_free_blocks
    events.sort()
    if len(events) > free:
        k = events[free][0]  # the first allocation that cannot be served starts a normal step
        if k < 2:
            return None
        events = events[:free]
    return DecodeRun(
        scheduler=sched,
        num_steps=k,
        reqs=list(reqs),
        base_context_tokens=out.batch.decode_context_tokens,
        alloc_steps=[j for j, _ in events],
        alloc_reqs=[reqs[i] for _, i in events],
        new_blocks=np.zeros(k, dtype=np.int64),
        evicted=np.zeros(k, dtype=np.int64),
    )


@dataclass(slots=True)
class CohortRun:
    """A decode run of a scheduler whose running requests are all in its decode cohort
    (`kvsim.core.cohort`): committing it costs what happens in it (the members reaching a
    block boundary), not its steps times its requests.

    Step 0 is the already-scheduled iteration; each later step j is scheduled when the
    run reaches it (`advance`, ``num_advanced`` so far), the previous step having ended
    then. Members finish only in the run's last step (``finishing``, once it is
    scheduled) and its allocations fit the free blocks.
    """

    scheduler: Scheduler
    num_steps: int
    num_seqs: int
    base_context_tokens: int
    new_blocks: np.ndarray
    evicted: np.ndarray
    step_starts: np.ndarray | None = None  # set by the engine once priced
    ends: np.ndarray | None = None
    num_advanced: int = 1
    finishing: list[Request] = field(default_factory=list)

    def context_tokens(self) -> np.ndarray:
        """``decode_context_tokens`` of each iteration of the run."""
        return self.base_context_tokens + self.num_seqs * np.arange(self.num_steps, dtype=np.int64)

    def advance(self, num_started: int, on_step: Callable[[int], None] | None = None) -> None:
        """Schedule the run's steps up to ``num_started`` (exclusive), as stepping would
        have when each started (``on_step(j)`` after a step j that changed the pool)."""
        sched = self.scheduler
        co, pool = sched.cohort, sched.pool
        assert co is not None and self.ends is not None and self.step_starts is not None
        ends, starts = self.ends, self.step_starts
        timed = pool.timed
        for j in range(self.num_advanced, num_started):
            co.end_iteration(float(ends[j - 1]))
            if co.step in co.due:
                if timed:
                    pool.set_time(float(starts[j]))
                before = pool.num_evicted
                num_new, self.finishing = sched.schedule_cohort_only()
                self.new_blocks[j] += num_new
                self.evicted[j] += pool.num_evicted - before
                if on_step is not None:
                    self.num_advanced = j + 1
                    on_step(j)
        if num_started > self.num_advanced:
            self.num_advanced = num_started

    def commit(
        self, num_steps: int, ends: np.ndarray, durations: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, StepOutcome]:
        """End the first ``num_steps`` iterations (step 0 included) at ``ends``, as
        `DecodeRun.commit`."""
        sched = self.scheduler
        assert sched.cohort is not None
        self.advance(num_steps)
        t_last = float(ends[num_steps - 1])
        sched.cohort.end_iteration(t_last)
        sched.pool.set_time(t_last)
        sched.num_tokens_stored += self.num_seqs * num_steps
        outcome = sched.finish_decoders(self.finishing, t_last) if self.finishing else StepOutcome()
        new_blocks, evicted = self.new_blocks[:num_steps], self.evicted[:num_steps]
        return np.cumsum(new_blocks), np.cumsum(evicted), outcome


def plan_cohort_run(sched: Scheduler, out: SchedulerOutput, max_steps: int) -> CohortRun | None:
    """If ``out`` starts a stretch of pure-decode iterations of the cohort alone, describe it."""
    co = sched.cohort
    assert co is not None
    if not out.all_running_decode or out.tokens or max_steps < 2:
        return None
    s = co.step
    k = max_steps
    first = co.first_finish()
    if first is not None and first - s + 1 < k:
        k = first - s + 1  # the run ends with the first iteration in which a member finishes
    if k < 2:
        return None
    k = 1 + co.steps_until_blocks_run_out(s + 1, k - 1, sched.pool.num_free_blocks)
    if k < 2:
        return None
    return CohortRun(
        scheduler=sched,
        num_steps=k,
        num_seqs=len(co),
        base_context_tokens=out.batch.decode_context_tokens,
        new_blocks=np.zeros(k, dtype=np.int64),
        evicted=np.zeros(k, dtype=np.int64),
    )
