"""Collects per-iteration rows and events as flat columns, turned into DataFrames at the end.

Appending to Python lists is the cheapest thing the hot loop can do; decode runs append
whole numpy arrays at once. The recorder is given plain numbers and scheduler outputs;
it never looks into a scheduler or a block pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.core.outcome import EventKind, SchedulerOutput
from kvsim.result import EVENT_COLUMNS, ITERATION_COLUMNS

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
        self._cols: dict[str, list[Any]] = {f: [] for f in _ITER_FIELDS}
        self._events: list[tuple[float, int, str, int, int, float]] = []

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
        c["replica"].extend([replica] * m)
        c["start_s"].append(start_s)
        c["start_s"].extend(ends[:-1].tolist())
        c["duration_s"].extend(durations.tolist())
        c["batch_size"].extend([batch_size] * m)
        c["num_prefill_seqs"].extend([0] * m)
        c["prefill_tokens"].extend([0] * m)
        c["decode_tokens"].extend([batch_size] * m)
        if isinstance(num_waiting, np.ndarray):  # arrivals that rode along the run
            c["num_waiting"].extend(num_waiting.tolist())
        else:
            c["num_waiting"].extend([num_waiting] * m)
        used = kv_blocks_used + new_blocks
        c["kv_blocks_used"].extend(used.tolist())
        c["kv_blocks_cached"].extend((kv_blocks_cached - evicted).tolist())
        c["kv_blocks_free"].extend((self.total_blocks[replica] - used).tolist())
        stored0 = kv_tokens_stored
        c["kv_tokens_stored"].extend(range(stored0 + batch_size, stored0 + batch_size * (m + 1), batch_size))

    def add_event(
        self, time_s: float, replica: int, kind: EventKind, request_id: int, num_blocks: int, num_bytes: float
    ) -> None:
        self._events.append((time_s, replica, kind.value, request_id, num_blocks, num_bytes))

    def iterations_frame(self) -> pd.DataFrame:
        """The iteration table, all replicas, ordered by start time (then replica)."""
        c = self._cols
        replica = np.asarray(c["replica"], dtype=np.int64)
        names = np.asarray(self.replica_names, dtype=object)
        df = pd.DataFrame(
            {
                "replica_id": names[replica] if len(replica) else np.asarray([], dtype=object),
                "start_s": np.asarray(c["start_s"], dtype=np.float64),
                "duration_s": np.asarray(c["duration_s"], dtype=np.float64),
                "batch_size": np.asarray(c["batch_size"], dtype=np.int64),
                "num_prefill_seqs": np.asarray(c["num_prefill_seqs"], dtype=np.int64),
                "prefill_tokens": np.asarray(c["prefill_tokens"], dtype=np.int64),
                "decode_tokens": np.asarray(c["decode_tokens"], dtype=np.int64),
                "num_waiting": np.asarray(c["num_waiting"], dtype=np.int64),
                "kv_blocks_used": np.asarray(c["kv_blocks_used"], dtype=np.int64),
                "kv_blocks_cached": np.asarray(c["kv_blocks_cached"], dtype=np.int64),
                "kv_blocks_free": np.asarray(c["kv_blocks_free"], dtype=np.int64),
            }
        )
        blocks = np.asarray(self.total_blocks, dtype=np.float64)[replica]
        slots = blocks * np.asarray(self.block_sizes, dtype=np.float64)[replica]
        df["kv_usage"] = df["kv_blocks_used"].to_numpy(dtype=np.float64) / blocks
        df["kv_tokens_stored"] = np.asarray(c["kv_tokens_stored"], dtype=np.int64)
        df["kv_token_usage"] = df["kv_tokens_stored"].to_numpy(dtype=np.float64) / slots
        if len(self.replica_names) > 1:
            df = df.sort_values(["start_s", "replica_id"], kind="stable", ignore_index=True)
        assert list(df.columns) == list(ITERATION_COLUMNS)
        return df

    def events_frame(self) -> pd.DataFrame:
        ev = self._events
        names = [*self.replica_names, ""]  # replica -1: the cluster (admission), no replica
        df = pd.DataFrame(
            {
                "time_s": np.asarray([e[0] for e in ev], dtype=np.float64),
                "replica_id": pd.Series([names[e[1]] for e in ev], dtype=object),
                "kind": pd.Series([e[2] for e in ev], dtype=object),
                "request_id": np.asarray([e[3] for e in ev], dtype=np.int64),
                "num_blocks": np.asarray([e[4] for e in ev], dtype=np.int64),
                "num_bytes": np.asarray([e[5] for e in ev], dtype=np.float64),
            }
        )
        # Rejections are logged when they happen, a decode run's evictions when it is
        # committed: order by time (stable, so ties keep the order of recording).
        df = df.sort_values("time_s", kind="stable", ignore_index=True)
        assert list(df.columns) == list(EVENT_COLUMNS)
        return df
