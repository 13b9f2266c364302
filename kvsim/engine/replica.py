"""One serving replica as a SimPy process: schedule -> wait the iteration's time -> apply.

This loop is kvsim's hot path: one SimPy event per engine iteration, never per token.
Everything an iteration does happens in the replica's engine
(`kvsim.engine.replica_engine.ReplicaEngine`, no SimPy); this layer only waits, is
interrupted and tells the cluster. Runs of identical pure-decode iterations are waited
for as one event (``fast_forward``); an arrival in the middle interrupts the wait, which
then ends at the first iteration boundary at or after the arrival, exactly where stepping
one iteration at a time would have admitted it.

Iteration boundaries come after ordinary events of the same instant (`kvsim.engine.clock`),
so requests arriving exactly at a boundary are seen by the iteration starting there.

With ``async_scheduling`` (vLLM's, SGLang's and TensorRT-LLM's overlap of scheduling with
the running iteration) the next iteration was decided while this one ran: a request that
arrives during an iteration (its end included) is held back and joins the scheduler's queue
just after the next iteration is scheduled, so it can start in the one after. An idle
replica takes it at once.

Besides its engine, a replica reports what the cluster layer watches: its unfinished
requests (``on_load``), its waiting queue (``on_waiting``), its admissions (for estimated
waits), and it waits for its transfers on links it shares with other transfers
(``fair_share``, through `kvsim.engine.transfers`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from kvsim.core.outcome import SchedulerOutput, StepOutcome
from kvsim.core.request_state import Request
from kvsim.engine.clock import LateTimeout
from kvsim.engine.replica_engine import ReplicaEngine, RunPlan
from kvsim.engine.transfers import TransferService
from kvsim.scenario.resolved import TierPlan

Process = Generator[simpy.Event, Any, None]


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
    """A serving engine's SimPy process: it waits, is interrupted by arrivals, and reports."""

    def __init__(
        self,
        env: simpy.Environment,
        engine: ReplicaEngine,
        name: str,
        *,
        on_finish: Callable[[Request], None],
        on_handoff: Callable[[Request], None] | None = None,
        on_reject: Callable[[Request, str], None] | None = None,
        drive: bool = True,
        async_scheduling: bool = False,
    ) -> None:
        """``drive``: run the replica's own engine loop; False for an attention-DP rank, whose
        instance steps it with the others (`kvsim.engine.lockstep.Lockstep`).
        ``async_scheduling``: arrivals during an iteration wait for the one after the next."""
        self.env = env
        self.engine = engine
        self.index = engine.index
        self.name = name
        self.geometry = engine.geometry
        self.on_finish = on_finish
        self.on_handoff = on_handoff
        self.on_reject = on_reject
        self.clock = 0.0  # exact end of the last iteration (SimPy's clock may differ by an ulp)
        self.num_outstanding = 0  # submitted and not finished or handed off (router load signal)
        # What the cluster layer watches (set by the cluster; None: nobody).
        self.on_load: Callable[[int], None] | None = None
        self.on_waiting: Callable[[int], None] | None = None
        self.transfers: TransferService | None = None
        self.links: ReplicaLinks | None = None
        self.admission_window_s: float | None = None  # track admissions for estimated waits
        self._admissions: deque[tuple[float, int]] = deque()
        self._admitted_in_window = 0
        self._ever_admitted = False
        self._waiting_seen = 0
        self._wake: simpy.Event | None = None
        self._in_run = False
        # Arrivals during a decode run that do not end it (`Scheduler.arrivals_wait_for_now`),
        # and whether they may: their times give each iteration's waiting count.
        self._run_rides = False
        self._run_arrivals: list[float] = []
        self.async_scheduling = async_scheduling
        self.stepping = False  # an iteration (or a decode run) is in flight
        self._run_ends: np.ndarray = np.zeros(0)  # a decode run's iteration ends
        self._run_last_start = 0.0  # and where its last iteration starts
        self._deferred: list[Request] = []  # arrivals the next iteration was scheduled without
        self.process = env.process(self._loop()) if drive else None

    def attached(self) -> None:
        """The engine was (re)attached: a new engine after a cold restart starts afresh."""
        if self.transfers is not None:
            self.engine.shared_links = True
            self.engine.write_sink = self._send_write
        self._admissions.clear()
        self._admitted_in_window = 0
        self._ever_admitted = False
        self._waiting_seen = self.engine.num_waiting

    # -- what a router may read (through kvsim.engine.view) ------------------------
    @property
    def num_running(self) -> int:
        return self.engine.num_running

    @property
    def num_waiting(self) -> int:
        return self.engine.num_waiting

    @property
    def kv_usage(self) -> float:
        """The pool's usage as it stands (mid-run: call `sync` first)."""
        return self.engine.kv_usage

    def cached_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens this replica's pool would hit for ``req`` as it stands (whole
        blocks; mid-run: call `sync` first)."""
        return self.engine.cached_prefix_tokens(req)

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
        waiting = self.engine.num_waiting
        if not waiting or not self._ever_admitted:
            return 0.0
        if not self._admitted_in_window:
            return float("inf")
        return waiting * window / self._admitted_in_window

    def sync(self, until: float | None = None, *, inclusive: bool = False) -> None:
        """Bring the engine's pool up to a time (default now) for someone looking into it
        (`ReplicaEngine.advance_to`)."""
        now = self.env.now
        self.engine.advance_to(now if until is None else until, now, inclusive=inclusive)

    # -- arrivals ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Hand a request to this replica at the current simulated time."""
        if self.stepping and self.async_scheduling and self._defers_now():
            self._deferred.append(req)
            self._add_outstanding(1)
            if self._in_run and not self._run_rides:
                self._in_run = False  # end the run with the iteration in progress
                assert self.process is not None
                self.process.interrupt()
            return
        reason = self.engine.add_request(req, self.env.now)
        if reason is not None:
            self._rejected(req, reason)
            return
        self._add_outstanding(1)
        self._waiting_changed()
        if self._wake is not None:
            wake, self._wake = self._wake, None
            if not wake.triggered:  # an instance's ranks share one wake-up
                wake.succeed()
        elif self._in_run:
            if self._run_rides:  # it cannot be admitted before the run ends: no cut
                self._run_arrivals.append(self._seen_from())
            else:
                self._in_run = False
                assert self.process is not None
                self.process.interrupt()

    def _seen_from(self) -> float:
        """When a riding arrival joins the waiting count: now; with async scheduling, at the
        start of the iteration after the next (it is not in the queue the next one was
        scheduled from)."""
        now = self.env.now
        if not self.async_scheduling:
            return now
        ends = self._run_ends
        return float(ends[int(np.searchsorted(ends, now, side="left")) + 1])

    def _defers_now(self) -> bool:
        """Whether an arrival now misses the next iteration's schedule: always within a
        stepped iteration; within a decode run whose arrivals ride to its end (they cannot
        be admitted before it), only during the run's last iteration."""
        return not (self._in_run and self._run_rides) or self.env.now > self._run_last_start

    def release_deferred(self) -> bool:
        """Queue the arrivals held back while the iteration just scheduled was decided; True
        if there were any."""
        if not self._deferred:
            return False
        deferred, self._deferred = self._deferred, []
        now = self.env.now
        for req in deferred:
            reason = self.engine.add_request(req, now)
            if reason is not None:
                self._add_outstanding(-1)
                self._rejected(req, reason)
        self._waiting_changed()
        return True

    @property
    def has_deferred(self) -> bool:
        return bool(self._deferred)

    def _rejected(self, req: Request, reason: str) -> None:
        """The engine refused ``req``: it can never run here (`kvsim.results.result.REJECT_REASONS`)."""
        if self.on_reject is not None:
            self.on_reject(req, reason)
        else:
            self.on_finish(req)

    def _add_outstanding(self, delta: int) -> None:
        self.num_outstanding += delta
        if self.on_load is not None:
            self.on_load(delta)

    def _waiting_changed(self) -> None:
        waiting = self.engine.num_waiting
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
        engine = self.engine  # the same engine for good (a cold restart gives it a new scheduler)
        max_time = engine.max_time_s
        while True:
            if not engine.has_work() and not self._deferred:
                yield from self._sleep()
            now = self.clock
            if max_time is not None and now >= max_time:
                return
            out = self.schedule(now)
            if not out.tokens and not out.num_lazy_decodes:
                if self.release_deferred():
                    continue  # the held-back arrivals start the next iteration, now
                yield from self._sleep()  # not with an empty pool, but never spin
                continue
            # Held-back arrivals join the queue once this iteration is priced (`_step`); they
            # may start in the next one: no decode run.
            run = None if self._deferred else engine.plan_run(out)
            self.stepping = True
            if run is None:
                yield from self._step(now, out)
            else:
                yield from self._decode_run(now, run)
            self.stepping = False

    def schedule(self, now: float) -> SchedulerOutput:
        """Schedule the iteration starting at ``now``; tell the cluster what that did."""
        engine = self.engine
        running_before = engine.num_running if self.admission_window_s is not None else 0
        out = engine.schedule(now)
        self._after_schedule(now, out, running_before)
        for req in out.rejected:  # nothing could ever schedule them
            self._add_outstanding(-1)
            self._rejected(req, "unschedulable")
        return out

    def _after_schedule(self, now: float, out: SchedulerOutput, running_before: int) -> None:
        """Tell the cluster layer what scheduling did."""
        self._waiting_changed()
        if self.admission_window_s is not None:
            admitted = self.engine.num_running - running_before + out.num_preempted
            if admitted > 0:
                self._admissions.append((now, admitted))
                self._admitted_in_window += admitted
                self._ever_admitted = True

    def _step(self, now: float, out: SchedulerOutput) -> Process:
        """One iteration: price it, record it, wait for its end, apply it."""
        engine = self.engine
        priced = engine.price_step(out)
        if self._deferred:  # after the iteration's waiting count: it was scheduled without them
            self.release_deferred()
        dt = priced.duration_s
        if self.transfers is not None:
            t0 = self.env.now
            yield from self._shared_transfers(out)
            dt += self.env.now - t0
        engine.record_step(now, dt, out, priced)
        t_end = now + dt
        yield LateTimeout(self.env, max(t_end - self.env.now, 0.0))
        self.clock = t_end
        self._dispatch(engine.end_step(out, t_end))

    def _decode_run(self, now: float, run: RunPlan) -> Process:
        """A fast-forwarded stretch of decode iterations, cut short by an arrival that the
        next schedule might admit (others ride along: they only raise the waiting count)."""
        engine, env = self.engine, self.env
        ends, k = engine.start_run(now, run)
        m = k
        self._in_run = True
        self._run_rides = engine.arrivals_wait_for_now()
        self._run_ends = ends
        self._run_last_start = float(ends[k - 2]) if k > 1 else now
        arrivals = self._run_arrivals = []
        try:
            yield LateTimeout(env, max(float(ends[k - 1]) - env.now, 0.0))
        except simpy.Interrupt:
            # An arrival: finish the iteration in progress, then schedule anew.
            m = min(int(np.searchsorted(ends, env.now, side="left")) + 1, k)
            yield LateTimeout(env, max(float(ends[m - 1]) - env.now, 0.0))
        self._in_run = False
        self.clock = float(ends[m - 1])
        self._dispatch(engine.commit_run(m, arrivals, env.now))

    # -- transfers on shared links -------------------------------------------------
    def _shared_transfers(self, out: SchedulerOutput) -> Process:
        """Swap copies and tier loads as transfers on the shared links; wait for all of them."""
        transfers, links, geo = self.transfers, self.links, self.geometry
        assert transfers is not None and links is not None
        shard = geo.bytes_per_block_per_shard
        h2d = out.swap_in_blocks
        events = []
        for n, p in zip(self.engine.tier_loads, self.engine.tier_plans, strict=False):
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

    # -- hand-overs --------------------------------------------------------------------
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
