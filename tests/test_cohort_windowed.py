"""The decode cohort for sliding-window and hybrid models (`kvsim.core.windowed_cohort`,
issue 22 item 5): every table equal, bit for bit, to the engine that walks every running
request each iteration (``tests/oracle.py``), with and without fast-forwarded runs, on
Gemma 3 (hybrid, window 512), Mistral (window 4096), gpt-oss (hybrid, window 128, prompts
either side of it), windows that are not a multiple of the block size, sinks, caching on
and off, pools that preempt; and the cohort's attended-token sums against
`attended_tokens`, member by member, step by step."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ROOT, spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import run_eager
from test_cohort import assert_identical

import kvsim
from kvsim.core.block_pool import BlockPool
from kvsim.core.hybrid_kv import HybridKvManager
from kvsim.core.kv_manager import SlidingWindowManager
from kvsim.core.request_state import Request
from kvsim.core.windowed_cohort import WindowedCohort
from kvsim.model.presets import resolve_model


def _gemma(**engine: Any) -> dict[str, Any]:
    return {
        "model": "gemma-3-1b",
        "replicas": [{"gpu": "rtx-3070", "engine": {"max_model_len": 16384, **engine}}],
        "workload": {
            "num_requests": 40,
            "arrival": {"kind": "poisson", "rate_per_s": 4.0},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 2000, "max_tokens": 6000},
            "output_tokens": {"kind": "fixed", "tokens": 64},
            "shared_prefix_tokens": 1024,
        },
    }


def _both(scenario: Any, overrides: dict[str, Any] | None = None, **kw: Any) -> kvsim.Result:
    """The lazy engine, with and without fast-forward, each equal to the oracle; returns it."""
    ov = dict(overrides or {})
    lazy = kvsim.run(scenario, overrides=ov, **kw)
    assert_identical(lazy, run_eager(scenario, overrides=ov, **kw))
    stepped = kvsim.run(scenario, overrides={**ov, "sim.fast_forward": False}, **kw)
    assert_identical(stepped, lazy)
    return lazy


@pytest.mark.parametrize(
    ("blocks", "caching", "sinks", "window"),
    [
        (700, True, 0, 512),
        (3000, True, 0, 512),
        (700, False, 0, 512),
        (700, True, 20, 512),
        (700, True, 0, 120),
    ],
)
def test_gemma_3_equals_the_oracle(blocks: int, caching: bool, sinks: int, window: int) -> None:
    """700 blocks: requests wait for blocks; window 120 is not a multiple of the
    block size (16), so a block leaves the window at its own step, not the fill's."""
    model = resolve_model("gemma-3-1b").model_dump() | {"num_sink_tokens": sinks, "sliding_window": window}
    scenario = _gemma(num_gpu_blocks_override=blocks, enable_prefix_caching=caching) | {"model": model}
    res = _both(scenario)
    assert res.summary["num_finished"] == 40
    if blocks == 700 and window == 512:
        assert res.iterations.num_waiting.max() > 0 and res.summary["kv_usage_peak"] > 0.9


@pytest.mark.parametrize(("caching", "sinks", "window"), [(True, 4, 4096), (False, 4, 4096), (True, 0, 200)])
def test_mistral_sliding_window_equals_the_oracle(caching: bool, sinks: int, window: int) -> None:
    model = resolve_model("mistral-7b").model_dump() | {"num_sink_tokens": sinks, "sliding_window": window}
    ov = {
        "workload.num_requests": 8,
        "replicas.0.engine.num_gpu_blocks_override": 600,
        "replicas.0.engine.enable_prefix_caching": caching,
        "model": model,
    }
    res = _both(ROOT / "scenarios" / "sliding_window_mistral.yaml", ov)
    assert res.summary["num_finished"] == 8


def test_gpt_oss_with_prompts_either_side_of_the_window_equals_the_oracle() -> None:
    """Window 128: prompts of 20 to 300 tokens, so members join below the span and reach it
    during a decode run (their attended tokens stop growing there)."""
    reqs = [spec(i, 20 + 37 * i % 280, output=60 + 13 * i % 150, arrival=0.01 * i) for i in range(24)]
    scenario = {
        "model": "gpt-oss-20b",
        "replicas": [{"gpu": "h100-sxm", "engine": {"max_model_len": 4096, "block_size": 16}}],
    }
    res = _both(scenario, requests=reqs)
    assert res.summary["num_finished"] == 24
    assert (res.iterations.batch_size > 8).any()


