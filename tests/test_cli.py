"""``kvsim run``, ``validate`` and ``schema`` driven through `kvsim.cli.main`.

Most tests replace the engine with `fake_run` (a deterministic Result built from the
scenario) so that they test the CLI shell alone: files written, atomicity, overrides,
several files, exit codes. The tests marked ``engine`` run the real `kvsim.run`.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REQUIRED_SUMMARY_KEYS

import kvsim
from kvsim.cli import main
from kvsim.cli.run_cmd import ProgressBar
from kvsim.core.outcome import CacheStats
from kvsim.results.io import RESULT_FILES, load_result
from kvsim.results.result import EVENT_COLUMNS, ITERATION_COLUMNS, Result, summarize


def fake_run(scenario: kvsim.Scenario, *, progress: Any = None) -> Result:
    """Request i arrives at i s and takes 0.25 s to first token, 1 s end to end; none finish if seed 99."""
    n = scenario.workload.num_requests
    ids = np.arange(n)
    finished = np.full(n, scenario.seed != 99)
    arrival = ids.astype(float)
    requests = pd.DataFrame(
        {
            "request_id": ids,
            "replica_id": "replica-0",
            "prefill_replica_id": "",
            "tenant": "default",
            "priority": 0,
            "arrival_s": arrival,
            "first_scheduled_s": arrival,
            "first_token_s": arrival + 0.25,
            "decode_scheduled_s": np.nan,
            "finish_s": arrival + 1.0,
            "queueing_s": 0.0,
            "ttft_s": np.where(finished, 0.25, np.nan),
            "tpot_s": np.where(finished, 0.75 / 9, np.nan),
            "max_itl_s": np.where(finished, 0.1, np.nan),
            "e2e_s": np.where(finished, 1.0, np.nan),
            "prompt_tokens": 100,
            "output_tokens": np.where(finished, 10, 0),
            "prefix_cache_hits_tokens": 0,
            "recompute_hits_tokens": 0,
            "offload_hits_tokens": 0,
            "evicted_miss_tokens": 0,
            "num_preemptions": 0,
            "num_swaps": 0,
            "finished": finished,
        }
    )
    iterations = pd.DataFrame({c: [0] for c in ITERATION_COLUMNS}).assign(
        replica_id="replica-0", duration_s=float(n), kv_usage=0.5
    )
    events = pd.DataFrame({c: [] for c in EVENT_COLUMNS}).astype({"kind": str, "num_blocks": int})
    if progress is not None:
        progress(0.0, 0, n)
        progress(float(n), n, n)
    summary = summarize(
        scenario,
        requests,
        iterations,
        events,
        cache=CacheStats(prefix_cache_queries_tokens=100 * n, prefix_cache_hits_tokens=0),
        total_kv_blocks=100,
        sim_time_s=float(n),
    )
    return Result(scenario=scenario, requests=requests, iterations=iterations, events=events, summary=summary)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> list[tuple[kvsim.Scenario, Any]]:
    """Replace `kvsim.run` by `fake_run`; the list records (scenario, progress) per call."""
    calls: list[tuple[kvsim.Scenario, Any]] = []

    def run(
        scenario: kvsim.Scenario, *, base_dir: Path | None = None, progress: Any = None, force: bool = False
    ) -> Result:
        calls.append((scenario, progress))
        return fake_run(scenario, progress=progress)

    monkeypatch.setattr(kvsim, "run", run, raising=False)
    return calls


def write_scenario(path: Path, **fields: Any) -> Path:
    data = {
        "name": path.stem,
        "replicas": [{"name": "replica", "gpu": "h100-sxm"}],
        "workload": {"kind": "synthetic", "num_requests": 4},
        **fields,
    }
    path.write_text(yaml.safe_dump(data))
    return path


# --- validate -------------------------------------------------------------------------


def test_validate_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_scenario(tmp_path / "a.yaml", model="llama-3-8b")
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith(
        f"{path}: ok (1 replica, model llama-3-8b, workload synthetic; "
    )


def test_validate_counts_replicas_after_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_scenario(tmp_path / "a.yaml")
    assert main(["validate", str(path), "--set", "replicas.0.count=3"]) == 0
    assert "(3 replicas, model llama-3-8b, workload synthetic; estimated " in capsys.readouterr().out


def test_validate_error_names_file_field_and_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_scenario(tmp_path / "bad.yaml", replicas=[{"tp": 0}])
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    rule = "Input should be greater than or equal to 1"
    assert captured.err == f"kvsim: error: {path}: invalid scenario\n  replicas.0.tp: {rule}\n"


def test_validate_unknown_key_and_bad_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_scenario(tmp_path / "a.yaml", bogus=1)
    assert main(["validate", str(path)]) == 2
    assert "  bogus: unknown field (not allowed here)" in capsys.readouterr().err
    good = write_scenario(tmp_path / "b.yaml")
    assert main(["validate", str(good), "--set", "workload.num_requests=0"]) == 2
    err = capsys.readouterr().err
    assert f"{good}: invalid scenario" in err
    assert "num_requests: Input should be greater than or equal to 1" in err


def test_validate_several_files_reports_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_scenario(tmp_path / "good.yaml")
    missing = tmp_path / "missing.yaml"
    assert main(["validate", str(good), str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{good}: ok")
    assert f"{missing}: invalid scenario\n  <root>: cannot read file" in captured.err


# --- schema ---------------------------------------------------------------------------


def test_schema_is_json_with_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Scenario"
    props = schema["properties"]
    assert {"name", "seed", "model", "replicas", "workload", "slo", "sim"} <= props.keys()
    assert all(p.get("description") for p in props.values())
    engine = schema["$defs"]["EngineConfig"]["properties"]
    assert engine["block_size"]["default"] == 16
    assert all(p.get("description") for p in engine.values())


# --- run ------------------------------------------------------------------------------


def test_run_writes_exactly_the_five_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    path = write_scenario(tmp_path / "a.yaml")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "out"]  # no temporary folder left
    captured = capsys.readouterr()
    assert captured.out.startswith("a (seed 0, 1 replica)\n\nRequests\n")
    assert "Latency (ms)" in captured.out
    assert f"kvsim: wrote {out}/" in captured.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 4
    assert summary["ttft_p50_s"] == 0.25
    assert summary["e2e_p99_s"] == 1.0


def test_run_overrides_are_applied_and_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    path = write_scenario(tmp_path / "a.yaml")
    out = tmp_path / "out"
    argv = [
        "run",
        str(path),
        "--out",
        str(out),
        "--set",
        "workload.num_requests=7",
        "--set",
        "replicas.0.tp=2",
    ]
    assert main(argv) == 0
    (scenario, _), *_ = fake_engine
    assert scenario.workload.num_requests == 7
    saved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert saved["workload"]["num_requests"] == 7
    assert saved["replicas"][0]["tp"] == 2
    # The resolved scenario has every default written out.
    assert saved["replicas"][0]["engine"]["block_size"] == 16
    assert load_result(out).scenario == scenario


def test_run_json_prints_the_summary_with_null_for_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    path = write_scenario(tmp_path / "a.yaml", seed=99)  # fake_run finishes nothing with seed 99
    assert main(["run", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out)
    assert set(REQUIRED_SUMMARY_KEYS) <= summary.keys()
    assert summary["num_finished"] == 0
    assert summary["ttft_p99_s"] is None
    assert "NaN" not in out


def test_run_without_file_uses_the_embedded_default(
    capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    assert main(["run", "--set", "workload.num_requests=5", "--quiet"]) == 0
    (scenario, progress), *_ = fake_engine
    assert scenario.name == "default"
    assert scenario.workload.num_requests == 5
    assert progress is None  # stderr is not a terminal under pytest
    assert capsys.readouterr() == ("", "")


def test_failed_run_leaves_nothing_half_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def exploding_run(scenario: kvsim.Scenario, **kwargs: Any) -> Result:
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(kvsim, "run", exploding_run, raising=False)
    path = write_scenario(tmp_path / "a.yaml")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml"]
    err = capsys.readouterr().err
    assert f"kvsim: error: {path}: simulation failed: RuntimeError: engine exploded" in err


def test_failed_save_keeps_the_previous_result(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fake_engine: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = write_scenario(tmp_path / "a.yaml")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 0
    before = (out / "summary.json").read_text()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("kvsim.results.io.write_parquet", broken)
    assert main(["run", str(path), "--out", str(out), "--set", "workload.num_requests=9"]) == 1
    assert f"kvsim: error: {out}: cannot write results: disk full" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "out"]


def test_run_several_files_one_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    a = write_scenario(tmp_path / "a.yaml")
    bad = write_scenario(tmp_path / "bad.yaml", seed=-1)
    c = write_scenario(tmp_path / "c.yaml", workload={"kind": "synthetic", "num_requests": 6})
    out = tmp_path / "runs"
    assert main(["run", str(a), str(bad), str(c), "--out", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["a", "c"]
    assert sorted(p.name for p in (out / "c").iterdir()) == sorted(RESULT_FILES)
    assert json.loads((out / "c" / "summary.json").read_text())["num_requests"] == 6
    captured = capsys.readouterr()
    assert f"==> {a} <==\na (seed 0, 1 replica)" in captured.out
    assert f"==> {c} <==\nc (seed 0, 1 replica)" in captured.out
    assert str(bad) not in captured.out
    assert (
        f"kvsim: error: {bad}: invalid scenario\n  seed: Input should be greater than or equal to 0"
        in captured.err
    )


def test_run_several_files_json_is_keyed_by_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    a = write_scenario(tmp_path / "a.yaml")
    bad = write_scenario(tmp_path / "bad.yaml", bogus=True)
    assert main(["run", str(a), str(bad), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert list(data) == [str(a), str(bad)]
    assert data[str(a)]["num_requests"] == 4
    assert data[str(bad)] is None


def test_run_several_files_with_the_same_stem_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    (tmp_path / "x").mkdir()
    a = write_scenario(tmp_path / "a.yaml")
    a2 = write_scenario(tmp_path / "x" / "a.yaml")
    assert main(["run", str(a), str(a2), "--out", str(tmp_path / "runs")]) == 2
    assert "would both write to" in capsys.readouterr().err
    assert fake_engine == []
    assert not (tmp_path / "runs").exists()


def test_run_refuses_to_replace_a_folder_with_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_engine: list[Any]
) -> None:
    path = write_scenario(tmp_path / "a.yaml")
    assert main(["run", str(path), "--out", str(tmp_path)]) == 2
    assert "holds files other than a kvsim result" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml"]


def test_quiet_and_json_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--quiet", "--json"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# --- progress bar ---------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_bar_waits_a_second_then_throttles_and_wipes() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(stream, "a.yaml", clock=clock, columns=200)
    clock.now = 100.9
    bar(5.0, 10, 100)
    assert stream.getvalue() == ""  # under a second: nothing drawn
    clock.now = 101.0
    bar(12.5, 25, 100)
    line = "a.yaml [" + "#" * 7 + "." * 23 + "] 25/100 requests  sim 12.5 s  wall 1.0 s"
    assert stream.getvalue() == "\r" + line
    clock.now = 101.05
    bar(13.0, 26, 100)
    assert stream.getvalue() == "\r" + line  # redraws at most every 0.1 s
    clock.now = 101.2
    bar(1234.5, 100, 100)
    done = "a.yaml [" + "#" * 30 + "] 100/100 requests  sim 1,234.5 s  wall 1.2 s"
    assert stream.getvalue() == "\r" + line + "\r" + done
    bar.close()
    assert stream.getvalue().endswith("\r" + " " * len(done) + "\r")


def test_progress_bar_is_cut_to_the_terminal_width() -> None:
    stream, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(stream, "a.yaml", clock=clock, columns=41)
    clock.now = 102.0
    bar(1.0, 1, 2)
    assert stream.getvalue() == "\ra.yaml [" + "#" * 15 + "." * 15 + "] "  # 40 characters


def test_progress_bar_never_drawn_leaves_nothing() -> None:
    stream = io.StringIO()
    bar = ProgressBar(stream, "x", clock=FakeClock())
    bar(1.0, 1, 2)
    bar.close()
    assert stream.getvalue() == ""


# --- with the real engine -------------------------------------------------------------


def test_default_scenario_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "default"
    assert main(["run", "--set", "workload.num_requests=50", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("default (seed 0, 1 replica)\n")
    assert "  requests" in captured.out and "Latency (ms)" in captured.out
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    summary = json.loads((out / "summary.json").read_text())
    assert set(REQUIRED_SUMMARY_KEYS) <= summary.keys()
    assert summary["num_requests"] == 50
    result = load_result(out)
    assert len(result.requests) == 50
    assert result.scenario.workload.num_requests == 50
    assert result.summary["num_iterations"] == len(result.iterations)


def test_same_scenario_twice_prints_the_same_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--set", "workload.num_requests=30", "--set", "seed=5", "--json"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    summary = json.loads(first)
    assert summary["seed"] == 5
    assert summary["num_requests"] == 30


def test_rerun_from_a_saved_scenario_reproduces_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["run", "--set", "workload.num_requests=30", "--out", str(first), "--quiet"]) == 0
    assert main(["run", str(first / "scenario.yaml"), "--out", str(second), "--quiet"]) == 0
    assert (second / "summary.json").read_text() == (first / "summary.json").read_text()
    assert capsys.readouterr() == ("", "")
