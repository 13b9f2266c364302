"""Collects per-iteration rows and events as flat columns, turned into DataFrames at the end.

Appending to Python lists is the cheapest thing the hot loop can do; decode runs append
whole numpy arrays at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kvsim.result import EVENT_COLUMNS, ITERATION_COLUMNS

if TYPE_CHECKING:
    from kvsim.core.scheduler import Scheduler, SchedulerOutput

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
    """Flat column store for iterations and events of all replicas."""

    def __init__(self, replica_names: list[str]) -> None:
        self.replica_names = replica_names
        self._cols: dict[str, list] = {f: [] for f in _ITER_FIELDS}
        self._events: list[tuple[float, int, str, int, int, float]] = []

    @property
    def num_iterations(self) -> int:
        return len(self._cols["start_s"])

    def add_iteration(
        self, replica: int, start_s: float, duration_s: float, out: SchedulerOutput, sched: Scheduler
    ) -> None:
        c = self._cols
        pool = sched.pool
        free = pool.num_free_blocks
        c["replica"].append(replica)
        c["start_s"].append(start_s)
        c["duration_s"].append(duration_s)
        c["batch_size"].append(len(out.tokens))
        c["num_prefill_seqs"].append(out.num_prefill_seqs)
        c["prefill_tokens"].append(out.prefill_tokens)
        c["decode_tokens"].append(out.decode_tokens)
        c["num_waiting"].append(sched.num_waiting)
        c["kv_blocks_used"].append(pool.num_blocks - free)
        c["kv_blocks_cached"].append(pool.num_cached_free)
        c["kv_blocks_free"].append(free)
        c["kv_tokens_stored"].append(sched.num_tokens_stored + out.num_scheduled_tokens)

    def add_decode_run(
        self,
        replica: int,
        start_s: float,
        ends: np.ndarray,
        durations: np.ndarray,
        batch_size: int,
        num_waiting: int,
        used0: int,
        cached0: int,
        total: int,
        new_blocks: np.ndarray,
        evicted: np.ndarray,
        stored0: int,
    ) -> None:
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
        c["num_waiting"].extend([num_waiting] * m)
        used = used0 + new_blocks
        c["kv_blocks_used"].extend(used.tolist())
        c["kv_blocks_cached"].extend((cached0 - evicted).tolist())
        c["kv_blocks_free"].extend((total - used).tolist())
        c["kv_tokens_stored"].extend(range(stored0 + batch_size, stored0 + batch_size * (m + 1), batch_size))

    def add_event(
        self, time_s: float, replica: int, kind: str, request_id: int, num_blocks: int, num_bytes: float
    ) -> None:
        self._events.append((time_s, replica, kind, request_id, num_blocks, num_bytes))

    def iterations_frame(self, total_blocks: list[int], block_sizes: list[int]) -> pd.DataFrame:
        """The iteration table; ``total_blocks`` / ``block_sizes`` per replica give the usages."""
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
        blocks = np.asarray(total_blocks, dtype=np.float64)[replica]
        slots = blocks * np.asarray(block_sizes, dtype=np.float64)[replica]
        df["kv_usage"] = df["kv_blocks_used"].to_numpy(dtype=np.float64) / blocks
        df["kv_tokens_stored"] = np.asarray(c["kv_tokens_stored"], dtype=np.int64)
        df["kv_token_usage"] = df["kv_tokens_stored"].to_numpy(dtype=np.float64) / slots
        if len(self.replica_names) > 1:
            df = df.sort_values(["start_s", "replica_id"], kind="stable", ignore_index=True)
        assert list(df.columns) == list(ITERATION_COLUMNS)
        return df

    def events_frame(self) -> pd.DataFrame:
        ev = self._events
        names = self.replica_names
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
