"""Property-based checks of the block pool and the scheduler (hypothesis state machines)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.kv.tiers import CpuOffloadTier
from kvsim.request import RequestSpec, Retention, Segment
from kvsim.scenario.schema import EngineConfig

NUM_BLOCKS = 12
#: Rule steps each machine ran (invariants are checked after every one), for the CI log.
STEPS = {"block pool": 0, "scheduler": 0}
#: Forks and speculative verify passes the scheduler machines made, for the CI log.
FEATURES = {"beam forks": 0, "verify passes": 0}
BEAM_CONTENT = 10_000  # content ids of beam groups' prompts


class BlockPoolMachine(RuleBasedStateMachine):
    """Random allocations, caching, hits and frees: blocks conserved, refs never negative."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(NUM_BLOCKS, eviction_policy="lru")
        self.owned: list[list] = []  # block lists held by imaginary requests
        self.next_hash = 0

    @rule(n=st.integers(1, 4))
    def allocate(self, n: int) -> None:
        if n <= self.pool.num_free_blocks:
            before = list(self.pool.free_queue)[:n]
            got = self.pool.get_new_blocks(n)
            assert got == before  # always from the head of the queue
            self.owned.append(got)

    @precondition(lambda self: self.owned)
    @rule(i=st.integers(0, 100))
    def cache_one(self, i: int) -> None:
        blocks = self.owned[i % len(self.owned)]
        for b in blocks:
            if b.block_hash is None:
                self.pool.cache_block(b, self.next_hash)
                self.next_hash += 1
                break

    @precondition(lambda self: self.owned)
    @rule(i=st.integers(0, 100))
    def free(self, i: int) -> None:
        blocks = self.owned.pop(i % len(self.owned))
        self.pool.free_blocks(reversed(blocks))

    @precondition(lambda self: self.pool.cached)
    @rule(i=st.integers(0, 1000))
    def hit(self, i: int) -> None:
        hashes = sorted(self.pool.cached)
        block = self.pool.get_cached_block(hashes[i % len(hashes)])
        assert block is not None
        self.pool.touch([block])
        self.owned.append([block])

    @invariant()
    def conserved(self) -> None:
        STEPS["block pool"] += 1
        pool = self.pool
        refs = {}
        for blocks in self.owned:
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        assert all(pool.blocks[i].ref_cnt == n for i, n in refs.items())
        assert pool.num_free_blocks + len(refs) == NUM_BLOCKS
        pool.check_invariants()


def test_block_pool_machine(record_property) -> None:
    before = STEPS["block pool"]
    run_state_machine_as_test(
        BlockPoolMachine, settings=settings(max_examples=150, stateful_step_count=50, deadline=None)
    )
    record_property("steps", {"machine": "block pool", "steps": STEPS["block pool"] - before})


