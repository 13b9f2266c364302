"""Scheduler and KV manager on tiny pools: prefix hits, chunking, preemption, swap."""

from __future__ import annotations

import weakref

from conftest import spec

from kvsim.core.block_pool import BlockPool
from kvsim.core.outcome import KvEvent, SchedulerOutput
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.scenario.schema import EngineConfig

# Every event each scheduler reported, in order, as the engine would record them.
_LOG: weakref.WeakKeyDictionary[Scheduler, list[KvEvent]] = weakref.WeakKeyDictionary()


def make(num_blocks: int = 10, **engine) -> Scheduler:
    cfg = EngineConfig(block_size=4, **engine)
    pool = BlockPool(
        num_blocks, enable_caching=cfg.enable_prefix_caching, eviction_policy=cfg.eviction_policy
    )
    return Scheduler(cfg, pool, num_swap_blocks=8)


def events(s: Scheduler) -> list[KvEvent]:
    return _LOG.setdefault(s, [])


def add(s: Scheduler, req: Request) -> bool:
    """Queue ``req``; False (and its rejection logged) if it can never run."""
    rejection = s.add_request(req)
    if rejection is not None:
        events(s).append(rejection)
    return rejection is None


def schedule(s: Scheduler, t: float) -> SchedulerOutput:
    out = s.schedule(t)
    events(s).extend(out.events)
    return out


def step(s: Scheduler, t: float) -> list[tuple[int, int]]:
    out = schedule(s, t)
    s.update(out, t + 1.0)
    return [(r.request_id, n) for r, n in out.scheduled]


def block_ids(r: Request) -> list[int]:
    return [b.block_id for b in r.blocks if b is not None]


def test_prefill_then_decode_with_exact_blocks_and_cached_hashes():
    s = make()
    a = Request(spec(0, [(1, 10)], output=3))
    add(s, a)
    assert step(s, 0) == [(0, 10)]  # whole prompt in one chunk; first token sampled
    assert a.num_output_tokens == 1 and a.metrics.first_token_s == 1.0
    assert block_ids(a) == [0, 1, 2] and a.num_cached_blocks == 2  # 10 tokens: 2 full blocks
    assert step(s, 1) == [(0, 1)] and step(s, 2) == [(0, 1)]
    assert a.status is Status.FINISHED and a.metrics.finish_s == 3.0
    # Freed tail first: 3..9 were never used, then 2, 1, 0.
    assert [b.block_id for b in s.pool.free_queue] == [3, 4, 5, 6, 7, 8, 9, 2, 1, 0]


def test_shared_prefix_hits_whole_blocks_and_leaves_one_token_to_compute():
    s = make()
    a = Request(spec(0, [(1, 8), (2, 2)], output=2))
    b = Request(spec(1, [(1, 8), (3, 5)], output=2))
    c = Request(spec(2, [(1, 8)], output=2))  # prompt entirely cached: recompute the last block
    for r in (a, b, c):
        add(s, r)
    assert step(s, 0) == [(0, 10), (1, 5), (2, 4)]
    assert (
        a.metrics.prefix_cache_hits_tokens,
        b.metrics.prefix_cache_hits_tokens,
        c.metrics.prefix_cache_hits_tokens,
    ) == (0, 8, 4)
    assert block_ids(b)[:2] == block_ids(a)[:2] == [0, 1]
    assert s.stats.prefix_cache_queries_tokens == 10 + 13 + 8 and s.stats.prefix_cache_hits_tokens == 12


def test_a_miss_on_an_evicted_block_is_counted_as_a_hit_lost_to_eviction():
    s = make()  # 10 blocks of 4 tokens
    a = Request(spec(0, [(1, 12)], output=1))  # blocks 0-2 cached, 3 (partial) uncached
    add(s, a)
    assert step(s, 0) == [(0, 12)] and a.status is Status.FINISHED
    # Free queue now 3 (uncached, at the head), 4..9, then a's cached blocks tail first: 2, 1, 0.
    b = Request(spec(1, 28, output=2))
    add(s, b)
    assert step(s, 2) == [(1, 28)] and block_ids(b) == [3, 4, 5, 6, 7, 8, 9]
    out = schedule(s, 3)  # its decode needs an 8th block: a's block 2, evicted
    assert block_ids(b)[-1] == 2 and out.num_evicted == 1
    s.update(out, 4)
    c = Request(spec(2, [(1, 12), (5, 4)], output=1))
    d = Request(spec(3, [(6, 12)], output=1))  # content never cached: nothing lost
    add(s, c)
    add(s, d)
    step(s, 4)
    assert (c.metrics.prefix_cache_hits_tokens, c.metrics.evicted_miss_tokens) == (
        8,
        4,
    )  # blocks 0, 1 hit; 2 was evicted
    assert (d.metrics.prefix_cache_hits_tokens, d.metrics.evicted_miss_tokens) == (0, 0)


