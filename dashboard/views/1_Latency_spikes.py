"""Latency spikes: TTFT and ITL over time, engine events on the same axis, each spike explained."""

from __future__ import annotations

import _common as common
import streamlit as st

from kvsim import analysis
from kvsim.analysis import plots

SPIKE_COLUMNS = [
    "explanation",
    "metric",
    "statistic",
    "start_s",
    "end_s",
    "peak_s",
    "cause",
    "queue_from_s",
    "queue_to_s",
    "queue_arrival_rate_per_s",
    "completion_rate_per_s",
    "backlog_start_requests",
    "backlog_end_requests",
    "queued_share_of_ttft",
    "num_preempt_recompute",
    "num_preempt_swap",
    "swapped_bytes",
    "num_evicted_blocks",
    "evicted_miss_tokens",
    "span_prefix_hit_rate",
    "num_rejected",
    "max_waiting",
    "slowest_iteration_s",
    "slowest_iteration_prefill_tokens",
    "arrival_rate_per_s",
    "mean_prompt_tokens",
]
#: Spikes listed in words above the table (the worst first).
MAX_LISTED = 8


def main() -> None:
    st.set_page_config(page_title="kvsim: latency spikes", layout="wide")
    common.show_notices()
    st.title("Latency spikes")
    run = common.require_run()
    res = run.result
    slo = res.scenario.slo
    span = float(res.requests["finish_s"].max()) if res.requests["finish_s"].notna().any() else 0.0
    view = common.view()
    if view.get("spikes.for") != common.scenario_key(res.scenario):  # another run: its own defaults
        for k in ("spikes.window", "spikes.ttft", "spikes.itl"):
            view.pop(k, None)
            st.session_state.pop(f"w:{k}", None)
        view["spikes.for"] = common.scenario_key(res.scenario)
    note = common.overload_note(res.summary)
    if note:
        st.warning(note, icon="⚠️")
    cols = st.columns(3)
    window_s = cols[0].number_input(
        "Window (s)",
        min_value=0.001,
        format="%.4g",
        key=common.kept("spikes.window", analysis.nice_window(span), min_value=0.001),
        help="Length of the rolling window of the percentiles, and of the windows spikes are found in.",
    )
    ttft_thr = cols[1].number_input(
        "TTFT spike threshold (s)",
        min_value=0.0,
        format="%.4g",
        key=common.kept("spikes.ttft", float(slo.ttft_s), min_value=0.0),
        help="A window whose p99 TTFT exceeds this is a spike (default: the scenario's TTFT SLO).",
    )
    itl_thr = cols[2].number_input(
        "ITL spike threshold (s)",
        min_value=0.0,
        format="%.4g",
        key=common.kept("spikes.itl", float(slo.tpot_s), min_value=0.0),
        help="A window whose p99 inter-token latency exceeds this is a spike (default: the TPOT SLO).",
    )
    for k, v in (("spikes.window", window_s), ("spikes.ttft", ttft_thr), ("spikes.itl", itl_thr)):
        common.keep(k, v)
    spikes = analysis.run_spikes(res.requests, res.iterations, res.events, window_s=window_s,
                                 ttft_threshold_s=ttft_thr, itl_threshold_s=itl_thr)  # fmt: skip
    fig = plots.latency_spikes_figure(
        res.requests,
        res.iterations,
        res.events,
        window_s=window_s,
        spikes=spikes,
        ttft_slo_s=ttft_thr,
        itl_slo_s=itl_thr,
    )
    common.show_figure(fig, f"{res.scenario.name}_latency_spikes")
    st.subheader("Spikes and their causes")
    if spikes.empty:
        st.success("No window's p99 TTFT or ITL, nor any preempted request's gap, exceeds its threshold.")
        common.sync_url()
        return
    table = analysis.attribute_spikes(spikes, res.requests, res.iterations, res.events)
    st.caption(
        "Causes are counted over the span the slow requests lived through: from the spike's start "
        "minus its peak latency to its end. Queueing is named when the slow requests spent most of their "
        "TTFT waiting; eviction only when evicted blocks were needed again (docs/dashboard.md)."
    )
    worst = analysis.worst_spikes(table, ttft_threshold_s=ttft_thr, itl_threshold_s=itl_thr, n=MAX_LISTED)
    st.markdown("\n".join(f"- {text}" for text in worst["explanation"]))
    if len(table) > MAX_LISTED:
        st.caption(f"The {MAX_LISTED} worst of {len(table)} spikes; the table has them all.")
    common.show_table(table[SPIKE_COLUMNS], f"{res.scenario.name}_spikes")
    common.sync_url()


main()