@pytest.mark.parametrize(
    ("name", "blocks", "mode"), [("mistral-7b", 150, "recompute"), ("gpt-oss-20b", 400, "swap")]
)
def test_a_pool_that_preempts_members_equals_the_oracle(name: str, blocks: int, mode: str) -> None:
    """Twelve requests whose blocks outgrow the pool as they decode (window 64, blocks of
    4): members are preempted, mid-cohort, and come back."""
    model = resolve_model(name).model_dump() | {"sliding_window": 64}
    engine = {
        "block_size": 4,
        "num_gpu_blocks_override": blocks,
        "preemption_mode": mode,
        "max_model_len": 4096,
    }
    scenario = {"model": model, "replicas": [{"gpu": "h100-sxm", "engine": engine}]}
    reqs = [spec(i, 12 + 5 * i, output=300, arrival=0.002 * i) for i in range(12)]
    res = _both(scenario, requests=reqs)
    assert res.summary["num_finished"] == 12 and res.summary["num_preemptions"] > 0


@st.composite
def _windowed_runs(draw: Any) -> tuple[dict[str, Any], list[Any]]:
    """Small random engines with a window or hybrid groups, prompts either side of it."""
    bs = draw(st.sampled_from([1, 4, 16]))
    window = draw(st.integers(1, 90))
    hybrid = draw(st.booleans())
    base = resolve_model("gpt-oss-20b" if hybrid else "mistral-7b").model_dump()
    model = base | {"sliding_window": window, "num_sink_tokens": draw(st.sampled_from([0, 0, 3, 17]))}
    engine = {
        "block_size": bs,
        "num_gpu_blocks_override": draw(st.integers(60, 600)),
        "max_num_seqs": draw(st.integers(1, 16)),
        "max_num_batched_tokens": draw(st.sampled_from([64, 256, 2048])),
        "enable_chunked_prefill": draw(st.booleans()),
        "preemption_mode": draw(st.sampled_from(["recompute", "swap"])),
        "scheduling_policy": draw(st.sampled_from(["fcfs", "fcfs", "priority"])),
        "enable_prefix_caching": draw(st.booleans()),
        "max_model_len": 4096,
    }
    scenario = {"model": model, "replicas": [{"gpu": "h100-sxm", "engine": engine}]}
    t, reqs = 0.0, []
    for rid in range(draw(st.integers(1, 30))):
        t += draw(st.sampled_from([0.0, 0.001, 0.02, 0.3]))
        shared = draw(st.sampled_from([0, 0, 1, 2]))
        own = draw(st.integers(1, 200))
        prompt = [(shared, draw(st.integers(1, 150))), (1000 + rid, own)] if shared else [(1000 + rid, own)]
        reqs.append(
            spec(rid, prompt, output=draw(st.integers(1, 120)), arrival=t, priority=draw(st.integers(0, 2)))
        )
    return scenario, reqs


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_windowed_runs())
def test_windowed_cohort_equals_the_oracle_on_random_small_scenarios(case: Any) -> None:
    scenario, reqs = case
    _both(scenario, requests=reqs)


# --------------------------------------------------------------------- attended-token sums


def _members(kv: Any, co: WindowedCohort, prompts: list[int], first_id: int = 0) -> list[Request]:
    reqs = []
    for i, prompt in enumerate(prompts, start=first_id):
        req = Request(spec(i, prompt, output=10_000))
        req.num_computed_tokens = prompt
        req.num_tokens = prompt + 1
        req.num_output_tokens = 1
        req.last_token_s = co.last_end
        assert kv.allocate_slots(req, 1)
        kv.remove_skipped_blocks(req)  # a running decode's state: the window's blocks dropped
        co.join(req)
        reqs.append(req)
    return reqs


@pytest.mark.parametrize("which", ["gpt-oss", "gemma", "window+sinks"])
def test_the_context_sum_is_the_members_attended_tokens_at_every_step(which: str) -> None:
    """`WindowedCohort.context_tokens` and `context_array` against sum(attended_tokens(nc + 1))
    over the members, for 300 steps, members joining below, at and above the span
    (gpt-oss: round((n + 128) / 2), ties to even; Gemma: 4 full / 22 window layers;
    a window of 40 with 7 sinks, which saturates at 47)."""
    pool = BlockPool(100_000, enable_caching=False)
    kv: Any
    if which == "window+sinks":
        kv = SlidingWindowManager(pool, 16, 40, num_sink_tokens=7)
    else:
        full, window = (18, 18) if which == "gpt-oss" else (4, 22)
        kv = HybridKvManager(
            pool, 16, num_full_groups=1, num_window_groups=1, sliding_window=128, layer_counts=(full, window)
        )
    co = WindowedCohort(pool, kv, limit=1 << 62)
    co.last_end = 0.0
    members = _members(kv, co, [1, 5, 33, 46, 47, 100, 127, 128, 129, 300, 301, 1000])
    array = co.context_array(300)
    for t in range(300):
        want = sum(kv.attended_tokens(co.computed_tokens(r) + 1) for r in members)
        assert co.context_tokens() == want == array[t], t
        co.end_iteration(float(t + 1))
        if t == 150:  # one leaves, one joins mid-way: the sums follow
            co.leave(members.pop(2))
            members += _members(kv, co, [60], first_id=100)
            array[t + 1 :] = co.context_array(300 - t - 1)
    assert kv.attended_tokens(129) == 128 if which == "gpt-oss" else True  # 128.5: to even


