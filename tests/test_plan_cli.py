"""`kvsim plan` on the command line: the tables, the answer, the files, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.cli import main

#: The default scenario (Llama-3-8B) cut to 400 requests at 30 req/s: one H100 is overloaded.
SMALL = ["--set", "workload.num_requests=400", "--set", "workload.arrival.rate_per_s=30"]
SPACE = ["--gpus", "h100-sxm,h200", "--tp", "1,2", "--slo", "ttft_p99_s=1", "--slo", "tpot_p99_s=0.1"]


def test_plan_prints_every_configuration_the_answer_and_the_launch_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan"
    assert main(["plan", *SPACE, *SMALL, "--jobs", "1", "--out", str(out)]) == 0
    text, err = capsys.readouterr()
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["gpu", "tp", "status", "replicas"]
    assert any(line.split()[:4] == ["h100-sxm", "1", "answer", "2"] for line in lines)
    answer = next(line for line in lines if line.startswith("Cheapest meeting"))
    # Two H100s either way ($12.31/hour): one TP-2 replica has the larger margin.
    assert "not overloaded: 1 x [h100-sxm tp2 aggregated] = 2 GPUs, USD 12.31/hour" in answer
    assert "  prices: CoreWeave on-demand list prices, 2026-09-20 (example prices, not a quote)" in lines
    assert any(
        line.strip().startswith("vllm serve meta-llama/Meta-Llama-3-8B --tensor-parallel-size 2")
        for line in lines
    )
    assert lines[-1].endswith(f"plan written to {out}")
    assert "run 1: 1 x [h100-sxm tp1 aggregated]: overloaded, stopped at t=" in err
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        ".kvsim",
        "cheapest.yaml",
        "configurations.csv",
        "launch.sh",
        "pareto.html",
        "plan.json",
        "runs.csv",
    ]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["format"] == "kvsim-plan/1" and plan["cheapest"]["units"] == 1
    # The cheapest scenario runs again as it is, and meets the SLO.
    assert main(["run", str(out / "cheapest.yaml"), "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ttft_p99_s"] <= 1 and summary["tpot_p99_s"] <= 0.1 and not summary["overloaded"]
    assert summary["ttft_p99_s"] == plan["cheapest"]["summary"]["ttft_p99_s"]
    # The same folder takes the next plan (its marker says kvsim wrote it).
    assert main(["plan", *SPACE, *SMALL, "--jobs", "1", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cheapest"]["gpu"] == "h100-sxm"


def test_no_configuration_meeting_the_slo_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--gpus", "h100-sxm", "--tp", "1", "--slo", "ttft_p99_s=0.001", "--max-gpus", "2", *SMALL,
                 "--quiet"])  # fmt: skip
    assert code == 3
    assert "No configuration searched meets ttft_p99_s ≤ 0.001" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tp", "1,x"], "--tp: 'x': must be an integer or 'default'"),
        (["--gpus", "h100-sxm,h900"], "--gpus: unknown GPU preset 'h900'"),
        (["--gpus", "l4"], "has no price for GPU 'l4'"),
        (["--slo", "ttft_p95_s=1"], "--slo: 'ttft_p95_s' is not a numeric summary key"),
        (["--pd-ratios", "1-2"], "--pd-ratios: '1-2': must be P:D"),
        (["--prefix-caching", "maybe"], "--prefix-caching: 'maybe': must be on, off or default"),
        (["--router", "nearest"], "--router: unknown router 'nearest'"),
    ],
)
def test_bad_values_are_refused_before_any_run(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *args, *SMALL]) == 2
    err = capsys.readouterr().err
    assert message in err and "run 1:" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-gpus", "0"], "argument --max-gpus: must be between 1 and 65,536, got 0"),
        (["--budget", "0"], "argument --budget: must be > 0, got 0"),
        (["--jobs", "1.5"], "argument --jobs: must be an integer, got '1.5'"),
        (["--search", "all"], "argument --search: invalid choice: 'all'"),
    ],
)
def test_bad_options_are_refused_by_the_parser(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_an_output_folder_of_someone_elses_is_refused_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["plan", *SPACE, *SMALL, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "not used: it holds files other than a kvsim plan" in err
    assert "run 1:" not in err
