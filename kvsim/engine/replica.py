"""One serving replica as a SimPy process: schedule -> wait the iteration's time -> apply.

This loop is kvsim's hot path: one SimPy event per engine iteration, never per token.
Runs of identical pure-decode iterations (`kvsim.core.decode_run`) are priced and waited
for as one event (``fast_forward``) and committed afterwards; an arrival in the middle
interrupts the wait, which then ends at the first iteration boundary at or after the
arrival, exactly where stepping one iteration at a time would have admitted it.

Iteration boundaries come after ordinary events of the same instant (`kvsim.engine.clock`),
so requests arriving exactly at a boundary are seen by the iteration starting there.

Besides its engine, a replica reports what the cluster layer watches: its unfinished
requests (``on_load``), its waiting queue (``on_waiting``), the KV events of its pool
(``kv_sink``, stamped with the start of the iteration that caused them, also inside a
decode run), the blocks its offload tiers wrote and loaded (per request, per tier), and
it prices tier loads on their links: whole (``dedicated``) or shared with other
transfers (``fair_share``, through `kvsim.engine.transfers`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from kvsim.core.block import PRIVATE
from kvsim.core.decode_run import CohortRun, DecodeRun, plan_cohort_run, plan_decode_run
from kvsim.core.outcome import EventKind, KvEvent, SchedulerOutput, StepOutcome
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import CostModel
from kvsim.engine.clock import LateTimeout
from kvsim.engine.transfers import TransferService
from kvsim.kv.tiers import TierStack
from kvsim.results.ledger import RequestLedger
from kvsim.results.recorder import Recorder
from kvsim.scenario.resolved import KvGeometry, TierPlan

#: Longest decode run priced in one piece (bounds the arrays it needs).
MAX_RUN_STEPS = 4096

Process = Generator[simpy.Event, Any, None]
#: kv_sink(stamp_s, events): KV events of this replica's pool at ``stamp_s``.
KvSink = Callable[[float, list[tuple[bool, int]]], None]


@dataclass(frozen=True, slots=True)
class ReplicaLinks:
    """A replica's links on a fair-share network (ids in `FairShareNetwork`), and the
    cluster-wide ones its transfers to other replicas and the shared pool also cross."""

    pcie_h2d: int
    pcie_d2h: int
    nic_tx: int
    nic_rx: int
    nvme: int | None = None
    fabric: tuple[int, ...] = ()
    pool: tuple[int, ...] = ()


class Replica:
    """A serving engine: a scheduler, a block pool, a cost model and a SimPy process."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        name: str,
        scheduler: Scheduler,
        cost: CostModel,
        recorder: Recorder,
        geometry: KvGeometry,
        *,
        fast_forward: bool = True,
        max_time_s: float | None = None,
        on_finish: Callable[[Request], None],
        on_handoff: Callable[[Request], None] | None = None,
        on_reject: Callable[[Request, str], None] | None = None,
    ) -> None:
        self.env = env
        self.index = index
        self.name = name
        self.scheduler = scheduler
        self.cost = cost
        self.recorder = recorder
        self.geometry = geometry
        self.fast_forward = fast_forward
        self.max_time_s = max_time_s
        self.on_finish = on_finish
        self.on_handoff = on_handoff
        self.on_reject = on_reject
        self.clock = 0.0  # exact end of the last iteration (SimPy's clock may differ by an ulp)
        self.num_outstanding = 0  # submitted and not finished or handed off (router load signal)
        # What the cluster layer watches (set by the cluster; None: nobody).
        self.on_load: Callable[[int], None] | None = None
        self.on_waiting: Callable[[int], None] | None = None
        self.kv_sink: KvSink | None = None
        self.ledger: RequestLedger | None = None
        self.tiers: TierStack | None = None
        self.tier_plans: tuple[TierPlan, ...] = ()
        self.transfers: TransferService | None = None
        self.links: ReplicaLinks | None = None
        self.admission_window_s: float | None = None  # track admissions for estimated waits
        self._admissions: deque[tuple[float, int]] = deque()
        self._admitted_in_window = 0
        self._ever_admitted = False
        self._waiting_seen = 0
        self._per_step = False  # decode runs advance step by step (stamped events, tier writes)
        self._wake: simpy.Event | None = None
        self._in_run = False
        self._run: DecodeRun | CohortRun | None = None  # the decode run being waited for, if any
        self._run_start = 0.0
        self._run_ends = np.zeros(0)
        # Arrivals during the run that do not end it (`Scheduler.arrivals_wait_for_now`),
        # and whether they may: their times give each iteration's waiting count.
        self._run_rides = False
        self._run_arrivals: list[float] = []
        self._run_steps = 0
        self._tier_loads: list[int] = []  # blocks loaded per tier by the iteration being priced
        self._loaded_order: list[int] = []  # the tier of each of those blocks, in load order
        self._run_writes: list[tuple[float, int, float]] = []  # a decode run's tier writes
        self.process = env.process(self._loop())

    def attach(
        self,
        *,
        tiers: TierStack | None,
        tier_plans: tuple[TierPlan, ...],
        kv_events: bool,
        stamped: bool,
        fast_forward: bool,
        lazy_decodes: bool,
    ) -> None:
        """Wire the pool's KV event log and offload tiers (again after a cold restart).

        ``lazy_decodes``: advance plain decoders lazily (`kvsim.core.cohort`) where the
        scheduler can; the results are the same bit for bit either way (tests compare
        both), off every iteration walks every running request.
        """
        self.tiers = tiers
        self.tier_plans = tier_plans
        pool = self.scheduler.pool
        writes_through = tiers is not None and any(tiers.write_through)
        pool.kv_events = [] if (kv_events or writes_through) else None
        pool.kv_events_private = writes_through
        self._per_step = stamped or tiers is not None
        self.fast_forward = fast_forward
        if lazy_decodes:
            self.scheduler.enable_cohort()
        self._admissions.clear()
        self._admitted_in_window = 0
        self._ever_admitted = False
        self._waiting_seen = self.scheduler.num_waiting

    # -- what a router may read (through kvsim.engine.view) ------------------------
    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return self.scheduler.num_waiting

    @property
    def kv_usage(self) -> float:
        self.sync()
        pool = self.scheduler.pool
        return pool.num_used_blocks / pool.num_blocks

    def cached_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens this replica would hit for ``req`` now (whole blocks)."""
        self.sync()  # mid-run pools first catch up with the iterations already started
        pool = self.scheduler.pool
        if not pool.enable_caching:
            return 0
        bs = self.geometry.block_size
        return len(req.match_prefix(bs, pool.cached.get)) * bs

    def estimated_wait_s(self) -> float:
        """Waiting requests / requests admitted per second over the admission window.

        0 before the replica ever admitted anything; infinite when it admitted nothing in
        the window but has requests waiting.
        """
        window = self.admission_window_s
        assert window is not None, "admissions are tracked only under an estimated-wait rule"
        dq, now = self._admissions, self.env.now
        while dq and dq[0][0] <= now - window:
            self._admitted_in_window -= dq.popleft()[1]
        waiting = self.scheduler.num_waiting
        if not waiting or not self._ever_admitted:
            return 0.0
        if not self._admitted_in_window:
            return float("inf")
        return waiting * window / self._admitted_in_window

    def sync(self, until: float | None = None, *, inclusive: bool = False) -> None:
        """Bring the block pool up to a time (default now) for someone looking into it.

        During a fast-forwarded decode run the iterations' block allocations (and the
        evictions they cause) are made when the run is committed; a router reading the
        prefix cache mid-run first makes those of the iterations already started, exactly
        as stepping would have made them by then. Step 0 started before now (a run is never
        entered at the time of the query); step k >= 1 starts at ends[k - 1] and has started
        at ``until`` if it lies strictly before it (at or before it with ``inclusive``).
        """
        run = self._run
        if run is None:
            return
        t = self.env.now if until is None else until
        ends = self._run_ends[: self._run_steps - 1]
        found = np.searchsorted(ends, t, side="right") if inclusive else np.searchsorted(ends, t, side="left")
        started = 1 + int(found)
        self._advance_run(run, started)

    def _advance_run(self, run: DecodeRun | CohortRun, started: int) -> None:
        """Make the run's allocations of its first ``started`` steps, publishing step by step."""
        if not self._per_step:
            run.advance(started)
            self._drain(self.env.now)
            return
        run.advance(started, self._drain_step)

    def _drain_step(self, j: int) -> None:
        """Publish what step j of the decode run being waited for did, stamped with its start."""
        self._drain(self._run_start if j == 0 else float(self._run_ends[j - 1]))

    # -- arrivals ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Hand a request to this replica at the current simulated time."""
        req.replica = self.index
        rejection = self.scheduler.add_request(req)
        if rejection is not None:
            self._record_events(self.env.now, [rejection])
            self._rejected(req, rejection.reason)
            return
        self._add_outstanding(1)
        self._waiting_changed()
        if self._wake is not None:
            wake, self._wake = self._wake, None
            wake.succeed()
        elif self._in_run:
            if self._run_rides:  # it cannot be admitted before the run ends: no cut
                self._run_arrivals.append(self.env.now)
            else:
                self._in_run = False
                self.process.interrupt()

    def _rejected(self, req: Request, reason: str) -> None:
        """The engine refused ``req``: it can never run here (`kvsim.result.REJECT_REASONS`)."""
        if self.on_reject is not None:
            self.on_reject(req, reason)
        else:
            self.on_finish(req)

    def _add_outstanding(self, delta: int) -> None:
        self.num_outstanding += delta
        if self.on_load is not None:
            self.on_load(delta)

    def _waiting_changed(self) -> None:
        waiting = self.scheduler.num_waiting
        delta, self._waiting_seen = waiting - self._waiting_seen, waiting
        if delta and self.on_waiting is not None:
            self.on_waiting(delta)

    # -- the engine loop -----------------------------------------------------------
    def _sleep(self) -> Process:
        """Wait for a submission, then for the rest of that instant's events."""
        self._wake = self.env.event()
        yield self._wake
        yield LateTimeout(self.env, 0)
        self.clock = self.env.now

    def _loop(self) -> Process:
        max_time = self.max_time_s
        while True:
            if not self.scheduler.has_work():
                yield from self._sleep()
            sched = self.scheduler  # a cold restart may have replaced it while asleep
            now = self.clock
            if max_time is not None and now >= max_time:
                return
            running_before = len(sched.running)
            out = sched.schedule(now)
            self._after_schedule(now, out, running_before)
            for req in out.rejected:  # nothing could ever schedule them
                self._add_outstanding(-1)
                self._rejected(req, "unschedulable")
            if (
                not out.tokens and not out.num_lazy_decodes
            ):  # cannot happen with an empty pool, but never spin
                yield from self._sleep()
                continue
            run: DecodeRun | CohortRun | None = None
            if self.fast_forward:
                if sched.cohort is not None:
                    run = plan_cohort_run(sched, out, MAX_RUN_STEPS)
                else:
                    run = plan_decode_run(sched, out, MAX_RUN_STEPS)
            if run is None:
                yield from self._step(now, out)
            else:
                yield from self._decode_run(now, run)

    def _after_schedule(self, now: float, out: SchedulerOutput, running_before: int) -> None:
        """Record what scheduling did, and tell the cluster layer."""
        self._record_events(now, out.events)
        self._record_evictions(now, out.num_evicted)
        self._tier_loads = self._drain(now)
        if self._tier_loads and self.ledger is not None:
            self._count_tier_hits(out.events)
        self._waiting_changed()
        if self.admission_window_s is not None:
            admitted = len(self.scheduler.running) - running_before + out.num_preempted
            if admitted > 0:
                self._admissions.append((now, admitted))
                self._admitted_in_window += admitted
                self._ever_admitted = True

    def _step(self, now: float, out: SchedulerOutput) -> Process:
        """One iteration: price it, record it, wait for its end, apply it."""
        sched = self.scheduler
        pool = sched.pool
        used, cached = pool.num_used_blocks, pool.num_cached_free
        stored, waiting = sched.num_tokens_stored + out.num_scheduled_tokens, sched.num_waiting
        dt = self.cost.step_time_s(out.batch)
        if self.transfers is None:
            dt += self._dedicated_transfer_s(out)
        else:
            t0 = self.env.now
            yield from self._shared_transfers(out)
            dt += self.env.now - t0
        self.recorder.add_iteration(
            self.index,
            now,
            dt,
            out,
            num_waiting=waiting,
            kv_blocks_used=used,
            kv_blocks_cached=cached,
            kv_tokens_stored=stored,
        )
        t_end = now + dt
        yield LateTimeout(self.env, max(t_end - self.env.now, 0.0))
        self.clock = t_end
        self._dispatch(sched.update(out, t_end))

    def _dedicated_transfer_s(self, out: SchedulerOutput) -> float:
        """Swap copies and tier loads, each on its whole link, one after the other."""
        loads, plans = self._tier_loads, self.tier_plans
        dram = sum(n for n, p in zip(loads, plans, strict=False) if p.bandwidth_bytes_per_s is None)
        moved = out.swap_in_blocks + out.swap_out_blocks + (dram if plans else out.offload_load_blocks)
        geo = self.geometry
        dt = 0.0
        if moved:
            dt += self.cost.pcie_transfer_s(moved * geo.bytes_per_block_per_shard)
        for n, p in zip(loads, plans, strict=False):
            if n and p.bandwidth_bytes_per_s is not None:
                per_block = geo.bytes_per_block_per_shard if p.per_shard else geo.bytes_per_block
                dt += p.latency_s + n * per_block / p.bandwidth_bytes_per_s
        return dt

    def _shared_transfers(self, out: SchedulerOutput) -> Process:
        """Swap copies and tier loads as transfers on the shared links; wait for all of them."""
        transfers, links, geo = self.transfers, self.links, self.geometry
        assert transfers is not None and links is not None
        shard = geo.bytes_per_block_per_shard
        h2d = out.swap_in_blocks
        events = []
        for n, p in zip(self._tier_loads, self.tier_plans, strict=False):
            if not n:
                continue
            if p.kind == "dram":
                h2d += n
            elif p.kind == "nvme":
                assert links.nvme is not None
                path: tuple[int, ...] = (links.nvme, links.pcie_h2d)
                events.append(transfers.send(n * shard, path, p.latency_s).event)
            else:
                path = (links.nic_rx, *links.fabric, *links.pool)
                events.append(transfers.send(n * geo.bytes_per_block, path, p.latency_s).event)
        if h2d:
            events.append(transfers.send(h2d * shard, (links.pcie_h2d,)).event)
        if out.swap_out_blocks:
            events.append(transfers.send(out.swap_out_blocks * shard, (links.pcie_d2h,)).event)
        if events:
            yield simpy.AllOf(self.env, events)

    def _decode_run(self, now: float, run: DecodeRun | CohortRun) -> Process:
        """A fast-forwarded stretch of decode iterations, cut short by an arrival that the
        next schedule might admit (others ride along: they only raise the waiting count)."""
        sched, env = self.scheduler, self.env
        dts = self.cost.decode_steps_s(run.num_seqs, run.context_tokens())
        ends = np.cumsum(np.concatenate(([now], dts)))[1:]
        run.step_starts = np.concatenate(([now], ends[:-1]))
        if isinstance(run, CohortRun):
            run.ends = ends
        k = run.num_steps
        if self.max_time_s is not None and ends[k - 2] >= self.max_time_s:
            # Iterations starting at or after max_time never start.
            k = int(np.searchsorted(ends, self.max_time_s, side="left")) + 1
        m = k
        # The pool and queues as scheduled: arrivals and early allocations (`sync`)
        # during the run must not leak into step 0's record.
        pool = sched.pool
        num_waiting, used0, cached0 = sched.num_waiting, pool.num_used_blocks, pool.num_cached_free
        stored0 = sched.num_tokens_stored
        self._in_run = True
        self._run, self._run_start, self._run_ends, self._run_steps = run, now, ends, k
        self._run, self._run_ends, self._run_steps = run, ends, k
        self._run_rides = sched.arrivals_wait_for_now()
        arrivals = self._run_arrivals = []
        try:
            yield LateTimeout(env, max(float(ends[k - 1]) - env.now, 0.0))
        except simpy.Interrupt:
            # An arrival: finish the iteration in progress, then schedule anew.
            m = min(int(np.searchsorted(ends, env.now, side="left")) + 1, k)
            yield LateTimeout(env, max(float(ends[m - 1]) - env.now, 0.0))
        self._in_run = False
        self._advance_run(run, m)
        self._run = None
        self.clock = float(ends[m - 1])
        pre = None
        if isinstance(run, DecodeRun) and self._stamps():
            pre = [(r.num_cached_blocks, r.num_computed_tokens) for r in run.reqs]
        if arrivals:  # iteration j >= 1 starts at ends[j - 1] and sees arrivals up to then
            waiting: int | np.ndarray = num_waiting + np.concatenate(
                ([0], np.searchsorted(np.asarray(arrivals), ends[: m - 1], side="right"))
            )
        else:
            waiting = num_waiting
        new_blocks, evicted, outcome = run.commit(m, ends, dts)
        if isinstance(run, DecodeRun):
            self._publish_run_registrations(run, pre, now, ends, m)
        elif self.scheduler.pool.kv_events:  # a cohort run registers blocks as it goes
            self._drain(self.clock)
        self.recorder.add_decode_run(
            self.index,
            now,
            ends[:m],
            dts[:m],
            run.num_seqs,
            num_waiting=waiting,
            kv_blocks_used=used0,
            kv_blocks_cached=cached0,
            kv_tokens_stored=stored0,
            new_blocks=new_blocks,
            evicted=evicted,
        )
        self._record_run_evictions(now, ends[:m], evicted)
        for stamp, n, num_bytes in self._run_writes:
            self.recorder.add_event(stamp, self.index, EventKind.TIER_WRITE, -1, n, num_bytes)
        self._run_writes.clear()
        self._dispatch(outcome)

    # -- KV events and tiers ---------------------------------------------------------
    def _stamps(self) -> bool:
        """Whether KV events need their exact step times (a delayed index is listening)."""
        return self._per_step and self.kv_sink is not None and self.scheduler.pool.kv_events is not None

    def _drain(self, stamp: float) -> list[int]:
        """Publish the pool's KV events and the tiers' writes at ``stamp``; return the
        blocks loaded per tier since the last drain."""
        pool = self.scheduler.pool
        log = pool.kv_events
        if log:
            pool.kv_events = []
            tiers = self.tiers
            if tiers is not None and any(tiers.write_through):
                for stored, h in log:
                    if stored:
                        tiers.write_through_block(None if h == PRIVATE else h)
            if self.kv_sink is not None:
                self.kv_sink(stamp, log)
        tiers = self.tiers
        if tiers is None:
            return []
        writes, loads = tiers.drain()
        if any(writes):
            self._record_tier_writes(stamp, writes)
        if not loads:
            return []
        per_tier = [0] * len(tiers.tiers)
        for i in loads:
            per_tier[i] += 1
        self._loaded_order = loads
        return per_tier

    def _count_tier_hits(self, events: list[KvEvent]) -> None:
        """Split the blocks loaded in load order over the requests that loaded them."""
        ledger, loads = self.ledger, self._loaded_order
        assert ledger is not None
        bs = self.geometry.block_size
        kinds = [p.kind for p in self.tier_plans]
        pos = 0
        for ev in events:
            if ev.kind is not EventKind.OFFLOAD_LOAD:
                continue
            req_tiers = loads[pos : pos + ev.num_blocks]
            pos += ev.num_blocks
            ledger.add_tier_hits(ev.request_id, [kinds[i] for i in req_tiers], bs)

    def _record_tier_writes(self, stamp: float, writes: list[int]) -> None:
        geo = self.geometry
        for n, p in zip(writes, self.tier_plans, strict=False):
            if not n:
                continue
            num_bytes = n * geo.bytes_per_block
            if self._run is not None:  # recorded after the run's evictions, as stepping orders them
                self._run_writes.append((stamp, n, num_bytes))
            else:
                self.recorder.add_event(stamp, self.index, EventKind.TIER_WRITE, -1, n, num_bytes)
            if self.ledger is not None:
                self.ledger.tier_write_bytes[p.kind] = (
                    self.ledger.tier_write_bytes.get(p.kind, 0.0) + num_bytes
                )
            if self.transfers is not None:
                self._send_write(n, p)

    def _send_write(self, n: int, plan: TierPlan) -> None:
        """Fair share: a write is a transfer on the tier's links that nobody waits for."""
        transfers, links, geo = self.transfers, self.links, self.geometry
        assert transfers is not None and links is not None
        if plan.kind == "dram":
            transfers.send(n * geo.bytes_per_block_per_shard, (links.pcie_d2h,))
        elif plan.kind == "nvme":
            assert links.nvme is not None
            transfers.send(n * geo.bytes_per_block_per_shard, (links.pcie_d2h, links.nvme))
        else:
            transfers.send(n * geo.bytes_per_block, (links.nic_tx, *links.fabric, *links.pool))

    def _publish_run_registrations(
        self,
        run: DecodeRun,
        pre: list[tuple[int, int]] | None,
        start: float,
        ends: np.ndarray,
        num_steps: int,
    ) -> None:
        """A committed run's cache registrations, each stamped with the start of the step
        that filled its block (as stepping would have published it)."""
        pool = self.scheduler.pool
        log = pool.kv_events
        if not log:
            return
        if pre is None:
            self._drain(self.clock)
            return
        pool.kv_events = []
        bs = self.geometry.block_size
        stamped: list[tuple[float, tuple[bool, int]]] = []
        p = 0
        for req, (old_cached, computed) in zip(run.reqs, pre, strict=True):
            while p < len(log) and log[p][1] == PRIVATE:
                p += 1  # private blocks come first and are not indexed
            hashes = req.block_hashes
            num_full = (computed + num_steps) // bs  # what commit registered up to (finished or not)
            for b in range(old_cached, min(req.private_from_token // bs, num_full)):
                if p < len(log) and log[p][1] == hashes[b]:
                    j = (b + 1) * bs - 1 - computed  # the run step whose token filled block b
                    stamped.append((start if j <= 0 else float(ends[j - 1]), log[p]))
                    p += 1
        assert p == len(log) or all(h == PRIVATE for _, h in log[p:])
        stamped.sort(key=lambda e: e[0])
        sink = self.kv_sink
        assert sink is not None
        i = 0
        while i < len(stamped):
            t, k = stamped[i][0], i
            while k < len(stamped) and stamped[k][0] == t:
                k += 1
            sink(t, [e for _, e in stamped[i:k]])
            i = k

    # -- records and hand-overs ------------------------------------------------------
    def _record_events(self, t: float, events: list[KvEvent]) -> None:
        bytes_per_block = self.geometry.bytes_per_block
        for ev in events:
            self.recorder.add_event(
                t, self.index, ev.kind, ev.request_id, ev.num_blocks, ev.num_blocks * bytes_per_block
            )

    def _record_evictions(self, t: float, n: int) -> None:
        if n:
            self.recorder.add_event(t, self.index, EventKind.EVICT, -1, n, n * self.geometry.bytes_per_block)

    def _record_run_evictions(self, now: float, ends: np.ndarray, evicted: np.ndarray) -> None:
        """A committed decode run: one eviction record per iteration that evicted blocks
        (``evicted``: cumulative)."""
        if not len(evicted) or not evicted[-1]:
            return
        before = 0
        for j, total in enumerate(evicted.tolist()):
            if total != before:
                self._record_evictions(now if j == 0 else float(ends[j - 1]), total - before)
                before = total

    def _dispatch(self, outcome: StepOutcome) -> None:
        """Hand the requests an iteration's end took out of the batch to the cluster."""
        for req in outcome.finished:
            self._add_outstanding(-1)
            req.forget_hashes()  # nothing looks its blocks up again: only its table row is kept
            self.on_finish(req)
        if outcome.handoffs:
            assert self.on_handoff is not None, "a prefill replica needs somewhere to send its KV"
            for req in outcome.handoffs:
                self._add_outstanding(-1)
                self.on_handoff(req)
