"""Decoding requests advanced lazily: an iteration pays for the requests whose state changes.

A running request that only decodes changes in one predictable way per iteration: one more
computed token, one more output token, the same gap since its last token as every other
decoder. The scheduler keeps such requests in a `DecodeCohort` instead of touching each of
them every iteration. A member's counters are those of the step it joined (``lazy_step``);
the cohort's step counter says how many iterations have ended since, so its true counters
are derived when needed (`materialize`). The only iterations at which a member needs the
scheduler's attention are known when it joins, and it is filed under the first of them:

    block boundary   its token fills its last block (registered in the prefix cache) or
                     needs a new one: every block_size steps, at a fixed phase
    finish           the iteration that samples its last token (output or max_model_len)

At such a step (``pop_due``) the scheduler handles it as stepping would (a new block, a
block registered), in running order with the requests outside the cohort, and files it
again (``refile``); one that samples its last token leaves. Everything else about the members is kept in aggregates: their number, the
sum of their context lengths (for the cost model), the allocations due at each phase of
the block size (for how long a decode run can go before the free blocks run out) and the
iteration gaps, kept as suffix maxima so that a member's longest inter-token gap is one
binary search away:

    gaps by iteration     3  1  4  1  5  2  2
    suffix-max stack         .  .  .  5  2  2     (index, gap) pairs, gaps non-increasing
    longest gap after iteration 3 = first stack entry past index 3 = 5

Nothing here decides anything: every decision is the scheduler's, made with the counters
of the requests it looks at, which are exact.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import bisect_right
from collections.abc import Iterable

from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request, advance_decoder


class DecodeCohort:
    """The lazily advanced decoders of one scheduler and what it needs to know about them."""

    __slots__ = (
        "_finishes",
        "_gap_idx",
        "_gap_val",
        "_tick",
        "base_sum",
        "block_size",
        "caching",
        "due",
        "last_end",
        "limit",
        "members",
        "paged",
        "phase_count",
        "pool",
        "step",
    )

    def __init__(self, pool: BlockPool, block_size: int, limit: int, *, paged: bool = True) -> None:
        self.pool = pool
        self.block_size = block_size
        # Paged block tables grow a block every block_size tokens; a contiguous reservation
        # (`kvsim.core.allocators.ContiguousAllocator`) holds all its blocks from admission.
        self.paged = paged
        self.caching = pool.enable_caching
        assert paged or not self.caching, "a contiguous reservation is private: no prefix caching"
        self.limit = limit  # max_model_len (a huge number without one)
        self.step = 0  # iterations ended so far
        self.last_end = math.nan  # end time of the last iteration
        self.members: dict[Request, None] = {}
        # sum over members of (computed tokens - lazy_step): their context is
        # base_sum + len(members) * (step + 1) at the iteration scheduled at `step`.
        self.base_sum = 0
        self.due: dict[int, list[Request]] = {}  # iteration -> members that need attention
        self.phase_count = [0] * block_size  # members allocating at iterations = phase (mod bs)
        self._finishes: list[tuple[int, int, Request]] = []  # (finishing iteration, tie-break, member)
        self._tick = itertools.count()
        self._gap_idx: list[int] = []  # iteration numbers (1-based: the i-th iteration to end)
        self._gap_val: list[float] = []

    def __len__(self) -> int:
        return len(self.members)

    def context_tokens(self) -> int:
        """Sum of the members' attended tokens in the iteration being scheduled."""
        return self.base_sum + len(self.members) * (self.step + 1)

    # -- membership --------------------------------------------------------------------
    def accepts(self, req: Request) -> bool:
        """Whether ``req``, just scheduled to decode in the iteration being scheduled, can
        join: its last token came at the end of the previous iteration (so its gaps are the
        cohort's) and it does not sample its last token in this one."""
        return (
            req.last_token_s == self.last_end
            and min(req.target_output_tokens - req.num_output_tokens, self.limit - req.num_tokens) > 1
        )

    def join(self, req: Request) -> None:
        """``req`` has just been scheduled to decode in the iteration being scheduled (its
        counters are those before that iteration), its last token came at ``last_end`` and
        it does not finish in this iteration: from now on the cohort advances it."""
        s = self.step
        nc = req.num_computed_tokens
        req.lazy_step = s
        if self.paged:
            phase = (s + len(req.blocks) * self.block_size - nc) % self.block_size
            req.lazy_phase = phase
            self.phase_count[phase] += 1
        else:
            req.lazy_phase = -1  # never allocates
        self.base_sum += nc - s
        self.members[req] = None
        finish = s - 1 + min(req.target_output_tokens - req.num_output_tokens, self.limit - req.num_tokens)
        if req.lazy_finish != finish:
            req.lazy_finish = finish
            heapq.heappush(self._finishes, (finish, next(self._tick), req))
        self.refile(req, nc)

    def refile(self, req: Request, nc: int) -> None:
        """File member ``req`` under the next iteration that needs the scheduler, after the
        one being scheduled (in which its token is token ``nc``)."""
        s = self.step
        bs = self.block_size
        if self.paged:
            last = len(req.blocks) - 1
            to_alloc = (last + 1) * bs - nc  # steps until a token needs a new block (1..bs)
            assert 0 < to_alloc <= bs, "a paged decode holds exactly the blocks its tokens need"
            j = to_alloc
            # With caching, the step before is the one whose token fills the block, which is
            # registered then. A private block nobody watches is registered by the allocation
            # step instead (cache_full_blocks catches it up): nothing can see the difference.
            if (
                self.caching
                and to_alloc > 1
                and (self.pool.kv_events_private or req.private_from_token > last * bs)
            ):
                j -= 1
        else:  # a contiguous reservation outlasts its request: due only when it finishes
            j = req.lazy_finish - s
        self.file(req, j)

    def file(self, req: Request, j: int) -> None:
        """File member ``req`` under its next event, ``j`` steps after the one being
        scheduled, or its finish if that comes first."""
        s = self.step
        to_finish = req.lazy_finish - s
        if to_finish < j:
            j = to_finish
        req.lazy_due = s + j
        due = self.due.get(s + j)
        if due is None:
            self.due[s + j] = [req]
        else:
            due.append(req)

    def computed_tokens(self, req: Request) -> int:
        """A member's computed tokens before the iteration being scheduled."""
        return req.num_computed_tokens + self.step - req.lazy_step

    def materialize(self, req: Request) -> None:
        """Bring a member's counters and timings up to the iterations ended so far."""
        d = self.step - req.lazy_step
        if d:
            gap = self._gap_val[bisect_right(self._gap_idx, req.lazy_step)]
            advance_decoder(req, req.num_computed_tokens + d, self.last_end, gap)
            req.lazy_step = self.step

    def leave(self, req: Request) -> None:
        """Take ``req`` out of the cohort, its counters made exact."""
        self.base_sum -= req.num_computed_tokens - req.lazy_step
        self.materialize(req)
        if req.lazy_phase >= 0:
            self.phase_count[req.lazy_phase] -= 1
        del self.members[req]

    def drop(self, req: Request) -> None:
        """Take a member out before its due iteration (it is preempted): `leave`, and its
        filing withdrawn so that the iteration it was due at does not see it."""
        self.leave(req)
        due = self.due.get(req.lazy_due)
        if due is not None and req in due:
            due.remove(req)

    def pop_due(self, step: int) -> list[Request]:
        """The members that need the scheduler at iteration ``step`` (still members: the
        scheduler refiles them, or lets those finishing now leave)."""
        return self.due.pop(step, None) or []

    def release_all(self, running: Iterable[Request]) -> list[Request]:
        """Empty the cohort, every member materialized; returns the former members.
        ``running``: every running request (their finish marks are reset)."""
        members = list(self.members)
        for req in members:
            self.materialize(req)
        self.members.clear()
        self.due.clear()
        self._finishes.clear()
        self.phase_count = [0] * self.block_size
        self.base_sum = 0
        for req in running:
            req.lazy_finish = -1
        return members

    # -- time ----------------------------------------------------------------------------
    def end_iteration(self, t_end: float) -> None:
        """An iteration ended at ``t_end``: every member decoded one token in it."""
        self.step += 1
        if self.members:
            gap = t_end - self.last_end
            idx, val = self._gap_idx, self._gap_val
            while val and val[-1] <= gap:
                val.pop()
                idx.pop()
            idx.append(self.step)
            val.append(gap)
        elif self._gap_val:  # nobody needs older gaps: a member joining now needs later ones
            self._gap_idx.clear()
            self._gap_val.clear()
        self.last_end = t_end

    # -- what a decode run needs to know -------------------------------------------------
    def first_finish(self) -> int | None:
        """The earliest iteration at which a member samples its last token."""
        heap = self._finishes
        while heap:
            finish, _, req = heap[0]
            if req.lazy_finish == finish:
                if req in self.members:
                    return finish
                req.lazy_finish = -1  # out of the cohort: a later join files it again
            heapq.heappop(heap)
        return None

    def steps_until_blocks_run_out(self, first: int, num_steps: int, free_blocks: int) -> int:
        """How many of the iterations ``first, first + 1, ...`` (at most ``num_steps``) can be
        run before one needs more new blocks than ``free_blocks``."""
        n = len(self.members)
        bs = self.block_size
        if n * -(-num_steps // bs) <= free_blocks:
            return num_steps
        counts = self.phase_count
        used = 0
        for j in range(num_steps):
            used += counts[(first + j) % bs]
            if used > free_blocks:
                return j
        return num_steps
