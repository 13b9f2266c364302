"""The decode cohort (`kvsim.core.cohort`): hand-computed bookkeeping on tiny cases, and
every table equal, bit for bit, to the engine that walks every running request each
iteration (the oracle, ``tests/oracle.py``), on the fast-forward cases of the engine and the
cluster, on random small scenarios and on random clusters."""

from __future__ import annotations

import math
from typing import Any

import pytest
from conftest import ROOT, spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import run_eager
from pandas.testing import assert_frame_equal
from test_cluster import FF_CASES as CLUSTER_CASES
from test_cluster import ROUTED
from test_cluster_properties import clusters
from test_engine import FF_CASES as ENGINE_CASES
from test_engine import _small_engine_runs
from test_retention import retention_scenario

import kvsim
from kvsim.core.block_pool import BlockPool
from kvsim.core.cohort import DecodeCohort
from kvsim.core.request_state import Request
from kvsim.core.scheduler import Scheduler

CHAT = ROOT / "scenarios" / "chat_sessions.yaml"


def assert_identical(a: kvsim.Result, b: kvsim.Result) -> None:
    assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert_frame_equal(a.iterations, b.iterations, check_exact=True)
    assert_frame_equal(a.events, b.events, check_exact=True)
    for key, x in a.summary.items():
        y = b.summary[key]
        assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), key


# --------------------------------------------------------------------------- bookkeeping


