"""Continuous-batching scheduler of one replica, after vLLM v1's scheduler.

Each iteration gets one token budget (``max_num_batched_tokens``). Running requests are
served first, in order, each catching its computed tokens up with its total tokens (one
token for a decode, a chunk for a prefill); a request that cannot get blocks preempts the
last-admitted (FCFS) or lowest-priority running request until it fits or is itself the
victim. Then, only if nobody was preempted, swapped-out requests come back and waiting
requests are admitted while budget, ``max_num_seqs`` and blocks allow (head-of-line:
the first that does not fit stops admission).

The scheduler is a plain object: `schedule` decides an iteration, `update` applies its
outcome at the iteration's end. `plan_decode_run` / `apply_decode_run` let the engine
advance many identical pure-decode iterations at once with the same result as stepping.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kvsim.config import EngineConfig
from kvsim.core.block_pool import BlockPool
from kvsim.core.kv_manager import KVCacheManager
from kvsim.core.request_state import Request, Status
from kvsim.cost.base import Batch


@dataclass(slots=True)
class SchedulerOutput:
    """What one iteration computes, and what scheduling it cost.

    ``tokens`` maps each scheduled request to its new tokens, in scheduling order, with
    0 standing for one decode token (the hot path's mark); `scheduled` spells it out.
    """

    tokens: dict[Request, int]
    batch: Batch
    num_prefill_seqs: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    num_preempted: int = 0
    num_scheduled_tokens: int = 0
    offload_load_blocks: int = 0
    swap_out_blocks: int = 0
    swap_in_blocks: int = 0
    all_running_decode: bool = False

    @property
    def scheduled(self) -> list[tuple[Request, int]]:
        """(request, new tokens) pairs in scheduling order."""
        return [(r, n or 1) for r, n in self.tokens.items()]


@dataclass(slots=True)
class DecodeRun:
    """A stretch of ``num_steps`` pure-decode iterations with an unchanged batch.

    Step 0 is the already-scheduled iteration; ``alloc_steps[i]`` / ``alloc_reqs[i]`` list
    the later block allocations in the order stepping would make them. The first
    ``num_allocated`` of them are done (`Scheduler.advance_decode_run` can do them early,
    so that a router looking into the pool mid-run sees what stepping would show);
    ``new_blocks[j]`` / ``evicted[j]`` count what step j allocated and evicted.
    """

    num_steps: int
    reqs: list[Request]
    base_context_tokens: int
    alloc_steps: list[int] = field(default_factory=list)
    alloc_reqs: list[Request] = field(default_factory=list)
    num_allocated: int = 0
    new_blocks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    evicted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(slots=True)
class KvEvent:
    kind: str
    request_id: int
    num_blocks: int


class Scheduler:
    """Waiting/running/swapped queues and the per-iteration scheduling decision."""

    def __init__(
        self,
        config: EngineConfig,
        pool: BlockPool,
        *,
        sliding_window: int | None = None,
        num_host_blocks: int = 0,
        max_model_len: int | None = None,
        role: str = "both",
    ) -> None:
        self.config = config
        self.pool = pool
        self.block_size = config.block_size
        self.kv = KVCacheManager(pool, config.block_size, sliding_window=sliding_window)
        self.sliding_window = sliding_window
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.enable_chunked_prefill
        self.long_prefill_threshold = config.long_prefill_token_threshold
        self.priority_policy = config.scheduling_policy == "priority"
        self.kv_cache_enabled = config.enable_kv_cache
        self.swap_mode = config.preemption_mode == "swap"
        self.num_host_blocks = num_host_blocks
        self.host_blocks_used = 0
        self.max_model_len = max_model_len
        self.kv_allocation = config.kv_allocation
        # Disaggregated serving: a prefill replica hands each request over after its first
        # token (to `handoffs`, drained by the engine); a decode replica admits them with
        # their KV already computed.
        self.hands_off = role == "prefill"
        self.handoffs: list[Request] = []
        if self.kv_allocation == "reserve_max" and max_model_len is None:
            raise ValueError('kv_allocation "reserve_max" needs max_model_len')
        # Tokens whose KV the running requests hold (their computed tokens), kept exactly
        # with O(1) work per iteration; shared prefix blocks count once per request.
        self.num_tokens_stored = 0
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self._waiting_fifo: deque[Request] = deque()
        self._waiting_heap: list[tuple[int, float, int, Request]] = []
        self._seq = itertools.count()
        self.events: list[KvEvent] = []  # drained by the engine after each iteration
        self.finished: list[Request] = []  # drained by the engine after each iteration
        # Prefix-cache statistics, in tokens (vLLM's queries/hits), first admissions only;
        # re-admissions after preemption by recompute are counted apart.
        self.prefix_queries_tokens = 0
        self.prefix_hits_tokens = 0
        self.recompute_queries_tokens = 0
        self.recompute_hits_tokens = 0
        # Tokens loaded from the host tier instead of recomputed (any admission).
        self.offload_hits_tokens = 0

    # -- queues ----------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self._waiting_fifo) + len(self._waiting_heap) + len(self.swapped)

    def has_work(self) -> bool:
        return bool(self.running or self.swapped or self._waiting_fifo or self._waiting_heap)

    def _push_waiting(self, req: Request, *, front: bool = False) -> None:
        req.status = Status.WAITING
        if self.priority_policy:
            heapq.heappush(self._waiting_heap, (req.priority, req.arrival_s, next(self._seq), req))
        elif front:
            self._waiting_fifo.appendleft(req)
        else:
            self._waiting_fifo.append(req)

    def _peek_waiting(self) -> Request | None:
        if self.priority_policy:
            return self._waiting_heap[0][3] if self._waiting_heap else None
        return self._waiting_fifo[0] if self._waiting_fifo else None

    def _pop_waiting(self) -> None:
        if self.priority_policy:
            heapq.heappop(self._waiting_heap)
        else:
            self._waiting_fifo.popleft()

    def add_request(self, req: Request) -> bool:
        """Queue a new request; returns False (and marks it rejected) if it can never run."""
        limit = self.max_model_len
        needed_blocks = -(-self._reserved_tokens(req) // self.block_size)
        if self.sliding_window is not None:
            needed_blocks = min(needed_blocks, -(-self.sliding_window // self.block_size) + 1)
        # Without chunked prefill a prompt must fit one iteration's budget (vLLM refuses
        # such configurations; kvsim rejects the requests that could never start).
        too_long_prompt = not self.chunked_prefill and req.prompt_tokens > self.max_num_batched_tokens
        if (
            (limit is not None and req.total_tokens > limit)
            or needed_blocks > self.pool.num_blocks
            or too_long_prompt
        ):
            req.status = Status.REJECTED
            self.events.append(KvEvent("reject", req.request_id, needed_blocks))
            return False
        self._push_waiting(req)
        return True

    def _reserved_tokens(self, req: Request) -> int:
        """Token slots the request needs reserved: all it will hold (paged: grows on demand)."""
        if self.kv_allocation == "reserve_max":
            assert self.max_model_len is not None
            return max(self.max_model_len, req.total_tokens)
        if self.kv_allocation == "reserve_pow2":
            return req.prompt_tokens + (1 << (req.target_output_tokens - 1).bit_length())
        return req.total_tokens

    # -- scheduling ------------------------------------------------------------------
    def _pick_victim(self) -> Request:
        if self.priority_policy:
            return max(self.running, key=lambda r: (r.priority, r.arrival_s))
        return self.running[-1]

    def _preempt(self, victim: Request) -> None:
        kv = self.kv
        victim.num_preemptions += 1
        if self.swap_mode:
            need = -(-victim.num_computed_tokens // self.block_size)
            if self.sliding_window is not None:
                need = min(need, kv.num_held_blocks(victim))
            if need and self.host_blocks_used + need <= self.num_host_blocks:
                self.num_tokens_stored -= victim.num_computed_tokens
                kv.free(victim)
                self.host_blocks_used += need
                victim.swapped_blocks = need
                victim.num_swaps += 1
                victim.status = Status.SWAPPED
                self.swapped.append(victim)
                self.events.append(KvEvent("swap_out", victim.request_id, need))
                return
        # Recompute: drop everything; the cached blocks may still be hit on re-admission.
        held = kv.num_held_blocks(victim)
        kv.publish_private_blocks(victim)
        kv.free(victim)
        self.num_tokens_stored -= victim.num_computed_tokens
        victim.num_computed_tokens = 0
        self._push_waiting(victim, front=True)
        self.events.append(KvEvent("preempt_recompute", victim.request_id, held))

    def _chunk(self, num_new: int, budget: int) -> int:
        thr = self.long_prefill_threshold
        if thr and num_new > thr:
            num_new = thr
        return min(num_new, budget)

    def schedule(self, now: float) -> SchedulerOutput:
        """Decide the next iteration: which requests compute how many tokens."""
        kv = self.kv
        budget = self.max_num_batched_tokens
        scheduled: dict[Request, int] = {}
        running = self.running
        num_preempted = 0
        swap_out_before = len(self.events)

        # 1. Running requests, in order.
        bs = self.block_size
        caching = kv.enable_caching
        hot_path_ok = self.sliding_window is None and self.kv_cache_enabled
        # Decodes are tallied as they are scheduled (the hot path); everything else is
        # classified in _make_output.
        num_fast_decodes = 0
        fast_decode_ctx = 0
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            nc = req.num_computed_tokens
            if (
                hot_path_ok
                and req.num_tokens - nc == 1
                and req.num_output_tokens
                and len(req.blocks) * bs > nc
            ):
                # Hot path (a decode whose slot is already allocated): what allocate_slots
                # would do, minus the block arithmetic. The token may fill its block.
                if caching and (nc + 1) % bs == 0 and (nc + 1) // bs > req.num_cached_blocks:
                    kv.cache_full_blocks(req, (nc + 1) // bs)
                scheduled[req] = 0  # 0 marks a fast-path decode (one token)
                num_fast_decodes += 1
                fast_decode_ctx += nc + 1
                budget -= 1
                i += 1
                continue
            num_new = self._chunk(req.num_tokens - nc, budget)
            if self.sliding_window is not None:
                kv.remove_skipped_blocks(req)
            scheduled_ok = True
            while not kv.allocate_slots(req, num_new):
                victim = self._pick_victim()
                idx = running.index(victim) if self.priority_policy else len(running) - 1
                running.pop(idx)
                if victim in scheduled:  # already scheduled this iteration: give its budget back
                    n_victim = scheduled.pop(victim)
                    if n_victim == 0:
                        n_victim = 1
                        num_fast_decodes -= 1
                        fast_decode_ctx -= victim.num_computed_tokens + 1
                    budget += n_victim
                    i -= 1
                self._preempt(victim)
                num_preempted += 1
                if victim is req:
                    scheduled_ok = False
                    break
            if not scheduled_ok:
                continue  # `req` left `running`; index i now points at the next request
            scheduled[req] = num_new
            budget -= num_new
            i += 1

        swap_in_blocks = 0
        loaded_blocks = 0
        if not num_preempted:
            # 2. Swapped-out requests come back first (their KV is on the host).
            while self.swapped and budget > 0 and len(running) < self.max_num_seqs:
                req = self.swapped[0]
                num_new = self._chunk(req.num_tokens - req.num_computed_tokens, budget)
                if not kv.allocate_slots(req, num_new):
                    break
                self.swapped.popleft()
                self.host_blocks_used -= req.swapped_blocks
                swap_in_blocks += req.swapped_blocks
                self.events.append(KvEvent("swap_in", req.request_id, req.swapped_blocks))
                req.swapped_blocks = 0
                self.num_tokens_stored += req.num_computed_tokens
                req.status = Status.RUNNING
                running.append(req)
                scheduled[req] = num_new
                budget -= num_new

            # 3. Waiting requests (new, or preempted for recompute), head of line first.
            while budget > 0 and len(running) < self.max_num_seqs:
                req = self._peek_waiting()
                if req is None:
                    break
                if req.kv_transferred:  # KV computed on a prefill replica: just room for it
                    num_new = self._chunk(req.num_tokens - req.num_computed_tokens, budget)
                    if not kv.allocate_slots(req, num_new):
                        break
                    self._pop_waiting()
                    req.kv_transferred = False
                    self.num_tokens_stored += req.num_computed_tokens
                    req.status = Status.RUNNING
                    running.append(req)
                    scheduled[req] = num_new
                    budget -= num_new
                    continue
                hits = kv.get_computed_blocks(req)
                num_hit_tokens = len(hits) * self.block_size
                num_loaded = kv.host_hits(req, len(hits))
                num_new = req.num_tokens - num_hit_tokens - num_loaded * self.block_size
                if not self.chunked_prefill and num_new > budget:
                    break
                num_new = self._chunk(num_new, budget)
                if self.kv_allocation != "paged":
                    # Orca-style: reserve one contiguous run for everything the request will
                    # hold; its tokens then never need another block.
                    run = self.pool.get_contiguous_blocks(-(-self._reserved_tokens(req) // self.block_size))
                    if run is None:
                        break  # no free run that long, however much is free (external fragmentation)
                    req.blocks = list(run)
                if not kv.allocate_slots(req, num_new, hits, num_loaded):
                    break
                self._pop_waiting()
                if num_loaded:
                    loaded_blocks += num_loaded
                    self.offload_hits_tokens += num_loaded * self.block_size
                    req.offload_hit_tokens += num_loaded * self.block_size
                    self.events.append(KvEvent("offload_load", req.request_id, num_loaded))
                if req.num_preemptions:
                    self.recompute_queries_tokens += req.num_tokens
                    self.recompute_hits_tokens += num_hit_tokens
                    req.recompute_hit_tokens += num_hit_tokens
                else:
                    self.prefix_queries_tokens += req.num_tokens
                    self.prefix_hits_tokens += num_hit_tokens
                    req.prefix_hit_tokens = num_hit_tokens
                    req.first_scheduled_s = now
                req.num_computed_tokens = num_hit_tokens + num_loaded * self.block_size
                self.num_tokens_stored += req.num_computed_tokens
                req.status = Status.RUNNING
                running.append(req)
                scheduled[req] = num_new
                budget -= num_new

        swap_out_blocks = sum(e.num_blocks for e in self.events[swap_out_before:] if e.kind == "swap_out")
        return self._make_output(
            scheduled,
            num_fast_decodes,
            fast_decode_ctx,
            num_preempted,
            swap_out_blocks,
            swap_in_blocks,
            self.max_num_batched_tokens - budget,
            loaded_blocks,
        )

    def _make_output(
        self,
        scheduled: dict[Request, int],
        num_decode: int,
        decode_ctx: int,
        num_preempted: int,
        swap_out_blocks: int,
        swap_in_blocks: int,
        num_scheduled_tokens: int,
        offload_load_blocks: int,
    ) -> SchedulerOutput:
        """Classify what was scheduled; ``num_decode`` / ``decode_ctx`` already count the
        fast-path decodes, marked 0 in ``scheduled``."""
        window = self.sliding_window
        chunks: list[tuple[int, int]] = []
        if num_decode != len(scheduled):  # classify what the hot path did not
            for req, n in scheduled.items():
                if n == 0:
                    continue
                c = req.num_computed_tokens
                if n == 1 and req.num_output_tokens and c == req.num_tokens - 1 and self.kv_cache_enabled:
                    num_decode += 1
                    decode_ctx += c + 1 if window is None or c < window else window
                elif not self.kv_cache_enabled:
                    chunks.append((c + n, 0))  # no KV cache: every step recomputes the sequence
                else:
                    chunks.append((n, c if window is None or c < window else window))
        out = SchedulerOutput(
            num_scheduled_tokens=num_scheduled_tokens,
            offload_load_blocks=offload_load_blocks,
            tokens=scheduled,
            batch=Batch(prefill_chunks=chunks, num_decode_seqs=num_decode, decode_context_tokens=decode_ctx),
            num_prefill_seqs=len(chunks),
            prefill_tokens=sum(q for q, _ in chunks),
            decode_tokens=num_decode,
            num_preempted=num_preempted,
            swap_out_blocks=swap_out_blocks,
            swap_in_blocks=swap_in_blocks,
        )
        out.all_running_decode = (
            not chunks
            and not num_preempted
            and not swap_in_blocks
            and not offload_load_blocks
            and num_decode == len(self.running)
        )
        return out

    def update(self, out: SchedulerOutput, t_end: float) -> None:
        """Apply an iteration's outcome at its end time: advance tokens, sample, finish."""
        any_finished = False
        self.num_tokens_stored += out.num_scheduled_tokens
        for req, n in out.tokens.items():
            nc = req.num_computed_tokens + (n or 1)
            req.num_computed_tokens = nc
            if nc < req.num_tokens:
                continue  # a prefill chunk that does not reach the end samples nothing
            n_out = req.num_output_tokens + 1
            req.num_output_tokens = n_out
            req.num_tokens = nc + 1
            if n_out == 1:
                req.first_token_s = req.last_token_s = t_end
                if n_out == req.target_output_tokens:
                    self._finish(req, t_end)
                    any_finished = True
                elif self.hands_off:  # first token out: send the KV to a decode replica
                    self._hand_off(req)
                    any_finished = True
                continue
            gap = t_end - req.last_token_s
            if not gap <= req.max_itl_s:  # also replaces the initial NaN
                req.max_itl_s = gap
            req.last_token_s = t_end
            if n_out == req.target_output_tokens:
                self._finish(req, t_end)
                any_finished = True
        if any_finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]

    def _hand_off(self, req: Request) -> None:
        req.status = Status.TRANSFERRING
        self.num_tokens_stored -= req.num_computed_tokens
        self.kv.free(req)  # freed tail first; the prompt stays cached here for later hits
        self.handoffs.append(req)

    def _finish(self, req: Request, t_end: float) -> None:
        self.num_tokens_stored -= req.num_computed_tokens
        req.status = Status.FINISHED
        req.finish_s = t_end
        self.kv.free(req)
        self.finished.append(req)

    # -- fast-forward over identical decode iterations ----------------------------------
    def plan_decode_run(self, out: SchedulerOutput, max_steps: int) -> DecodeRun | None:
        """If ``out`` starts a stretch of identical pure-decode iterations, describe it.

        Holds when every running request decodes, nobody was preempted or swapped, and
        no waiting request was admitted: then nothing changes the batch until a request
        finishes or the pool runs out of blocks. (Admission cannot open up meanwhile:
        free blocks only shrink, and max_num_seqs and the budget stay as they are.) New
        arrivals end the stretch too; the engine handles that.
        """
        if not out.all_running_decode or self.sliding_window is not None or max_steps < 2:
            return None
        reqs = self.running
        k = min(min(r.target_output_tokens - r.num_output_tokens for r in reqs), max_steps)
        if k < 2:
            return None
        bs = self.block_size
        # Blocks needed at step j >= 1: request with c computed tokens before step 0 needs a
        # new block at step j when c + j is a multiple of the block size.
        events: list[tuple[int, int]] = []
        for idx, r in enumerate(reqs):
            j = bs - r.num_computed_tokens % bs
            while j < k:
                events.append((j, idx))
                j += bs
        free = self.pool.num_free_blocks
        if len(events) > free:
            events.sort()
            k = events[free][0]  # the first allocation that cannot be served starts a normal step
            if k < 2:
                return None
            events = events[:free]
        else:
            events.sort()
        base_ctx = out.batch.decode_context_tokens
        return DecodeRun(
            num_steps=k,
            reqs=list(reqs),
            base_context_tokens=base_ctx,
            alloc_steps=[j for j, _ in events],
            alloc_reqs=[reqs[i] for _, i in events],
            new_blocks=np.zeros(k, dtype=np.int64),
            evicted=np.zeros(k, dtype=np.int64),
        )

    def run_context_tokens(self, run: DecodeRun) -> np.ndarray:
        """``decode_context_tokens`` of each iteration of the run."""
        return run.base_context_tokens + len(run.reqs) * np.arange(run.num_steps, dtype=np.int64)

    def advance_decode_run(self, run: DecodeRun, num_started: int) -> None:
        """Make the block allocations of the run's first ``num_started`` iterations."""
        pool = self.pool
        steps, reqs = run.alloc_steps, run.alloc_reqs
        i = run.num_allocated
        while i < len(steps) and steps[i] < num_started:
            j = steps[i]
            before = pool.num_evicted
            reqs[i].blocks.extend(pool.get_new_blocks(1))
            run.new_blocks[j] += 1
            run.evicted[j] += pool.num_evicted - before
            i += 1
        run.num_allocated = i

    def apply_decode_run(
        self, run: DecodeRun, num_steps: int, ends: np.ndarray, durations: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Commit the first ``num_steps`` iterations of ``run`` (step 0 included).

        Returns per-iteration cumulative (new blocks, evicted blocks) after each step's
        allocations, for the engine's records.
        """
        kv, bs = self.kv, self.block_size
        self.advance_decode_run(run, num_steps)
        new_blocks, evicted = run.new_blocks[:num_steps], run.evicted[:num_steps]
        caching = kv.enable_caching
        t_last = float(ends[num_steps - 1])
        rest_max = float(durations[1:num_steps].max()) if num_steps > 1 else -1.0
        t_first = float(ends[0])
        any_finished = False
        self.num_tokens_stored += len(run.reqs) * num_steps
        for req in run.reqs:
            if caching:
                num_full = (req.num_computed_tokens + num_steps) // bs
                if num_full > req.num_cached_blocks:
                    kv.cache_full_blocks(req, num_full)
            gap = t_first - req.last_token_s
            if rest_max > gap:
                gap = rest_max
            if not gap <= req.max_itl_s:
                req.max_itl_s = gap
            req.num_computed_tokens += num_steps
            req.num_output_tokens += num_steps
            req.num_tokens += num_steps
            req.last_token_s = t_last
            if req.num_output_tokens == req.target_output_tokens:
                self._finish(req, t_last)
                any_finished = True
        if any_finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]
        return np.cumsum(new_blocks), np.cumsum(evicted)
