"""The cluster: replicas behind a router, their requests, and the links between them.

    source ──releases──> admission ──> entry router (sees a ClusterView) ──> replica (prefill or both)
      ^                    │ refused: rejected, with a reason                  │ first token (disaggregated)
      │                    v                                                   └── KV link ──> decode router
      │                 request table                                                         └─> decode replica
      └──── on_done: follow-up turns, a client's next request <── finished or rejected (any replica)
    replicas ──KV events──> index (what the router sees)    tiers ──> shared KV pool
    autoscaler ──starts / drains replicas of a group       shared links (fair share)

`Cluster` owns the SimPy environment, the replicas, the routers and their views, the
recorder and ledger, the links and the shared pool, and the autoscalers. Its requests come
from a `kvsim.engine.sources.RequestSource`, asked again whenever one is done. It is the only
part of the engine (with `Replica`) that touches schedulers and block pools, which it
builds from the resolved `Plan` (again, cold, when an autoscaled replica restarts).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import simpy

from kvsim.core.beam_search import BeamStats
from kvsim.core.block_pool import BlockPool
from kvsim.core.hybrid_kv import make_model_kv_manager
from kvsim.core.outcome import CacheStats, EventKind, SpecDecodeStats
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import CostModel
from kvsim.cost.factory import group_cost_model
from kvsim.engine.autoscale import ThresholdPolicy
from kvsim.engine.clock import EarlyTimeout
from kvsim.engine.index import KvEventIndex
from kvsim.engine.replica import Replica, ReplicaLinks
from kvsim.engine.routers import LeastLoadedRouter, Router, make_router, reads_prefix_cache
from kvsim.engine.sources import ConversationSource, Release, RequestSource
from kvsim.engine.transfers import TransferService
from kvsim.engine.view import LiveClusterView
from kvsim.errors import KvsimError
from kvsim.kv.links import DedicatedLink, FairShareNetwork, KvLink
from kvsim.kv.tiers import BlockTier, TierStack
from kvsim.request import RequestSpec
from kvsim.results.ledger import RequestLedger
from kvsim.results.recorder import Recorder
from kvsim.scenario.resolved import GroupPlan, Plan, TierPlan

#: progress(sim_time_s, num_done, num_requests): done = finished or rejected.
ProgressFn = Callable[[float, int, int], None]
#: How often a `RunWatch` is asked: every this many requests sent, and as many done.
WATCH_EVERY = 16


class RunWatch(Protocol):
    """Looks at a run from the inside and may end it early (`kvsim.overload.DivergenceWatch`).

    It only reads: ``start`` gets every request of the run before the first is sent (their
    ``arrival_s``, ``first_token_s``, ``finish_s`` and ``status`` fill in as the run goes);
    ``check`` is called every `WATCH_EVERY` requests sent and as many done, and returns a
    reason to stop now, or None. A run that is not stopped is the same, bit for bit, as
    one without a watch.
    """

    def start(self, requests: Sequence[Request]) -> None: ...

    def check(self, now_s: float, num_arrived: int, num_done: int) -> str | None: ...


class RunStopped(Exception):
    """A `RunWatch` ended the run at simulated time ``at_s``; ``reason`` says why. Not a
    `KvsimError`: nothing was wrong with the input, and there is no Result."""

    def __init__(self, reason: str, at_s: float) -> None:
        super().__init__(reason, at_s)  # both in args: SimPy rebuilds it as type(exc)(*exc.args)
        self.reason = reason
        self.at_s = at_s

    def __str__(self) -> str:
        return self.reason


#: A cost model for every replica, or one per replica group (given the group's plan).
CostModelSource = CostModel | Callable[[GroupPlan], CostModel]
Process = Generator[simpy.Event, Any, None]


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a run builds and simulates.

    A run allocates millions of long-lived objects (requests, blocks, block hashes, the
    recorder's rows) and no garbage cycles: every collection would only rescan them, ever
    more of them (building 100,000 requests took 1.1-1.3 s with it, 0.4-0.6 s without).
    Reference counting still frees everything that dies. Nests; the previous state comes
    back on exit."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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


#: An engine's prefix-cache, beam-search and speculative-decoding counters.
EngineCounters = tuple[CacheStats, BeamStats, SpecDecodeStats]


def counters_of(sched: Scheduler) -> EngineCounters:
    return sched.stats, sched.beams.stats, sched.spec_stats


@dataclass
class ClusterStats:
    """What the cluster layer measured beyond the request and iteration tables."""

    replica_seconds: float = 0.0
    gpu_seconds: float = 0.0
    num_scale_ups: int = 0
    num_scale_downs: int = 0
    replicas_peak: int = 0
    first_admission_tier_hits_tokens: int = 0
    tier_write_bytes: dict[str, float] = field(default_factory=dict)
    link_utilization: dict[str, tuple[float, float]] = field(default_factory=dict)
    num_index_events: int = 0


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
        source: RequestSource | None = None,
        watch: RunWatch | None = None,
        lazy_decodes: bool = True,
    ) -> None:
        """``source`` decides when each of ``specs`` is sent (None: at its arrival time, a
        follow-up turn think time after its parent finishes; `ConversationSource`);
        ``watch`` may end the run early (`RunWatch`, raising `RunStopped` out of `run`);
        ``lazy_decodes`` False runs every engine step by step over every running request
        (the reference the lazy decode cohort is compared with, `Replica.attach`)."""
        scenario = plan.scenario
        self.plan = plan
        self.lazy_decodes = lazy_decodes
        self.env = simpy.Environment()
        self.max_time_s = scenario.sim.max_time_s
        self.progress = progress
        self.watch = watch
        self.num_finished = 0  # done: finished or rejected
        self.num_arrived = 0  # sent to the cluster (admitted or rejected)
        self.requests: dict[int, Request] = {}
        self._add_requests(specs)
        self.source: RequestSource = source if source is not None else ConversationSource(specs)
        self.ledger = RequestLedger(self.requests)
        layout = plan.replicas
        self.groups = [g for _, g in layout]  # the group of every replica
        self.recorder = Recorder(
            [name for name, _ in layout],
            [g.kv.num_blocks for _, g in layout],
            [g.kv.block_size for _, g in layout],
        )
        self.network = FairShareNetwork() if scenario.network.sharing == "fair_share" else None
        self.transfers = TransferService(self.env, self.network) if self.network is not None else None
        pool_plan = plan.shared_pool
        self.shared_pool = (
            BlockTier(pool_plan.capacity_blocks, pool_plan.eviction_policy, "shared_pool")
            if pool_plan
            else None
        )
        costs = {g.index: self._cost_model(g, cost_model, base_dir) for g in plan.groups}
        self.replicas = [
            self._build_replica(i, name, group, costs[group.index]) for i, (name, group) in enumerate(layout)
        ]
        roles = [g.role for g in self.groups]
        # The replicas each router chooses among, and the views it sees them through.
        self._entry = [r for r, role in zip(self.replicas, roles, strict=True) if role != "decode"]
        self._decoders = [r for r, role in zip(self.replicas, roles, strict=True) if role == "decode"]
        router_rng = np.random.default_rng(np.random.SeedSequence(scenario.seed, spawn_key=(1,)))
        self.router = router if router is not None else make_router(scenario.router, router_rng)
        self._expects = reads_prefix_cache(self.router)
        self.kv_index = self._entry_index()
        self.entry_view = self._view(self._entry, self.kv_index, scenario.router.view.load_refresh_s)
        self.decode_view = self._view(self._decoders, None, 0.0)
        self.decode_router: Router = LeastLoadedRouter()  # used only when disaggregated
        self.kv_link: KvLink = DedicatedLink(
            scenario.kv_transfer.bandwidth_bytes_per_s, scenario.kv_transfer.latency_s
        )
        self.total_outstanding = 0
        self.entry_waiting = 0
        self._arrivals_done = False
        self._in_flight = 0  # requests released to be sent later, KV transfers
        self._cluster_links: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        self.fleet = Fleet(self)
        self._wire()

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
            return group_cost_model(group.config.cost_model, self.plan, group, base_dir)
        if isinstance(given, CostModel):
            return given
        return given(group)

    def _tier_stack(self, group: GroupPlan) -> TierStack | None:
        """Fresh local tiers of one replica, and the shared pool below them (None: no tier)."""
        plans = self._tier_stack_plans(group)
        if not plans:
            return None
        tiers = [
            self.shared_pool
            if p.kind == "shared_pool" and self.shared_pool is not None
            else BlockTier(p.capacity_blocks, p.eviction_policy, p.kind)
            for p in plans
        ]
        return TierStack(tiers, [p.write_through for p in plans])

    def build_scheduler(self, group: GroupPlan) -> Scheduler:
        """A cold engine for one replica of ``group``: empty pool, empty local tiers."""
        eng, kv = group.engine, group.kv
        stack = self._tier_stack(group)
        pool = BlockPool(
            kv.num_blocks,
            enable_caching=eng.enable_prefix_caching,
            eviction_policy=eng.eviction_policy,
            offload=stack,
        )
        sched = Scheduler(
            eng,
            pool,
            kv_manager=make_model_kv_manager(pool, eng.block_size, self.plan.model_of(group)),
            num_swap_blocks=kv.num_swap_blocks,
            max_model_len=group.max_model_len,
            role=group.role,
            seed=self.plan.scenario.seed,
        )
        return sched

    def _build_replica(self, index: int, name: str, group: GroupPlan, cost: CostModel) -> Replica:
        sched = self.build_scheduler(group)
        return Replica(
            self.env,
            index,
            name,
            sched,
            cost,
            self.recorder,
            group.kv,
            fast_forward=self.plan.scenario.sim.fast_forward,
            max_time_s=self.max_time_s,
            on_finish=self._on_done,
            on_handoff=self._on_handoff if group.role == "prefill" else None,
            on_reject=self._on_replica_reject,
        )

    def _entry_index(self) -> KvEventIndex | None:
        """The KV-event index of the entry replicas, if the router may read cached prefixes."""
        view = self.plan.scenario.router.view
        groups = {self.groups[r.index].index: self.groups[r.index] for r in self._entry}
        sizes = {g.engine.block_size for g in groups.values()}
        if view.cache != "events" or not self._expects or len(sizes) != 1:
            return None  # exact views (a custom router over mixed block sizes reads the pools)
        return KvEventIndex(view.kv_events_delay_s)

    def _view(self, replicas: list[Replica], index: KvEventIndex | None, refresh_s: float) -> LiveClusterView:
        block_size = self.groups[replicas[0].index].kv.block_size if replicas else 16
        active = [self.fleet_initially_active(r.index) for r in replicas]
        env = self.env
        return LiveClusterView(
            replicas,
            block_size=block_size,
            now=lambda: env.now,
            index=index,
            load_refresh_s=refresh_s,
            active=active,
        )

    def fleet_initially_active(self, index: int) -> bool:
        """Whether replica ``index`` takes requests at the start (autoscaled groups: the first count)."""
        group = self.groups[index]
        first = next(i for i, g in enumerate(self.groups) if g.index == group.index)
        return index - first < group.initial_count

    def _wire(self) -> None:
        """Connect every replica to its view, the index, the ledger, the links and the tiers."""
        adm = self.plan.scenario.admission
        if self.network is not None:
            self._cluster_links = self._shared_links(self.network)
        for view, members in ((self.entry_view, self._entry), (self.decode_view, self._decoders)):
            for pos, replica in enumerate(members):
                replica.on_load = self._load_callback(view, pos, replica.index)
                if view is self.entry_view:
                    replica.on_waiting = self._waiting_callback()
                    if adm.max_estimated_wait_s is not None:
                        replica.admission_window_s = adm.estimate_window_s
                    if self.kv_index is not None:
                        replica.kv_sink = self._sink(self.kv_index, pos)
        for replica in self.replicas:
            replica.ledger = self.ledger
            if self.network is not None:
                replica.links = self._links(replica)
                replica.transfers = self.transfers
            self.attach(replica, replica.scheduler)

    def attach(self, replica: Replica, sched: Scheduler) -> None:
        """Give ``replica`` its (new) engine, with its tiers, event log and fast-forward setting."""
        offload = sched.pool.offload
        stack = offload if isinstance(offload, TierStack) else None
        plans = self._tier_stack_plans(self.groups[replica.index]) if stack is not None else ()
        replica.scheduler = sched
        delay = self.kv_index.delay_s if self.kv_index is not None else 0.0
        # Steps are taken one at a time where another replica could see a decode run's side
        # effects at their exact instants: the shared pool, write-through, writes on shared links.
        ff = self.plan.scenario.sim.fast_forward and not (
            any(p.kind == "shared_pool" or p.write_through for p in plans)
            or (self.network is not None and plans)
        )
        replica.attach(
            tiers=stack,
            tier_plans=plans,
            kv_events=replica.kv_sink is not None,
            stamped=replica.kv_sink is not None and delay > 0,
            fast_forward=ff,
            lazy_decodes=self.lazy_decodes,
        )

    def _tier_stack_plans(self, group: GroupPlan) -> tuple[TierPlan, ...]:
        plans = list(group.tiers)
        if self.plan.shared_pool is not None and group.engine.enable_prefix_caching:
            plans.append(self.plan.shared_pool)
        return tuple(plans)

    def _load_callback(self, view: LiveClusterView, pos: int, index: int) -> Callable[[int], None]:
        replica = self.replicas[index]

        def on_load(delta: int) -> None:
            self.total_outstanding += delta
            view.load_changed(pos, delta)
            if not replica.num_outstanding:
                self.fleet.maybe_stop(index)

        return on_load

    def _waiting_callback(self) -> Callable[[int], None]:
        def on_waiting(delta: int) -> None:
            self.entry_waiting += delta

        return on_waiting

    @staticmethod
    def _sink(index: KvEventIndex, pos: int) -> Callable[[float, list[tuple[bool, int]]], None]:
        def sink(stamp: float, events: list[tuple[bool, int]]) -> None:
            index.publish(stamp, pos, events)

        return sink

    def _shared_links(self, net: FairShareNetwork) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The cluster-wide links: the fabric and the shared pool's servers, if limited."""
        scenario = self.plan.scenario
        fabric_bw = scenario.network.fabric_bandwidth_bytes_per_s
        pool = scenario.shared_kv_pool
        fabric = (net.add_link("fabric", "fabric", fabric_bw),) if fabric_bw else ()
        pool_bw = pool.pool_bandwidth_bytes_per_s if pool is not None else None
        return fabric, ((net.add_link("shared_pool", "shared_pool", pool_bw),) if pool_bw else ())

    def _links(self, replica: Replica) -> ReplicaLinks:
        """A replica's own links on the fair-share network: PCIe and NIC each way, NVMe."""
        net = self.network
        assert net is not None
        fabric, pool_links = self._cluster_links
        group, name = self.groups[replica.index], replica.name
        pcie = group.gpu.pcie_bandwidth_bytes_per_s
        nic = self.plan.scenario.kv_transfer.bandwidth_bytes_per_s
        nvme = next((t for t in group.tiers if t.kind == "nvme"), None)
        nvme_bw = nvme.bandwidth_bytes_per_s if nvme is not None else None
        return ReplicaLinks(
            pcie_h2d=net.add_link(f"{name}/pcie_h2d", "pcie_h2d", pcie),
            pcie_d2h=net.add_link(f"{name}/pcie_d2h", "pcie_d2h", pcie),
            nic_tx=net.add_link(f"{name}/nic_tx", "nic_tx", nic),
            nic_rx=net.add_link(f"{name}/nic_rx", "nic_rx", nic),
            nvme=net.add_link(f"{name}/nvme", "nvme", nvme_bw) if nvme_bw else None,
            fabric=fabric,
            pool=pool_links,
        )

    # -- running ---------------------------------------------------------------------
    def run(self) -> None:
        """Simulate until every request is done (or ``sim.max_time_s``); a `RunWatch` may end
        it earlier by raising `RunStopped`, which propagates."""
        if self.watch is not None:
            self.watch.start(list(self.requests.values()))
        self.env.process(self._arrivals())
        self.fleet.start()
        if self.entry_view.snapshot_mode:
            self.env.process(self._refresh_loads(self.plan.scenario.router.view.load_refresh_s))
        with cyclic_gc_paused():
            self.env.run()
        for replica in self.replicas:  # requests still running at max_time: exact counters
            replica.scheduler.materialize()
        if self.progress is not None:
            self.progress(self.env.now, self.num_finished, len(self.requests))

    def done(self) -> bool:
        """Nothing left to arrive, in flight or unfinished (periodic processes then stop)."""
        if self.max_time_s is not None and self.env.now >= self.max_time_s:
            return True
        return self._arrivals_done and not self._in_flight and not self.total_outstanding

    def _refresh_loads(self, interval_s: float) -> Process:
        while not self.done():
            yield EarlyTimeout(self.env, interval_s)
            self.entry_view.refresh()

    def cache_stats(self) -> CacheStats:
        """Prefix-cache counters summed over all replicas (and engines they restarted with)."""
        total = CacheStats()
        for s, _, _ in self._counters():
            total.prefix_cache_queries_tokens += s.prefix_cache_queries_tokens
            total.prefix_cache_hits_tokens += s.prefix_cache_hits_tokens
            total.recompute_queries_tokens += s.recompute_queries_tokens
            total.recompute_hits_tokens += s.recompute_hits_tokens
            total.offload_hits_tokens += s.offload_hits_tokens
        return total

    def beam_stats(self) -> BeamStats:
        """Beam search forks summed over all replicas."""
        total = BeamStats()
        for _, beams, _ in self._counters():
            total += beams
        return total

    def spec_stats(self) -> SpecDecodeStats:
        """Speculative decoding counters summed over all replicas."""
        total = SpecDecodeStats()
        for _, _, spec in self._counters():
            total += spec
        return total

    def _counters(self) -> list[EngineCounters]:
        """Every engine that ran: the replicas' current ones and those a cold restart replaced."""
        return [counters_of(r.scheduler) for r in self.replicas] + self.fleet.retired

    def stats(self, sim_time_s: float) -> ClusterStats:
        """Replica-seconds, scaling, tiers and links, for a run that ended at ``sim_time_s``."""
        out = self.fleet.stats(sim_time_s)
        out.first_admission_tier_hits_tokens = self.ledger.first_admission_tier_hits_tokens
        out.tier_write_bytes = dict(self.ledger.tier_write_bytes)
        if self.network is not None:
            out.link_utilization = self.network.utilization(sim_time_s)
        if self.kv_index is not None:
            out.num_index_events = self.kv_index.num_events
        return out

    @property
    def total_kv_blocks(self) -> int:
        return sum(r.geometry.num_blocks for r in self.replicas)

    def _arrivals(self) -> Process:
        """The source's requests sent at times known at the start, one after the other."""
        max_time = self.max_time_s
        env = self.env
        try:
            for release in self.source.start():
                at = release.at_s
                if max_time is not None and at >= max_time:
                    return
                if at > env.now:
                    yield env.timeout(at - env.now)
                self._send(release)
        finally:
            self._arrivals_done = True

    def _send(self, release: Release) -> None:
        """Send a released request now (its time, ``release.at_s``, has come)."""
        if not math.isnan(release.ready_s):  # a client held it back: how long it waited
            self.ledger.client_queue(release.spec.request_id, release.at_s - release.ready_s)
        self._submit(release.spec, release.at_s)

    # -- admission and routing ---------------------------------------------------------
    def _submit(self, spec: RequestSpec, at: float) -> None:
        req = self.requests[spec.request_id]
        req.arrival_s = at
        self.num_arrived += 1
        if self.watch is not None and self.num_arrived % WATCH_EVERY == 0:
            self._ask_watch()
        adm = self.plan.scenario.admission
        if adm.max_cluster_waiting is not None and self.entry_waiting >= adm.max_cluster_waiting:
            self._reject(req, "cluster_queue", -1)
            return
        view = self.entry_view
        chosen = self.router.route(req, view)
        replica = self._entry[chosen.index]
        if self._expects:
            self.ledger.expect(req.request_id, view.cached_tokens(req, chosen.index))
        view.forget()
        reason = self._refusal(replica)
        if reason:
            self._reject(req, reason, replica.index)
            return
        replica.submit(req)

    def _refusal(self, replica: Replica) -> str:
        """Why the chosen replica refuses a new request under the admission rules ('' if not)."""
        adm = self.plan.scenario.admission
        if adm.max_waiting_per_replica is not None and replica.num_waiting >= adm.max_waiting_per_replica:
            return "queue_full"
        if adm.max_estimated_wait_s is not None and replica.estimated_wait_s() > adm.max_estimated_wait_s:
            return "estimated_wait"
        if adm.max_kv_usage is not None and replica.kv_usage >= adm.max_kv_usage:
            return "kv_usage"
        return ""

    def _reject(self, req: Request, reason: str, replica_index: int) -> None:
        """Refuse ``req`` now: logged, in the request table with its reason, never lost."""
        req.status = Status.REJECTED
        self.recorder.add_event(self.env.now, replica_index, EventKind.REJECT, req.request_id, 0, 0.0)
        self.ledger.reject(req.request_id, reason)
        self._on_done(req)

    def _on_replica_reject(self, req: Request, reason: str) -> None:
        """A replica's engine refused ``req`` (it can never run there); the event is logged."""
        self.ledger.reject(req.request_id, reason)
        self._on_done(req)

    def _release(self, release: Release) -> Process:
        """A request the source released, sent at its time (a follow-up turn think time
        after its parent finished, a client's next request when a slot frees)."""
        at = release.at_s
        try:
            if self.max_time_s is not None and at >= self.max_time_s:
                return
            yield self.env.timeout(max(at - self.env.now, 0.0))
        finally:
            self._in_flight -= 1
        self._send(release)

    def _on_done(self, req: Request) -> None:
        """``req`` finished or was rejected: send (or reject) what its completion releases."""
        self.num_finished += 1
        for release in self.source.on_done(req, self.env.now):
            if release.dropped:  # never sent: rejected with the source's reason
                turn = self.requests[release.spec.request_id]
                turn.arrival_s = float("nan")
                turn.status = Status.REJECTED
                self.ledger.reject(release.spec.request_id, release.dropped)
                self._on_done(turn)
            else:
                self._in_flight += 1
                self.env.process(self._release(release))
        if self.progress is not None and self.num_finished % 64 == 0:
            self.progress(self.env.now, self.num_finished, len(self.requests))
        if self.watch is not None and self.num_finished % WATCH_EVERY == 0:
            self._ask_watch()

    def _ask_watch(self) -> None:
        assert self.watch is not None
        reason = self.watch.check(self.env.now, self.num_arrived, self.num_finished)
        if reason is not None:
            raise RunStopped(reason, self.env.now)

    # -- disaggregated serving ---------------------------------------------------------
    def _on_handoff(self, req: Request) -> None:
        """Disaggregated serving: the prompt's KV goes from its prefill replica to a decode
        replica over the KV link, then decoding resumes there."""
        source = self.replicas[req.replica]
        num_bytes = source.geometry.bytes_for_tokens(req.num_computed_tokens)
        num_blocks = source.geometry.blocks_for_tokens(req.num_computed_tokens)
        self.recorder.add_event(
            self.env.now, source.index, EventKind.KV_TRANSFER, req.request_id, num_blocks, num_bytes
        )
        req.prefill_replica = req.replica
        self._in_flight += 1
        if self.transfers is None:
            delay = self.kv_link.transfer_time_s(num_bytes)
            self.ledger.transferred(req.request_id, delay, 0.0)
            self.env.process(self._deliver(req, delay))
            return
        # Shared links: the decode replica is chosen first, then its NIC carries the KV.
        target = self._decoders[self.decode_router.route(req, self.decode_view).index]
        src, dst = source.links, target.links
        assert src is not None and dst is not None
        transfer = self.transfers.send(
            num_bytes, (src.nic_tx, dst.nic_rx, *src.fabric), self.plan.scenario.kv_transfer.latency_s
        )

        def arrived(_ev: simpy.Event) -> None:
            took = self.env.now - transfer.start_s
            self.ledger.transferred(req.request_id, took, max(took - transfer.alone_s, 0.0))
            self._in_flight -= 1
            req.kv_transferred = True
            target.submit(req)

        transfer.event.callbacks.append(arrived)

    def _deliver(self, req: Request, delay: float) -> Process:
        yield self.env.timeout(delay)
        self._in_flight -= 1
        req.kv_transferred = True
        self._decoders[self.decode_router.route(req, self.decode_view).index].submit(req)


