"""Models mixing sliding-window and full-attention layers: a block table per layer group (vLLM's
hybrid allocator), on tiny pools with exact block ids, and end to end on Gemma 3 and gpt-oss."""

from __future__ import annotations

import pytest
from conftest import spec
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.core.block import PRIVATE
from kvsim.core.block_pool import BlockPool
from kvsim.core.hybrid_kv import GroupView, HybridKvManager, make_model_kv_manager
from kvsim.core.kv_manager import SlidingWindowManager
from kvsim.core.request_state import NEVER_PRIVATE, Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.model.presets import resolve_model
from kvsim.scenario.schema import EngineConfig


def tables(kv: HybridKvManager, r: Request) -> list[list[int | None]]:
    return [[None if b is None else b.block_id for b in view.blocks] for _, view in kv.groups(r)]


def tiny() -> tuple[BlockPool, HybridKvManager, Scheduler]:
    # One full group and two window groups (window 8), blocks of 4 tokens, 24 blocks.
    pool = BlockPool(24)
    kv = HybridKvManager(
        pool, 4, num_full_groups=1, num_window_groups=2, sliding_window=8, layer_counts=(1, 2)
    )
    return pool, kv, Scheduler(EngineConfig(block_size=4), pool, kv_manager=kv)


def step(s: Scheduler, t: float) -> list[tuple[int, int]]:
    out = s.schedule(t)
    s.update(out, t + 1.0)
    return [(r.request_id, n) for r, n in out.scheduled]


def test_each_group_has_its_table_and_the_window_groups_free_what_left_the_window() -> None:
    pool, kv, s = tiny()
    a = Request(spec(0, [(1, 16), (2, 1)], output=3))
    s.add_request(a)
    assert step(s, 0) == [(0, 17)]
    assert tables(kv, a) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    assert step(s, 1) == [(0, 1)]  # 17 computed: tokens 0..7 out of every window group
    assert tables(kv, a) == [[0, 1, 2, 3, 4], [None, None, 7, 8, 9], [None, None, 12, 13, 14]]
    assert kv.num_held_blocks(a) == 11 == pool.num_used_blocks
    step(s, 2)
    assert a.status is Status.FINISHED
    # Each group frees tail first; its partial last block (no hash) goes to the head.
    assert [b.block_id for b in pool.free_queue][:3] == [14, 9, 4]
    assert [b.block_id for b in pool.free_queue][-6:] == [1, 0, 8, 7, 13, 12]


def test_a_hit_needs_the_full_groups_prefix_and_the_window_groups_window() -> None:
    _, kv, s = tiny()
    a = Request(spec(0, [(1, 16), (2, 1)], output=1))
    s.add_request(a)
    step(s, 0)
    b = Request(spec(1, [(1, 16), (3, 4)], output=2))
    s.add_request(b)
    assert step(s, 1) == [(1, 4)] and b.metrics.prefix_cache_hits_tokens == 16
    # The window groups took only the window's blocks before token 16 (2, 3); the new block
    # of every group came from the head of the free queue.
    assert tables(kv, b) == [[0, 1, 2, 3, 14], [None, None, 7, 8, 9], [None, None, 12, 13, 4]]
    # Groups hash apart: the same position in two groups is two cache entries.
    view = kv.groups(b)[1][1]
    assert isinstance(view, GroupView) and view.block_hashes[0] != b.block_hashes[0]


def test_a_window_group_missing_its_window_shortens_the_hit() -> None:
    pool, kv, s = tiny()
    a = Request(spec(0, [(1, 16), (2, 1)], output=1))
    s.add_request(a)
    step(s, 0)
    # Evict window group 2's block 13 (position 3): a hit of 4 blocks is no longer possible
    # there; a hit of 3 blocks needs positions 1..2 of the windows: 6, 7 and 11, 12.
    block = pool.blocks[13]
    pool.free_queue.remove(block)
    pool._evict([block])  # taken for new data: its hash is gone
    block.ref_cnt = 0
    pool.free_queue.append(block)
    b = Request(spec(1, [(1, 16), (3, 4)], output=2))
    s.add_request(b)
    step(s, 1)
    assert b.metrics.prefix_cache_hits_tokens == 12
    assert tables(kv, b)[1][:3] == [None, 6, 7] and tables(kv, b)[2][:3] == [None, 11, 12]


