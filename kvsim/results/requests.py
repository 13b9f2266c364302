"""The request table of a run: one row per request, from the engine's request states (their
`kvsim.core.request_state.RequestMetrics`) and the cluster layer's ledger
(`kvsim.results.ledger`). The columns are `kvsim.results.result.REQUEST_COLUMNS`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from kvsim.core.request_state import Request, Status
from kvsim.results.ledger import RequestLedger
from kvsim.results.result import REQUEST_COLUMNS


def requests_frame(
    reqs: list[Request], names: list[str], ledger: RequestLedger | None = None
) -> pd.DataFrame:
    """The request table (`kvsim.results.result.REQUEST_COLUMNS`), ordered by request id.

    ``ledger`` holds the cluster layer's columns for ``reqs`` in the same order (None: a
    table without rejections, router expectations, tiers or transfers).
    """
    if ledger is None:
        ledger = RequestLedger({r.request_id: r for r in reqs})

    def col(attr: str, dtype: Any) -> np.ndarray:
        return np.asarray([getattr(r, attr) for r in reqs], dtype=dtype)

    metrics = [r.metrics for r in reqs]

    def metric(attr: str, dtype: Any) -> np.ndarray:
        return np.asarray([getattr(m, attr) for m in metrics], dtype=dtype)

    arrival = col("arrival_s", np.float64)
    first_sched = metric("first_scheduled_s", np.float64)
    first_tok = metric("first_token_s", np.float64)
    finish = metric("finish_s", np.float64)
    out_tokens = col("num_output_tokens", np.int64)
    finished = np.asarray([r.status is Status.FINISHED for r in reqs], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (finish - first_tok) / np.maximum(out_tokens - 1, 1), math.nan)
    tpot = np.where(finished, tpot, math.nan)
    replica_names = np.asarray([*names, ""], dtype=object)
    engine_columns = {
        "request_id": col("request_id", np.int64),
        "replica_id": replica_names[col("replica", np.int64)],
        "prefill_replica_id": replica_names[col("prefill_replica", np.int64)],
        "tenant": pd.Series([r.spec.tenant for r in reqs], dtype=object),
        "priority": np.asarray([r.spec.priority for r in reqs], dtype=np.int64),
        "arrival_s": arrival,
        "first_scheduled_s": first_sched,
        "first_token_s": first_tok,
        "decode_scheduled_s": metric("decode_scheduled_s", np.float64),
        "finish_s": finish,
        "queueing_s": first_sched - arrival,
        "ttft_s": first_tok - arrival,
        "tpot_s": tpot,
        "max_itl_s": metric("max_itl_s", np.float64),
        "e2e_s": np.where(finished, finish - arrival, math.nan),
        "prompt_tokens": col("prompt_tokens", np.int64),
        "output_tokens": out_tokens,
        "prefix_cache_hits_tokens": metric("prefix_cache_hits_tokens", np.int64),
        "recompute_hits_tokens": metric("recompute_hits_tokens", np.int64),
        "offload_hits_tokens": metric("offload_hits_tokens", np.int64),
        "evicted_miss_tokens": metric("evicted_miss_tokens", np.int64),
        "num_preemptions": metric("num_preemptions", np.int64),
        "num_swaps": metric("num_swaps", np.int64),
        "finished": finished,
        "rejected": np.asarray([r.status is Status.REJECTED for r in reqs], dtype=bool),
    }
    df = pd.DataFrame({**engine_columns, **_ledger_columns(ledger)})
    if not df["request_id"].is_monotonic_increasing:
        df = df.sort_values("request_id", kind="stable", ignore_index=True)
    assert list(df.columns) == list(REQUEST_COLUMNS)
    return df


def _ledger_columns(ledger: RequestLedger) -> dict[str, Any]:
    """The request table's columns the cluster layer keeps (`kvsim.results.ledger`)."""
    return {
        "reject_reason": pd.Series(ledger.reject_reason, dtype=object),
        "router_expected_hits_tokens": ledger.expected_hits_tokens,
        "dram_hits_tokens": ledger.tier_hits_tokens["dram"],
        "nvme_hits_tokens": ledger.tier_hits_tokens["nvme"],
        "shared_pool_hits_tokens": ledger.tier_hits_tokens["shared_pool"],
        "kv_transfer_s": ledger.kv_transfer_s,
        "kv_transfer_queueing_s": ledger.kv_transfer_queueing_s,
        "warmup": ledger.warmup,
        "client_queue_s": ledger.client_queue_s,
    }
