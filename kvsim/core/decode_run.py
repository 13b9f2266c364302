"""Fast-forward: many identical pure-decode iterations advanced at once, exactly as stepping.

When every running request decodes, nobody was preempted, swapped or admitted, nothing can
change the batch until a request finishes or the pool runs out of free blocks (admission
cannot open up meanwhile: free blocks only shrink, and max_num_seqs and the budget stay as
they are). A new arrival ends the stretch too, unless it could not be admitted before the
stretch ends anyway (FCFS behind a blocked head, or a full batch); the engine handles that
(`Scheduler.arrivals_wait_for_now`). Such a stretch is a `CohortRun` of the decode cohort
(`kvsim.core.cohort`), which then holds every running request: the engine prices all its
iterations in one vectorised cost-model call, waits once, then commits the iterations that
happened with the block allocations, cache registrations and evictions stepping would have
made, in the same order (`advance` makes them early, step by step, for someone looking).

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
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.core.windowed_cohort import WindowedCohort


@dataclass(slots=True)
class CohortRun:
    """A decode run of a scheduler whose running requests are all in its decode cohort
    (`kvsim.core.cohort`): committing it costs what happens in it (the members reaching a
    block boundary, or finishing), not its steps times its requests.

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
    # A window's cohort (`kvsim.core.windowed_cohort`): each step's context, and the blocks
    # each step's frees return to the prefix cache's free blocks (None: full attention).
    contexts: np.ndarray | None = None
    cached_freed: np.ndarray | None = None

    def context_tokens(self) -> np.ndarray:
        """``decode_context_tokens`` of each iteration of the run."""
        if self.contexts is not None:
            return self.contexts
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
                before, cached_before = pool.num_evicted, pool.num_cached_free
                num_new, self.finishing = sched.schedule_cohort_only()
                self.new_blocks[j] += num_new
                evicted = pool.num_evicted - before
                self.evicted[j] += evicted
                if self.cached_freed is not None:
                    self.cached_freed[j] += pool.num_cached_free - cached_before + evicted
                if on_step is not None:
                    self.num_advanced = j + 1
                    on_step(j)
        if num_started > self.num_advanced:
            self.num_advanced = num_started

    def commit(
        self, num_steps: int, ends: np.ndarray, durations: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, StepOutcome]:
        """End the first ``num_steps`` iterations (step 0 included) at ``ends``.

        Returns the cumulative (new blocks, evicted blocks) after each step's allocations,
        for the engine's records, and the requests that finished."""
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
    if k < 2 or sched.admission_may_open():
        return None
    run = CohortRun(
        scheduler=sched,
        num_steps=k,
        num_seqs=len(co),
        base_context_tokens=out.batch.decode_context_tokens,
        new_blocks=np.zeros(k, dtype=np.int64),
        evicted=np.zeros(k, dtype=np.int64),
    )
    if isinstance(co, WindowedCohort):
        run.contexts = co.context_array(k)
        assert run.contexts[0] == run.base_context_tokens, "the run's first step is the one scheduled"
        run.cached_freed = np.zeros(k, dtype=np.int64)
    return run
