"""kvsim's side of the differential harness: replay a DiffWorkload through kvsim's core.

This is the only module of `kvsim.validation` that touches kvsim's engine core
(`kvsim.core`, `kvsim.scenario.schema.EngineConfig`, `kvsim.request`); re-point it here
when the core's API moves. It builds the scheduler and block pool the way
`kvsim.engine.cluster.Cluster` does and drives the production replica engine
(`kvsim.engine.replica_engine.ReplicaEngine`, SimPy-free: the decode cohort and
fast-forwarded decode runs included) on the step clock the recorder uses
(`kvsim.validation.vllm_engine.Engine.run`, every iteration 1.0 long): the same
arrival rule, the same child-release rule, the same record (`kvsim.validation.fixtures`).

``reserve_null_block`` (default True) gives kvsim's pool ``num_gpu_blocks - 1`` blocks,
mirroring the null block vLLM keeps out of its free queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from kvsim.core.block_pool import BlockPool
from kvsim.core.kv_manager import FullAttentionManager
from kvsim.core.outcome import EventKind, SchedulerOutput
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import ConstantCostModel
from kvsim.engine.replica_engine import ReplicaEngine
from kvsim.request import RequestSpec, Segment
from kvsim.results.recorder import Recorder
from kvsim.scenario.resolved import NULL_BLOCKS, KvGeometry
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


def _scheduled(sched: Scheduler, out: SchedulerOutput) -> list[tuple[Request, int]]:
    """Every request the iteration computes tokens for, in scheduling order (the running
    order): those ``out`` lists, and the decode cohort's members, one token each."""
    tokens = out.tokens
    co = sched.cohort
    if co is None or not len(co):
        return out.scheduled
    members = co.members
    return [
        (r, tokens[r] or 1) if r in tokens else (r, 1) for r in sched.running if r in tokens or r in members
    ]


def build_engine(
    knobs: Knobs, *, reserve_null_block: bool = True, engine: type[ReplicaEngine] = ReplicaEngine
) -> ReplicaEngine:
    """kvsim's replica engine for ``knobs`` on the step clock: every iteration lasts 1.0, so
    the one scheduled at step s starts at s (`ConstantCostModel`)."""
    sched = build_scheduler(knobs, reserve_null_block=reserve_null_block)
    bs, n = knobs.block_size, sched.pool.num_blocks
    geometry = KvGeometry(block_size=bs, num_blocks=n, bytes_per_block_per_shard=1.0, tp=1)
    eng = engine(0, sched, ConstantCostModel(1.0), Recorder(["kvsim"], [n], [bs]), geometry)
    eng.attach(None, tiers=None, tier_plans=(), kv_events=False, stamped=False, fast_forward=True)
    return eng


