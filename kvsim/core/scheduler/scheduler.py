"""The scheduler of one replica: the phases composed (`schedule`, `update`), its queues.

`schedule` decides an iteration (`kvsim.core.scheduler.running`, then, if nobody was
preempted, `kvsim.core.scheduler.admission`) and returns it with the events it caused;
`update` (`kvsim.core.scheduler.update`) applies its outcome at the iteration's end and
returns the requests that left.
"""

from __future__ import annotations

from collections import deque

from kvsim.core.allocators import PagedAllocator, make_allocator
from kvsim.core.beam_search import BeamGroups
from kvsim.core.block_pool import BlockPool
from kvsim.core.cohort import DecodeCohort
from kvsim.core.kv_manager import FullAttentionManager, make_kv_manager
from kvsim.core.outcome import CacheStats, KvEvent, SchedulerOutput, SpecDecodeStats
from kvsim.core.queues import RequestQueue
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler.admission import AdmissionPhase
from kvsim.core.scheduler.base import NO_LIMIT, Step, run_seq
from kvsim.core.scheduler.running import RunningPhase
from kvsim.core.scheduler.update import UpdatePhase
from kvsim.core.speculative import Speculator
from kvsim.core.windowed_cohort import WindowedCohort
from kvsim.cost.base import Batch
from kvsim.kv.swap import SwapSpace
from kvsim.registry import SCHEDULING_POLICIES
from kvsim.scenario.schema import EngineConfig


