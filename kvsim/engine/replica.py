"""One serving replica as a SimPy process: schedule -> wait the iteration's time -> apply.

This loop is kvsim's hot path: one SimPy event per engine iteration, never per token.
Runs of identical pure-decode iterations (`kvsim.core.decode_run`) are priced and waited
for as one event (``fast_forward``) and committed afterwards; an arrival in the middle
interrupts the wait, which then ends at the first iteration boundary at or after the
arrival, exactly where stepping one iteration at a time would have admitted it.

Iteration boundaries come after ordinary events of the same instant (`kvsim.engine.clock`),
so requests arriving exactly at a boundary are seen by the iteration starting there.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from kvsim.core.decode_run import DecodeRun, plan_decode_run
from kvsim.core.outcome import EventKind, KvEvent, SchedulerOutput, StepOutcome
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import CostModel
from kvsim.engine.clock import LateTimeout
from kvsim.engine.recorder import Recorder
from kvsim.plan import KvGeometry

#: Longest decode run priced in one piece (bounds the arrays it needs).
MAX_RUN_STEPS = 4096

Process = Generator[simpy.Event, Any, None]


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
        self.clock = 0.0  # exact end of the last iteration (SimPy's clock may differ by an ulp)
        self.num_outstanding = 0  # submitted and not finished or handed off (router load signal)
        self._wake: simpy.Event | None = None
        self._in_run = False
        self._run: DecodeRun | None = None  # the decode run being waited for, if any
        self._run_ends = np.zeros(0)
        # Arrivals during the run that do not end it (`Scheduler.arrivals_wait_for_now`),
        # and whether they may: their times give each iteration's waiting count.
        self._run_rides = False
        self._run_arrivals: list[float] = []
        self._run_steps = 0
        self.process = env.process(self._loop())

    # -- what a router may read (through kvsim.engine.view) ------------------------
    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return self.scheduler.num_waiting

    @property
    def kv_usage(self) -> float:
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

    def sync(self) -> None:
        """Bring the block pool up to the current time for someone looking into it.

        During a fast-forwarded decode run the iterations' block allocations (and the
        evictions they cause) are made when the run is committed; a router reading the
        prefix cache mid-run first makes those of the iterations already started, exactly
        as stepping would have made them by now.
        """
        run = self._run
        if run is None:
            return
        # Step 0 started before now (a run is never entered at the time of the query);
        # step k >= 1 starts at ends[k - 1] and is seen only once strictly past it.
        started = 1 + int(np.searchsorted(self._run_ends[: self._run_steps - 1], self.env.now, side="left"))
        run.advance(started)

    # -- arrivals ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Hand a request to this replica at the current simulated time."""
        req.replica = self.index
        rejection = self.scheduler.add_request(req)
        if rejection is not None:
            self._record_events(self.env.now, [rejection])
            self.on_finish(req)
            return
        self.num_outstanding += 1
        if self._wake is not None:
            wake, self._wake = self._wake, None
            wake.succeed()
        elif self._in_run:
            if self._run_rides:  # it cannot be admitted before the run ends: no cut
                self._run_arrivals.append(self.env.now)
            else:
                self._in_run = False
                self.process.interrupt()

    # -- the engine loop -----------------------------------------------------------
    def _sleep(self) -> Process:
        """Wait for a submission, then for the rest of that instant's events."""
        self._wake = self.env.event()
        yield self._wake
        yield LateTimeout(self.env, 0)
        self.clock = self.env.now

    def _loop(self) -> Process:
        sched = self.scheduler
        max_time = self.max_time_s
        while True:
            if not sched.has_work():
                yield from self._sleep()
            now = self.clock
            if max_time is not None and now >= max_time:
                return
            out = sched.schedule(now)
            self._record_events(now, out.events)
            self._record_evictions(now, out.num_evicted)
            if not out.tokens:  # cannot happen with an empty pool, but never spin
                yield from self._sleep()
                continue
            run = plan_decode_run(sched, out, MAX_RUN_STEPS) if self.fast_forward else None
            if run is None:
                yield from self._step(now, out)
            else:
                yield from self._decode_run(now, run)

    def _step(self, now: float, out: SchedulerOutput) -> Process:
        """One iteration: price it, record it, wait for its end, apply it."""
        sched = self.scheduler
        dt = self.cost.step_time_s(out.batch)
        moved = out.swap_in_blocks + out.swap_out_blocks + out.offload_load_blocks
        if moved:
            dt += self.cost.pcie_transfer_s(moved * self.geometry.bytes_per_block_per_shard)
        pool = sched.pool
        self.recorder.add_iteration(
            self.index,
            now,
            dt,
            out,
            num_waiting=sched.num_waiting,
            kv_blocks_used=pool.num_used_blocks,
            kv_blocks_cached=pool.num_cached_free,
            kv_tokens_stored=sched.num_tokens_stored + out.num_scheduled_tokens,
        )
        t_end = now + dt
        yield LateTimeout(self.env, max(t_end - self.env.now, 0.0))
        self.clock = t_end
        self._dispatch(sched.update(out, t_end))

    def _decode_run(self, now: float, run: DecodeRun) -> Process:
        """A fast-forwarded stretch of decode iterations, cut short by an arrival that the
        next schedule might admit (others ride along: they only raise the waiting count)."""
        sched, env = self.scheduler, self.env
        dts = self.cost.decode_steps_s(len(run.reqs), run.context_tokens())
        ends = np.cumsum(np.concatenate(([now], dts)))[1:]
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
        self._run = None
        self.clock = float(ends[m - 1])
        if arrivals:  # iteration j >= 1 starts at ends[j - 1] and sees arrivals up to then
            waiting: int | np.ndarray = num_waiting + np.concatenate(
                ([0], np.searchsorted(np.asarray(arrivals), ends[: m - 1], side="right"))
            )
        else:
            waiting = num_waiting
        new_blocks, evicted, outcome = run.commit(m, ends, dts)
        self.recorder.add_decode_run(
            self.index,
            now,
            ends[:m],
            dts[:m],
            len(run.reqs),
            num_waiting=waiting,
            kv_blocks_used=used0,
            kv_blocks_cached=cached0,
            kv_tokens_stored=stored0,
            new_blocks=new_blocks,
            evicted=evicted,
        )
        self._record_run_evictions(now, ends[:m], evicted)
        self._dispatch(outcome)

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
        """A committed decode run: one eviction record per iteration that evicted blocks."""
        per_step = np.diff(evicted, prepend=0)
        starts = np.concatenate(([now], ends[:-1]))
        for j in np.flatnonzero(per_step):
            self._record_evictions(float(starts[j]), int(per_step[j]))

    def _dispatch(self, outcome: StepOutcome) -> None:
        """Hand the requests an iteration's end took out of the batch to the cluster."""
        for req in outcome.finished:
            self.num_outstanding -= 1
            self.on_finish(req)
        if outcome.handoffs:
            assert self.on_handoff is not None, "a prefill replica needs somewhere to send its KV"
            for req in outcome.handoffs:
                self.num_outstanding -= 1
                self.on_handoff(req)
