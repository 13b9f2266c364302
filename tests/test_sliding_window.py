"""Sliding windows on tiny pools: the stall fixed at its root, the unschedulable guard, window holes
in prefix hits, and attention sinks, with exact block ids."""

from __future__ import annotations

from conftest import ROOT, spec

import kvsim
from kvsim.core.block_pool import BlockPool
from kvsim.core.kv_manager import FullAttentionManager, SlidingWindowManager
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.model.presets import resolve_model
from kvsim.scenario.schema import EngineConfig


def ids(r: Request) -> list[int | None]:
    return [None if b is None else b.block_id for b in r.blocks]


def step(s: Scheduler, t: float) -> list[tuple[int, int]]:
    out = s.schedule(t)
    s.update(out, t + 1.0)
    return [(r.request_id, n) for r, n in out.scheduled]


def test_the_mistral_stall_of_issue_11_is_gone() -> None:
    # 600 blocks: a 16k-token prompt's second 8,192-token chunk needs its 256 window blocks
    # plus 512 new ones, more than the pool. Before: 0 of the requests finished, exit 0.
    res = kvsim.run(
        ROOT / "scenarios" / "sliding_window_mistral.yaml",
        overrides=["workload.num_requests=12", "replicas.0.engine.num_gpu_blocks_override=600"],
    )
    assert res.summary["num_finished"] == 12
    # The chunk is cut to what the pool can hold beside the window: no iteration asks more.
    assert res.iterations.kv_blocks_used.max() <= 599


def test_a_chunk_is_cut_to_fit_beside_the_window() -> None:
    # Window 8, blocks of 4, a pool of 5 blocks, a 40-token prompt, no caching.
    cfg = EngineConfig(block_size=4, max_num_batched_tokens=64)
    s = Scheduler(cfg, BlockPool(5, enable_caching=False), sliding_window=8)
    a = Request(spec(0, 40, output=2))
    assert s.add_request(a) is None
    # First chunk: 20 tokens fill the 5 blocks; then the window (tokens 13..19, blocks 3, 4)
    # leaves room for 3 more blocks: chunks of 12 tokens.
    assert step(s, 0) == [(0, 20)]
    assert ids(a) == [0, 1, 2, 3, 4]
    assert step(s, 1) == [(0, 12)]
    assert ids(a) == [None, None, None, 3, 4, 2, 1, 0] and a.num_skipped_blocks == 3
    assert step(s, 2) == [(0, 8)]  # 32 computed: window 25..31 in blocks 6, 7; room for 2 more
    assert a.num_output_tokens == 1 and a.status is Status.RUNNING


class _NeverFits(FullAttentionManager):
    def fit_chunk(self, req, num_new_tokens, num_hit_blocks=0):  # type: ignore[no-untyped-def]
        return 0  # as if nothing could ever be computed


def test_a_request_nothing_can_ever_schedule_is_rejected_with_its_reason() -> None:
    cfg = EngineConfig(block_size=4)
    pool = BlockPool(10)
    s = Scheduler(cfg, pool, kv_manager=_NeverFits(pool, 4))
    a, b = Request(spec(0, 8, output=2)), Request(spec(1, 8, output=2))
    s.add_request(a)
    s.add_request(b)
    out = s.schedule(0.0)
    assert out.rejected == [a, b] and not out.tokens
    assert [(e.kind, e.reason) for e in out.events] == [("reject", "unschedulable")] * 2
    assert a.status is Status.REJECTED
    assert not s.has_work()


def test_rejections_on_arrival_say_why() -> None:
    res = kvsim.run(
        {
            "replicas": [
                {"engine": {"max_model_len": 64}, "cost_model": {"kind": "constant", "step_time_s": 0.01}}
            ]
        },
        requests=[spec(0, 64, output=2), spec(1, 10, output=2)],
    )
    assert list(res.requests.reject_reason) == ["max_model_len", ""]


