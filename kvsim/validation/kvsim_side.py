"""kvsim's side of the differential harness: replay a DiffWorkload through kvsim's core.

This is the only module of `kvsim.validation` that touches kvsim's engine core
(`kvsim.core`, `kvsim.scenario.schema.EngineConfig`, `kvsim.request`); re-point it here
when the core's API moves. It builds the scheduler and block pool the way
`kvsim.engine.cluster.Cluster` does, without SimPy and without a cost model,
and drives ``schedule`` / ``update`` on the step clock the recorder uses
(`kvsim.validation.vllm_engine.Engine.run`): the same arrival rule, the same
child-release rule, the same record (`kvsim.validation.fixtures`).

``reserve_null_block`` (default True) gives kvsim's pool ``num_gpu_blocks - 1`` blocks,
mirroring the null block vLLM keeps out of its free queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kvsim.core.block_pool import BlockPool
from kvsim.core.kv_manager import FullAttentionManager
from kvsim.core.outcome import EventKind
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.request import RequestSpec, Segment
from kvsim.scenario.resolved import NULL_BLOCKS
from kvsim.scenario.schema import EngineConfig
from kvsim.validation import fixtures as fx
from kvsim.validation.workload import DiffRequest, DiffWorkload, Knobs

#: Same stall rule as the recorder.
MAX_IDLE_STEPS = 64
MAX_STEPS = 100_000


def build_scheduler(knobs: Knobs, *, reserve_null_block: bool = True) -> Scheduler:
    """kvsim's scheduler and pool for ``knobs`` (as `kvsim.engine.cluster.Cluster` builds them)."""
    eng = EngineConfig(
        block_size=knobs.block_size,
        max_num_seqs=knobs.max_num_seqs,
        max_num_batched_tokens=knobs.max_num_batched_tokens,
        enable_chunked_prefill=knobs.enable_chunked_prefill,
        long_prefill_token_threshold=knobs.long_prefill_token_threshold,
        enable_prefix_caching=knobs.enable_prefix_caching,
        scheduling_policy=knobs.scheduling_policy,
        num_gpu_blocks_override=knobs.num_gpu_blocks,
        max_model_len=knobs.resolved_max_model_len,
        preemption_mode="recompute",
    )
    num_blocks = knobs.num_gpu_blocks - (NULL_BLOCKS if reserve_null_block else 0)
    pool = BlockPool(
        num_blocks, enable_caching=eng.enable_prefix_caching, eviction_policy=eng.eviction_policy
    )
    return Scheduler(eng, pool, max_model_len=eng.max_model_len)


def request_spec(req: DiffRequest, arrival_s: float) -> RequestSpec:
    """kvsim's request: the same segments (negative ids are outputs, kvsim's default ids)."""
    return RequestSpec(
        request_id=req.id,
        arrival_s=arrival_s,
        prompt=tuple(Segment(c, n) for c, n in req.prompt),
        output_tokens=req.output_tokens,
        tenant=req.salt if req.salt is not None else "default",
        priority=req.priority,
    )


def _waiting_ids(sched: Scheduler) -> list[int]:
    return [r.request_id for r in sched.queue]


def replay(wl: DiffWorkload, *, reserve_null_block: bool = True) -> fx.Record:
    """Run ``wl`` through kvsim's core on the step clock; returns its record."""
    sched = build_scheduler(wl.knobs, reserve_null_block=reserve_null_block)
    pool = sched.pool
    reqs = {r.id: r for r in wl.requests}
    children: dict[int, list[DiffRequest]] = {}
    for r in wl.requests:
        if r.parent is not None:
            children.setdefault(r.parent, []).append(r)
    records = {r.id: fx.new_request_record(r.id) for r in wl.requests}
    pending: dict[int, list[int]] = {}
    for r in wl.requests:
        if r.parent is None:
            pending.setdefault(r.arrival_step, []).append(r.id)
    state: dict[int, Request] = {}
    live: set[int] = set()
    steps: list[dict[str, Any]] = []
    num_injected = 0
    step = 0
    idle = 0
    stalled = False
    while pending or live:
        if not live:
            step = max(step, min(pending))
        for rid in sorted(pending.pop(step, [])):
            req = Request(request_spec(reqs[rid], float(num_injected)), salt_by_tenant=True)
            num_injected += 1
            records[rid]["arrival"] = step
            if sched.add_request(req) is not None:
                records[rid]["rejected"] = True
                continue
            state[rid] = req
            live.add(rid)
        if not live:
            continue
        waiting_before = {rid for rid in live if state[rid].status is Status.WAITING}
        out = sched.schedule(float(step))
        scheduled = out.scheduled
        preempted = [e.request_id for e in out.events if e.kind is EventKind.PREEMPT_RECOMPUTE]
        for rid in preempted:
            records[rid]["preemptions"] += 1
        for req, _ in scheduled:
            if req.request_id in waiting_before:
                records[req.request_id]["hits"].append(req.num_computed_tokens)
        finished: list[int] = []
        step_rec: dict[str, Any] = {
            "step": step,
            "sched": [[req.request_id, n] for req, n in scheduled],
            "preempted": preempted,
            "finished": finished,
            "free": pool.num_free_blocks,
            "running": [r.request_id for r in sched.running],
            "waiting": _waiting_ids(sched),
        }
        outcome = sched.update(out, float(step + 1))
        for req, _ in scheduled:
            rec = records[req.request_id]
            if req.num_output_tokens and rec["first_token"] is None:
                rec["first_token"] = step
            rec["num_output"] = req.num_output_tokens
        for req in outcome.finished:
            rid = req.request_id
            finished.append(rid)
            records[rid]["finish"] = step
            live.discard(rid)
            for child in children.get(rid, ()):
                pending.setdefault(step + 1 + child.think_steps, []).append(child.id)
        steps.append(step_rec)
        idle = idle + 1 if not scheduled else 0
        step += 1
        if idle >= MAX_IDLE_STEPS or len(steps) >= MAX_STEPS:
            stalled = True
            live.clear()
            pending.clear()
    return {"steps": steps, "requests": records, "stalled": stalled}


@contextmanager
def planted_head_first_free() -> Iterator[None]:
    """Plant a known difference (tests only): a request frees its blocks head first, so a
    prompt's first blocks are evicted before its last, the reverse of vLLM's order."""
    original = FullAttentionManager.free

    def free_head_first(self: FullAttentionManager, req: Request) -> None:
        self.pool.free_blocks([b for b in req.blocks if b is not None])
        req.blocks = []
        req.num_cached_blocks = 0

    FullAttentionManager.free = free_head_first  # type: ignore[method-assign]
    try:
        yield
    finally:
        FullAttentionManager.free = original  # type: ignore[method-assign]