def test_tenants_never_share_blocks():
    s = make()
    a = Request(spec(0, [(1, 8), (2, 1)], output=2, tenant="a"))
    b = Request(spec(1, [(1, 8), (2, 1)], output=2, tenant="b"))
    add(s, a)
    add(s, b)
    step(s, 0)
    assert b.metrics.prefix_cache_hits_tokens == 0 and not set(block_ids(a)) & set(block_ids(b))


def test_chunked_prefill_respects_budget_and_threshold():
    s = make(num_blocks=20, max_num_batched_tokens=8, long_prefill_token_threshold=6)
    a = Request(spec(0, 20, output=2))
    b = Request(spec(1, 3, output=2))
    add(s, a)
    add(s, b)
    assert step(s, 0) == [(0, 6), (1, 2)]  # a capped at 6, b gets the 2 left
    assert a.num_output_tokens == 0 and b.num_output_tokens == 0
    assert step(s, 1) == [(0, 6), (1, 1)]  # b's prompt completes: first token
    assert b.num_output_tokens == 1
    assert step(s, 2) == [(0, 6), (1, 1)]  # b decodes and finishes
    assert step(s, 3) == [(0, 2)]
    assert a.num_output_tokens == 1 and a.metrics.first_token_s == 4.0


def test_without_chunked_prefill_a_long_prompt_waits_for_a_whole_budget():
    s = make(num_blocks=20, max_num_batched_tokens=8, enable_chunked_prefill=False)
    a = Request(spec(0, 3, output=3))
    b = Request(spec(1, 8, output=1))
    add(s, a)
    add(s, b)
    assert step(s, 0) == [(0, 3)]  # b (8 tokens) does not fit in the 5 left
    assert step(s, 1) == [(0, 1)]  # still 7 left: b waits (head of line)
    assert step(s, 2) == [(0, 1)]
    assert step(s, 3) == [(1, 8)]


def test_max_num_seqs_caps_running_requests():
    s = make(num_blocks=20, max_num_seqs=2)
    for i in range(3):
        add(s, Request(spec(i, 2, output=2)))
    assert step(s, 0) == [(0, 2), (1, 2)]
    assert s.num_waiting == 1


def test_preemption_by_recompute_takes_the_last_admitted_and_requeues_it_first():
    # 4 blocks of 4 tokens. a and b each take 2 blocks; b's next token needs a 3rd.
    s = make(num_blocks=4)
    a = Request(spec(0, 7, output=4))
    b = Request(spec(1, 8, output=4))
    add(s, a)
    add(s, b)
    assert step(s, 0) == [(0, 7), (1, 8)]
    assert step(s, 1) == [(0, 1)]  # b needs a 3rd block, none is free: b (last admitted) goes
    assert b.status is Status.WAITING and b.metrics.num_preemptions == 1 and b.num_computed_tokens == 0
    assert [e.kind for e in events(s)] == ["preempt_recompute"]
    # b's blocks were freed tail first (queue: 3, 2). a's next block evicts block 3, the
    # tail of b's prompt; b comes back hitting only its first block.
    step(s, 2)
    assert [bl.block_id for bl in a.blocks] == [0, 1, 3] and s.pool.num_evicted == 1
    step(s, 3)
    assert a.status is Status.FINISHED
    assert step(s, 4) == [(1, 9 - 4)]  # 8 prompt tokens + 1 sampled, minus 4 hit
    assert b.metrics.recompute_hits_tokens == 4 and s.stats.recompute_hits_tokens == 4
    assert b.metrics.prefix_cache_hits_tokens == 0  # first admission: nothing cached


def test_priority_policy_preempts_the_lowest_priority_request():
    s = make(num_blocks=5, scheduling_policy="priority")
    hi = Request(spec(0, 8, output=4, priority=0))
    lo = Request(spec(1, 8, output=4, priority=5))
    add(s, lo)
    add(s, hi)
    assert step(s, 0) == [(0, 8), (1, 8)]  # the heap admits the higher priority first
    step(s, 1)  # both need a 3rd block; 1 free: hi gets it
    step(s, 2)  # lo needs one more -> itself the lowest priority -> preempted
    assert lo.metrics.num_preemptions >= 1 and hi.metrics.num_preemptions == 0


def test_swap_moves_blocks_to_the_host_and_back():
    s = make(num_blocks=4, preemption_mode="swap")
    a = Request(spec(0, 7, output=4))
    b = Request(spec(1, 8, output=4))
    add(s, a)
    add(s, b)
    step(s, 0)
    out = schedule(s, 1.0)
    assert out.swap_out_blocks == 2 and b.status is Status.SWAPPED and s.swap.num_used_blocks == 2
    s.update(out, 2.0)
    step(s, 2)
    step(s, 3)  # a finishes
    out = schedule(s, 4.0)
    assert out.swap_in_blocks == 2 and b.status is Status.RUNNING and s.swap.num_used_blocks == 0
    assert b.num_computed_tokens == 8  # nothing recomputed
    assert [e.kind for e in events(s)] == ["swap_out", "swap_in"]


