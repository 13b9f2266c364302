"""The iteration's end: what it computed is applied, tokens are sampled, requests finish.

Every sampled token goes through `kvsim.core.request_state.advance_decoder`, here for the
requests the iteration scheduled explicitly and in `finish_decoders` for decode-cohort
members that sample their last token.
"""

from __future__ import annotations

from kvsim.core.allocators import PagedAllocator
from kvsim.core.outcome import SchedulerOutput, StepOutcome
from kvsim.core.request_state import Request, Status, advance_decoder
from kvsim.core.scheduler.base import NO_LIMIT, SchedulerBase


class UpdatePhase(SchedulerBase):
    """Applying an iteration's outcome at its end."""

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
        limit = self.max_model_len or NO_LIMIT
        spec = self.speculator
        beams = self.beams if self.beams else None  # checked once: the loop below is the hot path
        forked: list[int] = []  # beam groups that sampled a token
        for req, n in out.tokens.items():
            nc = req.num_computed_tokens + (n or 1)
            if nc > req.num_tokens:  # a verify pass: its rejected drafts' slots are rolled back
                nc -= self._settle_verify(req, n - 1)
            if nc < req.num_tokens:
                req.num_computed_tokens = nc
                continue  # a prefill chunk that does not reach the end samples nothing
            # One token out, or the accepted drafts and one; a first token has no gap (NaN).
            n_out = advance_decoder(req, nc, t_end, t_end - req.last_token_s)
            if spec is not None:  # the drafts the next step verifies
                req.num_spec_tokens = spec.num_drafts(req, limit)
            if beams is not None and req.spec.beam_group is not None:
                forked.append(req.spec.beam_group)
            if n_out == 1:
                req.metrics.first_token_s = t_end
                if n_out == req.target_output_tokens or nc + 1 >= limit:
                    self.finish(req, t_end)
                    outcome.finished.append(req)
                elif self.hands_off:  # first token out: send the KV to a decode replica
                    self._hand_off(req)
                    outcome.handoffs.append(req)
                continue
            if n_out == req.target_output_tokens or nc + 1 >= limit:
                self.finish(req, t_end)
                outcome.finished.append(req)
        if beams is not None:
            for group in dict.fromkeys(forked):
                beams.after_step(group)
        if outcome:
            self.prune_running([*outcome.finished, *outcome.handoffs])
        return outcome

    def finish_decoders(self, reqs: list[Request], t_end: float) -> StepOutcome:
        """End an iteration for decoders that sampled their last token in it (in running
        order): what `update` does for them."""
        outcome = StepOutcome()
        for req in reqs:
            advance_decoder(req, req.num_computed_tokens + 1, t_end, t_end - req.last_token_s)
            assert req.num_output_tokens == req.target_output_tokens or req.num_tokens >= (
                self.max_model_len or NO_LIMIT
            )
            self.finish(req, t_end)
            outcome.finished.append(req)
        if outcome:
            self.prune_running(outcome.finished)
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
