"""Trace replay: formats, options, bad rows, drop counts, and the real traces' own statistics."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvsim.cli import main
from kvsim.errors import TraceError
from kvsim.request import Segment
from kvsim.workload import generate_workload
from kvsim.workload.config import TraceWorkload
from kvsim.workload.traces import replay_trace

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"real traces not found at {TRACES} (see shared/traces/README.md)"
)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def mooncake_row(ts: int, n_in: int, n_out: int, ids: list[int]) -> str:
    return json.dumps({"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids})


@pytest.fixture
def mooncake(tmp_path: Path) -> Path:
    return write_lines(
        tmp_path / "m.jsonl",
        [
            mooncake_row(0, 1300, 10, [7, 9, 4]),
            mooncake_row(500, 1024, 3, [7, 9]),
            mooncake_row(1500, 10, 0, [11]),
            mooncake_row(3000, 600, 2, [7, 12]),
        ],
    )


def test_mooncake_hash_ids_become_512_token_segments(mooncake: Path) -> None:
    reqs, report = replay_trace(TraceWorkload(path=str(mooncake), format="mooncake"))
    assert [r.prompt for r in reqs] == [
        (Segment(7, 512), Segment(9, 512), Segment(4, 276)),
        (Segment(7, 512), Segment(9, 512)),
        (Segment(7, 512), Segment(12, 88)),
    ]
    assert [r.arrival_s for r in reqs] == [0.0, 0.5, 3.0]
    assert [r.output_tokens for r in reqs] == [10, 3, 2]
    assert [r.request_id for r in reqs] == [0, 1, 2]
    assert report.num_rows == 4 and report.num_requests == 3
    assert report.num_dropped == 1 and report.dropped_by_reason == {"zero_output": 1}
    assert report.summary()["trace_dropped_zero_output"] == 1


def test_zero_output_as_one_token(mooncake: Path) -> None:
    reqs, report = replay_trace(TraceWorkload(path=str(mooncake), format="mooncake", zero_output="one"))
    assert [r.output_tokens for r in reqs] == [10, 3, 1, 2] and report.num_dropped == 0


def test_window_first_n_time_scale_and_rate(mooncake: Path) -> None:
    base = {"path": str(mooncake), "format": "mooncake", "zero_output": "one"}
    reqs, report = replay_trace(TraceWorkload(**base, start_s=0.4, end_s=2.0))
    assert [r.arrival_s for r in reqs] == [0.0, 1.0]  # rows at 0.5 s and 1.5 s, shifted to 0
    assert report.num_outside_window == 2
    reqs, report = replay_trace(TraceWorkload(**base, max_requests=2, time_scale=2.0))
    assert [r.arrival_s for r in reqs] == [0.0, 0.25] and report.num_outside_window == 2
    # 4 arrivals over 3 s: mean rate (4 - 1) / 3 = 1/s; asking for 3/s compresses time 3x.
    reqs, _ = replay_trace(TraceWorkload(**base, rate_per_s=3.0))
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 0.5 / 3, 1.5 / 3, 1.0])


def test_relative_path_uses_base_dir(mooncake: Path) -> None:
    work = generate_workload(
        TraceWorkload(path="m.jsonl", format="mooncake"), np.random.default_rng(0), base_dir=mooncake.parent
    )
    assert work.info.num_requests == 3 and work.info.trace is not None
    assert work.info.summary()["trace_num_dropped"] == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not valid JSON"),
        (
            mooncake_row(1, 1025, 5, [1, 2]),
            "line 2: 2 hash_ids for 1025 prompt tokens; expected ceil(1025 / 512) = 3",
        ),
        ('{"timestamp": 1, "input_length": 5, "output_length": 1}', "line 2: missing field 'hash_ids'"),
        (mooncake_row(1, -5, 5, [1]), "line 2: input_length must be >= 0"),
        (
            '{"timestamp": 1, "input_length": 5.5, "output_length": 1, "hash_ids": [1]}',
            "line 2: input_length must be an integer",
        ),
        ("[1, 2]", "line 2: each line must be a JSON object"),
    ],
)
def test_bad_mooncake_rows_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    f = write_lines(tmp_path / "bad.jsonl", [mooncake_row(0, 5, 1, [0]), line])
    with pytest.raises(TraceError, match=r"bad\.jsonl") as info:
        replay_trace(TraceWorkload(path=str(f), format="mooncake"))
    assert message in str(info.value)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="trace file not found"):
        replay_trace(TraceWorkload(path=str(tmp_path / "nope.csv"), format="azure"))


def test_azure_wall_clock_timestamps(tmp_path: Path) -> None:
    f = write_lines(
        tmp_path / "a.csv",
        [
            "TIMESTAMP,ContextTokens,GeneratedTokens",
            "2023-11-16 18:15:46.6805900,374,44",
            "2023-11-16 18:15:50.9951690,396,109",
            "2023-11-16 18:16:00.0000000,10,1",
        ],
    )
    reqs, _ = replay_trace(TraceWorkload(path=str(f), format="azure"))
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 4.314579, 13.31941], abs=1e-6)
    assert [r.prompt_tokens for r in reqs] == [374, 396, 10]
    assert len({r.prompt[0].content_id for r in reqs}) == 3  # no prefix information: all unique


def test_azure_bad_rows(tmp_path: Path) -> None:
    header = "TIMESTAMP,ContextTokens,GeneratedTokens"
    f = write_lines(tmp_path / "a.csv", [header, "2023-11-16 18:15:46.68,374,44", "yesterday,1,1"])
    with pytest.raises(TraceError, match=r"a.csv, line 3: timestamp must look like"):
        replay_trace(TraceWorkload(path=str(f), format="azure"))
    f = write_lines(tmp_path / "b.csv", [header, "2023-11-16 18:15:46.68,374"])
    with pytest.raises(TraceError, match=r"b.csv, line 2: expected 3 fields"):
        replay_trace(TraceWorkload(path=str(f), format="azure"))
    f = write_lines(tmp_path / "c.csv", ["time,in,out", "1,2,3"])
    with pytest.raises(TraceError, match=r"c.csv, line 1: missing column\(s\) TIMESTAMP"):
        replay_trace(TraceWorkload(path=str(f), format="azure"))


def test_burstgpt_drops_failed_and_filtered_rows(tmp_path: Path) -> None:
    f = write_lines(
        tmp_path / "b.csv",
        [
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
            "5,ChatGPT,472,18,490,Conversation log",
            "45,GPT-4,1087,0,1087,Conversation log",
            "47,ChatGPT,417,30,447,API log",
            "50,GPT-4,100,20,120,API log",
        ],
    )
    reqs, report = replay_trace(TraceWorkload(path=str(f), format="burstgpt", model_filter="ChatGPT"))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [
        (0.0, 472, 18),
        (42.0, 417, 30),
    ]
    assert report.num_rows == 4 and report.dropped_by_reason == {"other_model": 2}
    reqs, report = replay_trace(TraceWorkload(path=str(f), format="burstgpt"))
    assert len(reqs) == 3 and report.dropped_by_reason == {"zero_output": 1}


def test_generic_csv_and_jsonl_with_column_mapping(tmp_path: Path) -> None:
    cols = {
        "timestamp": "t_ms",
        "prompt_tokens": "in",
        "output_tokens": "out",
        "tenant": "user",
        "priority": "prio",
    }
    f = write_lines(tmp_path / "g.csv", ["t_ms,in,out,user,prio", "1000,5,6,alice,1", "1250,7,8,bob,0"])
    reqs, _ = replay_trace(TraceWorkload(path=str(f), format="csv", columns=cols, timestamp_unit="ms"))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.tenant, r.priority) for r in reqs] == [
        (0.0, 5, 6, "alice", 1),
        (0.25, 7, 8, "bob", 0),
    ]
    cols = {"timestamp": "t", "prompt_tokens": "n", "output_tokens": "m", "hash_ids": "blocks"}
    f = write_lines(
        tmp_path / "g.jsonl",
        [
            json.dumps({"t": 2, "n": 20, "m": 1, "blocks": [3, 4]}),
            json.dumps({"t": 1, "n": 8, "m": 2, "blocks": [3]}),
        ],
    )
    reqs, _ = replay_trace(TraceWorkload(path=str(f), format="jsonl", columns=cols, hash_block_tokens=16))
    # Sorted by arrival: the row at t=1 comes first.
    assert [r.prompt for r in reqs] == [(Segment(3, 8),), (Segment(3, 16), Segment(4, 4))]
    g = write_lines(tmp_path / "h.csv", ["t_ms,in", "1,2"])
    with pytest.raises(TraceError, match="missing column"):
        replay_trace(
            TraceWorkload(
                path=str(g),
                format="csv",
                columns={"timestamp": "t_ms", "prompt_tokens": "in", "output_tokens": "out"},
            )
        )


# --------------------------------------------------------------------------- real traces


def _azure_own_stats(path: Path) -> dict[str, tuple[float, float]]:
    """Means and p99s computed straight from the CSV, independently of the loader."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = {}
    for col in ("ContextTokens", "GeneratedTokens"):
        x = np.array([int(r[col]) for r in rows], dtype=float)
        out[col] = (x.mean(), float(np.percentile(x, 99)))
    return out


