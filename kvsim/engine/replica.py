"""One serving replica as a SimPy process: schedule -> wait the iteration's time -> apply.

This loop is kvsim's hot path: one SimPy event per engine iteration, never per token.
Runs of identical pure-decode iterations are priced and waited for as one event
(``fast_forward``) and committed afterwards; an arrival in the middle interrupts the
wait, which then ends at the first iteration boundary at or after the arrival, exactly
where stepping one iteration at a time would have admitted it.

Iteration boundaries are scheduled with a priority *after* ordinary events, so requests
arriving exactly at a boundary are seen by the iteration starting there.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL

from kvsim.core.request_state import Request
from kvsim.core.scheduler import DecodeRun, Scheduler
from kvsim.cost.base import CostModel
from kvsim.engine.recorder import Recorder

#: Event priority of iteration boundaries and wake-ups: after NORMAL events at the same time.
LATE = NORMAL + 1
#: Longest decode run priced in one piece (bounds the arrays it needs).
MAX_RUN_STEPS = 4096


def _late_event(env: simpy.Environment, delay: float) -> simpy.Event:
    """A timeout processed after all NORMAL-priority events of its time."""
    ev = simpy.Event(env)
    ev._ok = True  # triggered successfully, as simpy.Timeout does
    ev._value = None
    env.schedule(ev, LATE, delay)
    return ev


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
        *,
        block_bytes_per_shard: float,
        tp: int,
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
        self.block_bytes_per_shard = block_bytes_per_shard
        self.tp = tp
        self.fast_forward = fast_forward
        self.max_time_s = max_time_s
        self.on_finish = on_finish
        self.on_handoff = on_handoff
        self.clock = 0.0  # exact end of the last iteration (SimPy's clock may differ by an ulp)
        self.num_outstanding = 0  # submitted and not finished (router load signal)
        self._wake: simpy.Event | None = None
        self._in_run = False
        self._run: DecodeRun | None = None  # the decode run being waited for, if any
        self._run_ends = np.zeros(0)
        self._run_steps = 0
        self.process = env.process(self._loop())

    # -- arrivals ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Hand a request to this replica at the current simulated time."""
        req.replica = self.index
        if not self.scheduler.add_request(req):
            self._record_scheduler_events(self.env.now)
            self.on_finish(req)
            return
        self.num_outstanding += 1
        if self._wake is not None:
            wake, self._wake = self._wake, None
            wake._ok = True
            wake._value = None
            self.env.schedule(wake, LATE, 0)
        elif self._in_run:
            self._in_run = False
            self.process.interrupt()

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
        self.scheduler.advance_decode_run(run, started)

    # -- the engine loop -----------------------------------------------------------
    def _wait_until(self, t: float) -> simpy.Event:
        return _late_event(self.env, max(t - self.env.now, 0.0))

    def _loop(self) -> Generator[simpy.Event, Any, None]:
        sched = self.scheduler
        rec = self.recorder
        cost = self.cost
        env = self.env
        max_time = self.max_time_s
        while True:
            if not sched.has_work():
                self._wake = simpy.Event(env)
                yield self._wake
                self.clock = env.now
            now = self.clock
            if max_time is not None and now >= max_time:
                return
            out = sched.schedule(now)
            self._record_iteration_events(now)
            if not out.tokens:  # cannot happen with an empty pool, but never spin
                self._wake = simpy.Event(env)
                yield self._wake
                self.clock = env.now
                continue
            run = sched.plan_decode_run(out, MAX_RUN_STEPS) if self.fast_forward else None
            if run is None:
                dt = cost.step_time_s(out.batch)
                moved = out.swap_in_blocks + out.swap_out_blocks + out.offload_load_blocks
                if moved:
                    dt += cost.host_transfer_s(moved * self.block_bytes_per_shard)
                rec.add_iteration(self.index, now, dt, out, sched)
                t_end = now + dt
                yield self._wait_until(t_end)
                self.clock = t_end
                sched.update(out, t_end)
            else:
                dts = cost.decode_steps_s(len(run.reqs), sched.run_context_tokens(run))
                ends = np.cumsum(np.concatenate(([now], dts)))[1:]
                k = run.num_steps
                if max_time is not None and ends[k - 2] >= max_time:
                    # Iterations starting at or after max_time never start.
                    k = int(np.searchsorted(ends, max_time, side="left")) + 1
                m = k
                # The pool and queues as scheduled: arrivals and early allocations (`sync`)
                # during the run must not leak into step 0's record.
                num_waiting = sched.num_waiting
                used0 = sched.pool.num_used_blocks
                cached0 = sched.pool.num_cached_free
                stored0 = sched.num_tokens_stored
                self._in_run = True
                self._run, self._run_ends, self._run_steps = run, ends, k
                try:
                    yield self._wait_until(float(ends[k - 1]))
                except simpy.Interrupt:
                    # An arrival: finish the iteration in progress, then schedule anew.
                    m = min(int(np.searchsorted(ends, env.now, side="left")) + 1, k)
                    yield self._wait_until(float(ends[m - 1]))
                self._in_run = False
                self._run = None
                self.clock = float(ends[m - 1])
                new_blocks, evicted = sched.apply_decode_run(run, m, ends, dts)
                rec.add_decode_run(
                    self.index,
                    now,
                    ends[:m],
                    dts[:m],
                    len(run.reqs),
                    num_waiting,
                    used0,
                    cached0,
                    sched.pool.num_blocks,
                    new_blocks,
                    evicted,
                    stored0,
                )
                self._record_run_evictions(now, ends[:m], evicted)
            self._drain_finished()

    def _record_scheduler_events(self, t: float) -> None:
        """Log the scheduler's pending events (rejections, preemptions, swaps) at ``t``."""
        sched = self.scheduler
        bytes_per_block = self.block_bytes_per_shard * self.tp
        for ev in sched.events:
            self.recorder.add_event(
                t, self.index, ev.kind, ev.request_id, ev.num_blocks, ev.num_blocks * bytes_per_block
            )
        sched.events.clear()

    def _record_iteration_events(self, now: float) -> None:
        """After scheduling an iteration at ``now``: its scheduler events and evictions."""
        self._record_scheduler_events(now)
        pool = self.scheduler.pool
        n = pool.num_evicted
        if n:
            self.recorder.add_event(now, self.index, "evict", -1, n, n * self.block_bytes_per_shard * self.tp)
            pool.num_evicted = 0

    def _record_run_evictions(self, now: float, ends: np.ndarray, evicted: np.ndarray) -> None:
        """A committed decode run: one eviction record per iteration that evicted blocks."""
        per_step = np.diff(evicted, prepend=0)
        starts = np.concatenate(([now], ends[:-1]))
        for j in np.flatnonzero(per_step):
            n = int(per_step[j])
            self.recorder.add_event(
                float(starts[j]), self.index, "evict", -1, n, n * self.block_bytes_per_shard * self.tp
            )
        # The run's evictions (some made early by `sync`) are all in its per-step counts.
        self.scheduler.pool.num_evicted = 0

    def _drain_finished(self) -> None:
        sched = self.scheduler
        if sched.finished:
            done, sched.finished = sched.finished, []
            for req in done:
                self.num_outstanding -= 1
                self.on_finish(req)
        if sched.handoffs:
            assert self.on_handoff is not None, "a prefill replica needs somewhere to send its KV"
            sent, sched.handoffs = sched.handoffs, []
            for req in sent:
                self.num_outstanding -= 1
                self.on_handoff(req)
