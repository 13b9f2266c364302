"""kvsim's core against the recorded reference traces of a real vLLM 0.32.0 engine.

Every workload recorded in tests/fixtures/vllm/ (kvsim/validation/generate.py describes
the catalogue; `kvsim verify-vllm --record-fixtures` re-records it) is replayed through
kvsim's production replica engine (the decode cohort and fast-forwarded decode runs, as
`kvsim.run` executes) on the same step clock and compared step for step.

Every workload must be identical: a difference fails its test with the first diverging
step, both sides' queues and decisions (`kvsim.validation.compare.format_divergence`).
"""

from __future__ import annotations

from functools import cache

import pytest
from conftest import ROOT
from oracle import EagerEngine

from kvsim.engine.replica_engine import ReplicaEngine
from kvsim.validation import compare, fixtures, kvsim_side
from kvsim.validation.workload import DiffRequest, DiffWorkload, Knobs

FIXTURE_DIR = ROOT / "tests" / "fixtures" / "vllm"
VLLM_VERSION = "0.32.0"
#: Families the catalogue must cover (issue 9).
REQUIRED_GROUPS = {
    "pressure",
    "pressure_nocache",
    "chunked",
    "long_prefill",
    "max_num_seqs",
    "shared_prefix",
    "multi_turn",
    "priority",
    "no_chunk",
    "limits",
    "mooncake",
    "handcrafted",
}


@cache
def _fixtures() -> tuple[fixtures.Fixture, ...]:
    return tuple(fixtures.load_fixture_dir(FIXTURE_DIR))


@cache
def _comparison(name: str) -> compare.Comparison:
    fx = next(f for f in _fixtures() if f.workload.name == name)
    rec = kvsim_side.replay(fx.workload)
    return compare.compare_records(name, fx.record, rec, group=fx.workload.group)


def _names() -> list[str]:
    return [f.workload.name for f in _fixtures()]


def test_fixtures_cover_the_catalogue() -> None:
    fxs = _fixtures()
    assert len(fxs) >= 300
    assert len({f.workload.name for f in fxs}) == len(fxs), "workload names must be unique"
    assert {f.vllm_version for f in fxs} == {VLLM_VERSION}
    assert {f.workload.group for f in fxs} >= REQUIRED_GROUPS
    for f in fxs:
        assert not f.workload.problems(), f.workload.name
        settings = f.engine["settings"]
        assert settings["async_scheduling"] is False
        assert settings["scheduler_reserve_full_isl"] is True
        assert not f.record["stalled"], f"{f.workload.name}: vLLM stalled"
    # Memory pressure is exercised, not just configured: vLLM preempted somewhere in
    # every pressure family, repeatedly in some workloads.
    for group in ("pressure", "pressure_nocache", "priority", "mooncake"):
        preemptions = [
            sum(r["preemptions"] for r in f.record["requests"].values())
            for f in fxs
            if f.workload.group == group
        ]
        assert sum(preemptions) > 0 and max(preemptions) >= 3, group


@pytest.mark.parametrize("name", _names())
def test_kvsim_matches_vllm(name: str) -> None:
    c = _comparison(name)
    if not c.identical:
        pytest.fail(compare.format_divergence(c))


def test_totals() -> None:
    """Workloads / requests / steps identical over every fixture (the figure of issue 9)."""
    comps = [_comparison(n) for n in _names()]
    t = compare.totals(comps)
    line = (
        f"kvsim vs vLLM {VLLM_VERSION}: {t['workloads_identical']}/{t['workloads']} workloads, "
        f"{t['requests_identical']}/{t['requests']} requests, "
        f"{t['steps_identical']}/{t['steps']} steps identical"
    )
    assert t["workloads"] == len(comps) > 0
    assert t["workloads_identical"] == t["workloads"], line


# -- the check can fail ---------------------------------------------------------------


def _fixture(name: str) -> fixtures.Fixture:
    return next(f for f in _fixtures() if f.workload.name == name)


