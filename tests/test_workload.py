"""Synthetic workload generators: statistics with pinned seeds, prefix structure, sessions, tenants."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from kvsim.request import Segment
from kvsim.scenario.schema import Scenario
from kvsim.workload import generate_requests, generate_workload, resolve_workload_paths
from kvsim.workload.config import (
    ConstantArrivals,
    DiurnalArrivals,
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LognormalLength,
    OnOffArrivals,
    PoissonArrivals,
    RampArrivals,
    SessionConfig,
    SharedPrefixPool,
    SyntheticWorkload,
    TenantShare,
    TraceWorkload,
    UniformLength,
    ZipfLength,
)
from kvsim.workload.synthetic import sample_arrivals, sample_lengths


def rng(seed: int = 1) -> np.random.Generator:
    return np.random.default_rng(seed)


def cv(x: np.ndarray) -> float:
    return float(x.std() / x.mean())


# --------------------------------------------------------------------------- arrivals


def test_poisson_rate_and_cv() -> None:
    t = sample_arrivals(PoissonArrivals(rate_per_s=5.0), 20_000, rng())
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert np.all(gaps > 0)
    assert gaps.mean() == pytest.approx(0.2, rel=0.02)
    assert cv(gaps) == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize("target_cv", [0.5, 3.0])
def test_gamma_rate_and_cv(target_cv: float) -> None:
    t = sample_arrivals(GammaArrivals(rate_per_s=10.0, cv=target_cv), 50_000, rng())
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert cv(gaps) == pytest.approx(target_cv, rel=0.05)


def test_constant_arrivals_are_exact() -> None:
    assert sample_arrivals(ConstantArrivals(rate_per_s=4.0), 3, rng()).tolist() == [0.25, 0.5, 0.75]


def test_onoff_mean_rate_and_burstiness() -> None:
    cfg = OnOffArrivals(rate_on_per_s=20.0, rate_off_per_s=1.0, mean_on_s=5.0, mean_off_s=15.0)
    assert cfg.mean_rate_per_s == pytest.approx((20 * 5 + 1 * 15) / 20)
    t = sample_arrivals(cfg, 30_000, rng())
    assert np.all(np.diff(t) >= 0)
    assert len(t) / t[-1] == pytest.approx(cfg.mean_rate_per_s, rel=0.1)
    assert cv(np.diff(t)) > 1.5  # bursts: far burstier than Poisson


def test_ramp_counts_follow_the_integrated_rate() -> None:
    # Rate 0 -> 10/s over 100 s: expect 500 arrivals in the ramp, then 10/s.
    t = sample_arrivals(RampArrivals(start_rate_per_s=0, end_rate_per_s=10, duration_s=100), 2000, rng())
    assert abs(int((t < 100).sum()) - 500) < 70  # 3 sigma of Poisson(500)
    assert abs(int((t < 50).sum()) - 125) < 35
    late = t[t >= 100]
    assert len(late) / (late[-1] - 100) == pytest.approx(10, rel=0.08)


def test_diurnal_peak_and_trough() -> None:
    cfg = DiurnalArrivals(mean_rate_per_s=2.0, amplitude=0.8, period_s=1000.0)
    t = sample_arrivals(cfg, 20_000, rng())
    phase = np.mod(t, 1000.0)
    high, low = int((phase < 500).sum()), int((phase >= 500).sum())
    # Integral of 1 + 0.8 sin over each half period: 500 (1 +- 1.6/pi).
    assert high / low == pytest.approx((1 + 1.6 / math.pi) / (1 - 1.6 / math.pi), rel=0.05)
    assert len(t) / t[-1] == pytest.approx(2.0, rel=0.03)


# --------------------------------------------------------------------------- lengths


def test_fixed_and_uniform_lengths() -> None:
    assert sample_lengths(FixedLength(tokens=7), 3, rng()).tolist() == [7, 7, 7]
    x = sample_lengths(UniformLength(min_tokens=10, max_tokens=20), 20_000, rng())
    assert x.min() == 10 and x.max() == 20
    assert x.mean() == pytest.approx(15.0, rel=0.01)
    assert set(np.unique(x).tolist()) == set(range(10, 21))


def test_lognormal_moments() -> None:
    x = sample_lengths(LognormalLength(mean_tokens=1000, cv=0.5), 50_000, rng())
    assert x.mean() == pytest.approx(1000, rel=0.01)
    assert cv(x.astype(float)) == pytest.approx(0.5, rel=0.03)
    clipped = sample_lengths(
        LognormalLength(mean_tokens=1000, cv=2, min_tokens=50, max_tokens=4000), 5000, rng()
    )
    assert clipped.min() >= 50 and clipped.max() == 4000


def test_zipf_pmf_ratio() -> None:
    x = sample_lengths(ZipfLength(exponent=1.0, min_tokens=1, max_tokens=1000), 100_000, rng())
    assert x.min() == 1 and x.max() <= 1000
    # P(1) / P(2) = 2^1; harmonic number H_1000 = 7.4855 gives P(1) = 0.1336.
    assert (x == 1).mean() == pytest.approx(1 / 7.4855, rel=0.03)
    assert (x == 1).sum() / (x == 2).sum() == pytest.approx(2.0, rel=0.06)


def test_empirical_resamples_trace_values(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:00:00.0,100,5\n2023-11-16 18:00:01.0,300,0\n2023-11-16 18:00:02.0,200,7\n"
    )
    cfg = EmpiricalLength(path="t.csv", format="azure", field="prompt")
    x = sample_lengths(cfg, 3000, rng(), base_dir=tmp_path)
    # The row with 0 output tokens is not simulable and not resampled.
    assert set(np.unique(x).tolist()) == {100, 200}
    assert (x == 100).mean() == pytest.approx(0.5, abs=0.04)
    out = sample_lengths(EmpiricalLength(path=str(f), format="azure", field="output"), 10, rng())
    assert set(out.tolist()) <= {5, 7}


# --------------------------------------------------------------------------- requests


def test_simple_workload_keeps_the_interim_draw_order_and_ids() -> None:
    cfg = SyntheticWorkload(num_requests=5, shared_prefix_tokens=64)
    reqs = generate_requests(cfg, rng(7))
    g = rng(7)
    arrivals = np.cumsum(g.exponential(1 / 4.0, size=5))
    prompts = sample_lengths(cfg.prompt_tokens, 5, g)
    outputs = sample_lengths(cfg.output_tokens, 5, g)
    assert [r.arrival_s for r in reqs] == arrivals.tolist()
    assert [r.prompt for r in reqs] == [(Segment(0, 64), Segment(i + 1, int(prompts[i]))) for i in range(5)]
    assert [r.output_tokens for r in reqs] == outputs.tolist()
    assert [r.request_id for r in reqs] == [0, 1, 2, 3, 4]


def test_same_seed_same_requests() -> None:
    cfg = SyntheticWorkload(
        num_requests=50,
        sessions=SessionConfig(turns=UniformLength(min_tokens=1, max_tokens=4)),
        system_prompts=SharedPrefixPool(num_prompts=3, tokens=FixedLength(tokens=100)),
        tenants=[TenantShare(name="a"), TenantShare(name="b")],
    )
    assert generate_requests(cfg, rng(3)) == generate_requests(cfg, rng(3))
    assert generate_requests(cfg, rng(3)) != generate_requests(cfg, rng(4))


def test_system_prompts_have_zipf_popularity() -> None:
    cfg = SyntheticWorkload(
        num_requests=20_000,
        arrival=PoissonArrivals(rate_per_s=100),
        prompt_tokens=FixedLength(tokens=10),
        system_prompts=SharedPrefixPool(num_prompts=4, tokens=FixedLength(tokens=300), zipf_exponent=1.0),
    )
    reqs = generate_requests(cfg, rng())
    first = np.array([r.prompt[0].content_id for r in reqs])
    assert set(first.tolist()) == {1, 2, 3, 4}
    assert all(r.prompt[0].num_tokens == 300 for r in reqs)
    # P(k) = (1/k) / H_4 with H_4 = 25/12.
    for k in range(1, 5):
        assert (first == k).mean() == pytest.approx((1 / k) / (25 / 12), abs=0.01)
    assert len({r.prompt[1].content_id for r in reqs}) == 20_000  # user texts are unique


def test_layers_stack_in_order() -> None:
    cfg = SyntheticWorkload(
        num_requests=3,
        prompt_tokens=FixedLength(tokens=5),
        shared_prefix_tokens=8,
        system_prompts=SharedPrefixPool(num_prompts=2, tokens=FixedLength(tokens=6)),
        few_shot=SharedPrefixPool(num_prompts=3, tokens=FixedLength(tokens=7)),
    )
    for r in generate_requests(cfg, rng()):
        shared, system, shots, user = r.prompt
        assert shared == Segment(0, 8)
        assert system.content_id in (1, 2) and system.num_tokens == 6
        assert shots.content_id in (3, 4, 5) and shots.num_tokens == 7
        assert user.content_id >= 6 and user.num_tokens == 5


def test_sessions_resend_the_conversation() -> None:
    cfg = SyntheticWorkload(
        num_requests=10,
        prompt_tokens=FixedLength(tokens=100),
        output_tokens=FixedLength(tokens=20),
        sessions=SessionConfig(
            turns=FixedLength(tokens=4),
            think_time_s=3.0,
            think_time_dist="fixed",
            followup_tokens=FixedLength(tokens=30),
        ),
    )
    work = generate_workload(cfg, rng())
    reqs = work.requests
    assert len(reqs) == 10 and work.info.num_sessions == 3  # 4 + 4 + 2 turns
    by_id = {r.request_id: r for r in reqs}
    roots = [r for r in reqs if r.parent_id is None]
    assert [r.prompt_tokens for r in roots] == [100, 100, 100]
    for r in reqs:
        if r.parent_id is None:
            assert r.think_time_s == 0.0
            continue
        parent = by_id[r.parent_id]
        assert parent.request_id < r.request_id
        assert r.prompt[:-2] == parent.prompt
        assert r.prompt[-2] == parent.output_segment == Segment(-(parent.request_id + 1), 20)
        assert r.prompt[-1].num_tokens == 30
        assert r.think_time_s == 3.0
        assert r.arrival_s == parent.arrival_s
    assert [r.prompt_tokens for r in reqs[:4]] == [100, 150, 200, 250]
    assert [r.arrival_s for r in reqs] == sorted(r.arrival_s for r in reqs)


def test_exponential_think_time_mean() -> None:
    cfg = SyntheticWorkload(
        num_requests=20_000,
        prompt_tokens=FixedLength(tokens=10),
        sessions=SessionConfig(turns=FixedLength(tokens=5), think_time_s=8.0),
    )
    thinks = np.array([r.think_time_s for r in generate_requests(cfg, rng()) if r.parent_id is not None])
    assert len(thinks) == 16_000
    assert thinks.mean() == pytest.approx(8.0, rel=0.03)


def test_tenant_weights_and_priorities() -> None:
    cfg = SyntheticWorkload(
        num_requests=10_000,
        prompt_tokens=FixedLength(tokens=10),
        tenants=[
            TenantShare(name="gold", weight=1, priority=0),
            TenantShare(name="free", weight=3, priority=5),
        ],
    )
    reqs = generate_requests(cfg, rng())
    gold = [r for r in reqs if r.tenant == "gold"]
    assert len(gold) / len(reqs) == pytest.approx(0.25, abs=0.015)
    assert {r.priority for r in gold} == {0}
    assert {r.priority for r in reqs if r.tenant == "free"} == {5}


def test_parallel_sampling_and_beams_share_the_prompt() -> None:
    cfg = SyntheticWorkload(num_requests=4, parallel_samples=3, beam_width=2)
    reqs = generate_requests(cfg, rng())
    assert len(reqs) == 24
    for k in range(4):
        group = reqs[6 * k : 6 * k + 6]
        assert len({r.prompt for r in group}) == 1
        assert len({r.arrival_s for r in group}) == 1
        outs = [r.output_tokens for r in group]
        assert outs[0] == outs[1] and outs[2] == outs[3] and outs[4] == outs[5]  # beams share a length
        assert len({r.output_segment.content_id for r in group}) == 6  # own outputs


def test_config_validation_names_the_rule() -> None:
    with pytest.raises(ValidationError, match="max_tokens must be >= min_tokens"):
        UniformLength(min_tokens=5, max_tokens=4)
    with pytest.raises(ValidationError, match="tenant names must be unique"):
        SyntheticWorkload(tenants=[TenantShare(name="a"), TenantShare(name="a")])
    with pytest.raises(ValidationError, match="needs columns for: output_tokens, prompt_tokens"):
        TraceWorkload(path="x.csv", format="csv", columns={"timestamp": "t"})
    with pytest.raises(ValidationError):
        Scenario.model_validate({"workload": {"kind": "synthetic", "arrival": {"kind": "nope"}}})


def test_scenario_accepts_both_workload_kinds() -> None:
    s = Scenario.model_validate({"workload": {"kind": "trace", "path": "t.jsonl", "format": "mooncake"}})
    assert isinstance(s.workload, TraceWorkload)
    s = Scenario.model_validate({"workload": {"arrival": {"kind": "gamma", "rate_per_s": 2, "cv": 4}}})
    assert isinstance(s.workload, SyntheticWorkload) and isinstance(s.workload.arrival, GammaArrivals)


def test_resolve_workload_paths(tmp_path: Path) -> None:
    data = {
        "name": "x",
        "workload": {
            "kind": "synthetic",
            "prompt_tokens": {"kind": "empirical", "path": "traces/a.csv", "field": "prompt"},
        },
    }
    out = resolve_workload_paths(data, tmp_path)
    assert out["workload"]["prompt_tokens"]["path"] == str(tmp_path / "traces" / "a.csv")
    assert data["workload"]["prompt_tokens"]["path"] == "traces/a.csv"  # input untouched
    trace = resolve_workload_paths({"workload": {"kind": "trace", "path": "/abs/t.jsonl"}}, tmp_path)
    assert trace["workload"]["path"] == "/abs/t.jsonl"