def test_window_hits_take_no_block_the_window_has_passed() -> None:
    cfg = EngineConfig(block_size=4)
    pool = BlockPool(12)
    s = Scheduler(cfg, pool, sliding_window=8)
    a = Request(spec(0, [(1, 16), (2, 1)], output=1))
    s.add_request(a)
    step(s, 0)  # computes 17 tokens, finishes: blocks 0..3 cached (hashes), 4 partial
    assert a.status is Status.FINISHED
    b = Request(spec(1, [(1, 16), (3, 4)], output=1))
    s.add_request(b)
    out = s.schedule(1.0)
    # 16 tokens hit; the next token attends 9..16, so blocks 0 and 1 are holes, not taken.
    assert out.scheduled == [(b, 4)] and b.metrics.prefix_cache_hits_tokens == 16
    assert ids(b)[:4] == [None, None, 2, 3] and b.num_skipped_blocks == 2
    assert pool.blocks[0].ref_cnt == 0 and pool.blocks[2].ref_cnt == 1


def test_sink_blocks_stay_while_the_window_slides() -> None:
    pool = BlockPool(20, enable_caching=False)
    kv = SlidingWindowManager(pool, 4, sliding_window=8, num_sink_tokens=4)
    s = Scheduler(EngineConfig(block_size=4, enable_prefix_caching=False), pool, kv_manager=kv)
    a = Request(spec(0, 20, output=3))
    s.add_request(a)
    step(s, 0)  # 20 tokens: blocks 0..4
    assert ids(a) == [0, 1, 2, 3, 4]
    step(s, 1)  # 20 computed: the window of token 20 is 13..20; blocks 1, 2 go, block 0 (sinks) stays
    # Freed blocks 2, 1 (tail first) went to the head uncached; the decode's new block took 2.
    assert ids(a) == [0, None, None, 3, 4, 2] and kv.num_held_blocks(a) == 4
    assert [b.block_id for b in pool.free_queue][:2] == [1, 5]
    assert kv.attended_tokens(21) == 8 + 4 and kv.attended_tokens(10) == 8 + 2 and kv.attended_tokens(6) == 6
    assert kv.max_blocks_needed(1000) == 2 + 1 + 1


def test_fast_forward_equals_stepping_with_sinks_and_the_cut_chunks() -> None:
    from pandas.testing import assert_frame_equal

    model = resolve_model("mistral-7b").model_dump() | {"num_sink_tokens": 4}
    ov = ["workload.num_requests=8", "replicas.0.engine.num_gpu_blocks_override=600"]
    runs = [
        kvsim.run(
            ROOT / "scenarios" / "sliding_window_mistral.yaml", overrides=[*ov, f"sim.fast_forward={ff}"]
        )
        for ff in ("true", "false")
    ]
    assert runs[0].summary["num_finished"] == 8
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(runs[0], attr), getattr(runs[1], attr))
    sinks = kvsim.run(
        ROOT / "scenarios" / "sliding_window_mistral.yaml",
        overrides={"workload.num_requests": 4, "model": model},
    )
    assert sinks.summary["num_finished"] == 4


def test_the_decode_hot_path_equals_the_allocator_path_with_a_window(monkeypatch) -> None:
    """Issue 22: a sliding-window decode that needs no block, fills none and lets none leave
    the window skips the allocator (`SlidingWindowManager.decode_slot_ready`); forced
    through remove_skipped_blocks / fit_chunk / allocate_slots every step, the run is the
    same, bit for bit: a pool that preempts, sinks, caching on and off."""
    from pandas.testing import assert_frame_equal

    model = resolve_model("mistral-7b").model_dump() | {"num_sink_tokens": 4}
    path = ROOT / "scenarios" / "sliding_window_mistral.yaml"
    for caching in (True, False):
        ov = {
            "workload.num_requests": 8,
            "replicas.0.engine.num_gpu_blocks_override": 600,
            "replicas.0.engine.enable_prefix_caching": caching,
            "model": model,
        }
        fast = kvsim.run(path, overrides=ov)
        with monkeypatch.context() as m:
            m.setattr(SlidingWindowManager, "decode_slot_ready", lambda self, req, nc: False)
            slow = kvsim.run(path, overrides=ov)
        assert fast.summary["num_finished"] == 8
        for attr in ("requests", "iterations", "events"):
            assert_frame_equal(getattr(fast, attr), getattr(slow, attr), check_exact=True)
