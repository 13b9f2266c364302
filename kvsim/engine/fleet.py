"""The fleet: which replicas are provisioned and take requests, and the autoscalers that
decide it; and what the cluster layer measured beyond the tables (`ClusterStats`)."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

from kvsim.core.outcome import EventKind
from kvsim.engine.autoscale import ThresholdPolicy
from kvsim.engine.clock import EarlyTimeout
from kvsim.engine.replica_engine import EngineCounters
from kvsim.engine.view import LiveClusterView

if TYPE_CHECKING:
    from kvsim.engine.cluster import Cluster

Process = Generator[simpy.Event, Any, None]


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
        members = c.decode_replicas if c.groups[index].role == "decode" else c.entry_replicas
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
            for i in taking:
                replicas[i].sync()  # pools mid-run as stepping would have left them by now
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
        self.retired.append(replica.engine.counters())
        c.attach(replica, cold=True)
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
        if self.state[index] != "draining" or replica.num_outstanding or replica.engine.has_work():
            return
        self.state[index] = "stopped"
        self.closed_seconds[index] += c.env.now - self.since[index]
        self.since[index] = -1.0
        sink, cached = replica.engine.kv_sink, replica.engine.cached_hashes()
        if sink is not None and cached:
            sink(c.env.now, [(False, h) for h in cached])
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
