"""Phase 1 of an iteration: the running requests, in order.

Each catches its computed tokens up with its tokens (one for a decode, a chunk for a
prefill); one that cannot get blocks preempts the queue policy's victim until it fits or
is the victim itself, and then nobody after it runs in this iteration (vLLM's rule).

Two ways to run the same phase. Step by step (`_schedule_running`), every running request
is looked at. With the decode cohort (`_schedule_cohort`, `kvsim.core.cohort`), its members
decode a token each without being looked at, and only the requests outside it and the
members due now (at a block boundary, or finishing) are, in the same running order and
with the same preemptions; when the iteration could run out of token budget, the cohort
is emptied and the step-by-step phase decides. A decode run's later iterations, where
only the cohort runs, are `schedule_cohort_only`.
"""

from __future__ import annotations

from bisect import bisect_left

from kvsim.core.kv_manager import FullAttentionManager
from kvsim.core.request_state import Request, Status, decode_in_place
from kvsim.core.scheduler.base import SchedulerBase, Step, run_seq


def _drop_skipped(kv: FullAttentionManager, req: Request) -> bool:
    """`remove_skipped_blocks` for ``req``, then True: what the general path does first
    for a decode (so a decode whose only event is a block leaving the window is then
    ready for the hot path, and one that still needs the allocator finds it done)."""
    kv.remove_skipped_blocks(req)
    return True