class Scheduler(RunningPhase, AdmissionPhase, UpdatePhase):
    """Waiting/running/swapped queues and the per-iteration scheduling decision."""

    def __init__(
        self,
        config: EngineConfig,
        pool: BlockPool,
        *,
        sliding_window: int | None = None,
        num_sink_tokens: int = 0,
        kv_manager: FullAttentionManager | None = None,
        num_swap_blocks: int = 0,
        max_model_len: int | None = None,
        role: str = "both",
        seed: int = 0,
    ) -> None:
        self.pool = pool
        self.kv = kv_manager or make_kv_manager(pool, config.block_size, sliding_window, num_sink_tokens)
        self.queue: RequestQueue = SCHEDULING_POLICIES[config.scheduling_policy]()
        self.allocator = make_allocator(config.kv_allocation, pool, config.block_size, max_model_len)
        self.swap = SwapSpace(num_swap_blocks)
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.chunked_prefill = config.enable_chunked_prefill
        self.long_prefill_threshold = config.long_prefill_token_threshold
        self.kv_cache_enabled = config.enable_kv_cache
        self.swap_mode = config.preemption_mode == "swap"
        self.max_model_len = max_model_len
        # Disaggregated serving: a prefill replica hands each request over after its first
        # token; a decode replica admits them with their KV already computed.
        self.hands_off = role == "prefill"
        # SGLang without --enable-mixed-chunk: an iteration prefills or decodes, prompts first
        # (`_prefill_batch`). A decode replica's arrivals bring their KV: nothing to prefill.
        self.prefill_first = config.backend == "sglang" and not config.enable_mixed_chunk and role != "decode"
        # Tokens whose KV the running requests hold (their computed tokens), kept exactly
        # with O(1) work per iteration; shared prefix blocks count once per request.
        self.num_tokens_stored = 0
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.stats = CacheStats()
        # Speculative decoding: drafts proposed after each sampled token, verified next step.
        spec = config.speculative_config
        self.speculator = (
            None if spec is None else Speculator(spec.num_speculative_tokens, spec.acceptance(), seed)
        )
        self.spec_stats = SpecDecodeStats()
        # Beam search: beams of a group share blocks and fork copy-on-write (kvsim.core.beam_search).
        self.beams = BeamGroups(self.kv)
        self.can_fork = (
            type(self.kv) is FullAttentionManager
            and type(self.allocator) is PagedAllocator
            and self.kv_cache_enabled
            and self.speculator is None
        )
        # Decoders advanced lazily (`kvsim.core.cohort`), once `enable_cohort` is called;
        # `explicit` holds the running requests outside the cohort (order: `Request.run_seq`).
        self.cohort: DecodeCohort | None = None
        self.explicit: dict[Request, None] = {}
        self._next_run_seq = 0
        self.windowed = False  # the cohort is a WindowedCohort (blocks leave a window)
        self._init_intake(config)

    def _init_intake(self, config: EngineConfig) -> None:
        """Intake (`_poll_inbox`, `_batch_wait_over`): SGLang takes arrivals in every
        recv_interval decode iterations (they wait unseen in the inbox meanwhile);
        TensorRT-LLM may hold new prompts back for batch_wait_iters iterations."""
        self.recv_interval = config.scheduler_recv_interval
        self.inbox: list[Request] = []
        self._recv_count = 0  # SchedulerRecvSkipper's counter: +1 per decode iteration
        ratio = config.batch_wait_max_tokens_ratio
        self.batch_wait_iters = config.batch_wait_timeout_iters if ratio > 0 else 0
        self.batch_wait_tokens = ratio * config.max_num_batched_tokens  # compared as TensorRT-LLM does
        self._waited = 0  # iterations the queue has been held back (batch_wait_iters_count)
        self._held = False  # the last schedule held the queue back
        self._timed_out = False  # the last schedule stopped holding it back at the timeout
        self.intake = self.recv_interval > 1 or self.batch_wait_iters > 0  # either rule applies
        #: Set by an attention-DP instance for one schedule (`kvsim.engine.lockstep`): no new
        #: admission this iteration (prompts already chunking go on).
        self.hold_admissions = False

    def enable_cohort(self) -> bool:
        """Advance plain decoders lazily from now on, where this engine's decode hot path
        applies (full attention, or a sliding window / hybrid groups with paged blocks; a
        KV cache; no speculation); returns whether it does.

        With the cohort, iterations cost what changes in them, and running requests'
        counters are exact only after `materialize` (the engine calls it when it stops);
        `SchedulerOutput.tokens` then lists the requests outside the cohort.
        """
        kv = self.kv
        paged = type(self.allocator) is PagedAllocator
        windowed = kv.windowed and paged
        applies = (type(kv) is FullAttentionManager or windowed) and self.kv_cache_enabled
        if applies and self.speculator is None and not self.running and self.cohort is None:
            limit = self.max_model_len or NO_LIMIT
            self.windowed = windowed
            self.cohort = (
                WindowedCohort(self.pool, kv, limit)
                if windowed
                else DecodeCohort(self.pool, kv.block_size, limit, paged=paged)
            )
        return self.cohort is not None

    @property
    def num_waiting(self) -> int:
        """Requests waiting for admission, swapped-out ones and those not yet taken in included."""
        return len(self.queue) + len(self.swapped) + len(self.inbox)

    def arrivals_wait_for_now(self) -> bool:
        """Whether no request arriving now could be admitted by the next schedule unless
        something else changes first: the batch is full, or the waiting queue keeps
        arrivals behind a head the last schedule could not admit.

        Meant for the start of a decode run (every running request decodes, nobody
        admitted): until the run ends free blocks only shrink, so the head stays blocked
        (not with a window, which frees blocks as it slides: then only a full batch)."""
        if len(self.running) >= self.max_num_seqs or self.recv_interval > 1:
            return True  # with a recv interval a run ends where the scheduler next polls
        if self._held:
            return False  # batch waiting: an arrival's tokens may end the wait
        return (
            bool(len(self.queue))
            and not self.windowed
            and getattr(self.queue, "arrivals_queue_behind", False)
        )

    def admission_may_open(self) -> bool:
        """Whether a decode run's frees could let a waiting or swapped request in before
        it ends: a window frees blocks as it slides, and the batch has room."""
        return (
            self.windowed and bool(len(self.queue) or self.swapped) and len(self.running) < self.max_num_seqs
        )

    def has_work(self) -> bool:
        return bool(self.running or self.swapped or len(self.queue) or self.inbox)

    def run_step_cap(self) -> int | None:
        """Most iterations a decode run starting with the one just scheduled may span before
        intake changes what is scheduled: the next poll of the inbox (every run ends there,
        so arrivals ride along), or the end of a batch wait. None: no cap."""
        cap = None
        if self.recv_interval > 1:  # the poll comes before iteration recv_interval - count + 1
            cap = max(1, self.recv_interval - self._recv_count + 1)
        if self._held:  # the wait ends before iteration batch_wait_iters - waited + 1
            held = self.batch_wait_iters - self._waited + 1
            cap = held if cap is None else min(cap, held)
        elif self._timed_out:  # nothing started after the wait: the next iteration waits anew
            cap = 1
        return cap

    def note_run_steps(self, n: int) -> None:
        """``n`` more decode iterations of a run happened without their own `schedule`."""
        self._recv_count += n
        if self._held:
            self._waited += n

    def add_request(self, req: Request) -> KvEvent | None:
        """Queue a new request; returns its rejection (and marks it) if it can never run.

        As in vLLM, a prompt of ``max_model_len`` tokens or more is refused, while a longer
        requested output is accepted and cut at ``max_model_len`` (`update`).
        """
        limit = self.max_model_len
        reserved = self.allocator.reserved_tokens(req)
        needed_blocks = self.kv.max_blocks_needed(reserved if limit is None else min(reserved, limit))
        # Without chunked prefill a prompt must fit one iteration's budget (vLLM refuses
        # such configurations; kvsim rejects the requests that could never start). A prompt
        # prefilled elsewhere (its KV transferred to this decode replica) needs no budget.
        too_long_prompt = (
            not self.chunked_prefill
            and not req.kv_transferred
            and req.prompt_tokens > self.max_num_batched_tokens
        )
        reason = (
            "max_model_len"
            if limit is not None and req.prompt_tokens >= limit
            else "kv_capacity"
            if needed_blocks > self.pool.num_blocks
            else "prompt_budget"
            if too_long_prompt
            else ""
        )
        if reason:
            return self._reject(req, needed_blocks, reason)
        req.status = Status.WAITING
        if self.recv_interval > 1 and self.running:
            self.inbox.append(req)  # unseen until the scheduler next polls
        else:
            self.queue.push(req)
        if req.spec.beam_group is not None:
            if self.can_fork:
                self.beams.add(req)
            elif req.spec.beam_index == 0:  # a KV manager that cannot fork: beams share nothing
                self.beams.stats.num_forks_skipped += len(req.spec.beam_forks)
        return None

    def schedule(self, now: float) -> SchedulerOutput:
        """Decide the next iteration: which requests compute how many tokens."""
        # The cap on one request's prefill chunk stops a long prompt from starving others;
        # with nobody else running or waiting there is nobody to starve (vLLM 0.32).
        if self.intake:
            self._poll_inbox()
            self._held = self._timed_out = False
        alone = len(self.running) + self.num_waiting <= 1
        step = Step(self.max_num_batched_tokens, 0 if alone else self.long_prefill_threshold)
        self.pool.set_time(now)  # retention priorities expire by it
        evicted_before = self.pool.num_evicted
        if self.prefill_first and self._prefill_batch(step, now):
            pass  # a prompt-only iteration: the decodes wait
        elif self.cohort is None or not self._schedule_cohort(step):
            self._schedule_running(step)
            if self.cohort is not None and not self.beams:
                self._join_cohort(step)
        if self.prefill_first:
            pass  # SGLang admits in prompt iterations only (`_prefill_batch`)
        elif not step.num_preempted:
            self._resume_swapped(step)
            if self.hold_admissions:  # the instance's ranks start prompts together
                pass
            elif not self.batch_wait_iters or self._batch_wait_over(step):
                self._admit_waiting(step, now)
                if not step.scheduled and not self.running and not self.swapped and len(self.queue):
                    self._reject_unschedulable(step, now)
        out = self._make_output(step, self.pool.num_evicted - evicted_before)
        if self.intake:  # a decode iteration counts 1, any other reads next time
            self._recv_count += self.recv_interval if out.num_prefill_seqs else 1
        return out

    def _prefill_batch(self, step: Step, now: float) -> bool:
        """SGLang's choice between a prefill batch and a decode batch (Scheduler.
        get_next_batch_to_run, python/sglang/srt/managers/scheduler.py, 0.5.x, mixed chunks
        off): the prompt part-way through its chunks goes on, then waiting requests are
        admitted, head of line first, while the token budget (chunked_prefill_size), the
        running cap and the blocks allow. If that schedules anything the iteration is
        theirs alone: the decoding requests wait (cohort members leave the cohort, their
        counters made exact, and rejoin at the next decode iteration). False, with nothing
        changed, when no prompt can run: the iteration decodes, and admits nobody.

        Not modelled: SGLang's admission estimate of the running requests' future tokens
        (`new_token_ratio`), and its retracting decodes when blocks run out (kvsim preempts
        as vLLM does)."""
        chunking = [
            req
            for req in self.explicit
            if req.num_tokens - req.num_computed_tokens != 1 or not req.num_output_tokens
        ]
        if not chunking and not (len(self.queue) and len(self.running) < self.max_num_seqs):
            return False
        if len(chunking) > 1:
            chunking.sort(key=run_seq)
        if chunking and self.cohort is not None and len(self.cohort):
            self.materialize()  # a chunk may preempt a member: every counter exact first
        running = self.running
        for req in chunking:
            if step.budget <= 0 or req.status is not Status.RUNNING:
                continue  # out of budget, or preempted by a chunk before it
            if self._schedule_chunk(req, running.index(req), step) < 0:
                break
        if not step.num_preempted and not self.hold_admissions:
            self._resume_swapped(step)
            self._admit_waiting(step, now)
            if not step.scheduled and not running and not self.swapped and len(self.queue):
                self._reject_unschedulable(step, now)
        if not step.scheduled and not step.num_preempted and not step.rejected:
            return False
        if self.cohort is not None and len(self.cohort):
            self.materialize()  # its members decode nothing in this iteration
        return True

    def _poll_inbox(self) -> None:
        """SGLang's SchedulerRecvSkipper (python/sglang/srt/managers/scheduler_recv_skipper.py,
        0.5.x): the scheduler reads new requests when its counter, +1 per decode iteration
        and +1,000 per other batch, reaches --scheduler-recv-interval; idle, it spins and
        reads them at once."""
        if self.recv_interval > 1 and (self._recv_count >= self.recv_interval or not self.running):
            self._recv_count = 0
            for req in self.inbox:
                self.queue.push(req)
            self.inbox.clear()

    def _batch_wait_over(self, step: Step) -> bool:
        """TensorRT-LLM's batch waiting (PyExecutor._waiting_requests, tensorrt_llm/_torch/
        pyexecutor/py_executor.py, 1.1-1.2; TP only, not with attention DP): when an
        iteration schedules both generation and context requests, the context requests
        wait unless batch_wait_timeout_iters iterations have waited or the scheduled tokens
        (generation + context) reach batch_wait_max_tokens_ratio x max_num_tokens.
        kvsim holds new admissions back (a prompt already chunking goes on)."""
        scheduled = self.max_num_batched_tokens - step.budget
        if not len(self.queue) or not self.running or not scheduled or len(self.running) >= self.max_num_seqs:
            return True  # no generation or no context request: nothing to wait for
        if self._waited < self.batch_wait_iters:
            need = self.batch_wait_tokens - scheduled
            if need > step.budget:
                reach = False
            else:
                queued = 0
                for req in self.queue:
                    queued += req.num_tokens - req.num_computed_tokens
                    if queued >= need:
                        break
                reach = queued >= need
            if not reach:
                self._waited += 1
                self._held = True
                return False
        else:
            self._timed_out = True
        self._waited = 0
        return True

    def _make_output(self, step: Step, num_evicted: int) -> SchedulerOutput:
        """Classify what was scheduled; the hot path's decodes (marked 0) are counted already."""
        kv = self.kv
        scheduled = step.scheduled
        num_decode, decode_ctx = step.num_fast_decodes, step.fast_decode_ctx
        chunks: list[tuple[int, int]] = []
        verifies: list[tuple[int, int]] = []  # speculative decoding: 1 + drafts after the context
        if num_decode - step.num_lazy != len(scheduled):  # classify what the hot path did not
            kv_cache = self.kv_cache_enabled
            for req, n in scheduled.items():
                if n == 0:
                    continue
                c = req.num_computed_tokens
                decoding = req.num_output_tokens and c == req.num_tokens - 1 and kv_cache
                if n == 1 and decoding:
                    num_decode += 1
                    decode_ctx += kv.attended_tokens(c + 1)
                elif decoding:
                    verifies.append((n, kv.attended_tokens(c)))
                elif not kv_cache:
                    chunks.append((c + n, 0))  # no KV cache: every step recomputes the sequence
                else:
                    chunks.append((n, kv.attended_tokens(c)))
        batch = Batch(
            prefill_chunks=chunks + verifies,
            num_decode_seqs=num_decode,
            decode_context_tokens=decode_ctx,
            num_verify_chunks=len(verifies),
        )
        return SchedulerOutput(
            tokens=scheduled,
            batch=batch,
            events=step.events,
            rejected=step.rejected,
            num_evicted=num_evicted,
            num_prefill_seqs=len(chunks),
            prefill_tokens=sum(q for q, _ in chunks),
            decode_tokens=num_decode + sum(q for q, _ in verifies),
            num_preempted=step.num_preempted,
            num_scheduled_tokens=self.max_num_batched_tokens - step.budget,
            num_lazy_decodes=step.num_lazy,
            offload_load_blocks=step.loaded_blocks,
            swap_out_blocks=step.swap_out_blocks,
            swap_in_blocks=step.swap_in_blocks,
            all_running_decode=(
                not chunks
                and not verifies
                and not step.num_preempted
                and not step.swap_in_blocks
                and not step.loaded_blocks
                and num_decode == len(self.running)
            ),
        )