def _decoder(rid: int, prompt: int, output: int, pool: BlockPool, bs: int) -> Request:
    """A request that has prefilled ``prompt`` tokens and sampled one: decoding."""
    req = Request(spec(rid, prompt, output=output))
    req.num_computed_tokens = prompt
    req.num_tokens = prompt + 1
    req.num_output_tokens = 1
    req.blocks = list(pool.get_new_blocks(-(-(prompt + 1) // bs)))
    return req


def test_a_member_is_due_at_the_step_its_token_fills_its_block_then_at_each_allocation():
    pool = BlockPool(20)
    co = DecodeCohort(pool, block_size=4, limit=1 << 62)
    co.step = 10
    co.last_end = 1.0
    # 5 prompt tokens + 1 sampled: 6 tokens in 2 blocks (room 8); iteration 10 computes
    # token 5. Token 7 (iteration 12) fills block 1, token 8 (iteration 13) needs block 2.
    req = _decoder(0, 5, output=100, pool=pool, bs=4)
    co.join(req)
    assert co.due == {12: [req]}
    assert co.phase_count == [0, 1, 0, 0]  # allocations at iterations 13, 17, ... = 1 mod 4
    assert co.context_tokens() == 6  # the token computed in iteration 10 attends to 6
    co.end_iteration(1.5)
    co.end_iteration(2.25)
    assert co.pop_due(12) == [req] and co.computed_tokens(req) == 7
    co.refile(req, 7)  # iteration 12 registered block 1: next, the allocation at iteration 13
    assert co.due == {13: [req]}
    co.leave(req)
    assert (req.num_computed_tokens, req.num_tokens, req.num_output_tokens) == (7, 8, 3)
    assert req.last_token_s == 2.25 and req.metrics.max_itl_s == 0.75
    assert len(co) == 0 and co.phase_count == [0, 0, 0, 0]


def test_a_private_block_is_registered_by_the_allocation_that_follows_it():
    pool = BlockPool(20)
    co = DecodeCohort(pool, block_size=4, limit=1 << 62)
    req = _decoder(0, 5, output=100, pool=pool, bs=4)
    req.private_from_token = 0  # nobody else can hit its blocks
    co.last_end = req.last_token_s = 0.0
    co.join(req)
    assert co.due == {3: [req]}  # not 2: nothing can tell the fill step from the next one
    pool.kv_events_private = True  # ...unless a write-through tier counts private blocks
    req2 = _decoder(1, 5, output=100, pool=pool, bs=4)
    req2.private_from_token = 0
    co.join(req2)
    assert co.due == {3: [req], 2: [req2]}


def test_without_caching_only_allocations_and_the_finish_are_due():
    pool = BlockPool(20, enable_caching=False)
    co = DecodeCohort(pool, block_size=4, limit=1 << 62)
    co.last_end = 0.0
    long_one = _decoder(0, 5, output=100, pool=pool, bs=4)  # needs block 2 at token 8: iteration 3
    short_one = _decoder(1, 9, output=3, pool=pool, bs=4)  # 2 more tokens: finishes in iteration 1
    co.join(long_one)
    co.join(short_one)
    assert co.due == {3: [long_one], 1: [short_one]}
    assert co.first_finish() == 1


def test_the_finish_comes_from_max_model_len_when_that_is_nearer():
    pool = BlockPool(20)
    co = DecodeCohort(pool, block_size=16, limit=12)
    co.last_end = 0.0
    req = _decoder(0, 5, output=100, pool=pool, bs=16)  # 6 tokens; the 12th ends it
    co.join(req)
    assert co.first_finish() == 5  # iterations 0..5 sample tokens 7..12
    assert co.due == {5: [req]}


def test_the_longest_gap_is_the_largest_gap_since_joining():
    pool = BlockPool(20)
    co = DecodeCohort(pool, block_size=16, limit=1 << 62)
    co.last_end = 0.0
    early = _decoder(0, 1, output=100, pool=pool, bs=16)
    co.join(early)
    t = 0.0
    for gap in (3.0, 1.0, 4.0):  # iterations 0..2
        t += gap
        co.end_iteration(t)
    late = _decoder(1, 1, output=100, pool=pool, bs=16)
    late.last_token_s = t
    co.join(late)
    for gap in (1.0, 0.5, 2.0, 2.0):  # iterations 3..6
        t += gap
        co.end_iteration(t)
    co.materialize(early)
    co.materialize(late)
    assert early.metrics.max_itl_s == 4.0 and late.metrics.max_itl_s == 2.0
    assert early.num_output_tokens == 8 and late.num_output_tokens == 5
    assert early.last_token_s == late.last_token_s == t


def test_a_contiguous_reservation_is_due_only_when_it_finishes():
    """A reserve_* allocator's request holds all its blocks from admission: it never
    allocates, so it needs the scheduler only at the step that samples its last token."""
    pool = BlockPool(40, enable_caching=False)
    co = DecodeCohort(pool, block_size=4, limit=1 << 62, paged=False)
    co.step = 3
    co.last_end = 0.5
    req = _decoder(0, prompt=5, output=10, pool=pool, bs=4)
    req.blocks = [*req.blocks, *pool.get_new_blocks(2)]  # the reservation: 4 blocks, 16 slots
    co.join(req)
    # Tokens 5.. are computed at iterations 3..; its 10th output token is sampled at 3 + 8.
    assert (req.lazy_phase, req.lazy_finish, req.lazy_due) == (-1, 11, 11)
    assert co.phase_count == [0, 0, 0, 0]
    assert co.steps_until_blocks_run_out(4, 20, free_blocks=0) == 20  # it needs no block


def test_a_decode_run_stops_before_the_allocation_the_free_blocks_cannot_serve():
    pool = BlockPool(40, enable_caching=False)
    co = DecodeCohort(pool, block_size=4, limit=1 << 62)
    co.last_end = 0.0
    # Three members allocating at iterations 2, 3 and 4 (mod 4: phases 2, 3, 0).
    for rid, prompt in enumerate((6, 5, 4)):  # 7, 6, 5 tokens: room 8: to_alloc 2, 3, 4
        co.join(_decoder(rid, prompt, output=100, pool=pool, bs=4))
    assert co.phase_count == [1, 0, 1, 1]
    # Iterations 1..: allocations at 2, 3, 4, then 6, 7, 8, ...
    assert co.steps_until_blocks_run_out(1, 20, free_blocks=0) == 1  # iteration 2 needs one
    assert co.steps_until_blocks_run_out(1, 20, free_blocks=3) == 5  # the 4th is at iteration 6
    assert co.steps_until_blocks_run_out(1, 20, free_blocks=100) == 20


# --------------------------------------------------------------------------- equal to walking everyone


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(ENGINE_CASES))
def test_the_cohort_changes_nothing_on_the_engine_cases(case: str) -> None:
    ov = ["workload.num_requests=250", *ENGINE_CASES[case]]
    lazy = kvsim.run(None, overrides=ov)
    eager = run_eager(None, overrides=ov)
    assert_identical(lazy, eager)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CLUSTER_CASES))
