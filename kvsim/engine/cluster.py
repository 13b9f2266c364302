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
from a `kvsim.engine.sources.RequestSource`, asked again whenever one is done. It builds its
parts from the resolved `Plan` (`kvsim.engine.wiring`); each replica is a SimPy process
(`kvsim.engine.replica`) around an engine without SimPy (`kvsim.engine.replica_engine`),
the only part of the engine that touches schedulers and block pools.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import simpy

from kvsim.core.beam_search import BeamStats
from kvsim.core.outcome import CacheStats, EventKind, SpecDecodeStats
from kvsim.core.request_state import Request, Status
from kvsim.engine.clock import EarlyTimeout
from kvsim.engine.fleet import ClusterStats, Fleet
from kvsim.engine.replica import Replica
from kvsim.engine.replica_engine import EngineCounters, ReplicaEngine
from kvsim.engine.routers import Router, make_router, reads_prefix_cache
from kvsim.engine.sources import ConversationSource, Release, RequestSource
from kvsim.engine.wiring import ClusterWiring, CostModelSource
from kvsim.errors import KvsimError
from kvsim.kv.links import DedicatedLink, KvLink
from kvsim.request import RequestSpec
from kvsim.results.ledger import RequestLedger
from kvsim.scenario.resolved import Plan
from kvsim.scenario.schema import RouterConfig

#: progress(sim_time_s, num_done, num_requests): done = finished or rejected.
ProgressFn = Callable[[float, int, int], None]
#: How often a `RunWatch` is asked: every this many requests sent, and as many done.
WATCH_EVERY = 16


class RunWatch(Protocol):
    """Looks at a run from the inside and may end it early (`kvsim.results.overload.DivergenceWatch`).

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


class Cluster(ClusterWiring):
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
        engine: type[ReplicaEngine] = ReplicaEngine,
    ) -> None:
        """``source`` decides when each of ``specs`` is sent (None: at its arrival time, a
        follow-up turn think time after its parent finishes; `ConversationSource`);
        ``watch`` may end the run early (`RunWatch`, raising `RunStopped` out of `run`);
        ``engine``: the class every replica's engine is built from (tests run their
        step-by-step oracle through it, ``tests/oracle.py``)."""
        scenario = plan.scenario
        self.plan = plan
        self.engine_class = engine
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
        self._build_replicas(cost_model, base_dir)
        router_rng = np.random.default_rng(np.random.SeedSequence(scenario.seed, spawn_key=(1,)))
        self.router = router if router is not None else make_router(scenario.router, router_rng)
        self._expects = reads_prefix_cache(self.router)
        self.kv_index = self._entry_index()
        self.entry_view = self._view(self.entry_replicas, self.kv_index, scenario.router.view.load_refresh_s)
        self.decode_view = self._view(self.decode_replicas, None, 0.0)
        decode_rng = np.random.default_rng(np.random.SeedSequence(scenario.seed, spawn_key=(2,)))
        self.decode_router = make_router(RouterConfig(kind=scenario.decode_router), decode_rng)
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
        # Private marks (content no other request holds, cached without a hash) may change
        # nothing but speed. A write-through tier would write a private block when cached
        # and again when its request's preemption publishes its hash, and a shared pool
        # would hold one placeholder per replica for content it stores once by hash: with
        # either, every block is hashed.
        plan = self.plan
        tiers_see_them = plan.shared_pool is not None or any(
            t.write_through for g in plan.groups for t in g.tiers
        )
        shared_ids = None if tiers_see_them else shared_content_ids(specs)
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
            replica.engine.materialize()
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
        return [r.engine.counters() for r in self.replicas] + self.fleet.retired

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
        replica = self.entry_replicas[chosen.index]
        if self._expects:
            self.ledger.expect(req.request_id, view.cached_tokens(req, chosen.index))
        view.forget()
        reason = self._refusal(replica)
        if reason:
            self._reject(req, reason, replica.index)
            return
        frontend = self.groups[replica.index].engine.frontend
        delay = frontend.request_s + frontend.per_prompt_token_s * req.prompt_tokens
        if delay > 0.0:  # the server's front end holds it first (`FrontendConfig`)
            self._in_flight += 1
            self.env.timeout(delay).callbacks.append(lambda _ev: self._through_frontend(req, replica))
            return
        replica.submit(req)

    def _through_frontend(self, req: Request, replica: Replica) -> None:
        """``req`` leaves ``replica``'s front end for its scheduler."""
        self._in_flight -= 1
        replica.submit(req)

    def _refusal(self, replica: Replica) -> str:
        """Why the chosen replica refuses a new request under the admission rules ('' if not)."""
        adm = self.plan.scenario.admission
        if adm.max_waiting_per_replica is not None and replica.num_waiting >= adm.max_waiting_per_replica:
            return "queue_full"
        if adm.max_estimated_wait_s is not None and replica.estimated_wait_s() > adm.max_estimated_wait_s:
            return "estimated_wait"
        if adm.max_kv_usage is not None:
            replica.sync()  # the pool as stepping would have left it by now
            if replica.kv_usage >= adm.max_kv_usage:
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
        target = self.decode_replicas[self.decode_router.route(req, self.decode_view).index]
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
        self.decode_replicas[self.decode_router.route(req, self.decode_view).index].submit(req)