class Fleet:
    """Which replicas are provisioned and take requests, and the autoscalers that decide it.

    States: ready (takes requests), starting (cold start, paid for), draining (finishes
    its requests, takes no new ones), stopped (not provisioned). Replica-seconds run from
    the start of a run (or a scale-up decision) to the stop (or the end of the run).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        n = len(cluster.replicas)
        self.state = ["ready" if cluster.fleet_initially_active(i) else "stopped" for i in range(n)]
        self.since = [0.0 if s == "ready" else -1.0 for s in self.state]
        self.closed_seconds = [0.0] * n
        self.num_scale_ups = 0
        self.num_scale_downs = 0
        self.peak = sum(s != "stopped" for s in self.state)
        self.retired: list[EngineCounters] = []  # of engines a cold restart replaced: they still count
        self.policies = {
            g.index: ThresholdPolicy(g.config.autoscale)
            for g in cluster.plan.groups
            if g.config.autoscale is not None
        }
        self._members = {
            g: [i for i, grp in enumerate(cluster.groups) if grp.index == g] for g in self.policies
        }

    def start(self) -> None:
        for g in self.policies:
            self.cluster.env.process(self._autoscale(g))

    def _view_of(self, index: int) -> tuple[LiveClusterView, int]:
        c = self.cluster
        replica = c.replicas[index]
        members = c._decoders if c.groups[index].role == "decode" else c._entry
        view = c.decode_view if c.groups[index].role == "decode" else c.entry_view
        return view, members.index(replica)

    def _autoscale(self, group_index: int) -> Process:
        c = self.cluster
        policy = self.policies[group_index]
        members = self._members[group_index]
        while not c.done():
            yield EarlyTimeout(c.env, policy.config.interval_s)
            taking = [i for i in members if self.state[i] == "ready"]
            starting = sum(self.state[i] == "starting" for i in members)
            action = policy.decide(c.env.now, self._metric(policy, taking), len(taking), starting)
            if action > 0:
                # A draining replica is still warm: it takes requests again at once.
                draining = [i for i in members if self.state[i] == "draining"]
                if draining:
                    self._undrain(min(draining))
                else:
                    self._scale_up(next(i for i in members if self.state[i] == "stopped"), policy)
            elif action < 0:
                self._scale_down(max(taking))

    def _undrain(self, index: int) -> None:
        c = self.cluster
        self.state[index] = "ready"
        self.num_scale_ups += 1
        view, pos = self._view_of(index)
        view.set_active(pos, True)
        c.recorder.add_event(c.env.now, index, EventKind.REPLICA_READY, -1, 0, 0.0)

    def _metric(self, policy: ThresholdPolicy, taking: list[int]) -> float:
        if not taking:
            return float("inf")
        replicas = self.cluster.replicas
        kind = policy.config.metric
        if kind == "queue_length":
            values = [float(replicas[i].num_waiting) for i in taking]
        elif kind == "kv_usage":
            values = [replicas[i].kv_usage for i in taking]
        else:
            values = [float(replicas[i].num_outstanding) for i in taking]
        return sum(values) / len(values)

    def _scale_up(self, index: int, policy: ThresholdPolicy) -> None:
        c = self.cluster
        self.state[index] = "starting"
        self.since[index] = c.env.now
        self.num_scale_ups += 1
        self.peak = max(self.peak, sum(s != "stopped" for s in self.state))
        c.recorder.add_event(c.env.now, index, EventKind.SCALE_UP, -1, 0, 0.0)
        timer = EarlyTimeout(c.env, policy.config.cold_start_s)
        timer.callbacks.append(lambda _ev: self._ready(index))

    def _ready(self, index: int) -> None:
        """A cold start is over: a fresh engine (empty caches) takes requests."""
        c = self.cluster
        replica = c.replicas[index]
        self.retired.append(counters_of(replica.scheduler))
        sched = c.build_scheduler(c.groups[index])
        c.attach(replica, sched)
        self.state[index] = "ready"
        view, pos = self._view_of(index)
        view.set_active(pos, True)
        c.recorder.add_event(c.env.now, index, EventKind.REPLICA_READY, -1, 0, 0.0)

    def _scale_down(self, index: int) -> None:
        c = self.cluster
        self.state[index] = "draining"
        self.num_scale_downs += 1
        view, pos = self._view_of(index)
        view.set_active(pos, False)
        c.recorder.add_event(c.env.now, index, EventKind.SCALE_DOWN, -1, 0, 0.0)
        self.maybe_stop(index)

    def maybe_stop(self, index: int) -> None:
        """A draining replica with nothing left to do leaves (its caches are dropped)."""
        c = self.cluster
        replica = c.replicas[index]
        if self.state[index] != "draining" or replica.num_outstanding or replica.scheduler.has_work():
            return
        self.state[index] = "stopped"
        self.closed_seconds[index] += c.env.now - self.since[index]
        self.since[index] = -1.0
        pool = replica.scheduler.pool
        if replica.kv_sink is not None and pool.cached:
            replica.kv_sink(c.env.now, [(False, h) for h in pool.cached])
        c.recorder.add_event(c.env.now, index, EventKind.REPLICA_STOPPED, -1, 0, 0.0)

    def stats(self, end_s: float) -> ClusterStats:
        groups = self.cluster.groups
        seconds = [
            closed + (max(end_s - since, 0.0) if since >= 0 else 0.0)
            for closed, since in zip(self.closed_seconds, self.since, strict=True)
        ]
        return ClusterStats(
            replica_seconds=float(sum(seconds)),
            gpu_seconds=float(sum(s * g.tp for s, g in zip(seconds, groups, strict=True))),
            num_scale_ups=self.num_scale_ups,
            num_scale_downs=self.num_scale_downs,
            replicas_peak=self.peak,
        )