def test_sizes_chunks_and_rejects_by_all_groups() -> None:
    _, kv, s = tiny()
    # 1 full + 2 window groups: 1,000 tokens need 250 full blocks + 2 x (cdiv(8, 4) + 1).
    assert kv.max_blocks_needed(1000) == 250 + 2 * 3
    assert kv.attended_tokens(100) == round((100 + 2 * 8) / 3)
    long = Request(spec(0, 120, output=1))  # 121 tokens: 31 full blocks + 2 x 3: more than the pool
    rejection = s.add_request(long)
    assert rejection is not None and (rejection.reason, rejection.num_blocks) == ("kv_capacity", 37)
    ok = Request(spec(1, 60, output=2))
    s.add_request(ok)
    # The chunk fits all groups together: 3 x cdiv(60, 4) = 45 > 24 blocks, so it is cut to 8 blocks.
    assert step(s, 0) == [(1, 32)]


def test_model_factory_picks_the_manager_per_attention_kind() -> None:
    pool = BlockPool(100)
    assert isinstance(make_model_kv_manager(pool, 16, resolve_model("gemma-3-1b")), HybridKvManager)
    gemma = make_model_kv_manager(pool, 16, resolve_model("gemma-3-1b"))
    assert isinstance(gemma, HybridKvManager) and (gemma.num_full_groups, gemma.num_window_groups) == (1, 6)
    assert type(make_model_kv_manager(pool, 16, resolve_model("mistral-7b"))) is SlidingWindowManager
    assert make_model_kv_manager(pool, 16, resolve_model("llama-3-8b")).supports_decode_fast_path


def _gemma(**over) -> dict:
    return {
        "model": "gemma-3-1b",
        "replicas": [{"gpu": "rtx-3070", "engine": {"max_model_len": 16384, **over}}],
        "workload": {
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": 4.0},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 2000, "max_tokens": 6000},
            "output_tokens": {"kind": "fixed", "tokens": 64},
            "shared_prefix_tokens": 1024,
        },
    }


def test_gemma_3_end_to_end_holds_less_than_all_full_layers_and_hits_its_prefix() -> None:
    hybrid = kvsim.run(_gemma(num_gpu_blocks_override=3000))
    full_model = resolve_model("gemma-3-1b").model_dump() | {
        "sliding_window": None,
        "num_sliding_window_layers": None,
    }
    full = kvsim.run(_gemma(num_gpu_blocks_override=3000) | {"model": full_model})
    assert hybrid.summary["num_finished"] == full.summary["num_finished"] == 40
    assert hybrid.summary["prefix_cache_hit_rate"] > 0.1  # the shared 1,024-token prefix, every group
    # Full attention keeps every token's KV in all 26 layers; the hybrid 4 of 26 (blocks of
    # 4 layers: 1 full + 6 window groups), so its blocks are 7x smaller and it holds fewer.
    assert hybrid.iterations.kv_blocks_used.max() < full.iterations.kv_blocks_used.max()


def test_fast_forward_equals_stepping_for_hybrid_models() -> None:
    scenario = _gemma(num_gpu_blocks_override=700)
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    assert fast.iterations.num_waiting.max() > 0 and fast.summary["kv_usage_peak"] > 0.9
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(fast, attr), getattr(slow, attr))


def test_gpt_oss_alternating_layers_run() -> None:
    res = kvsim.run(
        {
            "model": "gpt-oss-20b",
            "replicas": [{"gpu": "rtx-4090", "engine": {"max_model_len": 32768}}],
            "workload": {"num_requests": 20, "output_tokens": {"kind": "fixed", "tokens": 32}},
        }
    )
    assert res.summary["num_finished"] == 20