@needs_traces
@pytest.mark.parametrize(("name", "rows"), [("conv", 19_366), ("code", 8_819)])
def test_azure_replay_reproduces_the_trace_statistics(name: str, rows: int) -> None:
    path = TRACES / "azure" / f"AzureLLMInferenceTrace_{name}.csv"
    reqs, report = replay_trace(TraceWorkload(path=str(path), format="azure"))
    assert report.num_rows == rows and report.num_requests == rows and report.num_dropped == 0
    own = _azure_own_stats(path)
    for col, values in (
        ("ContextTokens", [r.prompt_tokens for r in reqs]),
        ("GeneratedTokens", [r.output_tokens for r in reqs]),
    ):
        x = np.asarray(values, dtype=float)
        mean, p99 = own[col]
        assert x.mean() == pytest.approx(mean, rel=0.01)
        assert float(np.percentile(x, 99)) == pytest.approx(p99, rel=0.01)
    # README: both span about one hour.
    assert 3000 < report.duration_s < 3700


@needs_traces
@pytest.mark.parametrize(
    ("name", "rows", "mean_in", "mean_out"),
    [("conversation", 12_031, 12_035, 343), ("synthetic", 3_993, 15_325, 149)],
)
def test_mooncake_replay_counts_and_means(name: str, rows: int, mean_in: int, mean_out: int) -> None:
    reqs, report = replay_trace(
        TraceWorkload(path=str(TRACES / "mooncake" / f"{name}_trace.jsonl"), format="mooncake")
    )
    assert report.num_rows == rows and report.num_requests == rows
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(mean_in, abs=0.5)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(mean_out, abs=0.5)
    assert all(len(r.prompt) == math.ceil(r.prompt_tokens / 512) for r in reqs)


def test_trace_stats_cli(mooncake: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace-stats", str(mooncake), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["num_rows"] == 4 and stats["num_requests"] == 3
    assert stats["dropped_by_reason"] == {"zero_output": 1}
    assert stats["rate_per_s"] == pytest.approx(2 / 3.0)
    assert stats["prompt_tokens"]["max"] == 1300
