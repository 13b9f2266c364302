"""Beam search with shared blocks: forks on tiny pools with exact block ids, the genealogy in
the workload, and the vLLM paper's memory saving (Kwon et al., SOSP 2023, section 6.3)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import spec
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.analysis.sharing import memory_saving, sample_groups
from kvsim.cli import main
from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.engine.cluster import shared_content_ids
from kvsim.kv.tiers import CpuOffloadTier
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.schema import EngineConfig
from kvsim.workload import generate_requests
from kvsim.workload.beams import beam_forks
from kvsim.workload.config import SyntheticWorkload

ROOT = Path(__file__).resolve().parents[1]


def group(width: int, prompt: int, output: int, forks: tuple[tuple[int, int, int], ...]) -> list[Request]:
    return [
        Request(
            spec(
                i,
                [(1, prompt)],
                output=output,
                beam_group=0,
                beam_index=i,
                beam_forks=forks if i == 0 else (),
            )
        )
        for i in range(width)
    ]


def engine(num_blocks: int = 20, **kw) -> Scheduler:
    cfg = EngineConfig(block_size=4, enable_prefix_caching=False, **kw)
    return Scheduler(cfg, BlockPool(num_blocks, enable_caching=False))


def step(s: Scheduler, t: float) -> None:
    s.update(s.schedule(t), t + 1.0)


def ids(beams: list[Request]) -> list[list[int]]:
    return [[b.block_id for b in r.blocks if b is not None] for r in beams]


def test_beams_share_the_prompt_and_copy_its_partial_block_on_write() -> None:
    s = engine()
    beams = group(3, 6, 6, forks=())
    for r in beams:
        s.add_request(r)
    step(s, 0)  # each beam prefilled 6 tokens in 2 blocks (0-1, 2-3, 4-5); first tokens out
    # After the prefill each beam but 0 is a fork of beam 0: block 0 (full) is shared, its
    # partial block 1 copied into a new block (the freed blocks' head: LIFO, uncached).
    assert ids(beams) == [[0, 1], [0, 3], [0, 5]]
    assert [b.ref_cnt for b in beams[0].blocks] == [3, 1]
    assert s.pool.num_used_blocks == 4 and s.beams.stats.num_forks == 2
    step(s, 1)
    step(s, 2)  # 8 computed: the beams' own blocks full; the next token needs a new block each
    step(s, 3)
    assert ids(beams) == [[0, 1, 4], [0, 3, 2], [0, 5, 6]]
    for _ in range(4, 7):
        step(s, _)
    assert all(r.status is Status.FINISHED for r in beams)
    assert s.pool.num_used_blocks == 0 and not s.beams
    assert all(b.ref_cnt == 0 for b in s.pool.blocks)


def test_a_pruned_beam_frees_its_blocks_and_forks_from_a_survivor() -> None:
    s = engine()
    # After its 3rd token beam 2 is pruned and replaced by a fork of beam 1.
    beams = group(3, 6, 8, forks=((3, 2, 1),))
    for r in beams:
        s.add_request(r)
    for t in range(3):  # prefill, then tokens 2 and 3: 8 computed, every block full
        step(s, t)
    # The fork after token 3: beam 2 dropped its block 5 (to the head of the free queue)
    # and shares beam 1's blocks 0 and 3 (nothing partial to copy).
    assert ids(beams) == [[0, 1], [0, 3], [0, 3]]
    assert [b.block_id for b in s.pool.free_queue][:2] == [5, 4]
    step(s, 3)  # token 4 needs a third block each: 5, 4, then 2 from the head
    assert ids(beams) == [[0, 1, 5], [0, 3, 4], [0, 3, 2]]
    assert [b.ref_cnt for b in beams[1].blocks] == [3, 2, 1]
    assert s.beams.stats.num_forks == 3 and s.beams.stats.num_forks_skipped == 0
    while s.has_work():
        step(s, 10)
    assert s.pool.num_used_blocks == 0 and all(b.ref_cnt == 0 for b in s.pool.blocks)


def test_a_fork_with_a_partial_block_copies_it() -> None:
    s = engine()
    beams = group(2, 6, 8, forks=((2, 1, 0),))  # after token 2: 7 computed, block 1 partial
    for r in beams:
        s.add_request(r)
    step(s, 0)
    step(s, 1)
    # Beam 1 dropped its own copy 3 (to the head of the free queue), then copied beam 0's
    # partial block 1 into the head block: 3 again.
    assert ids(beams) == [[0, 1], [0, 3]]
    assert [b.ref_cnt for b in beams[0].blocks] == [2, 1] and s.beams.stats.num_forks == 2


def test_beams_out_of_lockstep_do_not_fork() -> None:
    # A budget of 8 tokens: beam 0 prefills alone; beam 1 starts a step later.
    s = engine(max_num_batched_tokens=8, enable_chunked_prefill=True)
    beams = group(2, 6, 4, forks=((2, 1, 0),))
    for r in beams:
        s.add_request(r)
    while s.has_work():
        step(s, 0)
    assert s.beams.stats.num_forks == 0 and s.beams.stats.num_forks_skipped == 2


def test_no_fork_without_a_free_block_for_the_copy() -> None:
    s = engine(num_blocks=4)
    beams = group(2, 6, 2, forks=())
    for r in beams:
        s.add_request(r)
    step(s, 0)  # 4 blocks held; beam 1 frees its partial block 3 and copies beam 0's into it
    assert ids(beams) == [[0, 1], [0, 3]]
    # A fork needing a copy with every block held, none freed by the child: refused, nothing changed.
    beams[1].blocks[1].ref_cnt += 1  # pretend someone else holds the child's copy too
    s.pool.get_new_blocks(s.pool.num_free_blocks)
    assert not s.kv.fork(beams[1], beams[0])
    assert ids(beams) == [[0, 1], [0, 3]]


@pytest.mark.parametrize("offload_blocks", [0, 4])
def test_private_marks_change_nothing_for_a_pruned_beam_recomputed(offload_blocks: int) -> None:
    """Beam 1 is pruned after its 2nd token: it drops its own full block (4 tokens: 3 of the
    prompt, its 1st token) and shares beam 0's. The beams' outputs are content no other
    request contains (`shared_content_ids`), yet a fork puts one beam's blocks in another's
    table and beam 1, preempted for recompute, looks its own dropped block up again. Marking
    them private (cached unhashed) must change nothing: the run equals one with every block
    hashed, as in vLLM."""
    specs = [
        spec(i, [(1, 3)], output=12, beam_group=0, beam_index=i, beam_forks=((2, 1, 0),) if i == 0 else ())
        for i in range(2)
    ]

    def run(shared: set[int] | None) -> list[tuple]:
        cfg = EngineConfig(block_size=4, enable_prefix_caching=True, preemption_mode="recompute")
        tier = CpuOffloadTier(offload_blocks) if offload_blocks else None
        s = Scheduler(cfg, BlockPool(5, offload=tier))
        beams = [Request(x, shared_content_ids=shared) for x in specs]
        for r in beams:
            s.add_request(r)
        log = []
        for t in range(14):
            out = s.schedule(t)
            scheduled = [(r.request_id, n) for r, n in out.scheduled]
            log.append((scheduled, [(e.kind.value, e.request_id) for e in out.events], ids(beams)))
            s.update(out, t + 1.0)
        return log

    hashed = run(None)
    assert run(shared_content_ids(specs)) == hashed
    # After the fork beam 1 holds beam 0's block 0 and a copy (3) of its partial block 2;
    # its own block 1 went to the free queue, cached, and is evicted at step 6 (to the tier).
    assert hashed[2][2] == [[0, 2], [0, 3]] and hashed[6][2] == [[0, 2, 4], [0, 3, 1]]
    assert hashed[10][:2] == ([(0, 1)], [("preempt_recompute", 1)])
    # Re-admitted, beam 1 misses beam 0's block 0 (other content) on the GPU: it loads its
    # own first block from the tier, or recomputes it without one.
    if offload_blocks:
        assert hashed[12] == ([(1, 9)], [("offload_load", 1)], [[], [1, 3, 4, 2]])
    else:
        assert hashed[12][:2] == ([(1, 13)], [])


def test_the_genealogy_is_drawn_per_group_and_only_for_beams() -> None:
    rng = np.random.default_rng(0)
    forks = beam_forks(4, 50, 0.5, rng)
    assert forks and all(1 <= s < 50 and child != 0 and parent != child for s, child, parent in forks)
    cfg = SyntheticWorkload(num_requests=3, beam_width=3, output_tokens={"kind": "fixed", "tokens": 20})
    reqs = generate_requests(cfg, np.random.default_rng(1))
    assert [(r.beam_group, r.beam_index) for r in reqs] == [(g, i) for g in (0, 3, 6) for i in range(3)]
    assert all(bool(r.beam_forks) == (r.beam_index == 0) for r in reqs)
    # Without sharing, or with one beam, the requests are what they always were.
    plain = generate_requests(cfg.model_copy(update={"beam_sharing": False}), np.random.default_rng(1))
    assert [replace(r, beam_group=None, beam_index=0, beam_forks=()) for r in reqs] == plain
    one = SyntheticWorkload(num_requests=3)
    assert all(r.beam_group is None for r in generate_requests(one, np.random.default_rng(1)))


def test_fast_forward_changes_nothing_with_beams() -> None:
    scenario = {
        "seed": 2,
        "replicas": [{"engine": {"num_gpu_blocks_override": 400, "enable_prefix_caching": False}}],
        "workload": {"num_requests": 40, "beam_width": 4, "arrival": {"kind": "poisson", "rate_per_s": 4.0}},
    }
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(fast, attr), getattr(slow, attr))
    assert fast.summary["num_preemptions"] > 0 and fast.summary["beam_num_forks"] > 100


@pytest.mark.slow
@pytest.mark.parametrize(("width", "paper"), [(2, 0.376), (6, 0.552)])
def test_beam_search_saves_what_the_vllm_paper_measured(width: int, paper: float) -> None:
    # vLLM paper Figure 15 (Alpaca, OPT-13B): 37.6% saved at beam width 2, 55.2% at 6.
    scenario = load_scenario(ROOT / "scenarios" / "beam_search.yaml")
    (point,) = memory_saving(scenario, "beam", [width])
    assert point.same_schedule  # no preemption, the same TTFTs: the saving is memory alone
    assert point.saving == pytest.approx(paper, abs=0.04)


def test_parallel_sampling_saves_the_prompt_only() -> None:
    # vLLM paper Figure 15 (Alpaca): 6.1% .. 9.8% for 2 .. 6 samples. kvsim: 7.1% at 2 samples
    # (11.2% at 4 and 13.2% at 6, above the paper's range; see docs/workloads.md).
    scenario = load_scenario(ROOT / "scenarios" / "beam_search.yaml")
    (point,) = memory_saving(scenario, "parallel", [2])
    assert point.same_schedule and 0.061 <= point.saving <= 0.098


def test_sharing_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="beam or parallel"):
        memory_saving({}, "fork", [2])


def test_parallel_samples_become_groups_without_a_genealogy() -> None:
    cfg = SyntheticWorkload(num_requests=2, parallel_samples=3)
    reqs = sample_groups(generate_requests(cfg, np.random.default_rng(0)))
    assert [(r.beam_group, r.beam_index, r.beam_forks) for r in reqs] == [
        (g, i, ()) for g in (0, 3) for i in range(3)
    ]


def test_the_sharing_command_prints_each_width(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(ROOT / "scenarios" / "beam_search.yaml")
    args = ["sharing", path, "--widths", "2,3", "--set", "workload.num_requests=20"]
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("beam-search: memory saved by sharing blocks (beam)")
    assert [line.split(":")[0] for line in lines[1:]] == ["  beam width 2", "  beam width 3"]
    assert main([*args, "--json"]) == 0
    points = json.loads(capsys.readouterr().out)
    assert [p["width"] for p in points] == [2, 3] and all(0 < p["saving"] < 1 for p in points)
    assert main(["sharing", path, "--widths", "two"]) == 2
