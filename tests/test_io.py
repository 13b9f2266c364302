"""Saving and loading result folders: the five files, NaN as null, atomic replacement."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REQUIRED_SUMMARY_KEYS

import kvsim
from kvsim.core.outcome import CacheStats
from kvsim.results.io import (
    PARQUET_ROWS_PER_WRITE,
    RESULT_FILES,
    ResultDirError,
    json_safe,
    load_result,
    save_result,
    summary_to_json,
    write_parquet,
)
from kvsim.results.result import EVENT_COLUMNS, ITERATION_COLUMNS, REQUEST_COLUMNS, Result, summarize


def small_result(num_requests: int = 3) -> Result:
    """A hand-made Result: request i arrives at i s, first token 0.1 s later, 11 tokens at 10 ms.

    The last request never finishes (NaN latencies), so the summary holds NaN-free
    percentiles but the tables hold NaN.
    """
    scenario = kvsim.load_scenario(None, [f"workload.num_requests={num_requests}", "seed=7"])
    ids = np.arange(num_requests)
    arrival = ids.astype(float)
    finished = ids < num_requests - 1
    first_token = np.where(finished, arrival + 0.1, np.nan)
    finish = np.where(finished, first_token + 10 * 0.01, np.nan)
    requests = pd.DataFrame(
        {
            "request_id": ids,
            "replica_id": ["replica-0"] * num_requests,
            "prefill_replica_id": [""] * num_requests,
            "tenant": ["default"] * num_requests,
            "priority": np.zeros(num_requests, dtype=np.int64),
            "arrival_s": arrival,
            "first_scheduled_s": arrival,
            "first_token_s": first_token,
            "decode_scheduled_s": np.full(num_requests, np.nan),
            "finish_s": finish,
            "queueing_s": np.zeros(num_requests),
            "ttft_s": first_token - arrival,
            "tpot_s": np.where(finished, 0.01, np.nan),
            "max_itl_s": np.where(finished, 0.01, np.nan),
            "e2e_s": finish - arrival,
            "prompt_tokens": np.full(num_requests, 640, dtype=np.int64),
            "output_tokens": np.where(finished, 11, 0).astype(np.int64),
            "prefix_cache_hits_tokens": np.where(ids > 0, 512, 0).astype(np.int64),
            "recompute_hits_tokens": np.zeros(num_requests, dtype=np.int64),
            "offload_hits_tokens": np.zeros(num_requests, dtype=np.int64),
            "evicted_miss_tokens": np.zeros(num_requests, dtype=np.int64),
            "num_preemptions": np.zeros(num_requests, dtype=np.int64),
            "num_swaps": np.zeros(num_requests, dtype=np.int64),
            "finished": finished,
            "rejected": np.zeros(num_requests, dtype=bool),
            "reject_reason": [""] * num_requests,
            "router_expected_hits_tokens": np.full(num_requests, -1, dtype=np.int64),
            "dram_hits_tokens": np.zeros(num_requests, dtype=np.int64),
            "nvme_hits_tokens": np.zeros(num_requests, dtype=np.int64),
            "shared_pool_hits_tokens": np.zeros(num_requests, dtype=np.int64),
            "kv_transfer_s": np.full(num_requests, np.nan),
            "kv_transfer_queueing_s": np.full(num_requests, np.nan),
            "warmup": np.zeros(num_requests, dtype=bool),
            "client_queue_s": np.zeros(num_requests),
        }
    )
    iterations = pd.DataFrame(
        {
            "replica_id": ["replica-0", "replica-0"],
            "start_s": [0.0, 0.1],
            "duration_s": [0.1, 0.01],
            "batch_size": [1, 1],
            "num_prefill_seqs": [1, 0],
            "prefill_tokens": [640, 0],
            "decode_tokens": [0, 1],
            "num_waiting": [0, 0],
            "kv_blocks_used": [40, 41],
            "kv_blocks_cached": [0, 0],
            "kv_blocks_free": [60, 59],
            "kv_usage": [0.40, 0.41],
            "kv_tokens_stored": [640, 641],
            "kv_token_usage": [640 / 1600, 641 / 1600],
        }
    )
    events = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(EVENT_COLUMNS, _EVENT_DTYPES, strict=True)})
    summary = summarize(
        scenario,
        requests,
        iterations,
        events,
        cache=CacheStats(
            prefix_cache_queries_tokens=640 * num_requests, prefix_cache_hits_tokens=512 * (num_requests - 1)
        ),
        total_kv_blocks=100,
        sim_time_s=float(num_requests),
    )
    return Result(scenario=scenario, requests=requests, iterations=iterations, events=events, summary=summary)


_EVENT_DTYPES = ("float64", "str", "str", "int64", "int64", "int64")


def test_small_result_has_the_documented_columns() -> None:
    result = small_result()
    assert list(result.requests.columns) == list(REQUEST_COLUMNS)
    assert list(result.iterations.columns) == list(ITERATION_COLUMNS)
    assert list(result.events.columns) == list(EVENT_COLUMNS)


def test_save_writes_exactly_the_five_files(tmp_path: Path) -> None:
    out = save_result(small_result(), tmp_path / "run")
    assert out == tmp_path / "run"
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    # Nothing else left beside it (no temporary folders).
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_round_trip_preserves_tables_summary_and_scenario(tmp_path: Path) -> None:
    result = small_result()
    loaded = load_result(save_result(result, tmp_path / "run"))
    pd.testing.assert_frame_equal(loaded.requests, result.requests)
    pd.testing.assert_frame_equal(loaded.iterations, result.iterations)
    assert list(loaded.events.columns) == list(EVENT_COLUMNS)
    assert len(loaded.events) == 0
    assert loaded.scenario == result.scenario
    assert loaded.scenario.workload.num_requests == 3
    assert loaded.summary.keys() == result.summary.keys()
    for key, value in result.summary.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(loaded.summary[key]), key
        else:
            assert loaded.summary[key] == value, key


def test_numeric_columns_keep_their_types(tmp_path: Path) -> None:
    loaded = load_result(save_result(small_result(), tmp_path / "run"))
    assert loaded.requests["prompt_tokens"].dtype == np.int64
    assert loaded.requests["finished"].dtype == bool
    assert loaded.requests["ttft_s"].dtype == np.float64
    # The unfinished request keeps NaN latencies, not None.
    assert math.isnan(loaded.requests["ttft_s"].iloc[-1])
    # No pandas index was written as an extra column.
    assert "__index_level_0__" not in loaded.requests.columns


def test_summary_json_has_required_keys_and_null_for_nan(tmp_path: Path) -> None:
    result = small_result()
    summary = dict(result.summary, ttft_p99_s=float("nan"), kv_usage_peak=float("inf"))
    out = save_result(
        Result(result.scenario, result.requests, result.iterations, result.events, summary), tmp_path / "r"
    )
    text = (out / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    for key in REQUIRED_SUMMARY_KEYS:
        assert key in data, key
    assert data["ttft_p99_s"] is None
    assert data["kv_usage_peak"] is None
    # Hand-computed: 3 requests, 2 finished, TTFT 0.1 s each, 22 output tokens over 3 s.
    assert data["num_requests"] == 3
    assert data["num_finished"] == 2
    assert data["ttft_p50_s"] == pytest.approx(0.1)
    assert data["throughput_tokens_per_s"] == pytest.approx(22 / 3)
    assert data["prefix_cache_hit_rate"] == pytest.approx(1024 / 1920)


def test_json_safe_converts_numpy_and_non_finite() -> None:
    data = {"a": np.float64("nan"), "b": np.int64(3), "c": [float("-inf"), 1.5], "d": "x"}
    assert json_safe(data) == {"a": None, "b": 3, "c": [None, 1.5], "d": "x"}
    assert json.loads(summary_to_json({"x": float("nan")})) == {"x": None}


def test_existing_result_is_replaced_only_after_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    save_result(small_result(3), out)
    before = (out / "summary.json").read_text()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("kvsim.results.io.write_parquet", broken)
    with pytest.raises(OSError, match="disk full"):
        save_result(small_result(5), out)
    # The old result is untouched and no temporary folder is left behind.
    assert (out / "summary.json").read_text() == before
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]

    monkeypatch.undo()
    save_result(small_result(5), out)
    assert json.loads((out / "summary.json").read_text())["num_requests"] == 5
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_failed_first_save_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvsim.results.io, "dump_scenario", lambda scenario: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        save_result(small_result(), tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_refuses_to_replace_a_folder_that_is_not_a_result(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ResultDirError, match="holds files other than a kvsim result"):
        save_result(small_result(), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_overwrite_false_and_file_in_the_way(tmp_path: Path) -> None:
    out = save_result(small_result(), tmp_path / "run")
    with pytest.raises(ResultDirError, match="already exists"):
        save_result(small_result(), out, overwrite=False)
    (tmp_path / "file").write_text("")
    with pytest.raises(ResultDirError, match="is not a folder"):
        save_result(small_result(), tmp_path / "file")


def test_empty_folder_is_filled_and_parents_are_created(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    save_result(small_result(), tmp_path / "empty")
    save_result(small_result(), tmp_path / "a" / "b" / "c")
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == sorted(RESULT_FILES)
    assert sorted(p.name for p in (tmp_path / "a" / "b" / "c").iterdir()) == sorted(RESULT_FILES)


def test_load_errors_name_the_folder_and_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ResultDirError, match="no such result folder"):
        load_result(tmp_path / "missing")
    out = save_result(small_result(), tmp_path / "run")
    (out / "events.parquet").unlink()
    with pytest.raises(ResultDirError, match=r"run: not a kvsim result folder, missing events\.parquet"):
        load_result(out)
    out = save_result(small_result(), tmp_path / "run")
    (out / "summary.json").write_text("{not json")
    with pytest.raises(ResultDirError, match=r"summary\.json: not valid JSON"):
        load_result(out)
    (out / "summary.json").write_text("[1, 2]")
    with pytest.raises(ResultDirError, match=r"summary\.json: must hold a JSON object, got list"):
        load_result(out)
    out = save_result(small_result(), tmp_path / "run")
    (out / "scenario.yaml").write_text("seed: -1\n")
    with pytest.raises(ResultDirError, match=r"scenario\.yaml: invalid scenario\n  seed:"):
        load_result(out)


def test_docs_list_every_column_and_summary_key() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    for column in (*REQUEST_COLUMNS, *ITERATION_COLUMNS, *EVENT_COLUMNS):
        assert f"| `{column}` |" in doc, column
    for key in small_result().summary:
        stem, _, stat = key.removesuffix("_s").rpartition("_")
        is_latency = key.endswith("_s") and stat in ("mean", "p50", "p90", "p99")
        documented = f"`{stem}_STAT_s`" if is_latency else f"`{key}`"
        assert documented in doc, key
    for name in RESULT_FILES:
        assert f"── {name}" in doc, name


def test_round_trip_of_a_simulated_result_with_events(tmp_path: Path) -> None:
    # A 64-block pool under 40 requests forces evictions and preemptions into the event log.
    result = kvsim.run(
        None,
        overrides=["workload.num_requests=40", "replicas.0.engine.num_gpu_blocks_override=64"],
    )
    assert len(result.events) > 0
    loaded = load_result(save_result(result, tmp_path / "run"))
    for attr in ("requests", "iterations", "events"):
        before, after = getattr(result, attr), getattr(loaded, attr)
        # Text columns may come back as pandas' string dtype instead of object; values are equal.
        pd.testing.assert_frame_equal(after, before, check_dtype=False)
        for column in before.columns:
            if not pd.api.types.is_string_dtype(before[column]):
                assert after[column].dtype == before[column].dtype, (attr, column)
    assert loaded.scenario == result.scenario
    assert json.loads(summary_to_json(loaded.summary)) == json.loads(summary_to_json(result.summary))


@pytest.mark.parametrize("rows", [0, 1, PARQUET_ROWS_PER_WRITE, 2 * PARQUET_ROWS_PER_WRITE + 3])
def test_tables_are_written_a_slice_at_a_time_and_read_back_equal(tmp_path: Path, rows: int) -> None:
    # A column whose first slices hold only empty strings must keep its type across slices.
    reason = np.full(rows, "", dtype=object)
    reason[rows // 2 :] = "unschedulable"
    frame = pd.DataFrame(
        {
            "request_id": np.arange(rows, dtype=np.int64),
            "ttft_s": np.where(np.arange(rows) % 3 == 0, np.nan, np.arange(rows) / 7.0),
            "finished": np.arange(rows) % 2 == 0,
            "reject_reason": reason,
            "tenant": pd.Series(["a", "b"] * (rows // 2) + ["a"] * (rows % 2), dtype=object),
        }
    )
    write_parquet(frame, tmp_path / "t.parquet")
    frame.to_parquet(tmp_path / "whole.parquet", index=False)  # what it must equal
    back = pd.read_parquet(tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(back, pd.read_parquet(tmp_path / "whole.parquet"), check_exact=True)
    pd.testing.assert_frame_equal(back, frame, check_exact=True, check_dtype=False)  # strings: StringDtype
