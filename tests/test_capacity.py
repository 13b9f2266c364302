"""`kvsim.planning.capacity` and `kvsim capacity`: bisection for the smallest knob value meeting an SLO.

The search is checked on hand-built monotone cases, with a fake runner whose summary is a
known function of the knob, so the answer and the number of runs are exact; then once on
the real simulator through the CLI.
"""

from __future__ import annotations

import json
import math
import time

import pytest

import kvsim
from kvsim.cli import main
from kvsim.planning.capacity import (
    CapacityError,
    SloBound,
    _probes,
    default_goal,
    find_capacity,
    parse_slo,
    parse_values,
)


def replicas_runner(scenario: kvsim.Scenario) -> tuple[dict, dict]:
    """p99 TTFT 10 s / replicas; overloaded below 3 replicas (a fake, monotone in the count)."""
    n = scenario.replicas[0].count
    return {"ttft_p99_s": 10.0 / n, "tpot_p99_s": 0.01, "overloaded": n < 3, "trace_num_rows": None}, {}


def rate_runner(scenario: kvsim.Scenario) -> tuple[dict, dict]:
    """p99 TTFT 0.1 s x rate: the SLO ttft_p99_s <= 2 holds up to 20 req/s."""
    rate = scenario.workload.arrival.rate_per_s
    return {"ttft_p99_s": 0.1 * rate, "overloaded": False}, {}


def bumpy_runner(scenario: kvsim.Scenario) -> tuple[dict, dict]:
    """Feasible at 4 and from 6 on, not at 5: not monotone."""
    n = scenario.replicas[0].count
    return {"ttft_p99_s": 1.0 if n == 4 or n >= 6 else 5.0, "overloaded": False}, {}


def test_bisection_finds_the_smallest_count_in_log2_runs() -> None:
    # 16 candidates, feasible from 5 on (10/5 = 2 s): probes 9, 5, 3, 4 -> answer 5 in 4 runs.
    report = find_capacity(None, "replicas.0.count", list(range(1, 17)), parse_slo("ttft_p99_s=2"),
                           runner=replicas_runner)  # fmt: skip
    assert report.answer == 5
    assert report.num_runs == 4 <= math.ceil(math.log2(16 + 1))
    assert [p.value for p in report.points] == [9, 5, 3, 4]
    assert report.monotone and report.goal == "smallest"
    assert (
        report.answer_line()
        == "Smallest replicas.0.count meeting ttft_p99_s ≤ 2, not overloaded, 99% served: 5 (4 runs)"
    )
    table = report.table()
    assert table["replicas.0.count"].tolist() == [3, 4, 5, 9]
    assert table["feasible"].tolist() == [False, False, True, True]


def test_overloaded_points_never_count_even_when_they_meet_the_slo() -> None:
    # With a loose SLO every count meets it, but 1 and 2 are overloaded: the answer is 3.
    report = find_capacity(None, "replicas.0.count", [1, 2, 3, 4], parse_slo("ttft_p99_s=100"),
                           runner=replicas_runner)  # fmt: skip
    assert report.answer == 3
    by_value = {p.value: p for p in report.points}
    assert by_value[2].slo_met and by_value[2].overloaded and not by_value[2].feasible


def served_runner(scenario: kvsim.Scenario) -> tuple[dict, dict]:
    """Fast everywhere, but a pool under 1,000 blocks rejects half the requests."""
    blocks = scenario.replicas[0].engine.num_gpu_blocks_override
    return {"ttft_p99_s": 0.1, "overloaded": False, "num_requests": 100,
            "num_finished": 50 if blocks < 1000 else 100}, {}  # fmt: skip


def test_a_point_that_rejects_requests_does_not_count() -> None:
    report = find_capacity(None, "replicas.0.engine.num_gpu_blocks_override", [250, 500, 1000, 2000],
                           parse_slo("ttft_p99_s=2"), runner=served_runner)  # fmt: skip
    assert report.answer == 1000
    assert report.table()["served"].tolist()[0] == 0.5
    lenient = find_capacity(None, "replicas.0.engine.num_gpu_blocks_override", [250, 500, 1000, 2000],
                            parse_slo("ttft_p99_s=2"), runner=served_runner, min_served=0.5)  # fmt: skip
    assert lenient.answer == 250


def test_parallel_rounds_probe_evenly_and_give_the_same_answer() -> None:
    assert _probes(0, 16, 1) == [8]
    assert _probes(0, 16, 3) == [4, 8, 12]
    assert _probes(2, 4, 3) == [2, 3]
    report = find_capacity(None, "replicas.0.count", list(range(1, 17)), parse_slo("ttft_p99_s=2"),
                           runner=replicas_runner, jobs=3)  # fmt: skip
    # Round 1: 5, 9, 13 -> [5 feasible]; interval [0, 4): round 2: 1, 2, 3 (indices 1, 2, 3 -> 2, 3, 4).
    assert report.answer == 5
    assert report.num_runs == 6
    assert sorted(p.value for p in report.points if p.round_index == 0) == [5, 9, 13]


def slow_first_runner(scenario: kvsim.Scenario) -> tuple[dict, dict]:
    """replicas_runner, but the round's first probe (5 replicas) finishes last."""
    if scenario.replicas[0].count == 5:
        time.sleep(1.0)
    return replicas_runner(scenario)


