"""Attention-DP ranks in lockstep: the D replicas of one instance take their iterations together.

An instance of ``attention_dp`` = D ranks serving a mixture of experts runs its MoE layers on
all tp x D GPUs: every rank enters each MoE layer's exchange (all-to-all, or all-gather and
reduce-scatter) at once, so the ranks start and end every iteration together and the
slowest rank's iteration is everyone's. A rank with nothing to run joins with a dummy batch
(vLLM's ``execute_dummy_batch``, SGLang's idle batches, TensorRT-LLM's attention-DP dummy
requests); kvsim lets it sit out, as a dummy batch's time is below the busy ranks'.

Each rank keeps its own scheduler, batch and KV pool (`kvsim.engine.replica.Replica`, not
driving itself); the instance schedules every rank with work, prices each rank's batch,
and waits the longest. What the experts run on follows each engine
(`instance_moe_tokens`); a rank's attention and dense layers run on its own tokens.

TensorRT-LLM's attention-DP balancing (``engine.attention_dp_balance``) decides, before each
iteration, whether the ranks hold new prompts back (`Lockstep._balance`).

Iterations are taken one at a time (no fast-forwarded decode runs): a run would have to
end wherever any rank's schedule changes.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kvsim.core.outcome import SchedulerOutput
from kvsim.engine.clock import LateTimeout
from kvsim.engine.replica import Replica
from kvsim.scenario.schema import AttentionDpBalance

Process = Generator[simpy.Event, Any, None]


def instance_moe_tokens(backend: str, tokens: list[int], prefill: bool, max_graph_tokens: int) -> int | None:
    """The tokens an instance's MoE layers run on in one lockstep iteration, from every
    rank's (``tokens``, one per rank, 0 for an idle one); None: every rank's count padded to
    the busiest rank's, which pricing each rank at its own tokens x D and taking the longest
    stands for.

    - vLLM pads every rank to the busiest rank's count when all run CUDA graphs
      (vllm/v1/worker/dp_utils.py ``_synchronize_dp_ranks``: padding when the synchronized
      cudagraph mode is not NONE, 0.32.0); a step beyond the capture size runs the sum.
    - SGLang gathers the sum whenever a prompt is in the batch (``DpPaddingMode.SUM_LEN``,
      python/sglang/srt/layers/dp_attention.py, 0.5.x), and in decode batches the busiest
      count x D when twice the sum exceeds it (``MAX_LEN``), else the sum.
    - TensorRT-LLM all-gathers each rank's own tokens: the sum.
    """
    busiest, total = max(tokens), sum(tokens)
    if backend == "vllm":
        return None if busiest <= max_graph_tokens else total
    if backend == "sglang" and not prefill and 2 * total > busiest * len(tokens):
        return None
    return total


class Lockstep:
    """One attention-DP instance: a SimPy process stepping its ranks together."""

    def __init__(
        self,
        env: simpy.Environment,
        ranks: list[Replica],
        backend: str,
        max_graph_tokens: int,
        balance: AttentionDpBalance | None = None,
    ) -> None:
        self.env = env
        self.ranks = ranks
        self.backend = backend
        self.max_graph_tokens = max_graph_tokens
        self.balance = balance
        self.clock = 0.0  # exact end of the last iteration
        self._waiting_iters = 0  # TensorRT-LLM's adp_ctx_waiting_iters_count
        self._batching_iters = 0  # and adp_ctx_batching_wait_iters_count
        self.process = env.process(self._loop())

    def _sleep(self) -> Process:
        """Wait for a submission to any rank, then for the rest of that instant's events."""
        wake = self.env.event()
        for rank in self.ranks:
            rank._wake = wake
        yield wake
        for rank in self.ranks:
            rank._wake = None
        yield LateTimeout(self.env, 0)
        self.clock = self.env.now

    def _loop(self) -> Process:
        ranks = self.ranks
        max_time = ranks[0].engine.max_time_s
        while True:
            if not any(rank.engine.has_work() or rank.has_deferred for rank in ranks):
                yield from self._sleep()
            now = self.clock
            if max_time is not None and now >= max_time:
                return
            if self.balance is not None:
                self._balance(self.balance)
            steps: list[tuple[Replica, SchedulerOutput]] = []
            for rank in ranks:
                if rank.engine.has_work():
                    out = rank.schedule(now)
                    if out.tokens or out.num_lazy_decodes:
                        steps.append((rank, out))
                rank.engine.scheduler.hold_admissions = False
            if not steps:
                if not any([rank.release_deferred() for rank in ranks]):  # async scheduling's late ones
                    yield from self._sleep()
                continue
            for rank in ranks:
                rank.stepping = True
            yield from self._step(now, steps)
            for rank in ranks:
                rank.stepping = False

    def _step(self, now: float, steps: list[tuple[Replica, SchedulerOutput]]) -> Process:
        """One iteration of every busy rank: price each, wait the longest, apply them all."""
        env = self.env
        tokens = [out.batch.num_tokens for _, out in steps] + [0] * (len(self.ranks) - len(steps))
        prefill = any(out.batch.prefill_chunks for _, out in steps)
        moe = instance_moe_tokens(self.backend, tokens, prefill, self.max_graph_tokens)
        for _, out in steps:
            out.batch.moe_tokens = moe
        priced = [rank.engine.price_step(out) for rank, out in steps]
        for rank in self.ranks:  # async scheduling: arrivals held back while this was scheduled
            if rank.has_deferred:
                rank.release_deferred()
        dt = max(p.duration_s for p in priced)
        if any(rank.transfers is not None for rank, _ in steps):
            t0 = env.now
            moves = [env.process(rank._shared_transfers(out)) for rank, out in steps if rank.transfers]
            yield simpy.AllOf(env, moves)
            dt += env.now - t0
        for (rank, out), p in zip(steps, priced, strict=True):
            rank.engine.record_step(now, dt, out, p)
        t_end = now + dt
        yield LateTimeout(env, max(t_end - env.now, 0.0))
        self.clock = t_end
        for rank, out in steps:
            rank.clock = t_end
            rank._dispatch(rank.engine.end_step(out, t_end))

    def _balance(self, cfg: AttentionDpBalance) -> None:
        """TensorRT-LLM's PyExecutor._balance_adp_requests (tensorrt_llm/_torch/pyexecutor/
        py_executor.py, 1.1-1.2), decided before the ranks schedule: new prompts wait unless
        every rank has one waiting and room for it; while some rank has none the waiting
        counter counts up (every iteration, whatever waits) and lets them go at timeout_iters
        or when some rank has nothing decoding; once every rank has one, and every rank
        decodes, they wait batching_wait_iters iterations more."""
        scheds = [rank.engine.scheduler for rank in self.ranks]
        every_room = all(len(s.running) < s.max_num_seqs for s in scheds)
        every_prompt = all(len(s.queue) for s in scheds)
        every_decodes = all(s.running for s in scheds)
        hold = False
        if every_room and every_prompt:
            self._waiting_iters = 0
            if every_decodes:
                if self._batching_iters < cfg.batching_wait_iters:
                    self._batching_iters += 1
                    hold = True
                else:
                    self._batching_iters = 0
        else:
            self._waiting_iters += 1
            hold = True
            if self._waiting_iters >= cfg.timeout_iters or not every_decodes:
                self._waiting_iters = 0
                hold = False
        for s in scheds:
            s.hold_admissions = hold
