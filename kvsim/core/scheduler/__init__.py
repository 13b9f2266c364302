"""Continuous-batching scheduler of one replica, after vLLM v1's scheduler.

Each iteration gets one token budget (``max_num_batched_tokens``) and three phases:

    1. running   in order, each request catches its computed tokens up with its tokens
                 (one for a decode, a chunk for a prefill); one that cannot get blocks
                 preempts the queue policy's victim until it fits or is the victim itself
    2. swapped   only if nobody was preempted: swapped-out requests come back first
    3. waiting   then waiting requests are admitted, head of line first, while budget,
                 max_num_seqs and blocks allow (the first that does not fit stops admission)

Its modules, one per phase: `base` (state, the step being decided, shared moves),
`running` (phase 1, step by step or with the decode cohort), `admission` (phases 2 and 3),
`update` (the iteration's end) and `scheduler` (`Scheduler`, composing them).

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

from kvsim.core.scheduler.base import NO_LIMIT
from kvsim.core.scheduler.scheduler import Scheduler

__all__ = ["NO_LIMIT", "Scheduler"]
