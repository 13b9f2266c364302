"""KV and request timelines over a run's tables: what the cache and each request did, over time.

- `kv_blocks_over_time`         used / cached / free KV blocks summed over replicas
- `prefix_hit_rate_over_time`   prefix hit rate of the requests admitted in a sliding window
- `replica_series`              running / waiting requests and KV usage per replica (vLLM's metric names)
- `request_timeline`            one request's life as Gantt segments (queued, prefill chunks, decode, events)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kvsim.analysis.spikes import OFFLOAD_HIT_TOKENS, PREFIX_HIT_TOKENS, column, window_count
from kvsim.units import format_seconds


def kv_blocks_over_time(iterations: pd.DataFrame, *, num_points: int = 400) -> pd.DataFrame:
    """KV blocks used, cached (free but hittable) and free-and-empty, summed over replicas.

    Each replica's state holds from the start of one iteration to the start of its next;
    the sums are taken on a grid of ``num_points`` times (or at every iteration start when
    there is one replica and fewer iterations). Columns: ``time_s``, ``used``, ``cached``,
    ``empty`` (free minus cached) and ``total``.
    """
    cols = ["time_s", "used", "cached", "empty", "total"]
    if iterations.empty:
        return pd.DataFrame(columns=cols)
    it = iterations.sort_values("start_s", kind="stable")
    replicas = list(dict.fromkeys(it["replica_id"]))
    if len(replicas) == 1 and len(it) <= num_points:
        used = it["kv_blocks_used"].to_numpy(int)
        cached = it["kv_blocks_cached"].to_numpy(int)
        free = it["kv_blocks_free"].to_numpy(int)
        return pd.DataFrame(
            {
                "time_s": it["start_s"].to_numpy(float),
                "used": used,
                "cached": cached,
                "empty": free - cached,
                "total": used + free,
            }
        )
    grid = np.linspace(float(it["start_s"].iloc[0]), float(it["start_s"].iloc[-1]), num_points)
    sums = {c: np.zeros(num_points, dtype=np.int64) for c in ("used", "cached", "free")}
    for rid in replicas:
        r = it[it["replica_id"] == rid]
        idx = np.clip(np.searchsorted(r["start_s"].to_numpy(float), grid, side="right") - 1, 0, None)
        for c in sums:
            sums[c] += r[f"kv_blocks_{c}"].to_numpy(np.int64)[idx]
    return pd.DataFrame(
        {
            "time_s": grid,
            "used": sums["used"],
            "cached": sums["cached"],
            "empty": sums["free"] - sums["cached"],
            "total": sums["used"] + sums["free"],
        }
    )


#: vLLM's Prometheus names of the per-replica series (`replica_series`).
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_KV_USAGE = "vllm:kv_cache_usage_perc"


def replica_series(iterations: pd.DataFrame, *, num_bins: int = 300) -> pd.DataFrame:
    """Running and waiting requests and KV usage per replica over time, named as vLLM's metrics.

    ``vllm:num_requests_running`` is the iteration's ``batch_size`` (vLLM v1 schedules every
    running request in every step unless the token budget cuts it), ``vllm:num_requests_waiting``
    its ``num_waiting`` and ``vllm:kv_cache_usage_perc`` its ``kv_usage`` (a fraction, as
    vLLM reports it). Time is cut into ``num_bins`` equal bins and each bin keeps the
    highest value of each series, so that short peaks survive; ``time_s`` is the bin's end.
    Long format: ``replica_id``, ``time_s`` and the three series.
    """
    cols = ["replica_id", "time_s", VLLM_RUNNING, VLLM_WAITING, VLLM_KV_USAGE]
    if iterations.empty:
        return pd.DataFrame(columns=cols)
    t = iterations["start_s"].to_numpy(float)
    t0, t1 = float(t.min()), float((iterations["start_s"] + iterations["duration_s"]).max())
    width = (t1 - t0) / num_bins if t1 > t0 else 1.0
    b = np.minimum(((t - t0) // width).astype(int), num_bins - 1)
    frame = pd.DataFrame(
        {
            "replica_id": iterations["replica_id"].to_numpy(),
            "bin": b,
            VLLM_RUNNING: iterations["batch_size"].to_numpy(),
            VLLM_WAITING: iterations["num_waiting"].to_numpy(),
            VLLM_KV_USAGE: iterations["kv_usage"].to_numpy(float),
        }
    )
    out = frame.groupby(["replica_id", "bin"], sort=True).max().reset_index()
    out["time_s"] = t0 + (out["bin"] + 1) * width
    return out[cols]


#: Lanes of a request's timeline, top to bottom.
TIMELINE_LANES = ("queued", "prefill", "KV transfer", "decode", "events")


def request_timeline(
    request_id: int,
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    events: pd.DataFrame,
    *,
    kv_transfer_bytes_per_s: float | None = None,
    kv_transfer_latency_s: float = 0.0,
) -> pd.DataFrame:
    """One request's life as Gantt segments, from the request, iteration and event tables.

    Rows: ``lane`` (`TIMELINE_LANES`), ``kind``, ``start_s``, ``end_s`` (equal for an
    instant), ``detail`` (the numbers) and ``exact`` (False where the tables only bound it):

    - queued: arrival to first scheduling (exact);
    - prefill: the iterations of its (prefill) replica from its first scheduling to its first
      token, one bar per chunk; the tables do not say which requests an iteration ran, so these
      are the iterations it was, in all likelihood, part of (``exact`` False); the first bar
      carries the cache hits: GPU prefix hits, host-tier (offload) hits;
    - KV transfer (disaggregated): from the ``kv_transfer`` event for bytes / bandwidth plus the
      link latency, when ``kv_transfer_bytes_per_s`` is given;
    - decode: first token to finish (or to the last iteration if unfinished);
    - events: preemptions (recompute, swap out), swap in, offload loads, rejection (instants).

    Raises KeyError for an unknown request id.
    """
    rows = requests.loc[requests["request_id"] == request_id]
    if rows.empty:
        raise KeyError(f"no request {request_id}")
    r = rows.iloc[0]
    out: list[dict[str, Any]] = []
    end_of_run = float((iterations["start_s"] + iterations["duration_s"]).max()) if len(iterations) else 0.0

    def seg(lane: str, kind: str, start: float, end: float, detail: str, exact: bool = True) -> None:
        out.append({"lane": lane, "kind": kind, "start_s": float(start), "end_s": float(end),
                    "detail": detail, "exact": exact})  # fmt: skip

    arrival = float(r["arrival_s"])
    sched = r.get("first_scheduled_s", np.nan)
    first_tok = r.get("first_token_s", np.nan)
    finish = r.get("finish_s", np.nan)
    prompt = int(r.get("prompt_tokens", 0))
    queued_to = sched if pd.notna(sched) else end_of_run
    seg(
        "queued",
        "queued",
        arrival,
        queued_to,
        f"waited {format_seconds(queued_to - arrival)} for its first step",
    )
    if pd.notna(sched):
        prefill_replica = r.get("prefill_replica_id") or r.get("replica_id")
        prefill_end = first_tok if pd.notna(first_tok) else end_of_run
        it = iterations[(iterations["replica_id"] == prefill_replica) & (iterations["start_s"] >= sched)
                        & (iterations["start_s"] < prefill_end)]  # fmt: skip
        hits = column(requests, PREFIX_HIT_TOKENS)
        gpu_hits = int(hits.loc[rows.index[0]]) if hits is not None else 0
        offload_col = column(requests, OFFLOAD_HIT_TOKENS)
        offload = int(offload_col.loc[rows.index[0]]) if offload_col is not None else 0
        hit_text = (
            f"cache hits: {gpu_hits:,} of {prompt:,} prompt tokens on the GPU, {offload:,} from the host tier"
        )
        with_prefill = it[it["prefill_tokens"] > 0]
        for k, step in enumerate(with_prefill.itertuples(index=False)):
            detail = (
                f"chunk {k + 1} of {len(with_prefill)}: iteration of {format_seconds(step.duration_s)} "
                f"computing {int(step.prefill_tokens):,} prefill tokens in all beside {int(step.decode_tokens)} decodes"
            )
            seg("prefill", "prefill chunk", step.start_s, step.start_s + step.duration_s,
                (hit_text + "; " if k == 0 else "") + detail, exact=False)  # fmt: skip
        if with_prefill.empty:
            seg("prefill", "prefill chunk", sched, prefill_end, hit_text, exact=False)
    mine = events[events["request_id"] == request_id].sort_values("time_s", kind="stable")
    for ev in mine.itertuples(index=False):
        if ev.kind == "kv_transfer" and kv_transfer_bytes_per_s:
            duration = kv_transfer_latency_s + float(ev.num_bytes) / kv_transfer_bytes_per_s
            seg("KV transfer", "kv_transfer", ev.time_s, ev.time_s + duration,
                f"{int(ev.num_blocks):,} blocks, {ev.num_bytes / 2**20:,.1f} MiB in {format_seconds(duration)}")  # fmt: skip
        else:
            what = {
                "preempt_recompute": "preempted: blocks freed, prompt and output so far computed again",
                "swap_out": "preempted: blocks swapped out to host memory",
                "swap_in": "swapped back in",
                "offload_load": "prefix blocks loaded from the host tier",
                "reject": "rejected: can never fit",
                "kv_transfer": "KV sent to the decode replica",
            }.get(ev.kind, ev.kind)
            seg("events", ev.kind, ev.time_s, ev.time_s, f"{what} ({int(ev.num_blocks):,} blocks)")
    if pd.notna(first_tok):
        decode_end = finish if pd.notna(finish) else end_of_run
        n_out = int(r.get("output_tokens", 0))
        tpot = r.get("tpot_s", np.nan)
        seg("decode", "decode", first_tok, decode_end,
            f"{n_out:,} output tokens, TPOT {format_seconds(tpot)}, longest gap {format_seconds(r.get('max_itl_s'))}, "
            f"{int(r.get('num_preemptions', 0))} preemptions")  # fmt: skip
    return pd.DataFrame(out, columns=["lane", "kind", "start_s", "end_s", "detail", "exact"])


def prefix_hit_rate_over_time(
    requests: pd.DataFrame, *, window_s: float, step_s: float | None = None
) -> pd.DataFrame:
    """Prefix hit rate (hit tokens / prompt tokens) of requests first scheduled in each window.

    Windows as in `rolling_quantiles` (from time 0). Columns ``time_s``, ``num_requests``, ``hit_rate``
    (NaN where no request was admitted).
    """
    adm = requests.dropna(subset=["first_scheduled_s"]).sort_values("first_scheduled_s", kind="stable")
    t = adm["first_scheduled_s"].to_numpy(float)
    hits = np.concatenate([[0.0], np.cumsum(adm["prefix_cache_hits_tokens"].to_numpy(float))])
    toks = np.concatenate([[0.0], np.cumsum(adm["prompt_tokens"].to_numpy(float))])
    step = window_s if step_s is None else step_s
    if not window_s > 0 or not step > 0:
        raise ValueError(f"window_s and step_s must be > 0, got {window_s} and {step}")
    if not len(t):
        return pd.DataFrame(columns=["time_s", "num_requests", "hit_rate"])
    ends = step * np.arange(1, window_count(float(t[-1]), step) + 1)
    lo = np.where(ends - window_s <= 0, 0, np.searchsorted(t, ends - window_s, side="right"))
    hi = np.searchsorted(t, ends, side="right")
    q = toks[hi] - toks[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(q > 0, (hits[hi] - hits[lo]) / q, np.nan)
    return pd.DataFrame({"time_s": ends, "num_requests": hi - lo, "hit_rate": rate})
