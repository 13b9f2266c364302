"""The decode cohort (`kvsim.core.cohort`) for sliding-window and hybrid KV managers.

Two things differ from full attention. A member needs the scheduler at more iterations:
besides the new block and the block filled, the iteration whose token moves the window
past a block (which is freed), found by the manager (`next_decode_event`); at each, the
scheduler does what stepping's allocator path does for that decode. And a member's
attended tokens stop growing one per token once they reach the window and the sinks
(``span``): the manager's `attended_tokens(n)` is ``n`` below the span and
``g(n) = saturated_attended(n)`` from it on, where ``g(n + P) = g(n) + K`` (``P``:
`attended_period`; ``K``: `attended_increment`, 0 for a pure window). So the members split:

    linear     attended n = b + t + 1 at the iteration scheduled at cohort step t
               (b = computed tokens - lazy step): the full-attention sum, base_sum + count * (t + 1)
    saturated  b = q * P + r: g(b + t + 1) = g(r + t + 1) + q * K, so the sum is
               sum over residues r of count_r * g(r + t + 1) + K * sum q

A linear member becomes saturated at the step its attended count reaches the span (a heap
of those steps, settled when the sum is asked for). Nothing is approximated: the sum is
the one stepping adds member by member (`tests/test_cohort_windowed.py` checks it step by
step against `attended_tokens`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import numpy as np

from kvsim.core.block_pool import BlockPool
from kvsim.core.cohort import DecodeCohort
from kvsim.core.kv_manager import FullAttentionManager
from kvsim.core.request_state import Request


class WindowedCohort(DecodeCohort):
    """A decode cohort whose members' blocks also leave a window."""

    __slots__ = (
        "_lin_due",
        "_sat_heap",
        "_sat_q",
        "_sat_r",
        "blocks_per_slot",
        "kv",
        "num_lin",
        "span",
    )

    def __init__(self, pool: BlockPool, kv: FullAttentionManager, limit: int) -> None:
        super().__init__(pool, kv.block_size, limit, paged=True)
        assert kv.windowed, "full attention has its own cohort"
        self.kv = kv
        self.blocks_per_slot = kv.blocks_per_slot
        self.span = kv.attended_span
        self.num_lin = 0  # linear members (their b's are in base_sum)
        self._lin_due: dict[Request, int] = {}  # linear member -> step it saturates at
        self._sat_heap: list[tuple[int, int, Request]] = []
        self._sat_r: dict[int, int] = {}  # residue of b -> saturated members with it
        self._sat_q = 0  # sum of the saturated members' quotients

    # -- membership --------------------------------------------------------------------
    def join(self, req: Request) -> None:
        s = self.step
        nc = req.num_computed_tokens
        req.lazy_step = s
        phase = (s + len(req.blocks) * self.block_size - nc) % self.block_size
        req.lazy_phase = phase
        self.phase_count[phase] += self.blocks_per_slot
        self.members[req] = None
        self._add_context(req, nc - s)
        finish = s - 1 + min(req.target_output_tokens - req.num_output_tokens, self.limit - req.num_tokens)
        if req.lazy_finish != finish:
            req.lazy_finish = finish
            heapq.heappush(self._finishes, (finish, next(self._tick), req))
        self.refile(req, nc)

    def refile(self, req: Request, nc: int) -> None:
        j = self.kv.next_decode_event(req, nc)
        assert j > 0, "a decode's events after the one being scheduled"
        self.file(req, j)

    def leave(self, req: Request) -> None:
        b = req.num_computed_tokens - req.lazy_step
        if self._lin_due.pop(req, None) is not None:
            self.base_sum -= b
            self.num_lin -= 1
        else:
            self._remove_saturated(b)
        self.materialize(req)
        self.phase_count[req.lazy_phase] -= self.blocks_per_slot
        del self.members[req]

    def release_all(self, running: Iterable[Request]) -> list[Request]:
        members = super().release_all(running)
        self.num_lin = 0
        self._lin_due.clear()
        self._sat_heap.clear()
        self._sat_r.clear()
        self._sat_q = 0
        return members

    # -- attended tokens ---------------------------------------------------------------
    def _add_context(self, req: Request, b: int) -> None:
        """A member with ``b`` = computed tokens - lazy step joins the sums."""
        sat_step = self.span - 1 - b  # first step t with b + t + 1 >= span
        if sat_step <= self.step:
            self._add_saturated(b)
            return
        self.base_sum += b
        self.num_lin += 1
        self._lin_due[req] = sat_step
        heapq.heappush(self._sat_heap, (sat_step, next(self._tick), req))

    def _add_saturated(self, b: int) -> None:
        q, r = divmod(b, self.kv.attended_period)
        self._sat_r[r] = self._sat_r.get(r, 0) + 1
        self._sat_q += q

    def _remove_saturated(self, b: int) -> None:
        q, r = divmod(b, self.kv.attended_period)
        left = self._sat_r[r] - 1
        if left:
            self._sat_r[r] = left
        else:
            del self._sat_r[r]
        self._sat_q -= q

    def _settle(self, t: int) -> None:
        """Linear members whose attended tokens reach the span by step ``t`` saturate."""
        heap, lin_due = self._sat_heap, self._lin_due
        while heap and heap[0][0] <= t:
            sat_step, _, req = heapq.heappop(heap)
            if lin_due.get(req) == sat_step:
                del lin_due[req]
                b = req.num_computed_tokens - req.lazy_step
                self.base_sum -= b
                self.num_lin -= 1
                self._add_saturated(b)

    def context_tokens(self) -> int:
        t = self.step
        if self._sat_heap and self._sat_heap[0][0] <= t:
            self._settle(t)
        x = t + 1
        total = self.base_sum + self.num_lin * x
        if self._sat_r:
            g = self.kv.saturated_attended
            for r, count in self._sat_r.items():
                total += count * g(r + x)
            total += self.kv.attended_increment * self._sat_q
        return total

    def context_array(self, num_steps: int) -> np.ndarray:
        """`context_tokens` of the iterations scheduled at steps ``step .. step + num_steps
        - 1``, the members staying as they are (a decode run's)."""
        t = self.step
        self._settle(t)
        x = np.arange(t + 1, t + 1 + num_steps, dtype=np.int64)
        ctx = self.base_sum + self.num_lin * x
        g = self.kv.saturated_attended_array
        for r, count in self._sat_r.items():
            ctx += count * g(r + x)
        ctx += self.kv.attended_increment * self._sat_q
        for req, sat_step in self._lin_due.items():  # linear members saturating in the run
            j = sat_step - t
            if j < num_steps:
                n = req.num_computed_tokens - req.lazy_step + x[j:]
                ctx[j:] += g(n) - n
        return ctx

    # -- what a decode run needs to know -------------------------------------------------
    def steps_until_blocks_run_out(self, first: int, num_steps: int, free_blocks: int) -> int:
        """`DecodeCohort.steps_until_blocks_run_out` with a block per group per new slot; the
        blocks the window frees meanwhile are not counted (a shorter run, never a longer one)."""
        bs = self.block_size
        if len(self.members) * self.blocks_per_slot * -(-num_steps // bs) <= free_blocks:
            return num_steps
        counts = self.phase_count  # blocks (all groups) taken at each phase
        used = 0
        for j in range(num_steps):
            used += counts[(first + j) % bs]
            if used > free_blocks:
                return j
        return num_steps
