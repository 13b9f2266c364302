"""Sweeps: expansion, parallel points, a failing point, resuming an interrupted sweep, Ray."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kvsim.cli import main
from kvsim.planning.sweep import SweepError, load_sweep, point_id, run_sweep
from kvsim.scenario.schema import Scenario

BASE = """\
name: tiny
model: llama-3-8b
replicas:
  - {name: replica, gpu: h100-sxm}
workload:
  kind: synthetic
  num_requests: 5
  arrival: {kind: poisson, rate_per_s: 1.0}
"""


def fake_runner(scenario: Scenario) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Stands in for the simulator: a summary made of scenario fields; rate 3 fails."""
    rate = scenario.workload.arrival.rate_per_s  # type: ignore[union-attr]
    if rate == 3.0:
        raise RuntimeError("rate 3 is cursed")
    block = scenario.replicas[0].engine.block_size
    summary = {"rate_x_block": rate * block, "num_requests": scenario.workload.num_requests}  # type: ignore[union-attr]
    return summary, {"summary.json": json.dumps(summary).encode()}


def interrupting_runner(scenario: Scenario) -> tuple[dict[str, Any], dict[str, bytes]]:
    if scenario.workload.arrival.rate_per_s == 4.0:  # type: ignore[union-attr]
        raise KeyboardInterrupt
    return fake_runner(scenario)


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "base.yaml").write_text(BASE)
    sweep = tmp_path / "sweeps" / "s.yaml"
    sweep.parent.mkdir()
    sweep.write_text(
        "base: ../scenarios/base.yaml\n"
        "overrides: {workload.num_requests: 7}\n"
        "grid:\n"
        "  workload.arrival.rate_per_s: [1.0, 2.0, 3.0, 4.0]\n"
        "  replicas.0.engine.block_size: [16, 32]\n"
    )
    return sweep


def test_grid_expansion(sweep_file: Path) -> None:
    spec, points = load_sweep(sweep_file)
    assert spec.base == "../scenarios/base.yaml"
    assert len(points) == 8
    assert points[0].overrides == {"workload.arrival.rate_per_s": 1.0, "replicas.0.engine.block_size": 16}
    assert points[1].overrides == {"workload.arrival.rate_per_s": 1.0, "replicas.0.engine.block_size": 32}
    assert points[0].data["workload"]["num_requests"] == 7
    group = points[0].data["replicas"][0]  # the resolved base, every default written out
    assert (group["name"], group["gpu"], group["engine"]["block_size"]) == ("replica", "h100-sxm", 16)
    assert points[1].data["replicas"][0]["engine"]["block_size"] == 32
    assert len({p.point_id for p in points}) == 8
    assert points[0].point_id == point_id({"workload.num_requests": 7, **points[0].overrides})