class SchedulerMachine(RuleBasedStateMachine):
    """Random arrivals and iterations on a tiny pool under random engine knobs."""

    def __init__(self) -> None:
        super().__init__()
        self.sched: Scheduler | None = None
        self.reqs: dict[int, Request] = {}
        self.t = 0.0

    @precondition(lambda self: self.sched is None)
    @rule(
        budget=st.integers(4, 24),
        max_seqs=st.integers(1, 5),
        chunked=st.booleans(),
        threshold=st.sampled_from([0, 3, 8]),
        mode=st.sampled_from(["recompute", "swap"]),
        policy=st.sampled_from(["fcfs", "priority"]),
        eviction=st.sampled_from(["lru", "lfu", "retention"]),
        caching=st.booleans(),
        allocation=st.sampled_from(["paged", "paged", "reserve_pow2", "reserve_oracle"]),
        offload_blocks=st.sampled_from([0, 0, 3, 16]),
        spec_k=st.sampled_from([0, 0, 1, 3]),
        acceptance=st.sampled_from([0.0, 0.5, 1.0]),
    )
    def configure(
        self,
        budget,
        max_seqs,
        chunked,
        threshold,
        mode,
        policy,
        eviction,
        caching,
        allocation,
        offload_blocks,
        spec_k,
        acceptance,
    ) -> None:
        caching = caching and allocation == "paged"
        # Speculative decoding (rollback of rejected drafts) on some machines.
        speculative = (
            {"method": "ngram", "num_speculative_tokens": spec_k, "acceptance_rate": acceptance}
            if spec_k
            else None
        )
        cfg = EngineConfig(
            block_size=4,
            max_num_batched_tokens=budget,
            max_num_seqs=max_seqs,
            enable_chunked_prefill=chunked,
            long_prefill_token_threshold=threshold,
            preemption_mode=mode,
            scheduling_policy=policy,
            eviction_policy=eviction,
            enable_prefix_caching=caching,
            kv_allocation=allocation,
            speculative_config=speculative,
        )

        def tier() -> CpuOffloadTier | None:  # a CPU offload tier below each pool
            return CpuOffloadTier(offload_blocks) if offload_blocks else None

        pool = BlockPool(NUM_BLOCKS, enable_caching=caching, eviction_policy=eviction, offload=tier())
        self.sched = Scheduler(cfg, pool, num_swap_blocks=6)
        # A twin that hashes every block (no private marks) must behave identically.
        twin_pool = BlockPool(NUM_BLOCKS, enable_caching=caching, eviction_policy=eviction, offload=tier())
        self.twin = Scheduler(cfg, twin_pool, num_swap_blocks=6)
        self.twin_reqs: dict[int, Request] = {}

    @precondition(lambda self: self.sched is not None)
    @rule(
        prefix=st.sampled_from([0, 1, 2]),
        prefix_len=st.integers(1, 12),
        own=st.integers(1, 12),
        out=st.integers(1, 8),
        prio=st.integers(0, 2),
        retention=st.sampled_from(["default", "default", "none", "priority:80:2", "priority:10"]),
    )
    def arrive(self, prefix, prefix_len, own, out, prio, retention) -> None:
        rid = len(self.reqs)
        segs = (
            (Segment(prefix, prefix_len), Segment(100 + rid, own)) if prefix else (Segment(100 + rid, own),)
        )
        if self.sched.pool.timed or not retention.startswith("priority"):  # priorities need the policy
            kept = Retention.parse(retention)
        else:
            kept = Retention()
        spec = RequestSpec(
            request_id=rid, arrival_s=self.t, prompt=segs, output_tokens=out, priority=prio, retention=kept
        )
        self._add(spec)

    @precondition(lambda self: self.sched is not None)
    @rule(
        width=st.integers(2, 3),
        prompt_len=st.integers(1, 10),
        out=st.integers(2, 8),
        forks=st.lists(st.tuples(st.integers(1, 7), st.integers(1, 2), st.integers(0, 2)), max_size=4),
    )
    def arrive_beams(self, width, prompt_len, out, forks) -> None:
        """A beam group: forks (step, pruned, parent) with copy-on-write of partial blocks."""
        first = len(self.reqs)
        genealogy = tuple(sorted((s, c, p) for s, c, p in forks if c < width and p < width and c != p))
        for i in range(width):
            spec = RequestSpec(
                request_id=first + i,
                arrival_s=self.t,
                prompt=(Segment(BEAM_CONTENT + first, prompt_len),),
                output_tokens=out,
                beam_group=first,
                beam_index=i,
                beam_forks=genealogy if i == 0 else (),
            )
            self._add(spec)

    def _add(self, spec: RequestSpec) -> None:
        # Only the prefixes and the beams' prompts are shared (the twin hashes everything).
        req = Request(
            spec,
            shared_content_ids={1, 2, *(s.content_id for s in spec.prompt if s.content_id >= BEAM_CONTENT)},
        )
        self.reqs[spec.request_id] = req
        self.sched.add_request(req)
        self.twin_reqs[spec.request_id] = Request(spec)
        self.twin.add_request(self.twin_reqs[spec.request_id])

    @precondition(lambda self: self.sched is not None and self.sched.has_work())
    @rule()
    def iterate(self) -> None:
        s = self.sched
        out = s.schedule(self.t)
        budget = s.max_num_batched_tokens
        assert sum(n for _, n in out.scheduled) <= budget
        assert len(out.scheduled) <= s.max_num_seqs and len(s.running) <= s.max_num_seqs
        assert len({r.request_id for r, _ in out.scheduled}) == len(out.scheduled)
        for r, n in out.scheduled:
            assert 1 <= n <= r.num_tokens - r.num_computed_tokens + r.num_spec_tokens  # drafts verified
            held = sum(1 for b in r.blocks if b is not None)
            assert held * 4 >= r.num_computed_tokens + n - 4 * r.num_skipped_blocks
        twin_out = self.twin.schedule(self.t)
        assert [(r.request_id, n) for r, n in twin_out.scheduled] == [
            (r.request_id, n) for r, n in out.scheduled
        ]
        assert [(e.kind, e.request_id) for e in twin_out.events] == [
            (e.kind, e.request_id) for e in out.events
        ]
        assert twin_out.num_evicted == out.num_evicted and self.twin.pool.num_evicted == s.pool.num_evicted
        for rid, r in self.reqs.items():
            assert [b.block_id for b in self.twin_reqs[rid].blocks if b] == [
                b.block_id for b in r.blocks if b
            ]
        self.t += 1.0
        done, twin_done = s.update(out, self.t), self.twin.update(twin_out, self.t)
        assert [r.request_id for r in done.finished] == [r.request_id for r in twin_done.finished]

    def teardown(self) -> None:
        if self.sched is not None:
            FEATURES["beam forks"] += self.sched.beams.stats.num_forks
            FEATURES["verify passes"] += self.sched.spec_stats.num_drafts

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        s = self.sched
        if s is None:
            return
        STEPS["scheduler"] += 1
        waiting = [r for r in self.reqs.values() if r.status is Status.WAITING]
        assert sorted(r.request_id for r in s.running) == sorted(
            r.request_id for r in self.reqs.values() if r.status is Status.RUNNING
        )
        assert len(s.running) == len({id(r) for r in s.running})
        assert s.num_waiting == len(waiting) + sum(
            1 for r in self.reqs.values() if r.status is Status.SWAPPED
        )
        for r in self.reqs.values():
            if r.status is Status.FINISHED:
                assert r.num_output_tokens == r.target_output_tokens and not r.blocks
            else:
                assert r.num_output_tokens < r.target_output_tokens
            if r.status in (Status.WAITING, Status.SWAPPED, Status.REJECTED):
                assert not r.blocks
        assert s.num_tokens_stored == sum(r.num_computed_tokens for r in s.running)
        # Blocks conserved: used blocks are exactly the distinct blocks running requests hold.
        held = {b.block_id for r in s.running for b in r.blocks if b is not None}
        assert s.pool.num_used_blocks == len(held)
        # Ref counts are the holders: beams sharing a block after a fork count once each.
        holders: dict[int, int] = {}
        for r in s.running:
            for b in r.blocks:
                if b is not None:
                    holders[b.block_id] = holders.get(b.block_id, 0) + 1
        assert {b.block_id: b.ref_cnt for b in s.pool.blocks if b.ref_cnt} == holders
        assert 0 <= s.swap.num_used_blocks <= s.swap.num_blocks
        s.pool.check_invariants()


def test_scheduler_machine(record_property) -> None:
    before = STEPS["scheduler"]
    run_state_machine_as_test(
        SchedulerMachine,
        settings=settings(
            max_examples=300,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    record_property("steps", {"machine": "scheduler", "steps": STEPS["scheduler"] - before})
    # The new operations were exercised, not only allowed.
    assert FEATURES["beam forks"] > 0 and FEATURES["verify passes"] > 0, FEATURES