def test_the_next_event_is_the_next_decode_the_hot_path_refuses() -> None:
    """`next_decode_event` token by token against `decode_slot_ready` (window 10, not a
    multiple of the block size 4, with a sink block; and the hybrid's groups)."""
    for kv_of in (
        lambda p: SlidingWindowManager(p, 4, 10, num_sink_tokens=2),
        lambda p: HybridKvManager(p, 4, num_full_groups=1, num_window_groups=2, sliding_window=10),
    ):
        pool = BlockPool(200)
        kv = kv_of(pool)
        req = Request(spec(0, 3, output=500))
        req.num_tokens = 3
        assert kv.allocate_slots(req, 3)
        seen = set()
        for nc in range(3, 120):  # the decode of token nc, stepped as the general path does
            req.num_computed_tokens, req.num_tokens = nc, nc + 1
            kv.remove_skipped_blocks(req)
            assert kv.allocate_slots(req, 1)
            j = kv.next_decode_event(req, nc)
            ready = [kv.decode_slot_ready(req, nc + i) for i in range(1, j + 1)]
            assert all(ready[:-1]) and not ready[-1], (nc, j)
            seen.add(j)
        assert max(seen) > 1 and min(seen) == 1
        assert np.all(np.asarray(sorted(seen)) > 0)


def test_no_decode_run_while_the_window_may_let_a_waiting_request_in() -> None:
    """A window frees a block at a member's fill step and takes one at the next: free
    blocks go up and down during a decode run. With 15 blocks (blocks of 4, window 16) the
    second request waits for 5 blocks while 4 are free, and gets in at the step the first
    one's window frees its fifth: stepping admits it there, so no decode run may skip that
    step (`Scheduler.admission_may_open`; without it this case differs from the oracle)."""
    model = resolve_model("mistral-7b").model_dump() | {"sliding_window": 16}
    engine = {"block_size": 4, "num_gpu_blocks_override": 15, "max_model_len": 4096}
    scenario = {"model": model, "replicas": [{"gpu": "h100-sxm", "engine": engine}]}
    reqs = [spec(0, 40, output=300), spec(1, 40, output=10, arrival=0.05)]
    res = _both(scenario, requests=reqs)
    assert res.iterations.num_waiting.max() == 1 and res.summary["num_finished"] == 2


@pytest.mark.parametrize("case", ["load-snapshots", "delayed-index", "write-through-pool", "dram-nvme"])
def test_a_cluster_of_windowed_replicas_equals_the_oracle(case: str) -> None:
    """Three routed Mistral replicas (window 256, 4 sinks): load snapshots read pools
    mid-run (a window frees blocks mid-run, so a snapshot must first catch the pool up:
    `LiveClusterView.refresh`), a delayed KV-event index, a write-through shared pool and
    offload tiers, each equal to the oracle."""
    import yaml
    from test_cluster import FF_CASES, ROUTED

    scenario = yaml.safe_load((ROOT / "scenarios" / "chat_sessions.yaml").read_text())
    scenario["model"] = resolve_model("mistral-7b").model_dump() | {
        "sliding_window": 256,
        "num_sink_tokens": 4,
    }
    ov = [*ROUTED, "workload.num_requests=150", *FF_CASES[case]]
    lazy = kvsim.run(scenario, overrides=ov)
    assert_identical(lazy, run_eager(scenario, overrides=ov))
    assert lazy.summary["num_finished"] == 150


@pytest.mark.parametrize("model", ["mistral-7b", "gpt-oss-20b"])
def test_retention_priorities_with_a_window_equal_the_oracle(model: str) -> None:
    """A timed free queue (blocks of one tenant kept at a priority for 5 s) under heavy
    eviction: a window's frees enter it mid-run, at the step's time, as stepping's do."""
    from test_retention import retention_scenario

    spec_ = resolve_model(model).model_dump()
    if model == "mistral-7b":
        spec_ |= {"sliding_window": 256}
    scenario = retention_scenario("retention") | {"model": spec_}
    lazy = kvsim.run(scenario)
    assert_identical(lazy, run_eager(scenario))
    assert lazy.summary["num_evicted_blocks"] > 10_000