def test_points_list_times_grid(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    f = tmp_path / "s.yaml"
    f.write_text("base: base.yaml\npoints: [{seed: 1}, {seed: 2}]\ngrid: {workload.num_requests: [3, 4]}\n")
    _, points = load_sweep(f)
    assert [p.overrides for p in points] == [
        {"seed": 1, "workload.num_requests": 3},
        {"seed": 1, "workload.num_requests": 4},
        {"seed": 2, "workload.num_requests": 3},
        {"seed": 2, "workload.num_requests": 4},
    ]


def test_bad_sweep_files(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("base: b.yaml\ngrdi: {}\n")
    with pytest.raises(SweepError, match="grdi: Extra inputs are not permitted"):
        load_sweep(f)
    f.write_text("base: b.yaml\ngrid: {seed: []}\n")
    with pytest.raises(SweepError, match=r"grid\.seed: needs at least one value"):
        load_sweep(f)


def test_sweep_in_parallel_with_a_failing_point(sweep_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = run_sweep(sweep_file, out, jobs=2, runner=fake_runner)
    assert (report.num_points, report.num_ok, report.num_failed, report.num_skipped) == (8, 6, 2, 0)
    table = pd.read_parquet(out / "results.parquet")
    assert table.equals(report.table) or len(table) == 8
    csv = pd.read_csv(out / "results.csv")
    assert list(csv["status"]) == list(table["status"])
    failed = table[table["status"] == "failed"]
    assert list(failed["workload.arrival.rate_per_s"]) == [3.0, 3.0]
    assert all("RuntimeError: rate 3 is cursed" in e for e in failed["error"])
    ok = table[table["status"] == "ok"]
    assert list(ok["rate_x_block"]) == [16.0, 32.0, 32.0, 64.0, 64.0, 128.0]
    assert set(ok["num_requests"]) == {7}
    pid = ok["point_id"].iloc[0]
    assert json.loads((out / "points" / pid / "summary.json").read_text())["rate_x_block"] == 16.0
    record = json.loads((out / "points" / pid / "point.json").read_text())
    assert record["status"] == "ok" and record["overrides"]["replicas.0.engine.block_size"] == 16

    # Rerun: the 6 finished points are skipped, the 2 failed ones run (and fail) again.
    again = run_sweep(sweep_file, out, jobs=1, runner=fake_runner)
    assert (again.num_skipped, again.num_ok, again.num_failed) == (6, 0, 2)


def test_interrupted_sweep_resumes(sweep_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep_file, out, jobs=1, runner=interrupting_runner)
    # Points run in order: rates 1, 2, 3 (4 ok + 2 failed) before rate 4 interrupted.
    table = pd.read_csv(out / "results.csv")
    assert list(table["status"]) == ["ok", "ok", "ok", "ok", "failed", "failed", "not_run", "not_run"]
    resumed = run_sweep(sweep_file, out, jobs=1, runner=fake_runner)
    assert (resumed.num_skipped, resumed.num_ok, resumed.num_failed) == (4, 2, 2)
    assert list(resumed.table["status"]) == ["ok", "ok", "ok", "ok", "failed", "failed", "ok", "ok"]


def test_invalid_point_is_recorded(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    f = tmp_path / "s.yaml"
    f.write_text("base: base.yaml\ngrid: {workload.num_requests: [2, -1]}\n")
    report = run_sweep(f, tmp_path / "out", runner=fake_runner)
    assert list(report.table["status"]) == ["ok", "failed"]
    assert "workload.synthetic.num_requests" in report.table["error"].iloc[1]


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray not installed (pip install -e '.[ray]')"
)
def test_ray_executor_on_a_local_instance(sweep_file: Path, tmp_path: Path) -> None:
    # Ray 2.x dropped local_mode; this starts a one-CPU local Ray instance instead. Ray's
    # workers cannot import this test module, so its runner travels by value.
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    report = run_sweep(sweep_file, tmp_path / "out", jobs=1, executor="ray", runner=fake_runner)
    assert (report.num_ok, report.num_failed) == (6, 2)
    assert sorted(report.table.loc[report.table["status"] == "ok", "rate_x_block"]) == [
        16,
        32,
        32,
        64,
        64,
        128,
    ]


def test_cli_sweep_runs_the_simulator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base.yaml").write_text(BASE)
    f = tmp_path / "s.yaml"
    f.write_text("base: base.yaml\ngrid: {replicas.0.engine.enable_prefix_caching: [true, false]}\n")
    out = tmp_path / "out"
    assert main(["sweep", str(f), "--out", str(out), "--jobs", "1"]) == 0
    assert "2 points: 0 already done, 2 ok, 0 failed" in capsys.readouterr().out
    table = pd.read_parquet(out / "results.parquet")
    assert list(table["num_finished"]) == [5, 5]
    pid = table["point_id"].iloc[0]
    assert sorted(p.name for p in (out / "points" / pid).iterdir()) == [
        "events.parquet",
        "iterations.parquet",
        "point.json",
        "requests.parquet",
        "scenario.yaml",
        "summary.json",
    ]
    assert main(["sweep", str(f), "--out", str(out), "--jobs", "1"]) == 0
    assert "2 already done" in capsys.readouterr().out
    f.write_text("base: base.yaml\ngrid: {workload.num_requests: [0]}\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "bad"), "--jobs", "1"]) == 1


def test_overrides_reach_into_defaults_the_base_left_out(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("seed: 1\n")  # no replicas section at all
    f = tmp_path / "s.yaml"
    f.write_text("base: base.yaml\ngrid: {replicas.0.tp: [1, 2]}\n")
    _, points = load_sweep(f)
    assert [p.data["replicas"][0]["tp"] for p in points] == [1, 2]


def test_cli_sweep_prints_load_per_point_and_warns_about_a_shortened_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "".join(f"2023-11-16 18:00:{i:02d}.000,{200 + i},{20 + i}\n" for i in range(40))
    (tmp_path / "trace.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    (tmp_path / "base.yaml").write_text("workload: {kind: trace, path: trace.csv, format: azure}\n")
    f = tmp_path / "s.yaml"
    f.write_text("base: base.yaml\ngrid: {workload.max_requests: [10, null]}\n")
    assert main(["sweep", str(f), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    head, *lines = captured.out.splitlines()
    assert head.split() == ["workload.max_requests", "status", "offered", "achieved", "TTFT", "p50", "TTFT",
                            "p99", "TPOT", "p99", "overloaded"]  # fmt: skip
    assert lines[0].split()[:2] == ["10", "ok"] and lines[0].split()[-1] == "no"
    warnings = [w for w in captured.err.splitlines() if "warning" in w]
    assert len(warnings) == 1 and "replays 25.0% of its trace" in warnings[0]