def test_the_cohort_changes_nothing_on_the_cluster_cases(case: str) -> None:
    ov = [*ROUTED, "workload.num_requests=200", *CLUSTER_CASES[case]]
    lazy = kvsim.run(CHAT, overrides=ov)
    eager = run_eager(CHAT, overrides=ov)
    assert_identical(lazy, eager)


@pytest.mark.parametrize(
    "path",
    [
        "chat_sessions.yaml",
        "chunked_prefill.yaml",
        "cpu_offload.yaml",
        "disaggregated_prefill_decode.yaml",
        "preemption_recompute.yaml",
        "prefix_caching_on.yaml",
    ],
)
def test_the_cohort_changes_nothing_on_catalogue_scenarios(path: str) -> None:
    ov = ["workload.num_requests=150"]
    lazy = kvsim.run(ROOT / "scenarios" / path, overrides=ov)
    eager = run_eager(ROOT / "scenarios" / path, overrides=ov)
    assert_identical(lazy, eager)


def test_the_cohort_changes_nothing_on_the_retention_tiers_scenario() -> None:
    path = ROOT / "scenarios" / "retention_tiers.yaml"
    assert_identical(kvsim.run(path), run_eager(path))


@pytest.mark.parametrize("policy", ["lru", "retention"])
def test_the_cohort_changes_nothing_under_retention_priorities(policy: str) -> None:
    scenario = retention_scenario(policy)
    lazy = kvsim.run(scenario)
    assert lazy.summary["num_evicted_blocks"] > 1000
    assert_identical(lazy, run_eager(scenario))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_small_engine_runs())
def test_the_cohort_changes_nothing_on_random_small_scenarios(case: Any) -> None:
    scenario, reqs = case
    for fast_forward in (True, False):
        run = scenario | {"sim": {"fast_forward": fast_forward}}
        assert_identical(kvsim.run(run, requests=reqs), run_eager(run, requests=reqs))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_cohort_changes_nothing_on_random_clusters(data: dict[str, Any]) -> None:
    assert_identical(kvsim.run(data), run_eager(data))


# --------------------------------------------------------------------------- preemption inside the cohort


def _priority_decoders(first_prompt: int, num_blocks: int) -> tuple[dict[str, Any], list[Any]]:
    """Three long decoders on a pool too small for all of them, under the priority policy:
    the first admitted has the worst priority, so it is preempted while members that come
    after it in running order keep decoding."""
    engine = {
        "block_size": 4,
        "num_gpu_blocks_override": num_blocks,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 64,
        "scheduling_policy": "priority",
        "enable_prefix_caching": True,
    }
    reqs = [
        spec(0, first_prompt, output=200, arrival=0.0, priority=2),
        spec(1, 9, output=200, arrival=0.001, priority=0),
        spec(2, 10, output=200, arrival=0.001, priority=0),
    ]
    return {"model": "llama-3-8b", "replicas": [{"gpu": "h100-sxm", "engine": engine}]}, reqs


