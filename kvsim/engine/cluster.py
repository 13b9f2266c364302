"""The cluster: replicas behind a router, their requests, and the links between them.

    arrivals ──> entry router ──> replica (prefill or both) ──finish──> follow-up turns
                                     │ first token (disaggregated)
                                     └── KV link ──> decode router ──> decode replica

`Cluster` owns the SimPy environment, the replicas, the routers, the recorder and the
table of requests; it is the only part of the engine (with `Replica`) that touches
schedulers and block pools, which it builds from the resolved `Plan`.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import simpy

from kvsim.core.beam_search import BeamStats
from kvsim.core.block_pool import BlockPool
from kvsim.core.hybrid_kv import make_model_kv_manager
from kvsim.core.outcome import CacheStats, EventKind, SpecDecodeStats
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import CostModel
from kvsim.cost.factory import build_cost_model
from kvsim.engine.recorder import Recorder
from kvsim.engine.replica import Replica
from kvsim.engine.routers import LeastLoadedRouter, Router, make_router
from kvsim.engine.view import ClusterView, LiveReplicaView
from kvsim.errors import KvsimError
from kvsim.kv.links import DedicatedLink, KvLink
from kvsim.kv.tiers import CpuOffloadTier
from kvsim.plan import GroupPlan, Plan
from kvsim.request import RequestSpec

#: progress(sim_time_s, num_finished, num_requests)
ProgressFn = Callable[[float, int, int], None]
#: A cost model for every replica, or one per replica group (given the group's plan).
CostModelSource = CostModel | Callable[[GroupPlan], CostModel]


def shared_content_ids(specs: Sequence[RequestSpec]) -> set[int]:
    """Content ids found in more than one request's tokens (prompt or output)."""
    seen: set[int] = set()
    shared: set[int] = set()
    for spec in specs:
        ids = {seg.content_id for seg in spec.prompt}
        ids.add(spec.output_segment.content_id)
        shared |= seen & ids
        seen |= ids
    return shared


