"""How a cluster is put together: its replicas' engines and SimPy processes, their tiers,
the views and index routers read, the links on a fair-share network, and the callbacks
through which replicas tell the cluster what changed. `Cluster` inherits it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import simpy

from kvsim.core.request_state import Request
from kvsim.cost.base import CostModel
from kvsim.cost.factory import group_cost_model
from kvsim.engine.build import build_scheduler
from kvsim.engine.fleet import Fleet
from kvsim.engine.index import KvEventIndex
from kvsim.engine.lockstep import Lockstep
from kvsim.engine.replica import Replica, ReplicaLinks
from kvsim.engine.replica_engine import ReplicaEngine
from kvsim.engine.transfers import TransferService
from kvsim.engine.view import LiveClusterView
from kvsim.kv.links import FairShareNetwork
from kvsim.kv.tiers import BlockTier, TierStack
from kvsim.results.ledger import RequestLedger
from kvsim.results.recorder import Recorder
from kvsim.scenario.resolved import GroupPlan, Plan, TierPlan

#: A cost model for every replica, or one per replica group (given the group's plan).
CostModelSource = CostModel | Callable[[GroupPlan], CostModel]


class ClusterWiring:
    """Building and connecting a cluster's parts (the state is `Cluster`'s)."""

    plan: Plan
    env: simpy.Environment
    max_time_s: float | None
    engine_class: type[ReplicaEngine]
    groups: list[GroupPlan]
    replicas: list[Replica]
    instances: list[Lockstep]
    entry_replicas: list[Replica]
    decode_replicas: list[Replica]
    recorder: Recorder
    ledger: RequestLedger
    network: FairShareNetwork | None
    transfers: TransferService | None
    shared_pool: BlockTier | None
    kv_index: KvEventIndex | None
    entry_view: LiveClusterView
    decode_view: LiveClusterView
    total_outstanding: int
    entry_waiting: int
    _expects: bool
    _cluster_links: tuple[tuple[int, ...], tuple[int, ...]]

    fleet: Fleet
    # The cluster's handlers a replica calls (`kvsim.engine.cluster.Cluster`).
    _on_done: Callable[[Request], None]
    _on_handoff: Callable[[Request], None]
    _on_replica_reject: Callable[[Request, str], None]

    def _build_replicas(self, cost_model: CostModelSource | None, base_dir: Path | None) -> None:
        """The recorder, the network, the shared pool, and every replica with its engine."""
        plan, scenario = self.plan, self.plan.scenario
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
        self.instances = self._build_instances(costs)
        roles = [g.role for g in self.groups]
        # The replicas each router chooses among, and the views it sees them through.
        self.entry_replicas = [r for r, role in zip(self.replicas, roles, strict=True) if role != "decode"]
        self.decode_replicas = [r for r, role in zip(self.replicas, roles, strict=True) if role == "decode"]

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

    def _build_replica(self, index: int, name: str, group: GroupPlan, cost: CostModel) -> Replica:
        scheduler = build_scheduler(self.plan, group, self._tier_stack(group))
        engine = self.engine_class(
            index, scheduler, cost, self.recorder, group.kv, max_time_s=self.max_time_s
        )
        return Replica(
            self.env,
            engine,
            name,
            on_finish=self._on_done,
            on_handoff=self._on_handoff if group.role == "prefill" else None,
            on_reject=self._on_replica_reject,
            drive=not self._in_lockstep(group),
            async_scheduling=group.engine.async_scheduling,
        )

    def _in_lockstep(self, group: GroupPlan) -> bool:
        """Whether the group's replicas are attention-DP ranks sharing a mixture of experts."""
        model = group.served or self.plan.model
        return group.config.attention_dp > 1 and model.num_experts is not None

    def _build_instances(self, costs: dict[int, CostModel]) -> list[Lockstep]:
        """The attention-DP instances, each stepping its ranks together (`kvsim.engine.lockstep`)."""
        instances = []
        for group in self.plan.groups:
            if not self._in_lockstep(group):
                continue
            dp, cost = group.config.attention_dp, costs[group.index]
            ranks = [r for r in self.replicas if self.groups[r.index] is group]
            for first in range(0, len(ranks), dp):
                instances.append(
                    Lockstep(
                        self.env,
                        ranks[first : first + dp],
                        group.engine.backend,
                        getattr(cost, "max_graph_tokens", 0),
                        group.engine.attention_dp_balance,
                    )
                )
        return instances

    def _entry_index(self) -> KvEventIndex | None:
        """The KV-event index of the entry replicas, if the router may read cached prefixes."""
        view = self.plan.scenario.router.view
        groups = {self.groups[r.index].index: self.groups[r.index] for r in self.entry_replicas}
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
        for view, members in (
            (self.entry_view, self.entry_replicas),
            (self.decode_view, self.decode_replicas),
        ):
            for pos, replica in enumerate(members):
                replica.on_load = self._load_callback(view, pos, replica.index)
                if view is self.entry_view:
                    replica.on_waiting = self._waiting_callback()
                    if adm.max_estimated_wait_s is not None:
                        replica.admission_window_s = adm.estimate_window_s
                    if self.kv_index is not None:
                        replica.engine.kv_sink = self._sink(self.kv_index, pos)
        for replica in self.replicas:
            replica.engine.ledger = self.ledger
            if self.network is not None:
                replica.links = self._links(replica)
                replica.transfers = self.transfers
            self.attach(replica)

    def attach(self, replica: Replica, *, cold: bool = False) -> None:
        """Set ``replica``'s engine up, with its tiers, event log and execution strategy;
        ``cold``: a fresh scheduler and pool first (a cold restart: empty caches)."""
        group = self.groups[replica.index]
        engine = replica.engine
        scheduler = None
        if cold:
            stack = self._tier_stack(group)
            scheduler = build_scheduler(self.plan, group, stack)
        else:
            stack = engine.offload_tiers()
        plans = self._tier_stack_plans(group) if stack is not None else ()
        delay = self.kv_index.delay_s if self.kv_index is not None else 0.0
        # Steps are taken one at a time where another replica could see a decode run's side
        # effects at their exact instants: the shared pool, write-through, writes on shared links.
        ff = self.plan.scenario.sim.fast_forward and not (
            any(p.kind == "shared_pool" or p.write_through for p in plans)
            or (self.network is not None and plans)
        )
        engine.attach(
            scheduler,
            tiers=stack,
            tier_plans=plans,
            kv_events=engine.kv_sink is not None,
            stamped=engine.kv_sink is not None and delay > 0,
            fast_forward=ff,
        )
        replica.attached()

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
