"""What a scheduler reports: the iteration it decided, the events it caused, what left.

The scheduler never keeps mailboxes for others to empty: `Scheduler.schedule` returns a
`SchedulerOutput` (the iteration, with the events and evictions it caused),
`Scheduler.update` returns a `StepOutcome` (requests that finished or were handed off),
and `add_request` returns the rejection it decided, if any. The engine records what it
is given; `CacheStats` are the running prefix-cache counters the summary reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from kvsim.core.request_state import Request
from kvsim.cost.base import Batch


class EventKind(StrEnum):
    """Kinds of rows in the event log (their values are the ``kind`` column)."""

    EVICT = "evict"  # cached blocks handed out for new data (per iteration, pool-level)
    PREEMPT_RECOMPUTE = "preempt_recompute"  # a running request lost its blocks
    SWAP_OUT = "swap_out"  # a preempted request's blocks copied to the swap space
    SWAP_IN = "swap_in"  # ... and back
    OFFLOAD_LOAD = "offload_load"  # prefix blocks loaded from the offload tier
    KV_TRANSFER = "kv_transfer"  # disaggregated serving: KV sent to a decode replica
    REJECT = "reject"  # a request that can never run on its replica, or refused by admission
    TIER_WRITE = "tier_write"  # cached blocks written to an offload tier (per iteration and tier)
    SCALE_UP = "scale_up"  # the autoscaler started a replica (cold start begins)
    REPLICA_READY = "replica_ready"  # ... which now takes requests
    SCALE_DOWN = "scale_down"  # the autoscaler stopped routing to a replica (it drains)
    REPLICA_STOPPED = "replica_stopped"  # ... which finished its last request and left


@dataclass(frozen=True, slots=True)
class KvEvent:
    """One event a scheduler decided: what, for which request, how many blocks."""

    kind: EventKind
    request_id: int
    num_blocks: int
    reason: str = ""  # REJECT: why the request can never run (kvsim.results.result.REJECT_REASONS)


@dataclass(slots=True)
class StepOutcome:
    """Requests an iteration's end took out of the running set, in the order it did."""

    finished: list[Request] = field(default_factory=list)
    handoffs: list[Request] = field(default_factory=list)  # prefilled; KV goes to a decode replica

    def __bool__(self) -> bool:
        return bool(self.finished or self.handoffs)


@dataclass(slots=True)
class SchedulerOutput:
    """What one iteration computes, what scheduling it cost, and the events it caused.

    ``tokens`` maps each scheduled request to its new tokens, in scheduling order, with
    0 standing for one decode token (the hot path's mark); `scheduled` spells it out.
    With a decode cohort, ``num_lazy_decodes`` more requests decode one token each.
    ``num_evicted`` counts the cached blocks that scheduling evicted.
    """

    tokens: dict[Request, int]
    batch: Batch
    events: list[KvEvent] = field(default_factory=list)
    num_evicted: int = 0
    num_prefill_seqs: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    num_preempted: int = 0
    num_scheduled_tokens: int = 0
    offload_load_blocks: int = 0
    swap_out_blocks: int = 0
    swap_in_blocks: int = 0
    all_running_decode: bool = False
    #: Decodes advanced by the decode cohort (`kvsim.core.cohort`), not listed in ``tokens``.
    num_lazy_decodes: int = 0
    #: Waiting requests found unschedulable (nothing runs, they still cannot start): rejected.
    rejected: list[Request] = field(default_factory=list)

    @property
    def scheduled(self) -> list[tuple[Request, int]]:
        """(request, new tokens) pairs in scheduling order."""
        return [(r, n or 1) for r, n in self.tokens.items()]


@dataclass(slots=True)
class CacheStats:
    """Prefix-cache counters of one replica, in tokens (vLLM's queries/hits).

    First admissions only; re-admissions after preemption by recompute are counted apart,
    so that recompute cannot inflate the hit rate.
    """

    prefix_cache_queries_tokens: int = 0
    prefix_cache_hits_tokens: int = 0
    recompute_queries_tokens: int = 0
    recompute_hits_tokens: int = 0
    offload_hits_tokens: int = 0  # loaded from the offload tier instead of recomputed


@dataclass(slots=True)
class SpecDecodeStats:
    """Speculative decoding counters of one replica (vLLM's spec_decode_num_drafts,
    num_draft_tokens and num_accepted_tokens)."""

    num_drafts: int = 0  # verify passes
    num_draft_tokens: int = 0  # drafts verified
    num_accepted_tokens: int = 0  # drafts accepted

    def __iadd__(self, other: SpecDecodeStats) -> SpecDecodeStats:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        return self