def test_hybrid_models_refuse_what_is_not_modelled() -> None:
    with pytest.raises(Exception, match="modelled with paged KV, without an offload tier"):
        kvsim.load_scenario({"model": "gemma-3-1b", "replicas": [{"engine": {"cpu_offload_gib": 4}}]})


def test_preempting_a_request_with_private_blocks_publishes_them_in_every_group() -> None:
    # Content 2 is the request's own (not shared): its block is cached under a placeholder
    # until a preemption lets the request hit it again; then every group gives it its hash.
    _, kv, _ = tiny()
    a = Request(spec(0, [(1, 4), (2, 4)], output=2), shared_content_ids={1})
    assert a.private_from_token == 4
    a.num_tokens = 9
    assert kv.allocate_slots(a, 9)
    a.num_computed_tokens = 9
    assert [[b.block_hash for b in view.blocks][1] for _, view in kv.groups(a)] == [PRIVATE] * 3
    kv.publish_private_blocks(a)
    assert a.private_from_token == NEVER_PRIVATE
    for _, view in kv.groups(a):
        assert [b.block_hash for b in view.blocks[:2]] == view.block_hashes[:2]


@pytest.mark.parametrize(
    ("blocks", "caching", "sinks"),
    [(700, True, 0), (3000, True, 0), (700, False, 0), (700, True, 20)],
)
def test_the_decode_hot_path_equals_the_allocator_path_for_hybrid_models(
    monkeypatch: pytest.MonkeyPatch, blocks: int, caching: bool, sinks: int
) -> None:
    """Issue 22: a hybrid decode that needs no block, fills none and lets none leave the
    window skips the allocator (`HybridKvManager.decode_slot_ready`), and allocate_slots
    without hits skips the hit lists (`_allocate_no_hits`); forced through
    remove_skipped_blocks / fit_chunk / the general allocate_slots every step, the run is
    the same, bit for bit, under preemption (700 blocks), with and without caching and with sinks."""
    model = resolve_model("gemma-3-1b").model_dump() | {"num_sink_tokens": sinks}
    scenario = _gemma(num_gpu_blocks_override=blocks, enable_prefix_caching=caching) | {"model": model}
    fast = kvsim.run(scenario)
    monkeypatch.setattr(HybridKvManager, "decode_slot_ready", lambda self, req, nc: False)
    monkeypatch.setattr(  # and allocate_slots' general path for requests without hits too
        HybridKvManager, "_allocate_no_hits", lambda self, req, n: self._allocate_with_hits(req, n, ())
    )
    slow = kvsim.run(scenario)
    assert fast.summary["num_finished"] == 40
    if blocks == 700:
        assert fast.iterations.num_waiting.max() > 0 and fast.summary["kv_usage_peak"] > 0.9
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(fast, attr), getattr(slow, attr), check_exact=True)
    assert fast.summary == slow.summary or str(fast.summary) == str(slow.summary)


def test_decode_slot_ready_stops_at_every_block_event() -> None:
    """The hot path's condition, token by token: false exactly where the allocator has work
    (a new block, a block filled with caching on, a block leaving a window group)."""
    _pool, kv, s = tiny()
    r = Request(spec(0, 30, 40))
    s.add_request(r)
    bs, window = kv.block_size, kv.window.sliding_window
    seen = 0
    for t in range(60):
        nc = r.num_computed_tokens
        if r.num_output_tokens and r.status is Status.RUNNING:
            ready = kv.decode_slot_ready(r, nc)
            views = [r, *(r.group_views or [])]
            needs_block = any(len(v.blocks) * bs <= nc for v in views)
            fills = (nc + 1) % bs == 0
            leaves = any(
                min(max(0, nc - window + 1) // bs, len(v.blocks)) > v.num_skipped_blocks
                for m, v in kv.groups(r)
                if m is kv.window
            )
            assert ready == (not (needs_block or fills or leaves)), nc
            seen += ready
        step(s, float(t))
    assert seen > 10
