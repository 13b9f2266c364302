"""Speculative decoding inside one engine: how many draft tokens a request verifies, how many
are accepted.

    step t:   [x] d1 d2 d3 d4      x: the last sampled token, d1..d4: the draft's proposals
    verify:   target computes x d1 d2 d3 d4 in one pass (5 KV slots written)
    accepted: d1 d2 (d3 rejected)  -> 3 tokens out: d1 d2 and the target's own token at d3
    rollback: the slots of d3 d4 are dropped; a block left holding none of the request's
              computed tokens is freed (vLLM keeps it allocated and overwrites it next step)

Each draft position i is accepted with probability p_i given that positions < i were
(a rejection ends the run), so a step yields 1 + a tokens, E[a] = sum_i prod_{j<=i} p_j.
Draws come from one random stream per request, spawned from the scenario seed with the
request id as spawn key: the same request gets the same acceptances whatever the order in
which requests are scheduled, and stepping and fast-forward agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvsim.core.request_state import Request

#: Spawn-key prefix of the acceptance streams (apart from the workload's spawned children).
SPEC_STREAM = 0x5BEC


class Speculator:
    """Proposes ``num_speculative_tokens`` drafts per decode step and draws their acceptance."""

    def __init__(self, num_speculative_tokens: int, acceptance: Sequence[float], seed: int) -> None:
        if num_speculative_tokens < 1:
            raise ValueError('"num_speculative_tokens" must be >= 1')
        if len(acceptance) != num_speculative_tokens or not all(0 <= p <= 1 for p in acceptance):
            raise ValueError('"acceptance" needs one probability in [0, 1] per draft position')
        self.k = num_speculative_tokens
        self.acceptance = np.asarray(acceptance, dtype=np.float64)
        self.seed = seed
        self._streams: dict[int, np.random.Generator] = {}

    def num_drafts(self, req: Request, max_model_len: int) -> int:
        """Drafts worth proposing: never beyond the request's last output token nor
        ``max_model_len`` (the verified positions run up to num_tokens + drafts - 1)."""
        left = min(req.target_output_tokens - req.num_output_tokens - 1, max_model_len - req.num_tokens)
        return max(0, min(self.k, left))

    def _stream(self, request_id: int) -> np.random.Generator:
        rng = self._streams.get(request_id)
        if rng is None:
            seq = np.random.SeedSequence(self.seed, spawn_key=(SPEC_STREAM, request_id))
            rng = self._streams[request_id] = np.random.default_rng(seq)
        return rng

    def accept(self, req: Request, num_drafts: int) -> int:
        """How many of ``num_drafts`` proposals the target accepts (the leading run)."""
        if num_drafts <= 0:
            return 0
        u = self._stream(req.request_id).random(num_drafts)
        rejected = np.flatnonzero(u >= self.acceptance[:num_drafts])
        return int(rejected[0]) if len(rejected) else num_drafts

    def release(self, req: Request) -> None:
        """The request finished: drop its stream."""
        self._streams.pop(req.request_id, None)
