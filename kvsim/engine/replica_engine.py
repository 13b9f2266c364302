"""One replica's engine without SimPy: a scheduler and its block pool, a cost model, and the
records it keeps. The SimPy layer (`kvsim.engine.replica.Replica`) only waits, interrupts
and routes; everything an iteration does happens here, behind a small boundary:

    add_request(req, now) -> reason | None    a request arrives (rejected: why)
    schedule(now) -> SchedulerOutput          decide an iteration, record its events
    plan_run(out) -> run | None               fast-forward: the decode run it starts, if any
    price_step(out) -> PricedStep             its duration (compute, and transfers on
                                              dedicated links) and the KV figures to record
    record_step(now, dt, out, priced)         its row in the iteration table
    end_step(out, t_end) -> StepOutcome       apply it at its end: tokens out, requests leave
    start_run(now, run) -> (ends, k)          price a decode run: when each of its steps ends
    advance_to(t, now, inclusive=)            make the run's steps started by ``t`` (someone
                                              looks into the pool mid-run)
    commit_run(m, arrivals, now) -> outcome   the run's first ``m`` steps happened

Speed is a strategy behind it (`use_speed_strategies`): where it applies, plain decoders are
advanced by the decode cohort (`kvsim.core.cohort`), and, unless the scenario says
``sim.fast_forward: false``, runs of identical decode iterations are priced and waited for
as one (`kvsim.core.decode_run`). The results are the same bit for bit as stepping every
iteration over every running request: the tests' oracle (``tests/oracle.py``) is this
engine with both strategies off, and the comparisons run against it.

Reads (``num_running``, ``kv_usage``, ``cached_prefix_tokens``...) never move the engine:
whoever reads mid-run calls `advance_to` first (`kvsim.engine.replica.Replica.sync`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kvsim.core.beam_search import BeamStats
from kvsim.core.block import PRIVATE
from kvsim.core.decode_run import CohortRun, plan_cohort_run
from kvsim.core.outcome import CacheStats, EventKind, KvEvent, SchedulerOutput, SpecDecodeStats, StepOutcome
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import CostModel
from kvsim.kv.links import transfer_time_s
from kvsim.kv.tiers import TierStack
from kvsim.results.ledger import RequestLedger
from kvsim.results.recorder import Recorder
from kvsim.scenario.resolved import KvGeometry, TierPlan

#: Longest decode run priced in one piece (bounds the arrays it needs).
MAX_RUN_STEPS = 4096

#: kv_sink(stamp_s, events): KV events of this replica's pool at ``stamp_s``.
KvSink = Callable[[float, list[tuple[bool, int]]], None]
#: write_sink(num_blocks, tier plan): a tier write to put on shared links (nobody waits).
WriteSink = Callable[[int, TierPlan], None]
#: A fast-forwarded decode run, as the SimPy layer waits for it.
RunPlan = CohortRun
#: The counters an engine keeps over its life (summed over cold restarts by the cluster).
EngineCounters = tuple[CacheStats, BeamStats, SpecDecodeStats]


class PricedStep(NamedTuple):
    """A stepped iteration priced: its duration so far (compute, and transfers on dedicated
    links) and the KV figures its row records (those once it is scheduled)."""

    duration_s: float
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_cached: int
    kv_tokens_stored: int


@dataclass(slots=True)
class _RunState:
    """The decode run being waited for: its plan, start, step ends and figures at step 0."""

    run: CohortRun
    start: float
    ends: np.ndarray
    durations: np.ndarray
    num_steps: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_cached: int
    kv_tokens_stored: int


class ReplicaEngine:
    """A serving engine without a clock of its own: the caller says when things happen."""

    def __init__(
        self,
        index: int,
        scheduler: Scheduler,
        cost: CostModel,
        recorder: Recorder,
        geometry: KvGeometry,
        *,
        max_time_s: float | None = None,
    ) -> None:
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.recorder = recorder
        self.geometry = geometry
        self.max_time_s = max_time_s
        self.fast_forward = True
        # What the cluster layer listens with (None: nobody).
        self.kv_sink: KvSink | None = None
        self.write_sink: WriteSink | None = None
        self.ledger: RequestLedger | None = None
        self.tiers: TierStack | None = None
        self.tier_plans: tuple[TierPlan, ...] = ()
        self.shared_links = False  # transfers go on shared links (the SimPy layer waits for them)
        self._per_step = False  # decode runs advance step by step (stamped events, tier writes)
        self._run: _RunState | None = None
        self.tier_loads: list[int] = []  # blocks loaded per tier by the iteration being priced
        self._loaded_order: list[int] = []  # the tier of each of those blocks, in load order
        self._run_writes: list[tuple[float, int, float]] = []  # a decode run's tier writes

    def attach(
        self,
        scheduler: Scheduler | None,
        *,
        tiers: TierStack | None,
        tier_plans: tuple[TierPlan, ...],
        kv_events: bool,
        stamped: bool,
        fast_forward: bool,
    ) -> None:
        """Take ``scheduler`` (a fresh one after a cold restart; None: keep this one), its
        tiers, KV event log and speed strategies (``fast_forward``: the scenario allows
        fast-forwarded decode runs)."""
        if scheduler is None:
            scheduler = self.scheduler
        self.scheduler = scheduler
        self.tiers = tiers
        self.tier_plans = tier_plans
        writes_through = tiers is not None and any(tiers.write_through)
        scheduler.pool.log_kv_events(kv_events or writes_through, private=writes_through)
        self._per_step = stamped or tiers is not None
        self.use_speed_strategies(scheduler, fast_forward)

    def use_speed_strategies(self, scheduler: Scheduler, fast_forward: bool) -> None:
        """How this engine executes, not what it computes: the decode cohort where it
        applies, and fast-forwarded decode runs of the cohort if ``fast_forward``."""
        self.fast_forward = fast_forward
        scheduler.enable_cohort()

    # -- reads (they never move the engine) ------------------------------------------
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
        """Prompt tokens this engine's prefix cache would hit for ``req`` (whole blocks)."""
        pool = self.scheduler.pool
        if not pool.enable_caching:
            return 0
        bs = self.geometry.block_size
        return len(req.match_prefix(bs, pool.cached.get)) * bs

    def cached_hashes(self) -> list[int]:
        """The hashes in the prefix cache (what an index must forget when it stops)."""
        return list(self.scheduler.pool.cached)

    def offload_tiers(self) -> TierStack | None:
        """The tiers below this engine's pool (None: none)."""
        offload = self.scheduler.pool.offload
        return offload if isinstance(offload, TierStack) else None

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def arrivals_wait_for_now(self) -> bool:
        return self.scheduler.arrivals_wait_for_now()

    def counters(self) -> EngineCounters:
        sched = self.scheduler
        return sched.stats, sched.beams.stats, sched.spec_stats

    def materialize(self) -> None:
        """Make every running request's counters exact (the run stopped with them running)."""
        self.scheduler.materialize()

    # -- requests and stepped iterations ---------------------------------------------
    def add_request(self, req: Request, now: float) -> str | None:
        """Queue ``req``; the reason if it can never run here (recorded), else None."""
        req.replica = self.index
        rejection = self.scheduler.add_request(req)
        if rejection is None:
            return None
        self._record_events(now, [rejection])
        return rejection.reason

    def schedule(self, now: float) -> SchedulerOutput:
        """Decide the iteration starting at ``now``; record what scheduling did."""
        out = self.scheduler.schedule(now)
        self._record_events(now, out.events)
        self._record_evictions(now, out.num_evicted)
        self.tier_loads = self._drain(now)
        if self.tier_loads and self.ledger is not None:
            self._count_tier_hits(out.events)
        return out

    def plan_run(self, out: SchedulerOutput) -> CohortRun | None:
        """The decode run ``out`` starts, if fast-forwarding and it starts one."""
        sched = self.scheduler
        if not self.fast_forward or sched.cohort is None:
            return None
        cap = sched.run_step_cap() if sched.intake else None  # where intake changes the schedule
        return plan_cohort_run(sched, out, MAX_RUN_STEPS if cap is None else min(cap, MAX_RUN_STEPS))

    def price_step(self, out: SchedulerOutput) -> PricedStep:
        """The iteration's compute time, plus its transfers unless they share links."""
        sched = self.scheduler
        pool = sched.pool
        dt = self.cost.step_time_s(out.batch)
        if not self.shared_links:
            dt += self._dedicated_transfer_s(out)
        return PricedStep(
            dt,
            sched.num_waiting,
            pool.num_used_blocks,
            pool.num_cached_free,
            sched.num_tokens_stored + out.num_scheduled_tokens,
        )

    def record_step(self, now: float, duration_s: float, out: SchedulerOutput, priced: PricedStep) -> None:
        self.recorder.add_iteration(
            self.index,
            now,
            duration_s,
            out,
            num_waiting=priced.num_waiting,
            kv_blocks_used=priced.kv_blocks_used,
            kv_blocks_cached=priced.kv_blocks_cached,
            kv_tokens_stored=priced.kv_tokens_stored,
        )

    def end_step(self, out: SchedulerOutput, t_end: float) -> StepOutcome:
        return self.scheduler.update(out, t_end)

    def _dedicated_transfer_s(self, out: SchedulerOutput) -> float:
        """Swap copies and tier loads, each on its whole link, one after the other."""
        loads, plans = self.tier_loads, self.tier_plans
        dram = sum(n for n, p in zip(loads, plans, strict=False) if p.bandwidth_bytes_per_s is None)
        moved = out.swap_in_blocks + out.swap_out_blocks + (dram if plans else out.offload_load_blocks)
        geo = self.geometry
        dt = 0.0
        if moved:
            dt += self.cost.pcie_transfer_s(moved * geo.bytes_per_block_per_shard)
        for n, p in zip(loads, plans, strict=False):
            if n and p.bandwidth_bytes_per_s is not None:
                per_block = geo.bytes_per_block_per_shard if p.per_shard else geo.bytes_per_block
                dt += transfer_time_s(n * per_block, p.bandwidth_bytes_per_s, p.latency_s)
        return dt

    # -- decode runs -----------------------------------------------------------------
    def start_run(self, now: float, run: CohortRun) -> tuple[np.ndarray, int]:
        """Price ``run`` starting at ``now``: the end of each step, and how many steps start
        before ``max_time_s``. The pool and queues as scheduled are kept for its record
        (arrivals and early allocations during the run must not leak into step 0's)."""
        sched = self.scheduler
        pool = sched.pool
        dts = self.cost.decode_steps_s(run.num_seqs, run.context_tokens())
        ends = np.cumsum(np.concatenate(([now], dts)))[1:]
        run.step_starts = np.concatenate(([now], ends[:-1]))
        run.ends = ends
        k = run.num_steps
        if self.max_time_s is not None and ends[k - 2] >= self.max_time_s:
            # Iterations starting at or after max_time never start.
            k = int(np.searchsorted(ends, self.max_time_s, side="left")) + 1
        self._run = _RunState(
            run,
            now,
            ends,
            dts,
            k,
            sched.num_waiting,
            pool.num_used_blocks,
            pool.num_cached_free,
            sched.num_tokens_stored,
        )
        return ends, k

    def advance_to(self, t: float, now: float, *, inclusive: bool = False) -> None:
        """Make the block allocations of the run's steps started by ``t`` (at ``now``).

        During a decode run the iterations' allocations (and the evictions they cause) are
        made when the run is committed; someone reading the prefix cache mid-run first
        makes those of the iterations already started, exactly as stepping would have made
        them by then. Step 0 started before now (a run is never entered at the time of the
        query); step k >= 1 starts at ends[k - 1] and has started at ``t`` if it lies
        strictly before it (at or before it with ``inclusive``)."""
        state = self._run
        if state is None:
            return
        ends = state.ends[: state.num_steps - 1]
        found = np.searchsorted(ends, t, side="right" if inclusive else "left")
        self._advance_run(state, 1 + int(found), now)

    def _advance_run(self, state: _RunState, started: int, now: float) -> None:
        """Make the run's allocations of its first ``started`` steps, publishing step by step."""
        run = state.run
        if not self._per_step:
            run.advance(started)
            self._drain(now)
            return

        def drain_step(j: int) -> None:  # what step j did, stamped with its start
            self._drain(state.start if j == 0 else float(state.ends[j - 1]))

        run.advance(started, drain_step)

    def commit_run(self, m: int, arrivals: list[float], now: float) -> StepOutcome:
        """The run's first ``m`` steps happened (``now`` is the end of the last); ``arrivals``:
        the times of requests that arrived during them without ending the run."""
        state = self._run
        assert state is not None, "commit_run without start_run"
        run, start, ends, dts = state.run, state.start, state.ends, state.durations
        self._advance_run(state, m, now)
        self._run = None
        waiting: int | np.ndarray = state.num_waiting
        if arrivals:  # iteration j >= 1 starts at ends[j - 1] and sees arrivals up to then
            waiting = state.num_waiting + np.concatenate(
                ([0], np.searchsorted(np.asarray(arrivals), ends[: m - 1], side="right"))
            )
        new_blocks, evicted, outcome = run.commit(m, ends, dts)
        if self.scheduler.intake:  # the first step was scheduled; the others were not
            self.scheduler.note_run_steps(m - 1)
        if self.scheduler.pool.kv_events:  # the last step's registrations
            self._drain(float(ends[m - 1]))
        self.recorder.add_decode_run(
            self.index,
            start,
            ends[:m],
            dts[:m],
            run.num_seqs,
            num_waiting=waiting,
            kv_blocks_used=state.kv_blocks_used,
            kv_blocks_cached=state.kv_blocks_cached,
            kv_tokens_stored=state.kv_tokens_stored,
            new_blocks=new_blocks,
            # the drop in cached free blocks: evictions, less what a window freed cached
            evicted=evicted if run.cached_freed is None else evicted - np.cumsum(run.cached_freed[:m]),
        )
        self._record_run_evictions(start, ends[:m], evicted)
        for stamp, n, num_bytes in self._run_writes:
            self.recorder.add_event(stamp, self.index, EventKind.TIER_WRITE, -1, n, num_bytes)
        self._run_writes.clear()
        return outcome

    # -- KV events and tiers ---------------------------------------------------------
    def _drain(self, stamp: float) -> list[int]:
        """Publish the pool's KV events and the tiers' writes at ``stamp``; return the
        blocks loaded per tier since the last drain."""
        pool = self.scheduler.pool
        tiers = self.tiers
        if pool.kv_events:  # logged since the last drain (None: nobody listens)
            log = pool.take_kv_events()
            if tiers is not None and any(tiers.write_through):
                for stored, h in log:
                    if stored:
                        tiers.write_through_block(None if h == PRIVATE else h)
            if self.kv_sink is not None:
                self.kv_sink(stamp, log)
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
            if self.write_sink is not None:
                self.write_sink(n, p)

    # -- records -----------------------------------------------------------------------
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