def test_runs_are_numbered_in_probe_order_however_they_finish() -> None:
    # Round 1 probes 5, 9, 13 at once; 5 finishes last, yet it is run 1 (a table that does
    # not change from one machine's timing to another's, as docs/questions.md quotes it).
    report = find_capacity(None, "replicas.0.count", list(range(1, 17)), parse_slo("ttft_p99_s=2"),
                           runner=slow_first_runner, jobs=3)  # fmt: skip
    first_round = [p for p in report.points if p.round_index == 0]
    assert [(p.value, p.run_index) for p in first_round] == [(5, 0), (9, 1), (13, 2)]
    assert report.table()["run"].tolist()[:3] == [4, 5, 6] and report.answer == 5


def test_rate_knobs_look_for_the_largest_rate() -> None:
    assert default_goal("workload.arrival.rate_per_s") == "largest"
    assert default_goal("workload.time_scale") == "largest"
    assert default_goal("replicas.0.tp") == "smallest"
    report = find_capacity(None, "workload.arrival.rate_per_s", parse_values("4:64:4"),
                           parse_slo("ttft_p99_s<=2"), runner=rate_runner)  # fmt: skip
    assert report.answer == 20
    assert report.answer_line().startswith("Largest workload.arrival.rate_per_s meeting")
    assert report.num_runs == 4  # 16 candidates


def test_no_value_in_the_range_says_so_with_the_numbers() -> None:
    report = find_capacity(None, "replicas.0.count", [1, 2, 3, 4], parse_slo("ttft_p99_s=1"),
                           runner=replicas_runner)  # fmt: skip
    assert report.answer is None
    assert [p.value for p in report.points] == [3, 4]  # both infeasible: the largest was run
    line = report.answer_line()
    assert line.startswith(
        "No value of replicas.0.count in 1..4 meets ttft_p99_s ≤ 1, not overloaded, 99% served"
    )
    assert "the largest value, 4, gives ttft_p99_s = 2.5" in line and line.endswith("raise the range.")


def test_a_non_monotone_answer_is_flagged() -> None:
    report = find_capacity(None, "replicas.0.count", list(range(1, 9)), parse_slo("ttft_p99_s=2"),
                           runner=bumpy_runner, jobs=4)  # fmt: skip
    assert not report.monotone
    assert any("not monotone" in n for n in report.notes)


def test_bad_candidates_are_refused_before_anything_runs() -> None:
    with pytest.raises(kvsim.ScenarioError, match=r"replicas.0.count=0"):
        find_capacity(None, "replicas.0.count", [0, 1], runner=replicas_runner)
    with pytest.raises(kvsim.ScenarioError, match=r"unknown GPU|gpu"):
        find_capacity(None, "replicas.0.gpu", ["h100-sxm", "no-such-gpu"], runner=replicas_runner)


def test_parsing_of_slo_and_values() -> None:
    assert parse_slo("ttft_p99_s=2, tpot_p99_s<=0.1,slo_attainment>=0.99") == [
        SloBound("ttft_p99_s", 2.0),
        SloBound("tpot_p99_s", 0.1),
        SloBound("slo_attainment", 0.99, upper=False),
    ]
    for bad in ("ttft", "ttft_p99_s=fast", "=2", "", "ttft_p99_s=inf"):
        with pytest.raises(CapacityError):
            parse_slo(bad)
    assert parse_values("1:4") == [1, 2, 3, 4]
    assert parse_values("2:10:4") == [2, 6, 10]
    assert parse_values("0.5:0.7:0.05") == [0.5, 0.55, 0.6, 0.65, 0.7]
    assert parse_values("l4, a100-80gb,h100-sxm") == ["l4", "a100-80gb", "h100-sxm"]
    assert parse_values("1,2,4") == [1, 2, 4]
    for bad in ("0.5:0.9", "4:1", "1:2:0", "a:b", "1,1"):
        with pytest.raises(CapacityError):
            parse_values(bad)
    assert SloBound("ttft_p99_s", 2).met({"ttft_p99_s": float("nan")}) is False
    assert SloBound("ttft_p99_s", 2).met({}) is False


def test_cli_prints_the_table_and_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    # Real runs, kept small: 120 requests at 8 req/s; the KV pool (blocks) is the knob.
    args = ["capacity", "--knob", "replicas.0.engine.num_gpu_blocks_override", "--values", "64,2048,16384",
            "--slo", "ttft_p99_s=2", "--set", "workload.num_requests=120", "--jobs", "1"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert head.split()[:3] == ["replicas.0.engine.num_gpu_blocks_override", "offered", "achieved"]
    assert "SLO met" in head and "overloaded" in head
    assert out.strip().splitlines()[-1].startswith("Smallest replicas.0.engine.num_gpu_blocks_override")

    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # 64 blocks reject most of the prompts (the few it serves are fast): not an answer.
    assert report["answer"] == 2048 and report["num_runs"] == 2  # 2,048 first, then 64
    assert report["points"][-1]["value"] == 64 and report["points"][-1]["served_share"] < 0.2
    assert {"offered_requests_per_s", "achieved_requests_per_s", "overloaded"} <= set(
        report["points"][0]["summary"]
    )

    assert main([*args[:-2], "--slo", "ttft_p99_s=0.000001", "--jobs", "1"]) == 3  # nothing meets 1 µs
    assert "No value of replicas.0.engine.num_gpu_blocks_override" in capsys.readouterr().out
    assert main(["capacity", "--knob", "replicas.0.count", "--range", "0.5:2"]) == 2
    assert "give a STEP" in capsys.readouterr().err
