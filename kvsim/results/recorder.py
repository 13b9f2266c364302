"""Collects per-iteration rows and events as flat columns, turned into DataFrames at the end.

Iteration columns are typed arrays (`array.array`, 8 bytes a value, no Python object per
value): appending to them is as cheap as appending to a list, and decode runs append whole
numpy arrays as raw bytes. The recorder is given plain numbers and scheduler outputs; it
never looks into a scheduler or a block pool.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.core.outcome import EventKind, SchedulerOutput
from kvsim.results.result import EVENT_COLUMNS, ITERATION_COLUMNS

_ITER_FIELDS = (
    "replica",
    "start_s",
    "duration_s",
    "batch_size",
    "num_prefill_seqs",
    "prefill_tokens",
    "decode_tokens",
    "num_waiting",
    "kv_blocks_used",
    "kv_blocks_cached",
    "kv_blocks_free",
    "kv_tokens_stored",
)
_FLOAT_FIELDS = frozenset({"start_s", "duration_s"})
_KINDS = tuple(EventKind)
_KIND_CODE = {kind: code for code, kind in enumerate(_KINDS)}


#: Decode runs of at most this many iterations are recorded a row at a time.
_SHORT_RUN = 8


def _as_bytes(values: np.ndarray, dtype: type) -> bytes:
    return np.ascontiguousarray(values, dtype=dtype).tobytes()


class Recorder:
    """Flat column store for iterations and events of all replicas.

    ``total_blocks`` and ``block_sizes`` (one per replica) turn block counts into usages.
    """

    def __init__(
        self, replica_names: Sequence[str], total_blocks: Sequence[int], block_sizes: Sequence[int]
    ) -> None:
        if not len(replica_names) == len(total_blocks) == len(block_sizes):
            raise ValueError("one name, block count and block size per replica")
        self.replica_names = list(replica_names)
        self.total_blocks = list(total_blocks)
        self.block_sizes = list(block_sizes)
        self._cols: dict[str, Any] = {  # array[int] or array[float] by field
            f: array("d" if f in _FLOAT_FIELDS else "q") for f in _ITER_FIELDS
        }
        # Events as columns too: time, replica, kind (index in _KINDS), request, blocks, bytes.
        self._ev_time = array("d")
        self._ev_replica = array("q")
        self._ev_kind = array("b")
        self._ev_request = array("q")
        self._ev_blocks = array("q")
        self._ev_bytes = array("d")

    def add_iteration(
        self,
        replica: int,
        start_s: float,
        duration_s: float,
        out: SchedulerOutput,
        *,
        num_waiting: int,
        kv_blocks_used: int,
        kv_blocks_cached: int,
        kv_tokens_stored: int,
    ) -> None:
        """One stepped iteration; the KV figures are those once it is scheduled."""
        c = self._cols
        c["replica"].append(replica)
        c["start_s"].append(start_s)
        c["duration_s"].append(duration_s)
        c["batch_size"].append(len(out.tokens) + out.num_lazy_decodes)
        c["num_prefill_seqs"].append(out.num_prefill_seqs)
        c["prefill_tokens"].append(out.prefill_tokens)
        c["decode_tokens"].append(out.decode_tokens)
        c["num_waiting"].append(num_waiting)
        c["kv_blocks_used"].append(kv_blocks_used)
        c["kv_blocks_cached"].append(kv_blocks_cached)
        c["kv_blocks_free"].append(self.total_blocks[replica] - kv_blocks_used)
        c["kv_tokens_stored"].append(kv_tokens_stored)

    def add_decode_run(
        self,
        replica: int,
        start_s: float,
        ends: np.ndarray,
        durations: np.ndarray,
        batch_size: int,
        *,
        num_waiting: int | np.ndarray,
        kv_blocks_used: int,
        kv_blocks_cached: int,
        kv_tokens_stored: int,
        new_blocks: np.ndarray,
        evicted: np.ndarray,
    ) -> None:
        """A fast-forwarded decode run: ``len(ends)`` iterations of ``batch_size`` decodes.

        The KV figures are those before the run's first iteration was scheduled;
        ``num_waiting`` is one count for all, or one per iteration;
        ``new_blocks`` / ``evicted`` are cumulative per iteration.
        """
        c = self._cols
        m = len(ends)
        if m <= _SHORT_RUN:
            self._add_short_run(
                replica, start_s, ends.tolist(), durations.tolist(), batch_size,
                num_waiting.tolist() if isinstance(num_waiting, np.ndarray) else int(num_waiting),
                kv_blocks_used, kv_blocks_cached, kv_tokens_stored, new_blocks.tolist(), evicted.tolist(),
            )  # fmt: skip
            return
        i64, f64 = np.int64, np.float64
        c["replica"].frombytes(_as_bytes(np.full(m, replica), i64))
        c["start_s"].append(start_s)
        c["start_s"].frombytes(_as_bytes(ends[:-1], f64))
        c["duration_s"].frombytes(_as_bytes(durations, f64))
        batch = _as_bytes(np.full(m, batch_size), i64)
        zeros = bytes(8 * m)
        c["batch_size"].frombytes(batch)
        c["num_prefill_seqs"].frombytes(zeros)
        c["prefill_tokens"].frombytes(zeros)
        c["decode_tokens"].frombytes(batch)
        c["num_waiting"].frombytes(_as_bytes(np.broadcast_to(num_waiting, m), i64))  # per step if riders
        used = kv_blocks_used + new_blocks
        c["kv_blocks_used"].frombytes(_as_bytes(used, i64))
        c["kv_blocks_cached"].frombytes(_as_bytes(kv_blocks_cached - evicted, i64))
        c["kv_blocks_free"].frombytes(_as_bytes(self.total_blocks[replica] - used, i64))
        stored = kv_tokens_stored + batch_size * np.arange(1, m + 1, dtype=i64)
        c["kv_tokens_stored"].frombytes(_as_bytes(stored, i64))

    def _add_short_run(
        self,
        replica: int,
        start_s: float,
        ends: list[float],
        durations: list[float],
        batch_size: int,
        num_waiting: int | list[int],
        kv_blocks_used: int,
        kv_blocks_cached: int,
        kv_tokens_stored: int,
        new_blocks: list[int],
        evicted: list[int],
    ) -> None:
        """`add_decode_run` a row at a time: for the few iterations most runs have (an
        arrival every other iteration cuts them), cheaper than a dozen array conversions."""
        c = self._cols
        free = self.total_blocks[replica] - kv_blocks_used
        starts = [start_s, *ends[:-1]]
        for j in range(len(ends)):
            c["replica"].append(replica)
            c["start_s"].append(starts[j])
            c["duration_s"].append(durations[j])
            c["batch_size"].append(batch_size)
            c["num_prefill_seqs"].append(0)
            c["prefill_tokens"].append(0)
            c["decode_tokens"].append(batch_size)
            c["num_waiting"].append(num_waiting if isinstance(num_waiting, int) else num_waiting[j])
            c["kv_blocks_used"].append(kv_blocks_used + new_blocks[j])
            c["kv_blocks_cached"].append(kv_blocks_cached - evicted[j])
            c["kv_blocks_free"].append(free - new_blocks[j])
            c["kv_tokens_stored"].append(kv_tokens_stored + batch_size * (j + 1))

    def add_event(
        self, time_s: float, replica: int, kind: EventKind, request_id: int, num_blocks: int, num_bytes: float
    ) -> None:
        self._ev_time.append(time_s)
        self._ev_replica.append(replica)
        self._ev_kind.append(_KIND_CODE[kind])
        self._ev_request.append(request_id)
        self._ev_blocks.append(num_blocks)
        self._ev_bytes.append(num_bytes)

    def iterations_frame(self) -> pd.DataFrame:
        """The iteration table, all replicas, ordered by start time (then replica)."""
        c = self._cols
        replica = np.array(c["replica"], dtype=np.int64)
        names = np.asarray(self.replica_names, dtype=object)
        df = pd.DataFrame(
            {
                "replica_id": names[replica] if len(replica) else np.asarray([], dtype=object),
                "start_s": np.array(c["start_s"], dtype=np.float64),
                "duration_s": np.array(c["duration_s"], dtype=np.float64),
                "batch_size": np.array(c["batch_size"], dtype=np.int64),
                "num_prefill_seqs": np.array(c["num_prefill_seqs"], dtype=np.int64),
                "prefill_tokens": np.array(c["prefill_tokens"], dtype=np.int64),
                "decode_tokens": np.array(c["decode_tokens"], dtype=np.int64),
                "num_waiting": np.array(c["num_waiting"], dtype=np.int64),
                "kv_blocks_used": np.array(c["kv_blocks_used"], dtype=np.int64),
                "kv_blocks_cached": np.array(c["kv_blocks_cached"], dtype=np.int64),
                "kv_blocks_free": np.array(c["kv_blocks_free"], dtype=np.int64),
            }
        )
        blocks = np.asarray(self.total_blocks, dtype=np.float64)[replica]
        slots = blocks * np.asarray(self.block_sizes, dtype=np.float64)[replica]
        df["kv_usage"] = df["kv_blocks_used"].to_numpy(dtype=np.float64) / blocks
        df["kv_tokens_stored"] = np.array(c["kv_tokens_stored"], dtype=np.int64)
        df["kv_token_usage"] = df["kv_tokens_stored"].to_numpy(dtype=np.float64) / slots
        if len(self.replica_names) > 1:
            df = df.sort_values(["start_s", "replica_id"], kind="stable", ignore_index=True)
        assert list(df.columns) == list(ITERATION_COLUMNS)
        return df

    def events_frame(self) -> pd.DataFrame:
        names = np.asarray([*self.replica_names, ""], dtype=object)  # -1: the cluster (admission)
        kinds = np.asarray([k.value for k in _KINDS], dtype=object)
        df = pd.DataFrame(
            {
                "time_s": np.array(self._ev_time, dtype=np.float64),
                "replica_id": names[np.array(self._ev_replica, dtype=np.int64)],
                "kind": kinds[np.array(self._ev_kind, dtype=np.int64)],
                "request_id": np.array(self._ev_request, dtype=np.int64),
                "num_blocks": np.array(self._ev_blocks, dtype=np.int64),
                "num_bytes": np.array(self._ev_bytes, dtype=np.float64),
            }
        )
        # Rejections are logged when they happen, a decode run's evictions when it is
        # committed: order by time (stable, so ties keep the order of recording).
        df = df.sort_values("time_s", kind="stable", ignore_index=True)
        assert list(df.columns) == list(EVENT_COLUMNS)
        return df