class RunningPhase(SchedulerBase):
    """Phase 1, step by step or with the decode cohort."""

    def _schedule_running(self, step: Step) -> None:
        """Phase 1 step by step: every running request, in order, preempting when blocks
        run out.

        The hot path of every engine the decode cohort does not apply to: a decode whose
        slot is already allocated skips the allocator (what allocate_slots would do, minus
        the block arithmetic), and everything it touches is a local.
        """
        kv = self.kv
        bs = kv.block_size
        caching = kv.enable_caching
        hot_path_ok = kv.supports_decode_fast_path and self.kv_cache_enabled and self.speculator is None
        # Sliding-window and hybrid managers: a decode that neither needs a block, fills one
        # nor lets one leave the window skips the allocator too (`decode_slot_ready`); the
        # others take the general path (`_schedule_chunk`), exactly as before.
        slot_ready = (
            kv.decode_slot_ready
            if not hot_path_ok and self.kv_cache_enabled and self.speculator is None
            else None
        )
        attended = kv.attended_tokens
        running = self.running
        scheduled = step.scheduled
        budget, num_fast, fast_ctx = step.budget, step.num_fast_decodes, step.fast_decode_ctx
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            nc = req.num_computed_tokens
            if (
                hot_path_ok
                and req.num_tokens - nc == 1
                and req.num_output_tokens
                and (decode_in_place(req, nc, bs, caching) or self._decode_at_block_boundary(req, nc))
            ):
                scheduled[req] = 0  # 0 marks a fast-path decode (one token)
                num_fast += 1
                fast_ctx += nc + 1
                budget -= 1
                i += 1
                continue
            if (
                slot_ready is not None
                and req.num_tokens - nc == 1
                and req.num_output_tokens
                and (slot_ready(req, nc) or (_drop_skipped(kv, req) and slot_ready(req, nc)))
            ):
                scheduled[req] = 0
                num_fast += 1
                fast_ctx += attended(nc + 1)
                budget -= 1
                i += 1
                continue
            step.budget, step.num_fast_decodes, step.fast_decode_ctx = budget, num_fast, fast_ctx
            i = self._schedule_chunk(req, i, step)
            budget, num_fast, fast_ctx = step.budget, step.num_fast_decodes, step.fast_decode_ctx
            if i < 0:
                break  # nothing left to preempt: the running phase ends here (as in vLLM)
        step.budget = budget
        step.num_fast_decodes = num_fast
        step.fast_decode_ctx = fast_ctx

    def _schedule_chunk(self, req: Request, i: int, step: Step) -> int:
        """Phase 1 for running request ``req`` (at ``i`` in the running list) when it is not
        a hot-path decode: its next token or prefill chunk (speculating, the drafts after it
        too), preempting the queue policy's victims until its blocks fit. Returns where the
        next running request is, or -1 if ``req`` had to preempt itself."""
        kv = self.kv
        running = self.running
        num_new = self._chunk(req.num_tokens - req.num_computed_tokens + req.num_spec_tokens, step)
        kv.remove_skipped_blocks(req)
        num_new = max(kv.fit_chunk(req, num_new), 1)
        while not kv.allocate_slots(req, num_new):
            victim = running.pop(self.queue.victim_index(running))
            if victim in step.scheduled:  # already scheduled this iteration: give its budget back
                step.take_back(victim, self.kv.attended_tokens)
                i -= 1
            self._preempt(victim, step)
            if victim is req:
                return -1
        step.scheduled[req] = num_new
        step.budget -= num_new
        return i + 1

    def _schedule_cohort(self, step: Step) -> bool:
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
            todo.sort(key=run_seq)
        tokens_fit, blocks_fit = self._cohort_step_fits(todo, step)
        if not tokens_fit:
            self.materialize()
            return False
        kv = self.kv
        bs = kv.block_size
        members = co.members
        step.num_lazy = len(co)
        step.num_fast_decodes, step.fast_decode_ctx = len(co), co.context_tokens()
        step.budget -= len(co)
        explicit = self._explicit_windowed if self.windowed else self._schedule_explicit
        for req in todo:
            if not blocks_fit and req.status is not Status.RUNNING:
                continue  # preempted earlier in this iteration
            if req in members:  # due: a block boundary, or its last token
                if not blocks_fit:
                    nc = req.num_computed_tokens + s - req.lazy_step
                    if self.windowed:  # stepping drops what left the window before allocating
                        kv.drop_skipped_at(req, nc)
                    if len(req.blocks) * bs == nc and not self._make_room(req, kv.blocks_per_slot, step):
                        break
                if self._serve_due(req, s):  # update finishes it: counted already, now explicit
                    self.explicit[req] = None
                    step.scheduled[req] = 0
                    step.num_lazy -= 1
            elif not explicit(req, step):
                break
        else:
            return True
        # `req` preempted itself: as in the step-by-step phase 1, nobody after it in running
        # order runs in this iteration (with FCFS nobody is left: it was the last).
        for later in self.running[bisect_left(self.running, req.run_seq, key=run_seq) :]:
            if later in members:
                self._undo_lazy_decode(later, step, decoded=False)
                self.explicit[later] = None
        return True

    def _schedule_explicit(self, req: Request, step: Step) -> bool:
        """`_schedule_cohort` for a running request outside the cohort: a decode (which joins
        the cohort if it can) or a prefill chunk. False if it had to preempt itself."""
        co = self.cohort
        assert co is not None
        kv = self.kv
        bs = kv.block_size
        nc = req.num_computed_tokens
        if req.num_tokens - nc == 1 and req.num_output_tokens:
            if not decode_in_place(req, nc, bs, kv.enable_caching) and not self._decode_at_block_boundary(
                req, nc
            ):
                if not self._make_room(req, 1, step):
                    return False
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
                step.scheduled[req] = 0
            return True
        num_new = self._chunk(req.num_tokens - nc, step)
        if not kv.allocate_slots(req, num_new):
            need = -(-(nc + num_new) // bs) - len(req.blocks)
            if not self._make_room(req, need, step):
                return False
            fits = kv.allocate_slots(req, num_new)
            assert fits, "room was made for it"
        step.scheduled[req] = num_new
        step.budget -= num_new
        return True

    def _explicit_windowed(self, req: Request, step: Step) -> bool:
        """`_schedule_explicit` with a sliding window or hybrid groups: a decode takes the
        step-by-step phase 1's hot path if its slot is ready (after dropping what left the
        window), else its allocator path; a prefill chunk its `_schedule_chunk`. False if
        it had to preempt itself."""
        co = self.cohort
        assert co is not None
        kv = self.kv
        nc = req.num_computed_tokens
        decode = req.num_tokens - nc == 1 and req.num_output_tokens
        if not decode or not (
            kv.decode_slot_ready(req, nc) or (_drop_skipped(kv, req) and kv.decode_slot_ready(req, nc))
        ):
            num_new = 1 if decode else self._chunk(req.num_tokens - nc, step)
            kv.remove_skipped_blocks(req)
            num_new = max(kv.fit_chunk(req, num_new), 1)
            if not kv.allocate_slots(req, num_new):
                # every layer group's table has the same length (allocations go to all)
                need = kv.blocks_per_slot * (-(-(nc + num_new) // kv.block_size) - len(req.blocks))
                if not self._make_room(req, need, step):
                    return False
                fits = kv.allocate_slots(req, num_new)
                assert fits, "room was made for it"
            if not decode:
                step.scheduled[req] = num_new
                step.budget -= num_new
                return True
        step.num_fast_decodes += 1
        step.fast_decode_ctx += kv.attended_tokens(nc + 1)
        step.budget -= 1
        if co.accepts(req):
            co.join(req)
            del self.explicit[req]
            step.num_lazy += 1
        else:
            step.scheduled[req] = 0
        return True

    def _make_room(self, req: Request, need: int, step: Step) -> bool:
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
                step.take_back(victim, self.kv.attended_tokens)
            self._preempt(victim, step)
            if victim is req:
                return False
        return True

    def _undo_lazy_decode(self, req: Request, step: Step, *, decoded: bool) -> None:
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
        step.fast_decode_ctx -= self.kv.attended_tokens(req.num_computed_tokens + 1)
        step.budget += 1

    def _join_cohort(self, step: Step) -> None:
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
            due.sort(key=run_seq)
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
        kv = self.kv
        if self.windowed:  # stepping's allocator path for this decode (its counters lag)
            j = kv.serve_decode(req, nc)
            assert j, "the free blocks were checked before the iteration"
            if req.lazy_finish == s:
                co.leave(req)
                return True
            co.file(req, j)
            return False
        if not decode_in_place(req, nc, kv.block_size, kv.enable_caching):
            fits = self._decode_at_block_boundary(req, nc)
            assert fits, "the free blocks were checked before the iteration"
        if req.lazy_finish == s:
            co.leave(req)
            return True
        co.refile(req, nc)
        return False

    def _cohort_step_fits(self, todo: list[Request], step: Step) -> tuple[bool, bool]:
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
        # Every layer group takes a block at once; what a window frees is not counted.
        return tokens <= step.budget, blocks * self.kv.blocks_per_slot <= self.pool.num_free_blocks