def test_the_fixtures_run_the_path_users_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay is not a side door: most steps of the catalogue are the decode cohort's
    fast-forwarded runs (`kvsim.core.decode_run.CohortRun`), as in `kvsim.run`."""
    run_steps = {"runs": 0, "steps": 0}
    real_commit = ReplicaEngine.commit_run

    def counting_commit(self: ReplicaEngine, m: int, arrivals: list[float], now: float) -> object:
        run_steps["runs"] += 1
        run_steps["steps"] += m
        return real_commit(self, m, arrivals, now)

    monkeypatch.setattr(ReplicaEngine, "commit_run", counting_commit)
    total = sum(len(kvsim_side.replay(f.workload)["steps"]) for f in _fixtures())
    assert run_steps["runs"] > 1000 and run_steps["steps"] > 0.7 * total  # 3,923 runs, 89% of 72,298


def test_the_production_engine_equals_the_step_by_step_oracle_on_every_fixture() -> None:
    for f in _fixtures():
        eager = kvsim_side.replay(f.workload, engine=EagerEngine)
        assert compare.compare_records(f.workload.name, eager, kvsim_side.replay(f.workload)).identical


def test_planted_difference_is_reported_at_the_right_step() -> None:
    """evict-order (generate.handcrafted): vLLM frees a request's blocks tail first, so C
    evicts A's last two blocks and D re-sending A's prompt hits A's first block (32
    tokens) at step 6. kvsim agrees; freeing head first makes D miss, and the comparison
    must say so at step 6 and nowhere before."""
    fx = _fixture("evict-order")
    d_admission = fx.record["steps"][3]
    assert d_admission["step"] == 6 and d_admission["sched"] == [[3, 64]]
    assert fx.record["requests"][3]["hits"] == [32]

    assert compare.compare_records("evict-order", fx.record, kvsim_side.replay(fx.workload)).identical

    with kvsim_side.planted_head_first_free():
        planted = kvsim_side.replay(fx.workload)
    c = compare.compare_records("evict-order", fx.record, planted)
    assert not c.identical
    assert c.divergence is not None
    assert c.divergence.step == 6 and c.divergence.index == 3
    assert "sched" in c.divergence.fields
    assert c.divergence.candidate is not None and c.divergence.candidate["sched"] == [[3, 96]]
    assert c.steps_identical == 3
    assert (3, "hits", [32], [0]) in c.request_diffs
    assert "step 6" in c.reason()
    assert "first diverging step: 6" in compare.format_divergence(c)


def test_comparison_names_the_first_differing_step_and_field() -> None:
    knobs = Knobs(block_size=32, num_gpu_blocks=12, max_num_batched_tokens=128, max_num_seqs=4)
    wl = DiffWorkload("two", knobs, (DiffRequest(0, 0, ((1, 70),), 3), DiffRequest(1, 1, ((2, 40),), 2)))
    ref = kvsim_side.replay(wl)
    assert compare.compare_records("two", ref, kvsim_side.replay(wl)).identical
    other = kvsim_side.replay(wl)
    assert len(ref["steps"]) == 3
    other["steps"][1]["free"] += 1
    other["steps"][2]["preempted"] = [0]
    c = compare.compare_records("two", ref, other)
    assert c.divergence is not None and c.divergence.index == 1 and c.divergence.fields == ("free",)
    assert c.steps_identical == len(ref["steps"]) - 2
    shorter = dict(ref, steps=ref["steps"][:-1])
    c = compare.compare_records("two", ref, shorter)
    assert c.divergence is not None and c.divergence.fields == ("missing step",)
    assert c.divergence.index == len(ref["steps"]) - 1


def test_fixture_round_trip(tmp_path) -> None:
    fx = _fixture("evict-order")
    path = tmp_path / "f.json.gz"
    fixtures.write_fixture_file(
        path, [(fx.workload, fx.record)], vllm_version=fx.vllm_version, engine=fx.engine
    )
    (back,) = fixtures.read_fixture_file(path)
    assert back.workload == fx.workload
    assert back.record["steps"] == fx.record["steps"] and back.record["requests"] == fx.record["requests"]
    assert back.vllm_version == VLLM_VERSION
