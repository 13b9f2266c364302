"""Per-request figures of the cluster layer, kept beside the engine's own request state.

The scheduler's `Request` says what happened inside a replica; the ledger adds what the
cluster saw: why a request was rejected, the cached prefix its router expected, the tier
each loaded block came from, how long its KV transfer took and how much of that was
waiting for a shared link, and for a benchmark client which requests were warm-ups and how
long each waited in the client for a free slot. `kvsim.engine.simulator` turns it into request-table columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from kvsim.core.request_state import Request
from kvsim.kv.tiers import TIER_KINDS


class RequestLedger:
    """Columns indexed like the cluster's request table (workload order)."""

    def __init__(self, requests: Mapping[int, Request]) -> None:
        self.requests = requests
        self.position = {rid: i for i, rid in enumerate(requests)}
        n = len(requests)
        self.expected_hits_tokens = np.full(n, -1, dtype=np.int64)
        self.reject_reason: list[str] = [""] * n
        self.tier_hits_tokens = {kind: np.zeros(n, dtype=np.int64) for kind in TIER_KINDS}
        self.kv_transfer_s = np.full(n, math.nan)
        self.kv_transfer_queueing_s = np.full(n, math.nan)
        self.client_queue_s = np.zeros(n)  # held back by a benchmark client for a free slot
        self.warmup = np.zeros(n, dtype=bool)  # sent by a benchmark client before it measures
        self.first_admission_tier_hits_tokens = 0  # loaded at a first admission (not a recompute)
        self.tier_write_bytes: dict[str, float] = {}

    def add_tier_hits(self, request_id: int, kinds: Sequence[str], block_size: int) -> None:
        """``request_id`` loaded one block from each tier in ``kinds`` at its admission."""
        i = self.position[request_id]
        for kind in kinds:
            self.tier_hits_tokens[kind][i] += block_size
        if not self.requests[request_id].metrics.num_preemptions:
            self.first_admission_tier_hits_tokens += block_size * len(kinds)

    def reject(self, request_id: int, reason: str) -> None:
        self.reject_reason[self.position[request_id]] = reason

    def client_queue(self, request_id: int, seconds: float) -> None:
        self.client_queue_s[self.position[request_id]] = seconds

    def mark_warmup(self, request_ids: Sequence[int]) -> None:
        for rid in request_ids:
            self.warmup[self.position[rid]] = True

    def expect(self, request_id: int, tokens: int) -> None:
        self.expected_hits_tokens[self.position[request_id]] = tokens

    def transferred(self, request_id: int, seconds: float, queueing_s: float) -> None:
        i = self.position[request_id]
        self.kv_transfer_s[i] = seconds
        self.kv_transfer_queueing_s[i] = queueing_s