def _spy_undo(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """(request id, decoded) of every member `Scheduler._undo_lazy_decode` takes back."""
    seen: list[tuple[int, bool]] = []
    real = Scheduler._undo_lazy_decode

    def spy(self: Scheduler, req: Request, step: Any, *, decoded: bool) -> None:
        seen.append((req.request_id, decoded))
        real(self, req, step, decoded=decoded)

    monkeypatch.setattr(Scheduler, "_undo_lazy_decode", spy)
    return seen


def test_a_member_preempted_after_its_token_was_scheduled_keeps_the_block_it_filled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Request 0 comes first in running order and is the victim of a later request's block:
    stepping had already scheduled its token, and registered the private block that token
    fills, so the block goes back to the free queue cached (evicted, not reused silently)."""
    seen = _spy_undo(monkeypatch)
    scenario, reqs = _priority_decoders(8, 61)
    lazy = kvsim.run(scenario, requests=reqs)
    assert (0, True) in seen
    assert lazy.summary["num_preemptions"] >= 1
    assert_identical(lazy, run_eager(scenario, requests=reqs))


def test_members_after_a_request_that_preempts_itself_do_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Request 1 needs a block and is itself the lowest priority left: it preempts itself, and
    as in vLLM nobody after it in running order (member 2) runs in that iteration."""
    seen = _spy_undo(monkeypatch)
    scenario, reqs = _priority_decoders(6, 58)
    lazy = kvsim.run(scenario, requests=reqs)
    assert (2, False) in seen
    assert_identical(lazy, run_eager(scenario, requests=reqs))


@st.composite
def _pressured_runs(draw: Any) -> tuple[dict[str, Any], list[Any]]:
    """Short prompts, long outputs and a pool that holds one to four of the longest
    requests: preemption in most iterations that need a block, under either policy."""
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    reqs = []
    t = 0.0
    for rid in range(draw(st.integers(2, 24))):
        t += draw(st.sampled_from([0.0, 0.0, 0.001, 0.05]))
        own = draw(st.integers(1, 40))
        prompt = (
            [(0, draw(st.integers(1, 40))), (1000 + rid, own)] if draw(st.booleans()) else [(1000 + rid, own)]
        )
        reqs.append(
            spec(rid, prompt, output=draw(st.integers(2, 150)), arrival=t, priority=draw(st.integers(0, 3)))
        )
    longest = -(-max(r.prompt_tokens + r.output_tokens for r in reqs) // bs)
    engine = {
        "block_size": bs,
        "num_gpu_blocks_override": draw(st.integers(longest + 2, longest * 4 + 2)),
        "max_num_seqs": draw(st.integers(2, 16)),
        "max_num_batched_tokens": draw(st.sampled_from([32, 64, 256])),
        "long_prefill_token_threshold": draw(st.sampled_from([0, 8, 16])),
        "preemption_mode": draw(st.sampled_from(["recompute", "swap"])),
        "scheduling_policy": draw(st.sampled_from(["fcfs", "priority", "priority"])),
        "enable_prefix_caching": draw(st.booleans()),
    }
    return {"model": "llama-3-8b", "replicas": [{"gpu": "h100-sxm", "engine": engine}]}, reqs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pressured_runs())
def test_the_cohort_changes_nothing_under_memory_pressure(case: Any) -> None:
    scenario, reqs = case
    assert_identical(kvsim.run(scenario, requests=reqs), run_eager(scenario, requests=reqs))


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Decodes of every iteration applied from now on: all of them, and the cohort's."""
    counted = {"lazy": 0, "all": 0}
    real_update = Scheduler.update

    def counting_update(self: Any, out: Any, t_end: float) -> Any:
        counted["lazy"] += out.num_lazy_decodes
        counted["all"] += out.decode_tokens
        return real_update(self, out, t_end)

    monkeypatch.setattr(Scheduler, "update", counting_update)
    return counted


def test_the_cohort_carries_most_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a no-op: on a loaded replica most decodes are advanced by the cohort."""
    counted = _count_decodes(monkeypatch)
    kvsim.run(None, overrides=["workload.num_requests=250", "sim.fast_forward=false"])
    assert counted["lazy"] > 0.8 * counted["all"]


def test_the_oracle_walks_every_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference the comparisons above run against is really the eager engine."""
    counted = _count_decodes(monkeypatch)
    run_eager(None, overrides=["workload.num_requests=250"])
    assert counted["lazy"] == 0 and counted["all"] > 1000
