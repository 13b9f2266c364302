"""Cache-only replay: hand-computed hit counts on tiny caches and exact reuse of the Mooncake traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.analysis.cache_curve import cache_curve, parse_capacities
from kvsim.cli import main
from kvsim.request import RequestSpec, Segment
from kvsim.workload.config import TraceWorkload
from kvsim.workload.traces import replay_trace

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"real traces not found at {TRACES} (see shared/traces/README.md)"
)


def req(i: int, *segments: tuple[int, int], tenant: str = "default", out: int = 1) -> RequestSpec:
    return RequestSpec(i, float(i), tuple(Segment(c, n) for c, n in segments), out, tenant=tenant)


# Block size 4. A has 8 tokens (2 full blocks), B 2 tokens (a partial block), C 4 tokens.
STORY = [
    req(0, (1, 8)),  # [A0][A1]          all miss
    req(1, (1, 8), (2, 2)),  # [A0][A1][B]    A0, A1 hit
    req(2, (1, 4), (3, 4)),  # [A0][C]        A0 hits; C follows A0 but is new
    req(3, (1, 8), (2, 2)),  # [A0][A1][B]    unbounded: all hit
]


def test_unbounded_story() -> None:
    (p,) = cache_curve(STORY, [None], block_size=4)
    assert (p.num_blocks, p.hit_blocks, p.prompt_tokens, p.hit_tokens) == (10, 6, 36, 22)
    assert p.block_hit_ratio == 0.6 and p.token_hit_ratio == 22 / 36
    assert p.capacity_blocks is None and p.policy == "unbounded" and p.num_evictions == 0


def test_lru_story_with_two_blocks() -> None:
    # Blocks are inserted tail first, so a request's head is the most recently used:
    # after r2 the cache is [C, A0] (A0 newest); r3 hits A0, misses A1.
    (p,) = cache_curve(STORY, [2], block_size=4, policy="lru")
    assert (p.hit_blocks, p.hit_tokens) == (0 + 2 + 1 + 1, 0 + 8 + 4 + 4)
    assert p.num_evictions == 3 + 1 + 3


def test_full_blocks_only() -> None:
    (p,) = cache_curve(STORY, [None], block_size=4, partial_blocks=False)
    # The partial B block is neither looked up nor cached; its tokens still count.
    assert (p.num_blocks, p.hit_blocks, p.prompt_tokens, p.hit_tokens) == (8, 5, 36, 20)


def test_lfu_keeps_the_popular_block() -> None:
    seq = [req(0, (1, 4)), req(1, (1, 4)), req(2, (2, 4)), req(3, (3, 4)), req(4, (1, 4))]
    lru, lfu = (cache_curve(seq, [2], block_size=4, policy=pol)[0] for pol in ("lru", "lfu"))
    assert lru.hit_blocks == 1  # X evicted by Z
    assert lfu.hit_blocks == 2  # Y (used once) evicted instead of X (used twice)


def test_lookup_stops_at_the_first_miss() -> None:
    # Capacity 1: after r0 only block 0 ([A0], inserted last) is cached; r1 hits it, then misses.
    seq = [req(0, (1, 12)), req(1, (1, 12))]
    (p,) = cache_curve(seq, [1], block_size=4)
    assert p.hit_blocks == 1


def test_tenants_do_not_share() -> None:
    seq = [req(0, (1, 8), tenant="a"), req(1, (1, 8), tenant="b"), req(2, (1, 8), tenant="a")]
    (p,) = cache_curve(seq, [None], block_size=4)
    assert p.hit_blocks == 2  # only r2 hits, on r0's blocks


def test_cache_outputs_lets_the_next_turn_hit_them() -> None:
    first = req(0, (1, 4), out=4)
    follow = RequestSpec(1, 1.0, (Segment(1, 4), first.output_segment, Segment(2, 4)), 1, parent_id=0)
    assert cache_curve([first, follow], [None], block_size=4)[0].hit_blocks == 1
    assert cache_curve([first, follow], [None], block_size=4, cache_outputs=True)[0].hit_blocks == 2


def test_parse_capacities() -> None:
    assert parse_capacities("1000, 1e4,inf") == [1000, 10000, None]
    with pytest.raises(ValueError, match="whole number"):
        parse_capacities("0.5")
    with pytest.raises(ValueError, match="not a number"):
        parse_capacities("lots")


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 10, "input_length": 1100, "output_length": 5, "hash_ids": [0, 2, 3]},
    ]
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["cache-curve", str(f), "--capacities", "1,inf", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["capacity_blocks"] for p in out] == [1, None]
    assert out[1]["block_hit_ratio"] == 1 / 5 and out[1]["token_hit_ratio"] == 512 / 1700
    assert out[0]["hit_blocks"] == 1  # block 0 was inserted last, so it survives
    assert main(["cache-curve", str(f), "--capacities", "zero"]) == 2


# --------------------------------------------------------------------------- real traces


def independent_reuse(path: Path) -> tuple[int, int, int, int]:
    """Blocks and tokens whose hash id appeared in an earlier request (no cache model at all)."""
    seen: set[int] = set()
    blocks = hits = tokens = hit_tokens = 0
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        ids, n = rec["hash_ids"], rec["input_length"]
        sizes = [512] * (len(ids) - 1) + [n - 512 * (len(ids) - 1)]
        blocks += len(ids)
        tokens += n
        for h, size in zip(ids, sizes, strict=True):
            if h in seen:
                hits += 1
                hit_tokens += size
        seen.update(ids)
    return blocks, hits, tokens, hit_tokens


@pytest.mark.slow
@needs_traces
@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_unbounded_hit_ratio_equals_hash_id_reuse(name: str) -> None:
    path = TRACES / "mooncake" / f"{name}_trace.jsonl"
    reqs, _ = replay_trace(TraceWorkload(path=str(path), format="mooncake"))
    points = cache_curve(reqs, [1000, 10_000, 100_000, None], block_size=512, policy="lru")
    p = points[-1]
    assert (p.num_blocks, p.hit_blocks, p.prompt_tokens, p.hit_tokens) == independent_reuse(path)
    ratios = [q.block_hit_ratio for q in points]
    assert ratios == sorted(ratios)  # more cache never hurts LRU here
    assert points[0].num_evictions > points[1].num_evictions > 0


@needs_traces
def test_pinned_mooncake_figures() -> None:
    """Pinned figures quoted in docs/workloads.md (block size 512, partial blocks count)."""
    expected = {
        "conversation": {1000: 0.0445, 10_000: 0.2116, 100_000: 0.3637, None: 0.3664},
        "synthetic": {1000: 0.0841, 10_000: 0.4239, 100_000: 0.6396, None: 0.6396},
    }
    for name, want in expected.items():
        reqs, _ = replay_trace(
            TraceWorkload(path=str(TRACES / "mooncake" / f"{name}_trace.jsonl"), format="mooncake")
        )
        got = {p.capacity_blocks: round(p.block_hit_ratio, 4) for p in cache_curve(reqs, list(want))}
        assert got == want