class _Replay:
    """One replay's state: the engine, the requests, the record being written."""

    def __init__(self, wl: DiffWorkload, engine: ReplicaEngine) -> None:
        self.engine = engine
        self.sched = engine.scheduler
        self.reqs = {r.id: r for r in wl.requests}
        self.children: dict[int, list[DiffRequest]] = {}
        for r in wl.requests:
            if r.parent is not None:
                self.children.setdefault(r.parent, []).append(r)
        self.records = {r.id: fx.new_request_record(r.id) for r in wl.requests}
        self.pending: dict[int, list[int]] = {}
        for r in wl.requests:
            if r.parent is None:
                self.pending.setdefault(r.arrival_step, []).append(r.id)
        self.state: dict[int, Request] = {}
        self.live: set[int] = set()
        self.steps: list[dict[str, Any]] = []
        self.num_injected = 0

    def arrive(self, step: int) -> None:
        """Hand the engine the requests arriving at ``step`` (before it is scheduled)."""
        for rid in sorted(self.pending.pop(step, [])):
            req = Request(request_spec(self.reqs[rid], float(self.num_injected)), salt_by_tenant=True)
            self.num_injected += 1
            self.records[rid]["arrival"] = step
            if self.engine.add_request(req, float(step)) is not None:
                self.records[rid]["rejected"] = True
                continue
            self.state[rid] = req
            self.live.add(rid)

    def schedule(self, step: int) -> tuple[SchedulerOutput, dict[str, Any]]:
        """Schedule ``step``; its record (``finished`` filled in when it ends)."""
        sched, records = self.sched, self.records
        waiting_before = {rid for rid in self.live if self.state[rid].status is Status.WAITING}
        out = self.engine.schedule(float(step))
        scheduled = _scheduled(sched, out)
        preempted = [e.request_id for e in out.events if e.kind is EventKind.PREEMPT_RECOMPUTE]
        for rid in preempted:
            records[rid]["preemptions"] += 1
        for req, _ in scheduled:
            if req.request_id in waiting_before:
                records[req.request_id]["hits"].append(req.num_computed_tokens)
        rec: dict[str, Any] = {
            "step": step,
            "sched": [[req.request_id, n] for req, n in scheduled],
            "preempted": preempted,
            "finished": [],
            "free": sched.pool.num_free_blocks,
            "running": [r.request_id for r in sched.running],
            "waiting": _waiting_ids(sched),
        }
        return out, rec

    def finished(self, reqs: list[Request], step: int, rec: dict[str, Any]) -> None:
        for req in reqs:
            rid = req.request_id
            rec["finished"].append(rid)
            self.records[rid]["finish"] = step
            self.live.discard(rid)
            for child in self.children.get(rid, ()):
                self.pending.setdefault(step + 1 + child.think_steps, []).append(child.id)

    def first_tokens(self, out: SchedulerOutput, step: int) -> None:
        """Requests the iteration computed explicitly that have their first token now (a
        decode cohort's members have theirs already)."""
        for req in out.tokens:
            rec = self.records[req.request_id]
            if req.num_output_tokens and rec["first_token"] is None:
                rec["first_token"] = step

    def step(self, step: int) -> int:
        """Run the iteration scheduled at ``step`` (or the decode run it starts, cut at the
        next arrival); returns the step after it."""
        out, rec = self.schedule(step)
        engine = self.engine
        run = engine.plan_run(out)
        if run is None:
            outcome = engine.end_step(out, float(step + 1))
            self.first_tokens(out, step)
            self.finished(outcome.finished, step, rec)
            self.steps.append(rec)
            return step + 1
        _, k = engine.start_run(float(step), run)
        m = k if not self.pending else min(k, min(self.pending) - step)
        outcome = engine.commit_run(m, [], float(step + m))
        # Every step of the run computes the same decodes; its allocations, step by step.
        free = rec["free"] - np.concatenate(([0], np.cumsum(run.new_blocks[1:m])))
        for j in range(m):
            rec_j = rec if j == 0 else {**rec, "step": step + j, "finished": [], "free": int(free[j])}
            if j == m - 1:
                self.finished(outcome.finished, step + j, rec_j)
            self.steps.append(rec_j)
        return step + m

    def record(self, stalled: bool) -> fx.Record:
        self.sched.materialize()
        for rid, req in self.state.items():
            self.records[rid]["num_output"] = req.num_output_tokens
        return {"steps": self.steps, "requests": self.records, "stalled": stalled}


def replay(
    wl: DiffWorkload, *, reserve_null_block: bool = True, engine: type[ReplicaEngine] = ReplicaEngine
) -> fx.Record:
    """Run ``wl`` through kvsim's replica engine on the step clock; returns its record.

    The engine executes as `kvsim.run` does (the decode cohort and fast-forwarded decode
    runs, `kvsim.engine.replica_engine`), so the path users run is the one checked against
    vLLM; ``engine`` may be another class (the tests' step-by-step oracle)."""
    r = _Replay(wl, build_engine(wl.knobs, reserve_null_block=reserve_null_block, engine=engine))
    step = idle = 0
    stalled = False
    while r.pending or r.live:
        if not r.live:
            step = max(step, min(r.pending))
        r.arrive(step)
        if not r.live:
            continue
        before = len(r.steps)
        step = r.step(step)
        idle = idle + 1 if not r.steps[-1]["sched"] else 0
        if idle >= MAX_IDLE_STEPS or len(r.steps) >= MAX_STEPS:
            stalled = True
            r.live.clear()
            r.pending.clear()
        assert len(r.steps) > before
    return r.record(stalled)


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