class Cluster:
    """Everything one run simulates, wired together; `run` advances it to the end."""

    def __init__(
        self,
        plan: Plan,
        specs: Sequence[RequestSpec],
        *,
        router: Router | None = None,
        cost_model: CostModelSource | None = None,
        base_dir: Path | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        scenario = plan.scenario
        self.plan = plan
        self.env = simpy.Environment()
        self.max_time_s = scenario.sim.max_time_s
        self.progress = progress
        self.num_finished = 0
        self.requests: dict[int, Request] = {}
        self._children: dict[int, list[RequestSpec]] = defaultdict(list)
        self._roots: list[RequestSpec] = []
        self._add_requests(specs)
        layout = plan.replicas
        self.recorder = Recorder(
            [name for name, _ in layout],
            [g.kv.num_blocks for _, g in layout],
            [g.kv.block_size for _, g in layout],
        )
        costs = {g.index: self._cost_model(g, cost_model, base_dir) for g in plan.groups}
        self.replicas = [
            self._build_replica(i, name, group, costs[group.index]) for i, (name, group) in enumerate(layout)
        ]
        roles = [g.role for _, g in layout]
        # The replicas each router chooses among, and the views it sees them through.
        self._entry = [r for r, role in zip(self.replicas, roles, strict=True) if role != "decode"]
        self._decoders = [r for r, role in zip(self.replicas, roles, strict=True) if role == "decode"]
        self.entry_view = self._view(self._entry)
        self.decode_view = self._view(self._decoders)
        self.router = router if router is not None else make_router(scenario.router)
        self.decode_router: Router = LeastLoadedRouter()  # used only when disaggregated
        self.kv_link: KvLink = DedicatedLink(
            scenario.kv_transfer.bandwidth_bytes_per_s, scenario.kv_transfer.latency_s
        )

    # -- building --------------------------------------------------------------------
    def _add_requests(self, specs: Sequence[RequestSpec]) -> None:
        shared_ids = shared_content_ids(specs)
        salt_by_tenant = self.plan.salt_by_tenant
        for spec in specs:
            if spec.request_id in self.requests:
                raise ValueError(f"duplicate request_id {spec.request_id}")
            self.requests[spec.request_id] = Request(
                spec, shared_content_ids=shared_ids, salt_by_tenant=salt_by_tenant
            )
            (self._children[spec.parent_id] if spec.parent_id is not None else self._roots).append(spec)
        if any(s.retention.kind == "priority" for s in specs):
            plain = [g.name for g in self.plan.groups if g.engine.eviction_policy != "retention"]
            if plain:
                raise KvsimError(
                    "requests with retention priorities need engine.eviction_policy: retention "
                    f"(replica groups {', '.join(plain)} evict by another policy)"
                )

    def _cost_model(
        self, group: GroupPlan, given: CostModelSource | None, base_dir: Path | None
    ) -> CostModel:
        if given is None:
            return build_cost_model(
                group.config.cost_model,
                model=self.plan.model,
                gpu=group.gpu,
                tp=group.tp,
                kv_cache_dtype=group.engine.kv_cache_dtype,
                base_dir=base_dir,
                expert_parallel=group.config.expert_parallel,
                speculative=group.engine.speculative_config,
                draft_model=group.draft_model,
            )
        if isinstance(given, CostModel):
            return given
        return given(group)

    def _build_replica(self, index: int, name: str, group: GroupPlan, cost: CostModel) -> Replica:
        eng, kv = group.engine, group.kv
        tier = CpuOffloadTier(kv.num_offload_blocks) if kv.num_offload_blocks else None
        pool = BlockPool(
            kv.num_blocks,
            enable_caching=eng.enable_prefix_caching,
            eviction_policy=eng.eviction_policy,
            offload=tier,
        )
        sched = Scheduler(
            eng,
            pool,
            kv_manager=make_model_kv_manager(pool, eng.block_size, self.plan.model),
            num_swap_blocks=kv.num_swap_blocks,
            max_model_len=group.max_model_len,
            role=group.role,
            seed=self.plan.scenario.seed,
        )
        return Replica(
            self.env,
            index,
            name,
            sched,
            cost,
            self.recorder,
            kv,
            fast_forward=self.plan.scenario.sim.fast_forward,
            max_time_s=self.max_time_s,
            on_finish=self._on_finish,
            on_handoff=self._on_handoff if group.role == "prefill" else None,
        )

    @staticmethod
    def _view(replicas: list[Replica]) -> ClusterView:
        return ClusterView(tuple(LiveReplicaView(r, i) for i, r in enumerate(replicas)))

    # -- running ---------------------------------------------------------------------
    def run(self) -> None:
        """Simulate until every request is done (or ``sim.max_time_s``)."""
        self.env.process(self._arrivals())
        # The run allocates millions of long-lived objects (requests, block hashes) and no
        # garbage cycles: the cyclic collector would only rescan them, ever more slowly.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self.env.run()
        finally:
            if gc_was_enabled:
                gc.enable()
        if self.progress is not None:
            self.progress(self.env.now, self.num_finished, len(self.requests))

    def cache_stats(self) -> CacheStats:
        """Prefix-cache counters summed over all replicas."""
        total = CacheStats()
        for r in self.replicas:
            s = r.scheduler.stats
            total.prefix_cache_queries_tokens += s.prefix_cache_queries_tokens
            total.prefix_cache_hits_tokens += s.prefix_cache_hits_tokens
            total.recompute_queries_tokens += s.recompute_queries_tokens
            total.recompute_hits_tokens += s.recompute_hits_tokens
            total.offload_hits_tokens += s.offload_hits_tokens
        return total

    def beam_stats(self) -> BeamStats:
        """Beam search forks summed over all replicas."""
        total = BeamStats()
        for r in self.replicas:
            total += r.scheduler.beams.stats
        return total

    def spec_stats(self) -> SpecDecodeStats:
        """Speculative decoding counters summed over all replicas."""
        total = SpecDecodeStats()
        for r in self.replicas:
            total += r.scheduler.spec_stats
        return total

    @property
    def total_kv_blocks(self) -> int:
        return sum(r.geometry.num_blocks for r in self.replicas)

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        max_time = self.max_time_s
        env = self.env
        for spec in sorted(self._roots, key=lambda s: (s.arrival_s, s.request_id)):
            at = spec.arrival_s
            if max_time is not None and at >= max_time:
                return
            if at > env.now:
                yield env.timeout(at - env.now)
            self._submit(spec, at)

    def _submit(self, spec: RequestSpec, at: float) -> None:
        req = self.requests[spec.request_id]
        req.arrival_s = at
        self._entry[self.router.route(req, self.entry_view).index].submit(req)

    def _release(self, spec: RequestSpec, at: float) -> Generator[simpy.Event, Any, None]:
        """A follow-up turn, sent ``think_time_s`` after its parent finished."""
        if self.max_time_s is not None and at >= self.max_time_s:
            return
        yield self.env.timeout(max(at - self.env.now, 0.0))
        self._submit(spec, at)

    def _on_finish(self, req: Request) -> None:
        self.num_finished += 1
        for child in self._children.pop(req.request_id, ()):
            if req.status is Status.FINISHED:
                self.env.process(self._release(child, req.finish_s + child.think_time_s))
        if self.progress is not None and self.num_finished % 64 == 0:
            self.progress(self.env.now, self.num_finished, len(self.requests))

    def _on_handoff(self, req: Request) -> None:
        """Disaggregated serving: the prompt's KV goes from its prefill replica to a decode
        replica over the KV link, then decoding resumes there."""
        source = self.replicas[req.replica]
        num_bytes = source.geometry.bytes_for_tokens(req.num_computed_tokens)
        delay = self.kv_link.transfer_time_s(num_bytes)
        num_blocks = source.geometry.blocks_for_tokens(req.num_computed_tokens)
        self.recorder.add_event(
            self.env.now, source.index, EventKind.KV_TRANSFER, req.request_id, num_blocks, num_bytes
        )
        req.prefill_replica = req.replica
        self.env.process(self._deliver(req, delay))

    def _deliver(self, req: Request, delay: float) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(delay)
        req.kv_transferred = True
        self._decoders[self.decode_router.route(req, self.decode_view).index].submit(req)