def test_swap_falls_back_to_recompute_when_the_host_pool_is_full():
    cfg = EngineConfig(block_size=4, preemption_mode="swap")
    s = Scheduler(cfg, BlockPool(4), num_swap_blocks=1)
    a = Request(spec(0, 7, output=4))
    b = Request(spec(1, 8, output=4))
    add(s, a)
    add(s, b)
    step(s, 0)
    step(s, 1)
    assert b.status is Status.WAITING and b.metrics.num_swaps == 0
    assert [e.kind for e in events(s)] == ["preempt_recompute"]


def test_requests_that_can_never_fit_are_rejected():
    s = make(num_blocks=4)
    assert not add(s, Request(spec(0, 16, output=1)))  # 17 tokens need 5 blocks
    s2 = Scheduler(EngineConfig(block_size=4), BlockPool(100), max_model_len=10)
    assert not add(s2, Request(spec(1, 10, output=3)))  # prompt >= max_model_len (vLLM refuses it)
    assert events(s2)[0].kind == "reject"
    capped = Request(spec(2, 8, output=3))  # 8 + 3 > 10: accepted, cut at max_model_len
    assert add(s2, capped)
    step(s2, 0)
    step(s2, 1)
    assert capped.status is Status.FINISHED and capped.num_output_tokens == 2 and capped.num_tokens == 10


def test_sliding_window_frees_blocks_out_of_the_window():
    cfg = EngineConfig(block_size=4)
    s = Scheduler(cfg, BlockPool(20), sliding_window=8)
    a = Request(spec(0, 16, output=6))
    add(s, a)
    step(s, 0)
    assert len(block_ids(a)) == 4
    step(s, 1)  # computed 16 -> tokens before 16-8+1=9 are out: blocks 0 and 1 freed
    assert a.num_skipped_blocks == 2 and len(block_ids(a)) == 3


def test_without_chunked_prefill_a_prompt_over_the_budget_is_rejected():
    s = make(num_blocks=20, max_num_batched_tokens=8, enable_chunked_prefill=False)
    assert not add(s, Request(spec(0, 9, output=1)))
    assert add(s, Request(spec(1, 8, output=1)))
    assert [e.kind for e in events(s)] == ["reject"]


def test_orca_style_reservation_holds_the_whole_sequence_from_admission():
    # pow2 reserves prompt + next power of two of the output: 6 + 8 = 14 tokens = 4 blocks.
    s = make(num_blocks=10, kv_allocation="reserve_pow2", enable_prefix_caching=False)
    a = Request(spec(0, 6, output=5))
    add(s, a)
    assert step(s, 0) == [(0, 6)]
    assert block_ids(a) == [0, 1, 2, 3] and s.num_tokens_stored == 6
    step(s, 1)
    assert block_ids(a) == [0, 1, 2, 3] and s.num_tokens_stored == 7  # no new block ever
    # oracle reserves exactly prompt + output; max reserves max_model_len.
    s2 = Scheduler(EngineConfig(block_size=4, kv_allocation="reserve_max", enable_prefix_caching=False),
                   BlockPool(10), max_model_len=32)  # fmt: skip
    b = Request(spec(1, 6, output=5))
    add(s2, b)
    step(s2, 0)
    assert len(block_ids(b)) == 8


def test_a_prefix_evicted_to_the_host_tier_is_loaded_back_instead_of_recomputed():
    from kvsim.kv.tiers import CpuOffloadTier

    s = Scheduler(EngineConfig(block_size=4), BlockPool(6, offload=CpuOffloadTier(16)))
    a = Request(spec(0, [(1, 8), (2, 1)], output=1))  # 9 tokens: blocks 0, 1 full and cached
    add(s, a)
    step(s, 0)  # a finishes; its blocks are freed tail first but stay cached
    filler = Request(spec(1, 23, output=1))  # 24 tokens: takes all 6 blocks, evicting a's
    add(s, filler)
    step(s, 1)
    assert len(s.pool.offload) == 2  # a's two cached blocks, written back when evicted
    b = Request(spec(2, [(1, 8), (3, 4)], output=1))  # same 8-token prefix
    add(s, b)
    out = schedule(s, 2.0)
    assert [(r.request_id, n) for r, n in out.scheduled] == [(2, 4)]  # only its own 4 tokens
    assert (
        out.offload_load_blocks == 2
        and b.metrics.offload_hits_tokens == 8
        and b.metrics.prefix_cache_hits_tokens == 0
    )
    assert [e.kind for e in events(s)] == ["offload_load"]
    assert s.stats.offload_hits_tokens == 8 and s.num_tokens_stored == 8
    assert b.num_cached_blocks == 3  # the 2 loaded blocks are cached on the GPU again, and its own
