"""The recorder: iteration rows, decode runs as many rows at once, the event log."""

from __future__ import annotations

import numpy as np
import pytest
from pandas.testing import assert_frame_equal

from kvsim.core.outcome import EventKind, SchedulerOutput
from kvsim.cost.base import Batch
from kvsim.results.recorder import Recorder
from kvsim.results.result import EVENT_COLUMNS, ITERATION_COLUMNS


def decode_output(batch_size: int) -> SchedulerOutput:
    return SchedulerOutput(
        tokens={object(): 0 for _ in range(batch_size)}, batch=Batch(), decode_tokens=batch_size
    )  # type: ignore[misc]


def test_an_iteration_row_holds_the_given_numbers_and_derived_usages():
    rec = Recorder(["r-0"], total_blocks=[10], block_sizes=[4])
    out = SchedulerOutput(
        tokens={object(): 5, object(): 0},  # type: ignore[dict-item]
        batch=Batch(),
        num_prefill_seqs=1,
        prefill_tokens=5,
        decode_tokens=1,
    )
    rec.add_iteration(
        0, 1.5, 0.25, out, num_waiting=3, kv_blocks_used=4, kv_blocks_cached=2, kv_tokens_stored=14
    )
    df = rec.iterations_frame()
    assert list(df.columns) == list(ITERATION_COLUMNS)
    row = df.iloc[0].to_dict()
    assert row == {
        "replica_id": "r-0",
        "start_s": 1.5,
        "duration_s": 0.25,
        "batch_size": 2,
        "num_prefill_seqs": 1,
        "prefill_tokens": 5,
        "decode_tokens": 1,
        "num_waiting": 3,
        "kv_blocks_used": 4,
        "kv_blocks_cached": 2,
        "kv_blocks_free": 6,
        "kv_usage": 0.4,
        "kv_tokens_stored": 14,
        "kv_token_usage": 14 / 40,
    }


def test_a_decode_run_records_exactly_the_rows_stepping_would():
    # 3 iterations of 2 decodes from t=1: the second allocates one block, the third evicts one.
    ends = np.array([1.1, 1.2, 1.3])
    durations = np.diff(np.concatenate(([1.0], ends)))
    new_blocks, evicted = np.array([0, 1, 1]), np.array([0, 0, 1])  # cumulative
    run = Recorder(["r-0"], [10], [4])
    run.add_decode_run(
        0, 1.0, ends, durations, 2,
        num_waiting=1, kv_blocks_used=5, kv_blocks_cached=3, kv_tokens_stored=20,
        new_blocks=new_blocks, evicted=evicted,
    )  # fmt: skip
    steps = Recorder(["r-0"], [10], [4])
    starts = [1.0, 1.1, 1.2]
    for j in range(3):
        steps.add_iteration(
            0, starts[j], float(durations[j]), decode_output(2),
            num_waiting=1, kv_blocks_used=5 + int(new_blocks[j]), kv_blocks_cached=3 - int(evicted[j]),
            kv_tokens_stored=20 + 2 * (j + 1),
        )  # fmt: skip
    assert_frame_equal(run.iterations_frame(), steps.iterations_frame(), check_exact=True)


def test_iterations_of_several_replicas_are_ordered_by_start_then_replica():
    rec = Recorder(["a-0", "a-1"], [10, 20], [4, 8])
    out = decode_output(1)
    kv = {"num_waiting": 0, "kv_blocks_used": 2, "kv_blocks_cached": 0, "kv_tokens_stored": 1}
    rec.add_iteration(1, 0.0, 0.1, out, **kv)
    rec.add_iteration(0, 0.5, 0.1, out, **kv)
    rec.add_iteration(0, 0.0, 0.1, out, **kv)
    df = rec.iterations_frame()
    assert list(zip(df.start_s, df.replica_id, strict=True)) == [(0.0, "a-0"), (0.0, "a-1"), (0.5, "a-0")]
    assert list(df.kv_usage) == [0.2, 0.1, 0.2]  # per-replica pool sizes
    assert list(df.kv_token_usage) == [1 / 40, 1 / 160, 1 / 40]


def test_events_are_ordered_by_time_keeping_the_recording_order_of_ties():
    rec = Recorder(["r-0"], [10], [4])
    rec.add_event(2.0, 0, EventKind.EVICT, -1, 3, 300.0)
    rec.add_event(1.0, 0, EventKind.PREEMPT_RECOMPUTE, 7, 2, 200.0)
    rec.add_event(1.0, 0, EventKind.SWAP_OUT, 8, 1, 100.0)
    df = rec.events_frame()
    assert list(df.columns) == list(EVENT_COLUMNS)
    assert list(df.kind) == ["preempt_recompute", "swap_out", "evict"]
    assert all(type(k) is str for k in df.kind)  # plain strings, not enum members, in the table
    assert list(df.request_id) == [7, 8, -1]


def test_recorder_needs_one_size_per_replica():
    with pytest.raises(ValueError, match="one name, block count and block size per replica"):
        Recorder(["a", "b"], [10], [4, 4])
